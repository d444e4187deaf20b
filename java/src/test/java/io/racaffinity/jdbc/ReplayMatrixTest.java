package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.AffinityDataSourceTest.keyOn;
import static io.racaffinity.jdbc.ReplayConnection.refusalOf;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import com.zaxxer.hikari.HikariPoolMXBean;
import com.zaxxer.hikari.pool.HikariPool;
import io.racaffinity.Continuity.Refusal;
import io.racaffinity.Continuity.ReplayRefusedException;
import io.racaffinity.test.LogCapture;
import io.racaffinity.test.PgNodes;
import io.racaffinity.testsupport.FaultProxy;
import io.racaffinity.testsupport.FaultProxy.Hold;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.ShardingKey;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The failure matrix's replay dimension ([continuity]) in Java: a fault on the request's node at
 * each step of a request x crash / blackhole / reset / refuse x independent nodes / RAC one
 * database, through {@link AffinityDataSource} with {@code replay=true}; the same cells as
 * python/tests/test_replay_matrix.py (docs/continuity.md, "Failure matrix: the replay
 * dimension").
 *
 * <p>The request: auto-commit off, {@code INSERT} a request id, {@code SELECT count(*)} of it
 * (read by the application, so compared on a replay), {@code COMMIT}. A cell holds when the id is
 * in the data (counted by SQL on every database) exactly once if the request returned, at most
 * once if it raised, and a raise carries a {@link ReplayRefusedException} whose refusal says
 * why; a raise whose write did commit must say {@link Refusal#OUTCOME_UNKNOWN}.
 *
 * <p>Each cell with a COMMIT in flight runs a second time with a mutation: the outcome check
 * answers "aborted" without asking (the node pools hand {@code ReplayConnection}'s check a
 * connection that says so), so the data source replays blind, as a wrapper without a
 * commit-outcome guard would. The mutant must fail the cell. {@code
 * -Dracaffinity.replayMatrix.recoveryOff=true} runs every cell without any recovery instead
 * (replay off, and the borrow's failover off), and {@code -Dracaffinity.replayMatrix.blind=true}
 * runs every cell blind: the cells then fail (run by hand; nothing is written). Results:
 * {@code target/failure-matrix/replay-java.json}, rendered by {@code tools/failure_matrix.py
 * --replay}.
 */
@ExtendWith(PgNodes.class)
class ReplayMatrixTest {
    static final List<String> NAMES = List.of("RAC1", "RAC2", "RAC3");
    static final List<String> STEPS = List.of("before", "mid", "before_commit", "commit_lost", "after");
    static final List<String> FAULTS = List.of("crash", "blackhole", "reset", "refuse");
    static final List<String> MODELS = List.of("node", "database");
    /** A commit can be in flight at these steps: a blind replay commits twice. */
    static final Set<String> IN_FLIGHT = Set.of("commit_lost");
    /** pgjdbc's socketTimeout (s): how long a call waits in a blackhole (Python's call_timeout). */
    static final int CALL_TIMEOUT_SECONDS = 1;
    /** Past HikariCP's aliveBypassWindowMs (500 ms): a borrow then checks a pooled connection. */
    static final long BEFORE_PAUSE_MILLIS = 600;
    /**
     * The other mutant, run by hand: no recovery at all (replay off, and {@code data.strict} so the
     * borrow does not fail over to another node either). Nothing is written.
     */
    static final boolean RECOVERY_OFF = Boolean.getBoolean("racaffinity.replayMatrix.recoveryOff");
    /** The blind-replay mutant for every cell, run by hand: the in-flight cells then fail. Nothing is written. */
    static final boolean BLIND = Boolean.getBoolean("racaffinity.replayMatrix.blind");
    static final Map<String, Map<String, Object>> RESULTS = new TreeMap<>();

    /** Proxy i in front of node i+1 (independent nodes); the first alone is used for one database. */
    static FaultProxy[] proxies = new FaultProxy[3];
    static LogCapture log;

    @BeforeAll
    static void setUp() throws Exception {
        for (int i = 1; i <= 3; i++) {
            proxies[i - 1] = new FaultProxy(PgNodes.port(i));
            try (Connection c = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                    Statement s = c.createStatement()) {
                // No key: a write committed twice shows as two rows.
                s.execute("CREATE TABLE IF NOT EXISTS java_rm (id text)");
                s.execute("TRUNCATE java_rm");
            }
        }
        log = new LogCapture();
    }

    @AfterAll
    static void tearDown() throws Exception {
        log.close();
        for (FaultProxy p : proxies) {
            if (p != null) {
                p.close();
            }
        }
        if (!RECOVERY_OFF && !BLIND) {
            write();
        }
    }

    static Stream<Arguments> cells() {
        List<Arguments> out = new ArrayList<>();
        for (String fault : FAULTS) {
            for (String step : STEPS) {
                for (String model : MODELS) {
                    out.add(Arguments.of(model, step, fault));
                }
            }
        }
        return out.stream();
    }

    @ParameterizedTest(name = "{0} {1} {2}")
    @MethodSource("cells")
    @Timeout(120)
    void cell(String model, String step, String fault) throws Exception {
        String rid = model + "-" + step + "-" + fault;
        Map<String, Object> r = run(model, step, fault, rid, BLIND);
        synchronized (RESULTS) {
            RESULTS.put(rid, r);
        }
        assertTrue((Boolean) r.get("holds"), r::toString);
        if (IN_FLIGHT.contains(step) && !RECOVERY_OFF && !BLIND) {
            // The same cell with the commit check answered blind must fail: a committed write
            // replayed elsewhere (two copies), or a raise that hides a commit.
            int answered = MatrixPool.BLIND_ANSWERS.get();
            Map<String, Object> m = run(model, step, fault, rid + "-mutant", true);
            synchronized (RESULTS) {
                RESULTS.put(rid + "-mutant", m);
            }
            assertTrue(MatrixPool.BLIND_ANSWERS.get() > answered, "the mutant answered no outcome check: is it"
                    + " still ReplayConnection.ask that borrows the check's connection?");
            assertFalse((Boolean) m.get("holds"), () -> "the blind-replay mutation passed this cell: " + m);
        }
    }

    // ---- one cell -------------------------------------------------------------------------------

    /** One fault on RAC1 (the request's node), injected and healed. */
    private static final class Fault {
        final String model;
        final String fault;
        final FaultProxy px = proxies[0];
        boolean killed;

        Fault(String model, String fault) {
            this.model = model;
            this.fault = fault;
        }

        void inject() throws Exception {
            switch (fault) {
                case "crash" -> {
                    if (model.equals("node")) {
                        PgNodes.kill(1);
                        killed = true;
                    } else {
                        // An instance of one database crashes: its sessions end (their transactions
                        // abort) and it takes no connection until restarted.
                        px.refuse();
                    }
                }
                case "blackhole" -> px.blackhole();
                case "reset" -> px.reset();
                case "refuse" -> px.refuse(); // stops accepting connections, its sessions cut
                default -> throw new IllegalArgumentException(fault);
            }
        }

        /**
         * The COMMIT runs on the server; its answer never comes back. A crash of an independent
         * node is a real one: the reply held, the node killed, then the client's socket closed.
         */
        CompletableFuture<Void> atCommit() {
            switch (fault) {
                case "blackhole" -> px.blackholeAfterNextCommit();
                case "reset" -> px.loseNextCommitReply();
                case "crash" -> {
                    if (model.equals("node")) {
                        Hold h = px.holdNextCommitReply();
                        killed = true;
                        return CompletableFuture.runAsync(() -> {
                            try {
                                if (h.withheld.await(30, TimeUnit.SECONDS)) {
                                    PgNodes.kill(1);
                                }
                            } catch (Exception e) {
                                throw new IllegalStateException(e);
                            } finally {
                                h.release();
                            }
                        });
                    }
                    px.loseNextCommitReplyThenRefuse();
                }
                case "refuse" -> px.loseNextCommitReplyThenRefuse();
                default -> throw new IllegalArgumentException(fault);
            }
            return CompletableFuture.completedFuture(null);
        }

        void heal() throws Exception {
            px.heal();
        }

        void restart() throws Exception {
            if (killed) {
                PgNodes.restart(1);
            }
        }
    }

    /**
     * A node pool whose connections, when {@code blind}, answer ReplayConnection's outcome check
     * "aborted" without asking anyone: the mutation of a replay that ignores the commit in flight.
     * Only the check's borrow is answered so (found on the stack); every other borrow, and the pool
     * itself (a HikariDataSource, as the data source's failover expects), is real.
     */
    static final class MatrixPool extends HikariDataSource {
        /** Outcome checks the mutant answered, so that a mutant that no longer acts is seen. */
        static final AtomicInteger BLIND_ANSWERS = new AtomicInteger();
        private final boolean blind;

        MatrixPool(HikariConfig config, boolean blind) {
            super(config);
            this.blind = blind;
        }

        @Override
        public Connection getConnection() throws SQLException {
            if (blind && fromOutcomeCheck()) {
                BLIND_ANSWERS.incrementAndGet();
                return abortedAnswer();
            }
            return super.getConnection();
        }

        /**
         * The outcome check borrows through HikariCP's own bounded borrow ({@code NodeConnect.within}:
         * {@code getHikariPoolMXBean().getConnection(long)}), which {@link #getConnection()} does not
         * see: a blind pool hands it a bean whose bounded borrow answers the same way.
         */
        @Override
        public HikariPoolMXBean getHikariPoolMXBean() {
            HikariPoolMXBean real = super.getHikariPoolMXBean();
            return blind && real instanceof HikariPool pool ? new BlindBean(pool) : real;
        }

        private static boolean fromOutcomeCheck() {
            return StackWalker.getInstance().walk(s -> s.anyMatch(f -> f.getClassName().equals(
                    ReplayConnection.class.getName()) && f.getMethodName().equals("ask")));
        }
    }

    /** A blind pool's bean: its bounded borrow, when the outcome check asks, answers "aborted". */
    static final class BlindBean implements HikariPoolMXBean {
        private final HikariPool real;

        BlindBean(HikariPool real) {
            this.real = real;
        }

        public Connection getConnection(long timeoutMs) throws SQLException {
            if (MatrixPool.fromOutcomeCheck()) {
                MatrixPool.BLIND_ANSWERS.incrementAndGet();
                return abortedAnswer();
            }
            return real.getConnection(timeoutMs);
        }

        @Override
        public int getIdleConnections() {
            return real.getIdleConnections();
        }

        @Override
        public int getActiveConnections() {
            return real.getActiveConnections();
        }

        @Override
        public int getTotalConnections() {
            return real.getTotalConnections();
        }

        @Override
        public int getThreadsAwaitingConnection() {
            return real.getThreadsAwaitingConnection();
        }

        @Override
        public void softEvictConnections() {
            real.softEvictConnections();
        }

        @Override
        public void suspendPool() {
            real.suspendPool();
        }

        @Override
        public void resumePool() {
            real.resumePool();
        }

    }

    /** A connection whose every query answers one row, {@code aborted}. */
    static Connection abortedAnswer() {
        InvocationHandler rs = (p, m, a) -> switch (m.getName()) {
            case "next" -> true;
            case "getString" -> "aborted";
            default -> defaultOf(m.getReturnType());
        };
        ResultSet answer = (ResultSet) Proxy.newProxyInstance(ReplayMatrixTest.class.getClassLoader(),
                new Class<?>[] {ResultSet.class}, rs);
        InvocationHandler st = (p, m, a) -> switch (m.getName()) {
            case "executeQuery", "getResultSet" -> answer;
            case "execute" -> true;
            default -> defaultOf(m.getReturnType());
        };
        PreparedStatement statement = (PreparedStatement) Proxy.newProxyInstance(
                ReplayMatrixTest.class.getClassLoader(), new Class<?>[] {PreparedStatement.class}, st);
        InvocationHandler cn = (p, m, a) -> switch (m.getName()) {
            case "prepareStatement", "createStatement" -> statement;
            case "isValid", "getAutoCommit" -> true;
            default -> defaultOf(m.getReturnType());
        };
        return (Connection) Proxy.newProxyInstance(ReplayMatrixTest.class.getClassLoader(),
                new Class<?>[] {Connection.class}, cn);
    }

    /** What a method of the fake answers: nothing (its caller reads only the answers above). */
    private static Object defaultOf(Class<?> type) {
        if (type == boolean.class) {
            return false;
        }
        if (type == int.class) {
            return 0;
        }
        if (type == long.class) {
            return 0L;
        }
        if (type.isPrimitive() && type != void.class) {
            throw new UnsupportedOperationException("the outcome check's fake has no " + type);
        }
        return null;
    }

    private static MatrixPool pool(String name, String url, boolean blind) {
        HikariConfig c = new HikariConfig();
        // The call timeout (a blackhole's wait) and short connects, as the Python matrix's.
        c.setJdbcUrl(url + "?socketTimeout=" + CALL_TIMEOUT_SECONDS + "&connectTimeout=2&loginTimeout=2");
        c.setUsername("postgres");
        c.setPoolName("rm-" + name);
        c.setMaximumPoolSize(2);
        c.setMinimumIdle(1);
        c.setConnectionTimeout(2000);
        c.setValidationTimeout(1000);
        return new MatrixPool(c, blind);
    }

    private Map<String, Object> run(String model, String step, String fault, String rid, boolean blind)
            throws Exception {
        boolean database = model.equals("database");
        String name = "rm-" + rid.replace('_', '-');
        Map<String, DataSource> pools = new LinkedHashMap<>();
        for (int i = 0; i < 3; i++) {
            String url = database ? (i == 0 ? proxies[0].url() : PgNodes.url(1)) : proxies[i].url();
            pools.put(NAMES.get(i), pool(NAMES.get(i), url, blind));
        }
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = " + name + "; nodes = RAC1, RAC2, RAC3; policy = random; thread.auto_pin = false"
                + (database ? "; recovery.scope = database" : "") + (RECOVERY_OFF ? "; data.strict = true" : ""));
        ds.setNodeDataSources(pools);
        ds.setHeartbeatIntervalMillis(0); // the failure is unknown to the library: no heartbeat, no FAN
        ds.setHeartbeatTimeoutSeconds(1); // the outcome check's bound
        ds.setRegisterMBean(false);
        ds.setReplay(!RECOVERY_OFF);
        Fault cell = new Fault(model, fault);
        long started = System.nanoTime();
        SQLException raised = null;
        SQLException raisedNext = null;
        try {
            ShardingKey key = keyOn(ds, "RAC1");
            if (step.equals("before")) {
                cell.inject();
                // The node failed a while before the request: its pooled connections are older
                // than HikariCP's 500 ms without a check, so the borrow checks them, as a request
                // some time after a failure would (a borrow right after it gets the dead
                // connection unchecked: the mid-request cells).
                Thread.sleep(BEFORE_PAUSE_MILLIS);
            }
            try {
                request(ds, key, rid, step, cell);
            } catch (SQLException e) {
                raised = e;
            }
            if (step.equals("after") && raised == null) {
                cell.inject();
                try {
                    request(ds, key, rid + "-next", "", cell);
                } catch (SQLException e) {
                    raisedNext = e;
                }
            }
        } finally {
            cell.heal();
            ds.close();
            for (DataSource p : pools.values()) {
                ((HikariDataSource) p).close();
            }
            cell.restart();
        }
        double seconds = (System.nanoTime() - started) / 1e9;
        int n = copies(database, rid);
        boolean holds = judge(raised, n);
        if (step.equals("after") && raised == null) {
            holds &= judge(raisedNext, copies(database, rid + "-next"));
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("model", model);
        r.put("step", step);
        r.put("fault", fault);
        r.put("holds", holds);
        r.put("copies", n);
        long replays = count(name, ": request replayed on node");
        r.put("replays", replays);
        SQLException shown = raised != null ? raised : raisedNext;
        String outcome;
        if (shown == null) {
            outcome = "ok" + (count(name, ": the COMMIT in flight committed") > 0 ? ", found committed" : "")
                    + ", " + replays + " replay(s)";
        } else {
            Refusal refusal = refusalOf(shown);
            outcome = "raised " + shown.getClass().getSimpleName() + (raised == null ? " (next request)" : "") + ": "
                    + (refusal != null ? refusal.name() : "untyped, SQLState " + shown.getSQLState() + " "
                    + shown.getMessage());
        }
        r.put("outcome", outcome);
        r.put("seconds", Math.round(seconds * 100) / 100.0);
        r.put("mutated", blind);
        return r;
    }

    /** The request: a write, a read the application sees, COMMIT; the fault at its step. */
    private static void request(AffinityDataSource ds, ShardingKey key, String id, String step, Fault cell)
            throws Exception {
        CompletableFuture<Void> crash = null;
        try (Connection c = ds.createConnectionBuilder().shardingKey(key).build()) {
            c.setAutoCommit(false);
            try (PreparedStatement s = c.prepareStatement("INSERT INTO java_rm VALUES (?)")) {
                s.setString(1, id);
                s.executeUpdate();
            }
            if (step.equals("mid")) {
                cell.inject();
            }
            try (PreparedStatement s = c.prepareStatement("SELECT count(*) FROM java_rm WHERE id = ?")) {
                s.setString(1, id);
                try (ResultSet rs = s.executeQuery()) {
                    rs.next();
                    rs.getInt(1);
                }
            }
            if (step.equals("before_commit")) {
                cell.inject();
            } else if (step.equals("commit_lost")) {
                crash = cell.atCommit();
            }
            c.commit();
        } finally {
            if (crash != null) {
                crash.get(60, TimeUnit.SECONDS);
            }
        }
    }

    /** Exactly once if it returned; at most once with a typed cause if it raised, OUTCOME_UNKNOWN if once. */
    private static boolean judge(SQLException raised, int copies) {
        if (raised == null) {
            return copies == 1;
        }
        Refusal refusal = refusalOf(raised);
        return refusal != null && copies <= 1 && (copies == 0 || refusal == Refusal.OUTCOME_UNKNOWN);
    }

    /** How many times {@code id} was committed, over the distinct databases. */
    static int copies(boolean database, String id) throws SQLException {
        int total = 0;
        for (int i = 1; i <= (database ? 1 : 3); i++) {
            try (Connection c = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                    PreparedStatement s = c.prepareStatement("SELECT count(*) FROM java_rm WHERE id = ?")) {
                s.setString(1, id);
                try (ResultSet rs = s.executeQuery()) {
                    rs.next();
                    total += rs.getInt(1);
                }
            }
        }
        return total;
    }

    /** Log lines of data source {@code name} containing {@code what}. */
    private static long count(String name, String what) {
        String prefix = "AffinityDataSource " + name + what;
        return log.records().stream().filter(r -> r.getMessage() != null && r.getMessage().startsWith(prefix))
                .count();
    }

    // ---- output ---------------------------------------------------------------------------------

    static void write() throws Exception {
        StringBuilder b = new StringBuilder("{\"language\": \"java\", \"cells\": [");
        boolean first = true;
        synchronized (RESULTS) {
            for (Map<String, Object> c : RESULTS.values()) {
                b.append(first ? "\n " : ",\n ").append(json(c));
                first = false;
            }
        }
        b.append("\n]}\n");
        Path p = PgNodes.repo().resolve("target/failure-matrix/replay-java.json");
        Files.createDirectories(p.getParent());
        Files.writeString(p, b.toString(), StandardCharsets.UTF_8);
    }

    private static String json(Map<String, Object> cell) {
        StringBuilder b = new StringBuilder("{");
        boolean first = true;
        for (Map.Entry<String, Object> e : cell.entrySet()) {
            b.append(first ? "" : ", ").append(string(e.getKey())).append(": ");
            Object v = e.getValue();
            b.append(v instanceof String s ? string(s) : String.valueOf(v));
            first = false;
        }
        return b.append('}').toString();
    }

    private static String string(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') {
                b.append('\\').append(ch);
            } else if (ch < 0x20) {
                b.append(String.format(Locale.ROOT, "\\u%04x", (int) ch));
            } else {
                b.append(ch);
            }
        }
        return b.append('"').toString();
    }
}
