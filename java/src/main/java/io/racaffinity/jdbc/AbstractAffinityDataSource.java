package io.racaffinity.jdbc;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.LibraryThreads;
import io.racaffinity.jmx.ClusterMonitor;
import java.io.PrintWriter;
import java.lang.System.Logger.Level;
import java.lang.reflect.Method;
import java.sql.SQLException;
import java.sql.SQLNonTransientConnectionException;
import java.sql.SQLNonTransientException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;
import javax.management.InstanceAlreadyExistsException;
import javax.management.ObjectName;
import javax.naming.InitialContext;
import javax.sql.CommonDataSource;
import javax.sql.DataSource;

/**
 * What {@link AffinityDataSource} and {@link AffinityXADataSource} share, as
 * HikariCP's data source shares {@code HikariConfig}: the bean configuration
 * (the cluster, where the node data sources come from, credentials, heartbeat
 * and failure detection), its sealing once the data source starts, the
 * validation at start (a warning for each setting that another one overrides)
 * and the lifecycle: the first connection (or {@link #init()}) builds the
 * cluster, resolves one node data source per node, starts the heartbeat and
 * registers the cluster's MXBean; {@link #close()} undoes what it built.
 *
 * <p>Every log line starts with the data source's kind and its cluster's name
 * ({@code AffinityDataSource orcl: ...}); configuration problems that still let
 * it run are WARNING, start and node state changes INFO or WARNING, per-call
 * details DEBUG. Credentials never appear in {@link #toString()}, log lines or
 * exception messages.
 *
 * <p>Only this package's two data sources extend it.
 *
 * @param <T> the node data source type, {@code DataSource} or {@code XADataSource}
 */
