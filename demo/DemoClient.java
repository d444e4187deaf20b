// DemoClient.java - the demo's Java client: one application process that runs
// its own branch of global transactions, routed by racaffinity.jar (JNI into
// libracaffinity), with SQL through JDBC (pgjdbc). The C (client.c) and Python
// (client.py) clients implement the same line protocol (demo/README.md);
// demo/run.py drives all three.
//
//   java -cp target/demo/java:racaffinity-0.2.0.jar:postgresql.jar DemoClient CONFIG_FILE
//
// Commands on stdin, one reply line per command on stdout.

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.Continuity;
import io.racaffinity.Lease;
import io.racaffinity.NodeState;
import io.racaffinity.Outcome;
import io.racaffinity.Route;
import io.racaffinity.Scope;
import io.racaffinity.UnknownTransactionException;
import io.racaffinity.jdbc.AffinityDataSource;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.JDBCType;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.ShardingKey;
import java.sql.Statement;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

public final class DemoClient {
    static final String LANG = "java";
    static final int TIMEOUT_S = timeoutSeconds();

    static int timeoutSeconds() {
        try {
            String t = System.getenv("RACAFF_CLIENT_TIMEOUT");
            return t == null ? 30 : Math.max(1, (int) Math.ceil(Double.parseDouble(t)));
        } catch (NumberFormatException e) {
            return 30;
        }
    }

    /** A branch started (BEGIN; INSERT) and not yet prepared. */
    static final class Branch {
        int node;
        Connection conn;
        int port; // the server's own port: where the row really is
        String kind; // how racaffinity routed it
        Lease lease; // balanced mode: the pick's lease

        Branch(int node, Connection conn, int port, String kind, Lease lease) {
            this.node = node;
            this.conn = conn;
            this.port = port;
            this.kind = kind;
            this.lease = lease;
        }
    }