public abstract class AbstractAffinityDataSource<T extends CommonDataSource> implements CommonDataSource,
        AutoCloseable {
    /** The data source's kind, for messages: its simple class name. */
    final String kind;
    final System.Logger log;
    final NodeSources<T> nodes;
    private PrintWriter logWriter;
    private volatile Running<T> running;
    private volatile boolean closed;

    /** What {@link #start()} built; {@link #close()} undoes it. */
    static final class Running<T> {
        final Cluster cluster;
        final boolean ownsCluster;
        final T[] byId;
        final List<Object> owned;
        final Heartbeat heartbeat;
        final ObjectName mbean;
        /** The thread that writes what the heartbeat and the pool upkeep log (they never wait on a log handler). */
        final AsyncLog upkeepLog;
        /**
         * By node id: whether the node's DataSource gave a connection already ({@link NodeConnect}).
         * Plain writes: a thread that misses another's write only takes the privileged path once more.
         */
        final boolean[] started;

        Running(Cluster cluster, boolean ownsCluster, T[] byId, List<Object> owned, Heartbeat heartbeat,
                ObjectName mbean, AsyncLog upkeepLog) {
            this.upkeepLog = upkeepLog;
            this.cluster = cluster;
            this.ownsCluster = ownsCluster;
            this.byId = byId;
            this.owned = owned;
            this.heartbeat = heartbeat;
            this.mbean = mbean;
            this.started = new boolean[byId.length];
        }
    }

    AbstractAffinityDataSource(Class<T> type, String givenProperty, String urlsNeedClassName) {
        this.kind = kindOf(getClass());
        this.log = System.getLogger(AbstractAffinityDataSource.class.getPackageName() + "." + kind);
        this.nodes = new NodeSources<>(kind, type, givenProperty, urlsNeedClassName, this::checkNotStarted);
    }

    /** Messages and the logger keep the library's class name when an application subclasses a data source. */
    private static String kindOf(Class<?> c) {
        while (c.getSuperclass() != AbstractAffinityDataSource.class) {
            c = c.getSuperclass();
        }
        return c.getSimpleName();
    }

    // ---- hooks of the two data sources --------------------------------------------

    /**
     * What the heartbeat probes for the node data sources (a node {@code XADataSource} is
     * probed through a {@code DataSource} view of it).
     */
    abstract DataSource[] probes(T[] byId);

    /**
     * Builds the data source's own runtime parts once the cluster, node data sources,
     * heartbeat and MXBean are in place; a failure undoes the whole start.
     */
    abstract void started(Running<T> r) throws SQLException;

    /** Whether the data source logs every node state change itself (else the heartbeat logs those it causes). */
    boolean logsStateChanges() {
        return false;
    }

    /** A node's state may have changed (a heartbeat moved it): act on it now, not at a tick. */
    void stateMayHaveChanged() {}

    /** Adds what only this kind of data source shows to {@link #toString()}. */
    void describe(StringBuilder sb) {}

    /** The name {@link #toString()} gives the node data source class ({@code xaDataSourceClassName}). */
    String classNameProperty() {
        return "dataSourceClassName";
    }

    /**
     * Stops the data source's own runtime parts, in {@link #close()} once the heartbeat was told to stop: waits for
     * them until {@code byNanos} at most, and returns the threads to wait for further (until close()'s deadline).
     */
    List<Thread> stopping(long byNanos) {
        return List.of();
    }

    // ---- sealing -------------------------------------------------------------------

    /** Throws once the data source has started or closed: every setter calls it first. */
    final void checkNotStarted() {
        if (running != null || closed) {
            throw new IllegalStateException(kind + " " + clusterName() + " is already initialised (or closed): set"
                    + " its properties before its first connection");
        }
    }

    // ---- properties ----------------------------------------------------------------

    /**
     * The core config text (the README's keys), e.g.
     * {@code "name = orcl; nodes = RAC1, RAC2, RAC3; transaction.strict = true"}
     * ({@code transaction.strict = true} is UCP's {@code useStrictXAAffinity}).
     *
     * @param config config text
     */
    public void setConfig(String config) {
        nodes.setConfig(config);
    }

    /** @return the config text, or null */
    public String getConfig() {
        return nodes.getConfig();
    }

    /**
     * Uses an existing cluster instead of building one from {@link #setConfig}. It is
     * shared (for example by an {@code AffinityDataSource} and an {@code AffinityXADataSource}
     * of the same database, so that both route a gtrid alike): {@link #close()} does not close it.
     *
     * @param cluster the cluster
     */
    public void setCluster(Cluster cluster) {
        nodes.setCluster(cluster);
    }

    /**
     * JNDI names of the node data sources (one app-server pool per instance),
     * looked up at initialisation.
     *
     * @param nodeJndiNames node name → JNDI name, in node order
     */
    public void setNodeJndiNames(Map<String, String> nodeJndiNames) {
        nodes.setNodeJndiNames(nodeJndiNames);
    }

    /**
     * {@link #setNodeJndiNames(Map)} as one string property:
     * {@code RAC1=java:comp/env/jdbc/rac1 | RAC2=java:comp/env/jdbc/rac2}
     * (entries separated by newlines or {@code |}).
     *
     * @param list the entries
     */
    public void setNodeJndiNameList(String list) {
        nodes.setNodeJndiNameList(list);
    }

    /**
     * Environment of the {@link InitialContext} for {@link #setNodeJndiNames}
     * (default: the platform's).
     *
     * @param env the environment
     */
    public void setJndiEnvironment(Properties env) {
        nodes.setJndiEnvironment(env);
    }

    /**
     * Per-node JDBC URLs.
     *
     * @param nodeUrls node name → URL, in node order
     */
    public void setNodeUrls(Map<String, String> nodeUrls) {
        nodes.setNodeUrls(nodeUrls);
    }

    /**
     * {@link #setNodeUrls(Map)} as one string property: {@code RAC1=jdbc:... | RAC2=jdbc:...}
     * (entries separated by newlines or {@code |}).
     *
     * @param list the entries
     */
    public void setNodeUrlList(String list) {
        nodes.setNodeUrlList(list);
    }

    /**
     * A JDBC URL with an instance placeholder ({@code {instance}}, {@code ${instance}},
     * {@code {INSTANCE_NAME}} or {@code ${INSTANCE_NAME}}), e.g.
     * {@code jdbc:oracle:thin:@//host:1521/svc/{instance}}; each node's URL replaces
     * it with the node name. {@link #setNodeUrls} entries take precedence.
     *
     * @param urlTemplate the template
     */
    public void setUrlTemplate(String urlTemplate) {
        nodes.setUrlTemplate(urlTemplate);
    }

    /** @return the URL template, or null */
    public String getUrlTemplate() {
        return nodes.getUrlTemplate();
    }

    /**
     * The node data source class for {@link #setNodeUrls}/{@link #setUrlTemplate}, configured
     * by reflection with the URL ({@code setURL}/{@code setUrl}/{@code setJdbcUrl}), {@link
     * #setUser user}, {@link #setPassword password} and {@link #setDataSourceProperties extra
     * properties}: e.g. {@code com.zaxxer.hikari.HikariDataSource}, {@code
     * oracle.ucp.jdbc.PoolDataSourceImpl} or {@code org.postgresql.ds.PGSimpleDataSource} for
     * an {@code AffinityDataSource} (without one, its nodes use an unpooled {@code DriverManager}
     * data source), {@code oracle.jdbc.xa.client.OracleXADataSource} or {@code
     * org.postgresql.xa.PGXADataSource} for an {@code AffinityXADataSource} (required).
     *
     * @param className the class name
     */
    public void setDataSourceClassName(String className) {
        nodes.setDataSourceClassName(className);
    }

    /** @return the node data source class name, or null */
    public String getDataSourceClassName() {
        return nodes.getDataSourceClassName();
    }

    /**
     * Extra properties set on every node data source built from a URL, by reflection
     * ({@code maximumPoolSize} → {@code setMaximumPoolSize(int)}, ...).
     *
     * @param properties the properties
     */
    public void setDataSourceProperties(Properties properties) {
        nodes.setDataSourceProperties(properties);
    }

    /**
     * {@link #setDataSourceProperties} as one string: {@code maximumPoolSize=10 | connectionTimeout=2000}.
     *
     * @param list the entries
     */
    public void setDataSourcePropertyList(String list) {
        nodes.setDataSourcePropertyList(list);
    }

    /**
     * User of the node data sources built from URLs.
     *
     * @param user the user
     */
    public void setUser(String user) {
        nodes.setUser(user);
    }

    /**
     * Password of the node data sources built from URLs. Never shown.
     *
     * @param password the password
     */
    public void setPassword(String password) {
        nodes.setPassword(password);
    }

    /**
     * Heartbeat period: -1 (default) uses the config's {@code heartbeat.interval}; 0 disables.
     *
     * @param millis the period in milliseconds
     * @throws IllegalArgumentException if below -1
     */
    public void setHeartbeatIntervalMillis(long millis) {
        nodes.setHeartbeatIntervalMillis(millis);
    }

    /** @return the heartbeat period setting (-1: from the config; 0: disabled) */
    public long getHeartbeatIntervalMillis() {
        return nodes.getHeartbeatIntervalMillis();
    }

    /**
     * Seconds a probe's {@code isValid} may take (default 5; 0: JDBC's no timeout); also the deadline of a
     * replay's outcome check.
     *
     * @param seconds the timeout
     * @throws IllegalArgumentException if negative ({@code isValid} refuses it: every probe would miss)
     */
    public void setHeartbeatTimeoutSeconds(int seconds) {
        nodes.setHeartbeatTimeoutSeconds(seconds);
    }

    /**
     * Whether to register the cluster's MXBean (default true; skipped with a warning if one
     * of the same cluster name is registered already).
     *
     * @param register register or not
     */
    public void setRegisterMBean(boolean register) {
        nodes.setRegisterMBean(register);
    }

    /**
     * SQLState prefixes of exceptions that report a node failure (comma-separated).
     * Default {@code 08,57P02,57P03}: JDBC's connection-exception class, plus
     * PostgreSQL's crash and "cannot connect now" states. Not {@code 57P01}: one session
     * terminated by {@code pg_terminate_backend} is no node failure (a crashed node is then
     * counted by the next connection attempt). A {@link java.sql.SQLRecoverableException} (ojdbc's
     * lost connection) always counts.
     *
     * @param prefixes comma-separated SQLState prefixes; empty: none (only a {@code SQLRecoverableException}
     *     reports a node failure)
     * @throws IllegalArgumentException for null
     */
    public void setNodeFailureSqlStates(String prefixes) {
        nodes.setNodeFailureSqlStates(prefixes);
    }

    /** @return the SQLState prefixes that report a node failure, comma-separated */
    public String getNodeFailureSqlStates() {
        return String.join(",", nodes.nodeFailureStates());
    }

    boolean isNodeFailure(SQLException e) {
        return SqlErrors.isNodeFailure(e, nodes.nodeFailureStates());
    }

    // ---- lifecycle -----------------------------------------------------------------

    /** @return the running parts, starting the data source on first use */
    final Running<T> running() throws SQLException {
        Running<T> r = running;
        if (r != null && !closed) {
            return r;
        }
        synchronized (this) {
            if (closed) {
                throw closedException();
            }
            if (running == null) {
                running = start();
            }
            return running;
        }
    }

    /** @return the running parts, or null before the start */
    final Running<T> runningOrNull() {
        return running;
    }

    final SQLException closedException() {
        return new SQLNonTransientConnectionException(kind + " " + clusterName() + " is closed", "08003");
    }

    /**
     * Builds the cluster, resolves the node data sources, starts the heartbeat and
     * registers the MXBean, if not done yet. The first connection does it lazily.
     *
     * @throws SQLException if the configuration is incomplete or invalid
     */
    public void init() throws SQLException {
        running();
    }

    private Running<T> start() throws SQLException {
        Redactor redactor = nodes.redactor();
        List<Object> owned = new ArrayList<>();
        Cluster c = nodes.givenCluster();
        boolean ownsCluster = false;
        Heartbeat hb = null;
        ObjectName mbean = null;
        AsyncLog upkeepLog = null;
        try {
            if (c == null) {
                c = nodes.newCluster();
                ownsCluster = true;
            }
            String prefix = kind + " " + c.name();
            for (String w : nodes.overridden()) {
                log.log(Level.WARNING, prefix + ": " + w);
            }
            T[] byId = nodes.resolve(c, redactor, owned::add);
            // Before the heartbeat or any pool connects (closed after the node pools).
            PgjdbcCleaner pgjdbc = PgjdbcCleaner.hold(Thread.currentThread().getContextClassLoader(),
                    AbstractAffinityDataSource.class.getClassLoader());
            if (pgjdbc != null) {
                owned.add(pgjdbc);
            }
            upkeepLog = new AsyncLog(log, prefix, "racaffinity-log-" + c.name());
            long interval = nodes.heartbeatInterval(c);
            if (interval > 0) {
                hb = new Heartbeat(prefix, c, probes(byId), interval, nodes.heartbeatTimeoutSeconds(), redactor,
                        !logsStateChanges(), this::stateMayHaveChanged, upkeepLog);
            }
            if (nodes.registerMBean()) {
                mbean = registerMBean(c, ownsCluster, prefix);
            }
            Running<T> r = new Running<>(c, ownsCluster, byId, owned, hb, mbean, upkeepLog);
            started(r);
            final long iv = interval;
            final ObjectName on = mbean;
            final Cluster fc = c;
            log.log(Level.INFO, () -> prefix + ": nodes " + fc.nodeNames()
                    + (iv > 0 ? ", heartbeat every " + iv + " ms" : ", no heartbeat")
                    + (on != null ? ", MBean " + on : ""));
            return r;
        } catch (SQLException | RuntimeException | Error e) {
            stopAll(hb, upkeepLog, mbean, c, ownsCluster, owned);
            if (e instanceof SQLException) {
                throw redactor.sql((SQLException) e, null);
            }
            throw e;
        }
    }

    /**
     * Stops the heartbeat, unregisters the MXBean, closes the node data sources this
     * data source created (not those it was given) and the cluster it built (not one
     * it was given). Idempotent. What becomes of connections still open is each data
     * source's to say ({@link AffinityDataSource#close()}, {@link AffinityXADataSource#close()}: both end them).
     * The wait for the threads of what it stops is bounded once, 2 s in all, however many parts are stuck (in a
     * driver, a TM, a log handler or the partition-map loader); closing the node pools it built comes on top.
     */
    @Override
    public void close() {
        Running<T> r;
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            r = running;
        }
        if (r == null) {
            return;
        }
        stopAll(r.heartbeat, r.upkeepLog, r.mbean, r.cluster, r.ownsCluster, r.owned);
    }

    /**
     * How long {@link #close()} waits in all for the threads of what it stops (heartbeat, pool upkeep, JTA sweeper,
     * log writer, and the library's wait for its threads when the last cluster closes). All are told to stop
     * first, then waited for under this one deadline: parts stuck at once (a driver, a TM, a log handler or a
     * partition-map loader that ignores the interrupt) cost it once, where each used to add its own 1 to 2 s.
     */
    static final long CLOSE_WAIT_MILLIS = 2_000;
    /** The end of {@link #CLOSE_WAIT_MILLIS} kept for the log writer: it stops after the parts that log through it. */
    static final long LOG_CLOSE_MILLIS = 1_000;
    /** The end of {@link #CLOSE_WAIT_MILLIS} a writer still in a log handler gets to unwind once interrupted. */
    static final long LOG_UNWIND_MILLIS = 500;

    /** Undoes a start, under one deadline ({@link #CLOSE_WAIT_MILLIS}); null parts were not built. */
    private void stopAll(Heartbeat hb, AsyncLog upkeepLog, ObjectName mbean, Cluster c, boolean ownsCluster,
            List<Object> owned) {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(CLOSE_WAIT_MILLIS);
        long partsBy = deadline - TimeUnit.MILLISECONDS.toNanos(LOG_CLOSE_MILLIS);
        List<Thread> parts = new ArrayList<>();
        if (hb != null) {
            hb.stop();
        }
        parts.addAll(stopping(partsBy));
        if (hb != null) {
            parts.addAll(hb.threads());
        }
        LibraryThreads.joinUntil(parts, partsBy);
        // After the heartbeat and the upkeep: what they logged last is written.
        if (upkeepLog != null) {
            upkeepLog.stop();
            upkeepLog.awaitStop(deadline - TimeUnit.MILLISECONDS.toNanos(LOG_UNWIND_MILLIS), deadline);
        }
        LibraryThreads.joinUntil(parts, deadline);
        if (mbean != null) {
            unregisterMBean(c, ownsCluster, mbean);
        }
        closeAll(owned);
        if (ownsCluster) {
            LibraryThreads.closingBy(deadline, c::close);
        }
    }

    /**
     * By given (shared) cluster, how many open data sources show its MXBean: the first registers it,
     * the last to close unregisters it, so that it never leaves JMX while the cluster is in use.
     */
    private static final Map<Cluster, int[]> SHARED_MBEANS = new IdentityHashMap<>();

    private ObjectName registerMBean(Cluster c, boolean ownsCluster, String prefix) {
        synchronized (SHARED_MBEANS) {
            int[] users = ownsCluster ? null : SHARED_MBEANS.get(c);
            if (users != null) {
                users[0]++;
                return ClusterMonitor.objectName(c.name());
            }
            try {
                ObjectName on = ClusterMonitor.register(c);
                if (!ownsCluster) {
                    SHARED_MBEANS.put(c, new int[] {1});
                }
                return on;
            } catch (InstanceAlreadyExistsException e) {
                // Expected only where the application registered this very cluster; another cluster of
                // the same name leaves this one out of JMX, given or not.
                if (!ownsCluster && ClusterMonitor.isRegistered(c)) {
                    log.log(Level.DEBUG, prefix + ": MBean " + ClusterMonitor.objectName(c.name())
                            + " is registered already by the application; this data source registers none");
                } else {
                    log.log(Level.WARNING, prefix + ": MBean " + ClusterMonitor.objectName(c.name())
                            + " is already registered (another cluster named " + c.name()
                            + "); this data source registers none");
                }
                return null;
            }
        }
    }

    private static void unregisterMBean(Cluster c, boolean ownsCluster, ObjectName on) {
        synchronized (SHARED_MBEANS) {
            if (!ownsCluster) {
                int[] users = SHARED_MBEANS.get(c);
                if (users != null && --users[0] > 0) {
                    return;
                }
                SHARED_MBEANS.remove(c);
            }
            ClusterMonitor.unregister(on);
        }
    }

    /** @return whether {@link #close()} was called */
    public boolean isClosed() {
        return closed;
    }

    private void closeAll(List<Object> owned) {
        for (Object o : owned) {
            try {
                if (o instanceof AutoCloseable) {
                    ((AutoCloseable) o).close();
                } else {
                    Method m = o.getClass().getMethod("close");
                    m.invoke(o);
                }
            } catch (NoSuchMethodException e) {
                // nothing to close
            } catch (Exception e) {
                log.log(Level.WARNING, kind + " " + clusterName() + ": closing a node data source failed: "
                        + e.getClass().getName());
            }
        }
    }

    // ---- use -----------------------------------------------------------------------

    /**
     * The cluster (initialising the data source if needed).
     *
     * @return the cluster
     * @throws SQLException if initialisation fails, or (SQLState 08003) once the data source is closed, as a
     *     closed HikariCP data source answers (not a closed cluster)
     */
    public Cluster getCluster() throws SQLException {
        return running().cluster;
    }

    /**
     * Ends a web session's affinity (when the HTTP session ends): a session's connections, and the XA
     * branches its requests begin, are placed by it.
     *
     * @param sessionId the session id
     * @return whether it had one
     * @throws SQLException if initialisation fails
     */
    public boolean endSession(String sessionId) throws SQLException {
        try {
            return running().cluster.endSession(sessionId);
        } catch (AffinityException e) {
            throw SqlErrors.routing(e);
        }
    }

    /**
     * The JMX name of the cluster's MXBean, if this data source registered it (or shows it with the
     * other data sources of a cluster it was given).
     *
     * @return the ObjectName or null
     * @throws SQLException if initialisation fails, or (SQLState 08003) once the data source is closed
     */
    public ObjectName getObjectName() throws SQLException {
        return running().mbean;
    }

    /** @return the node data source of {@code nodeName} */
    final T nodeSource(String nodeName) throws SQLException {
        Running<T> r = running();
        try {
            int id = r.cluster.nodeId(nodeName);
            if (id < r.byId.length && r.byId[id] != null) {
                return r.byId[id];
            }
        } catch (AffinityException e) {
            throw SqlErrors.routing(e);
        }
        throw new SQLNonTransientException("no " + nodes.typeName() + " for node " + nodeName, "22023");
    }

    /** @return the cluster's name, or a placeholder before the start */
    final String clusterName() {
        Running<T> r = running;
        if (r != null) {
            return r.cluster.name();
        }
        Cluster given = nodes.givenCluster();
        return given != null ? given.name() : "(not initialised)";
    }

    // ---- CommonDataSource ----------------------------------------------------------

    @Override
    public PrintWriter getLogWriter() {
        return logWriter;
    }

    @Override
    public void setLogWriter(PrintWriter out) {
        this.logWriter = out;
    }

    /**
     * The longest a connection to a node may take to be established, in seconds (JDBC's login
     * timeout): given to the node data sources built from node URLs as the driver's own, as
     * {@code HikariDataSource.setLoginTimeout} gives it to its driver (pgjdbc's {@code loginTimeout},
     * Oracle's {@code oracle.net.CONNECT_TIMEOUT}), unless the URL or {@code dataSourceProperties} set
     * it. 0 (the default) keeps the data source's default, 10 s (docs/java-datasource.md, "Node
     * timeouts"). Node data sources the application gives or looks up are its own: set it there (a
     * WARNING at the start says it was not applied). Not HikariCP's {@code connectionTimeout}, the wait
     * for a free pooled connection, which is the node pool's setting.
     *
     * <p>Sealed at the start like the bean properties, except that the value already in force is taken
     * without a word: {@code CommonDataSource.setLoginTimeout} is JDBC's, and an app server or framework may
     * call it again late with the value it gave before (HikariDataSource never refuses it).
     *
     * @param seconds the timeout, 0 for the default
     * @throws IllegalArgumentException if negative
     * @throws IllegalStateException once the data source has started (or closed), for a value other than the one
     *     in force, which would apply to no connection
     */
    @Override
    public void setLoginTimeout(int seconds) {
        int inForce = nodes.loginTimeout();
        if (seconds == inForce) {
            return;
        }
        if (running != null || closed) {
            throw new IllegalStateException(kind + " " + clusterName() + ": loginTimeout is " + inForce
                    + " s since the start (0: the default); " + seconds + " s would apply to no connection: set it"
                    + " before the first connection");
        }
        nodes.setLoginTimeout(seconds);
    }

    @Override
    public int getLoginTimeout() {
        return nodes.loginTimeout();
    }

    @Override
    public Logger getParentLogger() {
        return Logger.getLogger("io.racaffinity");
    }

    /**
     * The configuration, one format for both data sources: {@code AffinityDataSource[cluster=orcl, nodes=[...],
     * nodeUrls=..., dataSourceClassName=..., dataSourceProperties={...}, credentials=<set>]}. No credential shows:
     * URLs are redacted, a secret property's value (and the user's) is {@code ****}, user and password are only
     * said to be set.
     */
    @Override
    public String toString() {
        Redactor r = nodes.redactor();
        StringBuilder sb = new StringBuilder(kind).append("[cluster=").append(clusterName());
        Running<T> s = running;
        if (s != null && !closed) {
            try {
                sb.append(", nodes=").append(s.cluster.nodeNames());
            } catch (AffinityException e) {
                // closed concurrently
            }
        }
        describe(sb);
        if (nodes.describe(sb, r, classNameProperty()) && !nodes.dataSourceProperties().isEmpty()) {
            sb.append(", dataSourceProperties=").append(redactedProperties(r));
        }
        if (nodes.hasCredentials()) {
            sb.append(", credentials=<set>");
        }
        return sb.append(closed ? ", closed]" : "]").toString();
    }

    private Map<String, String> redactedProperties(Redactor r) {
        Map<String, String> m = new LinkedHashMap<>();
        nodes.dataSourceProperties().forEach((k, v) -> {
            String lk = k.toLowerCase(Locale.ROOT);
            m.put(k, Redactor.isSecretKey(k) || lk.equals("user") || lk.equals("username")
                    ? "****" : r.redact(v));
        });
        return Collections.unmodifiableMap(m);
    }
}