    private final Cluster cluster;
    private final Map<Integer, String> urls = new HashMap<>();
    private final Map<Integer, ArrayDeque<Connection>> idle = new HashMap<>();
    private final Map<String, Branch> open = new HashMap<>();
    private final PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);

    // The soak's feed mode (RACAFF_FEEDLOG_MS): a thread polls this process's
    // metrics and notes when the feed revision or the topology fingerprint
    // changed, so the driver learns when this process applied an event even
    // while the main thread waits on a silent node. FEEDLOG hands the notes over.
    static final Pattern FEED_REVISION = Pattern.compile("\"feed\":\\{[^{}]*?\"revision\":(\\d+)");
    static final Pattern FINGERPRINT = Pattern.compile("\"fingerprint\":\"([^\"]*)\"");
    final List<String> feedLog = new ArrayList<>();
    volatile boolean feedLogStop;
    Thread feedLogThread;

    void startFeedLog() {
        String v = System.getenv("RACAFF_FEEDLOG_MS");
        long every = v == null || v.isEmpty() ? 0 : Long.parseLong(v);
        if (every <= 0) {
            return;
        }
        feedLogThread = new Thread(() -> {
            String last = "";
            while (!feedLogStop) {
                try {
                    Thread.sleep(every);
                } catch (InterruptedException e) {
                    return;
                }
                String m = cluster.metricsJson();
                Matcher r = FEED_REVISION.matcher(m);
                Matcher fp = FINGERPRINT.matcher(m);
                String cur = (r.find() ? r.group(1) : "0") + "," + (fp.find() ? fp.group(1) : "-");
                if (!cur.equals(last)) {
                    last = cur;
                    synchronized (feedLog) {
                        feedLog.add(System.currentTimeMillis() + "," + cur);
                    }
                }
            }
        }, "feedlog");
        feedLogThread.setDaemon(true);
        feedLogThread.start();
    }

    String takeFeedLog() {
        synchronized (feedLog) {
            String out = String.join(" ", feedLog);
            feedLog.clear();
            return out;
        }
    }

    DemoClient(String config) {
        cluster = Cluster.fromConfig(config);
        // Each node's listener, as the core parsed it from node.<NAME>.address.
        for (int id : cluster.nodeIds()) {
            String address = cluster.nodeAddress(id).orElseThrow(() ->
                    new IllegalArgumentException("no node." + cluster.nodeName(id) + ".address in the config"));
            // Every call has a deadline: socketTimeout (RACAFF_CLIENT_TIMEOUT seconds,
            // default 30) fails a query on a node that stopped answering (a
            // blackhole) instead of hanging it; connectTimeout and loginTimeout
            // bound new connections.
            urls.put(id, "jdbc:postgresql://" + address + "/postgres?user=postgres&connectTimeout=5&loginTimeout=5"
                    + "&socketTimeout=" + TIMEOUT_S);
        }
    }

    /** "STRICT_AFFINITY(StrictAffinityException)": the C result name and the Java type. */
    static String code(AffinityException e) {
        String simple = e.getClass().getSimpleName();
        String base = simple.replaceAll("Exception$", "");
        String c = switch (base) {
            case "ClusterClosed" -> "INVALID_HANDLE";
            case "InvalidConfig" -> "CONFIG";
            case "TooManyClusters" -> "TOO_MANY_HANDLES";
            default -> base.replaceAll("([a-z])([A-Z])", "$1_$2").toUpperCase(Locale.ROOT);
        };
        return c + "(" + simple + ")";
    }

    /** pgjdbc's socketTimeout fired: the node is silent, so no retry on a fresh connection. */
    static boolean timedOut(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof java.net.SocketTimeoutException) {
                return true;
            }
        }
        return false;
    }

    static String oneLine(Throwable e) {
        String m = e.getMessage() == null ? e.getClass().getSimpleName() : e.getMessage();
        return m.strip().split("\n", 2)[0].replace('\t', ' ');
    }

    // ---- connections: a tiny per-node pool -------------------------------

    private Connection checkout(int node, boolean[] pooled) throws SQLException {
        ArrayDeque<Connection> q = idle.computeIfAbsent(node, k -> new ArrayDeque<>());
        pooled[0] = !q.isEmpty();
        return pooled[0] ? q.pop() : DriverManager.getConnection(urls.get(node));
    }

    private void checkin(int node, Connection c) {
        idle.computeIfAbsent(node, k -> new ArrayDeque<>()).push(c);
    }

    private static void discard(Connection c) {
        try {
            if (c != null) {
                c.close();
            }
        } catch (SQLException ignored) {
            // the connection is gone either way
        }
    }

    /** BEGIN; INSERT on node. A pooled connection that turns out dead is replaced once. */
    private Branch work(String gtrid, int node, String kind, Lease lease) throws SQLException {
        for (int attempt = 0; ; attempt++) {
            boolean[] pooled = {false};
            Connection c = checkout(node, pooled);
            try (Statement s = c.createStatement()) {
                s.execute("BEGIN");
                try (ResultSet rs = s.executeQuery("INSERT INTO demo_xa VALUES ('" + gtrid + "', '" + LANG
                        + "', current_setting('port')::int) RETURNING port")) {
                    rs.next();
                    return new Branch(node, c, rs.getInt(1), kind, lease);
                }
            } catch (SQLException e) {
                discard(c);
                String state = e.getSQLState() == null ? "" : e.getSQLState();
                if (!pooled[0] || attempt > 0 || !(state.startsWith("08") || state.startsWith("57P")) || timedOut(e)) {
                    throw e;
                }
            }
        }
    }

    // ---- commands --------------------------------------------------------

    String start(String gtrid, boolean affinity) {
        return start(gtrid, affinity, "");
    }

    String start(String gtrid, boolean affinity, String preferred) {
        Lease lease = null;
        Route route;
        try {
            if (affinity && !preferred.isEmpty()) {
                // The TM placed the transaction and enlists this branch there; in
                // strict mode the core refuses it if this process sees that node
                // unable to take new work (elsewhere would split the transaction).
                route = cluster.txBegin(gtrid.getBytes(StandardCharsets.UTF_8), cluster.nodeId(preferred));
            } else if (affinity) {
                route = cluster.txBegin(gtrid.getBytes(StandardCharsets.UTF_8));
            } else { // a plain pool: every connection request load-balanced
                lease = cluster.pick();
                route = lease.route();
            }
        } catch (AffinityException e) {
            return "REFUSED\t" + gtrid + "\t-\t" + code(e) + "\t" + oneLine(e);
        }
        String kind = route.kind().name().toLowerCase(Locale.ROOT);
        try {
            Branch b = work(gtrid, route.node(), kind, lease);
            open.put(gtrid, b);
            return "STARTED\t" + gtrid + "\t" + route.nodeName() + "\t" + kind + "\t" + b.port;
        } catch (SQLException e) {
            cluster.reportOutcome(route.node(), false);
            if (lease != null) {
                lease.release(Outcome.FAILED);
            }
            forget(gtrid);
            return "FAIL\t" + gtrid + "\t" + route.nodeName() + "\tSQL\t" + oneLine(e);
        }
    }

    String prepare(String gtrid, boolean affinity) {
        Branch b = open.remove(gtrid);
        if (b == null) {
            return "ERR\tPROTOCOL\tno open branch " + gtrid;
        }
        byte[] g = gtrid.getBytes(StandardCharsets.UTF_8);
        if (affinity) {
            if (cluster.nodeState(b.node) == NodeState.DOWN) {
                // Its node went down before the branch was prepared: the branch
                // is lost with its connection. Join again: soft affinity
                // re-places the transaction (rendezvous over the nodes that are
                // left, so every process agrees), strict refuses.
                discard(b.conn);
                String was = cluster.nodeName(b.node);
                Route r;
                try {
                    r = cluster.txBegin(g);
                } catch (AffinityException refused) {
                    forget(gtrid);
                    return "REFUSED\t" + gtrid + "\t" + was + "\t" + code(refused) + "\t" + oneLine(refused);
                }
                try {
                    b = work(gtrid, r.node(), r.kind().name().toLowerCase(Locale.ROOT), null);
                } catch (SQLException sql) {
                    forget(gtrid);
                    return "FAIL\t" + gtrid + "\t" + r.nodeName() + "\tSQL\t" + oneLine(sql);
                }
            }
        }
        String name = cluster.nodeName(b.node);
        try (Statement s = b.conn.createStatement()) {
            s.execute("PREPARE TRANSACTION '" + gtrid + "." + LANG + "'");
        } catch (SQLException e) {
            discard(b.conn);
            cluster.reportOutcome(b.node, false);
            if (b.lease != null) {
                b.lease.release(Outcome.FAILED);
            }
            forget(gtrid);
            return "FAIL\t" + gtrid + "\t" + name + "\tSQL\t" + oneLine(e);
        }
        if (affinity) {
            cluster.txPrepared(g); // from now on it never moves
        }
        if (b.lease != null) {
            b.lease.release(Outcome.OK);
        }
        checkin(b.node, b.conn);
        return "PREPARED\t" + gtrid + "\t" + name + "\t" + b.kind + "\t" + b.port;
    }

    String rollback(String gtrid) {
        Branch b = open.remove(gtrid);
        if (b != null) {
            try (Statement s = b.conn.createStatement()) {
                s.execute("ROLLBACK");
                checkin(b.node, b.conn);
            } catch (SQLException e) {
                discard(b.conn);
            }
            if (b.lease != null) {
                b.lease.release(Outcome.NEUTRAL);
            }
        }
        forget(gtrid);
        return "OK";
    }

    void forget(String gtrid) {
        try {
            cluster.txComplete(gtrid.getBytes(StandardCharsets.UTF_8));
        } catch (UnknownTransactionException ignored) {
            // never registered (balanced mode) or already forgotten
        }
    }

    String event(String line) {
        try {
            return "OK\t" + cluster.applyEvent(line);
        } catch (AffinityException e) {
            return "ERR\t" + code(e) + "\t" + oneLine(e);
        }
    }

    // ---- soak commands (demo/soak.py): sessions, data keys, pinned work, heartbeats

    /** One request on node: the server's port. A dead pooled connection is replaced once. */
    private int selectPort(int node) throws SQLException {
        for (int attempt = 0; ; attempt++) {
            boolean[] pooled = {false};
            Connection c = checkout(node, pooled);
            try (Statement s = c.createStatement();
                 ResultSet rs = s.executeQuery("SELECT current_setting('port')::int")) {
                rs.next();
                int port = rs.getInt(1);
                checkin(node, c);
                return port;
            } catch (SQLException e) {
                discard(c);
                String state = e.getSQLState() == null ? "" : e.getSQLState();
                if (!pooled[0] || attempt > 0 || !(state.startsWith("08") || state.startsWith("57P")) || timedOut(e)) {
                    throw e;
                }
            }
        }
    }

    /** SESSION / KEY: route, then one request; PINNED: count requests in one pin. */
    @SuppressWarnings("try") // the pin scope is the point; its handle is not needed inside
    String request(String what, String key, int count) {
        java.util.List<Route> routes = new java.util.ArrayList<>();
        int port = -1;
        try {
            if (what.equals("PINNED")) {
                try (io.racaffinity.Pin pin = cluster.pin()) {
                    for (int i = 0; i < Math.max(1, count); i++) {
                        Route r = cluster.route();
                        routes.add(r);
                        port = selectPort(r.node());
                        cluster.reportOutcome(r.node(), true);
                    }
                }
            } else {
                Route r = what.equals("SESSION") ? cluster.routeSession(key) : cluster.routeKey(key);
                routes.add(r);
                port = selectPort(r.node());
                cluster.reportOutcome(r.node(), true);
            }
        } catch (AffinityException e) {
            return "REFUSED\t" + key + "\t-\t" + code(e) + "\t" + oneLine(e);
        } catch (SQLException e) {
            String name = "-";
            if (!routes.isEmpty()) {
                Route last = routes.get(routes.size() - 1);
                cluster.reportOutcome(last.node(), false);
                name = last.nodeName();
            }
            return "FAIL\t" + key + "\t" + name + "\tSQL\t" + oneLine(e);
        }
        Route r = routes.get(routes.size() - 1);
        long distinct = routes.stream().mapToInt(Route::node).distinct().count();
        return "OK\t" + key + "\t" + r.nodeName() + "\t" + r.kind().name().toLowerCase(Locale.ROOT) + "\t" + port
                + "\t" + distinct;
    }

    /** Probes every node (connect + SELECT 1, 2 s each) and reports it. */
    String heartbeat() {
        StringBuilder oks = new StringBuilder();
        for (int id : cluster.nodeIds()) {
            boolean ok = false;
            String url = urls.get(id).replaceAll("(connectTimeout|loginTimeout|socketTimeout)=\\d+", "$1=2");
            try (Connection c = DriverManager.getConnection(url);
                 Statement s = c.createStatement();
                 ResultSet rs = s.executeQuery("SELECT 1")) {
                ok = rs.next();
            } catch (SQLException e) {
                ok = false;
            }
            cluster.reportProbe(id, ok);
            oks.append(ok ? '1' : '0');
        }
        return "OK\t" + oks;
    }

    long txLive() {
        Matcher m = Pattern.compile("\"transaction\":\\{[^}]*\"live\":(\\d+)").matcher(cluster.metricsJson());
        return m.find() ? Long.parseLong(m.group(1)) : -1;
    }

    void reply(String line) {
        out.println(line);
        out.flush();
    }

    int serve() throws Exception {
        reply("READY\t" + LANG + "\tracaffinity " + Cluster.libraryVersion() + " (Java " + Runtime.version().feature()
                + ", pgjdbc " + new org.postgresql.Driver().getMajorVersion() + "."
                + new org.postgresql.Driver().getMinorVersion() + ")");
        startFeedLog();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\t", -1);
            boolean affinity = f.length > 2 && f[2].equals("affinity");
            switch (f[0]) {
                case "BRANCH" -> {
                    String started = start(f[1], affinity, f.length > 3 ? f[3] : "");
                    reply(started.startsWith("STARTED") ? prepare(f[1], affinity) : started);
                }
                case "START" -> reply(start(f[1], affinity));
                case "SESSION", "KEY" -> reply(request(f[0], f[1], 1));
                case "PINNED" -> reply(request(f[0], f[1], f.length > 2 ? Integer.parseInt(f[2]) : 1));
                case "ENDSESSION" -> {
                    cluster.endSession(f[1]);
                    reply("OK");
                }
                case "HEARTBEAT" -> reply(heartbeat());
                case "METRICS" -> reply("METRICS\t" + cluster.metricsJson());
                case "FEEDLOG" -> reply("FEEDLOG\t" + takeFeedLog());
                case "PREPARE" -> reply(prepare(f[1], affinity));
                case "ROLLBACK" -> reply(rollback(f[1]));
                case "DONE" -> {
                    forget(f[1]);
                    reply("OK");
                }
                case "EVENT" -> reply(event(f[1]));
                case "STRICT" -> {
                    cluster.setStrict(Scope.TRANSACTION, f[1].equals("1"));
                    reply("OK");
                }
                case "QUIT" -> {
                    reply("BYE\ttx_live=" + txLive() + "\topen=" + open.size());
                    close();
                    return 0;
                }
                default -> reply("ERR\tPROTOCOL\tunknown command " + f[0]);
            }
        }
        close();
        return 0;
    }

    void close() throws InterruptedException {
        if (feedLogThread != null) {
            feedLogStop = true;
            feedLogThread.join();
        }
        idle.values().forEach(q -> q.forEach(DemoClient::discard));
        open.values().forEach(b -> discard(b.conn));
        cluster.close();
    }

    /**
     * {@code DemoClient --replay LANG CONFIG_FILE}: the soak's replay-enabled Java client. Plain
     * requests, not XA branches, through {@link AffinityDataSource} with {@code replay=true} over
     * HikariCP node pools, so that a request a failure interrupted is replayed once elsewhere when
     * its commit outcome allows it (docs/continuity.md). One request: INSERT a unique request id,
     * SELECT it back (nothing that depends on the node), COMMIT. The data source probes every node on
     * its own heartbeat and takes the FAN lines itself ({@code applyEvent}). The timeouts come from
     * the soak (RACAFF_REPLAY_* in the environment, see demo/soak.py).
     */
    static final class Replay {
        final String lang;
        final AffinityDataSource ds;
        final PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        // What the data source did for the request in hand, from its own DEBUG records (the client
        // is one thread, so every record between two requests is this request's).
        int replays;
        boolean foundCommitted;
        // Held here: JUL keeps loggers weakly, and a collected one would lose the level set on it.
        final java.util.logging.Logger log = java.util.logging.Logger.getLogger("io.racaffinity.jdbc.AffinityDataSource");

        static String env(String name, String dflt) {
            String v = System.getenv(name);
            return v == null || v.isEmpty() ? dflt : v;
        }

        Replay(String lang, String config) {
            this.lang = lang;
            Map<String, String> urls = new HashMap<>();
            // pgjdbc: socketTimeout is the statement and COMMIT deadline (whole seconds), connectTimeout
            // and loginTimeout bound a new connection, tcpKeepAlive turns the OS keepalives on (pgjdbc has
            // no per-socket idle time).
            String params = "user=postgres&socketTimeout=" + env("RACAFF_REPLAY_CALL_TIMEOUT", "1")
                    + "&connectTimeout=" + env("RACAFF_REPLAY_CONNECT_TIMEOUT", "2")
                    + "&loginTimeout=" + env("RACAFF_REPLAY_CONNECT_TIMEOUT", "2") + "&tcpKeepAlive=true";
            try (Cluster c = Cluster.fromConfig(config)) {
                for (int id : c.nodeIds()) {
                    String address = c.nodeAddress(id).orElseThrow();
                    urls.put(c.nodeName(id), "jdbc:postgresql://" + address + "/postgres?" + params);
                }
            }
            ds = new AffinityDataSource();
            ds.setConfig(config);
            ds.setNodeUrls(urls);
            ds.setUser("postgres");
            ds.setReplay(true);
            ds.setHeartbeatIntervalMillis(Math.round(Double.parseDouble(env("RACAFF_REPLAY_HEARTBEAT", "0.5")) * 1000));
            ds.setHeartbeatTimeoutSeconds(Math.max(1, (int) Math.ceil(Double.parseDouble(
                    env("RACAFF_REPLAY_PROBE_TIMEOUT", "0.5")))));
            ds.setDataSourceClassName("com.zaxxer.hikari.HikariDataSource");
            long wait = Math.round(Double.parseDouble(env("RACAFF_REPLAY_POOL_TIMEOUT", "3")) * 1000);
            ds.setDataSourcePropertyList("maximumPoolSize=4 | minimumIdle=1 | connectionTimeout=" + wait
                    + " | validationTimeout=" + Math.min(1000, wait - 250));
            log.setLevel(java.util.logging.Level.FINE);
            log.addHandler(new java.util.logging.Handler() {
                @Override
                public void publish(java.util.logging.LogRecord r) {
                    String m = r.getMessage() == null ? "" : r.getMessage();
                    if (m.contains("request replayed on node")) {
                        replays++;
                    } else if (m.contains("the COMMIT in flight committed")) {
                        foundCommitted = true;
                    }
                }

                @Override
                public void flush() {}

                @Override
                public void close() {}
            });
        }

        /** The node of the connection in hand now, from its description. */
        static String nodeOf(Connection c) {
            Matcher m = Pattern.compile("node=([^,\\]]+)").matcher(String.valueOf(c));
            return m.find() ? m.group(1) : "-";
        }

        /** The typed cause of a request's failure: the refusal's name, or "-" when there is none. */
        static String cause(Throwable e) {
            for (Throwable t = e; t != null; t = t.getCause()) {
                if (t instanceof Continuity.ReplayRefusedException r) {
                    return r.refusal().name();
                }
                for (Throwable s : t.getSuppressed()) {
                    if (s instanceof Continuity.ReplayRefusedException r) {
                        return r.refusal().name();
                    }
                }
            }
            return "-";
        }

        String request(String rid, String key) {
            replays = 0;
            foundCommitted = false;
            String node = "-";
            Connection c = null;
            try {
                ShardingKey sk = ds.createShardingKeyBuilder().subkey(key, JDBCType.VARCHAR).build();
                c = ds.createConnectionBuilder().shardingKey(sk).build();
                c.setAutoCommit(false);
                try (PreparedStatement s = c.prepareStatement("INSERT INTO soak_req (id, lang) VALUES (?, ?)")) {
                    s.setString(1, rid);
                    s.setString(2, lang);
                    s.executeUpdate();
                }
                long n;
                try (PreparedStatement s = c.prepareStatement("SELECT count(*) FROM soak_req WHERE id = ?")) {
                    s.setString(1, rid);
                    try (ResultSet rs = s.executeQuery()) {
                        rs.next();
                        n = rs.getLong(1);
                    }
                }
                if (n != 1) {
                    throw new SQLException("the request's own row counted " + n + " times");
                }
                node = nodeOf(c);
                c.commit();
                // Found committed: the row is where the COMMIT ran, and the connection has moved on.
                String at = foundCommitted ? node : nodeOf(c);
                return "OK\t" + rid + "\t" + at + "\t" + replays + "\t"
                        + (foundCommitted ? "found-committed" : "committed");
            } catch (AffinityException e) {
                return "REFUSED\t" + rid + "\t-\t" + code(e) + "\t" + oneLine(e);
            } catch (SQLException | RuntimeException e) {
                if (c != null) {
                    node = nodeOf(c);
                }
                return "FAIL\t" + rid + "\t" + node + "\t" + cause(e) + "\t" + e.getClass().getSimpleName() + ": "
                        + oneLine(e);
            } finally {
                if (c != null) {
                    try {
                        c.close();
                    } catch (SQLException e) {
                        // the request is over; a dead connection's close has nothing to say
                    }
                }
            }
        }

        int serve() throws Exception {
            ds.getConnection().close(); // init: the pools and the heartbeat start now, not at the first request
            out.println("READY\t" + lang + "\tracaffinity (Java " + System.getProperty("java.version")
                    + ", AffinityDataSource replay=true, HikariCP)");
            out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                String[] a = line.split("\t", -1);
                String reply;
                switch (a[0]) {
                    case "REQUEST":
                        reply = request(a[1], a[2]);
                        break;
                    case "EVENT":
                        try {
                            reply = "OK\t" + ds.applyEvent(a[1]);
                        } catch (SQLException e) {
                            reply = "ERR\tEVENT\t" + oneLine(e);
                        }
                        break;
                    case "METRICS":
                        reply = "METRICS\t" + ds.getCluster().metricsJson();
                        break;
                    case "FEEDLOG":
                        reply = "FEEDLOG\t";
                        break;
                    case "QUIT":
                        Matcher m = Pattern.compile("\"transaction\":\\{[^{}]*?\"live\":(\\d+)")
                                .matcher(ds.getCluster().metricsJson());
                        out.println("BYE\ttx_live=" + (m.find() ? m.group(1) : "?") + "\topen=0");
                        out.flush();
                        ds.close();
                        return 0;
                    default:
                        reply = "ERR\tPROTOCOL\tunknown command " + a[0];
                }
                out.println(reply);
                out.flush();
            }
            ds.close();
            return 0;
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 3 && args[0].equals("--replay")) {
            System.exit(new Replay(args[1], Files.readString(Path.of(args[2]))).serve());
        }
        if (args.length != 1) {
            System.err.println("usage: DemoClient CONFIG_FILE | DemoClient --replay LANG CONFIG_FILE");
            System.exit(2);
        }
        System.exit(new DemoClient(Files.readString(Path.of(args[0]))).serve());
    }
}
