package io.racaffinity.jdbc;

import io.racaffinity.AffinityContext;
import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.LibraryThreads;
import io.racaffinity.Lease;
import io.racaffinity.Outcome;
import io.racaffinity.Pin;
import io.racaffinity.ReplayCounts;
import io.racaffinity.Route;
import io.racaffinity.Scope;
import io.racaffinity.jta.TransactionAffinity;
import java.lang.System.Logger.Level;
import java.sql.Connection;
import java.sql.ConnectionBuilder;
import java.sql.SQLException;
import java.sql.SQLNonTransientException;
import java.sql.SQLTransientConnectionException;
import java.sql.ShardingKeyBuilder;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.Executor;
import java.util.concurrent.atomic.AtomicInteger;
import javax.naming.InitialContext;
import javax.naming.NamingException;
import javax.sql.DataSource;

/**
 * A drop-in {@link DataSource} that routes every connection to one of several
 * node DataSources, one per RAC instance (seed 000: one pool per instance, each
 * connecting with {@code INSTANCE_NAME} set), with the racaffinity core
 * deciding which:
 *
 * <ul>
 *   <li>{@link #getConnection()} honours the calling thread's pin ({@link #pin()}),
 *       else load-balances by the config's {@code policy};
 *   <li>a JDBC 4.3 sharding key ({@link #createShardingKeyBuilder()},
 *       {@link #createConnectionBuilder()}{@code .shardingKey(k).build()}) routes by
 *       data affinity, with UCP's call shape;
 *   <li>inside {@link #withSession(String)} a connection routes by web-session affinity.
 * </ul>
 *
 * <p>One call hands everything it knows to the core ({@link Cluster#pickFor}), which decides the
 * precedence: the active JTA transaction (see {@link #setTransactionSynchronizationRegistry}), an
 * explicit sharding key, then the session scope ({@link #withSession}, else the request's
 * {@link #withRequestSession}), then the thread pin or load balancing. Connections are {@link AffinityConnection}s:
 * closing one releases its lease, and a connection exception (SQLState {@code 08},
 * see {@link #setNodeFailureSqlStates}) reports the node failure (passive ejection). A node that cannot give a
 * connection at all costs the caller no failed request in soft scopes: {@code getConnection()} retries once, within
 * the same call, on the node the core names next ({@link Cluster#repickFor}), and the session or pin moves there;
 * never a transaction's branch, never in a strict scope. A retry whose node goes Down while the call waits on its
 * pool asks the core again (the core never names a Down node, so at most once per node). A heartbeat probes each node at
 * {@code heartbeat.interval} without application traffic. One MXBean per cluster
 * is registered as {@code io.racaffinity:type=Cluster,name=<name>}.
 *
 * <p>Configure it as a bean (HikariCP/Agroal style), then use it; the first
 * {@code getConnection()} (or {@link #init()}) builds the cluster and resolves the
 * node DataSources, after which the setters throw {@link IllegalStateException}.
 * The nodes come from one of:
 * <ol>
 *   <li>{@link #setNodeDataSources(Map)}: DataSources built by the application;
 *   <li>{@link #setNodeJndiNames(Map)}: one app-server pool per instance, looked up
 *       lazily through {@link InitialContext};
 *   <li>{@link #setNodeUrls(Map)} or {@link #setUrlTemplate(String)} (with an
 *       {@code {instance}} placeholder), plus {@link #setDataSourceClassName(String)}
 *       configured by reflection with the URL, {@link #setUser user}, {@link #setPassword
 *       password} and {@link #setDataSourceProperties extra properties}.
 * </ol>
 * The node list is the config's ({@link #setConfig(String)}); without a config,
 * the map's keys in order make {@code nodes = ...}. Credentials never appear in
 * {@link #toString()}, log lines or exception messages of this class.
 */
public class AffinityDataSource extends AbstractAffinityDataSource<DataSource> implements DataSource {
    private static final List<String> PLACEHOLDERS =
            List.of("${instance}", "${INSTANCE_NAME}", "{instance}", "{INSTANCE_NAME}");

    // ---- bean properties ------------------------------------------------------
    private Object transactionSynchronizationRegistry;
    private Object transactionManager;
    private String transactionSynchronizationRegistryJndiName = DEFAULT_TSR_JNDI_NAME;
    private String transactionManagerJndiName;

    /** Where Jakarta EE servers bind the TransactionSynchronizationRegistry. */
    public static final String DEFAULT_TSR_JNDI_NAME = "java:comp/TransactionSynchronizationRegistry";
    /** Where servers commonly bind the TransactionManager (tried when the registry came from JNDI). */
    private static final List<String> TM_JNDI_NAMES =
            List.of("java:comp/TransactionManager", "java:jboss/TransactionManager", "java:/TransactionManager");

    // ---- runtime --------------------------------------------------------------
    /** The request's web session, for every affinity data source of the thread ({@link #withRequestSession}). */
    private static final ThreadLocal<byte[]> REQUEST_SESSION = new ThreadLocal<>();
    private final ThreadLocal<byte[]> session = new ThreadLocal<>();
    // ---- seed 002 (UCP) parity: the affinity callback, pool upkeep, the partition-map loader
    private volatile ConnectionAffinityCallback affinityCallback;
    private PartitionMapLoader partitionMapLoader;
    private long partitionMapReloadMillis;
    private long poolMaintenanceMillis = 200;
    private boolean replay;
    private volatile PoolMaintenance maintenance;
    /** Per node id, the last connection failure seen (racy by design: a log detail only). */
    private volatile String[] lastFailure = new String[0];
    /** JTA routing, when a transaction registry was found at the start. */
    private volatile TransactionAffinity jta;
    /** Fast connection failover's bookkeeping (a placeholder of no node until the start). */
    private volatile NodeFailover failover = new NodeFailover(0);

    /** Creates an unconfigured data source; set its properties, then use it. */
    public AffinityDataSource() {
        super(DataSource.class, "nodeDataSources", null);
    }

    // ---- properties (the shared ones are AbstractAffinityDataSource's) ---------------
    /**
     * Node DataSources by node name (case-insensitive), built by the application.
     *
     * @param nodeDataSources node name → DataSource, in node order
     */
    public void setNodeDataSources(Map<String, DataSource> nodeDataSources) {
        nodes.setGiven(nodeDataSources);
    }

    /**
     * The application's partition-map loader (seed 002 §10.4.1.3): called at
     * start, after each HA event (a node state change) and every
     * {@link #setPartitionMapReloadMillis partitionMapReloadMillis}; each load
     * replaces the whole map atomically. A failing load keeps the last good map
     * and is logged and counted; routing never breaks on it.
     *
     * @param loader the loader, or null for none
     */
    public void setPartitionMapLoader(PartitionMapLoader loader) {
        checkNotStarted();
        this.partitionMapLoader = loader;
    }

    /**
     * Period of partition-map reloads (0, the default: only at start and after HA events).
     *
     * @param millis the period in milliseconds
     */
    public void setPartitionMapReloadMillis(long millis) {
        checkNotStarted();
        if (millis < 0) {
            throw new IllegalArgumentException("partitionMapReloadMillis must be >= 0");
        }
        this.partitionMapReloadMillis = millis;
    }

    /**
     * Request replay (default off; docs/continuity.md, "Java"): each connection records what
     * runs on it since its transaction began, and a request a recoverable failure interrupted
     * (connection lost, node down) is replayed once on the node the core names, after the
     * outcome of any COMMIT in flight is known; the application sees no error. Connections of a
     * JTA transaction are never replayed.
     *
     * @param replay whether to replay
     */
    public void setReplay(boolean replay) {
        checkNotStarted();
        this.replay = replay;
    }

    /** @return whether requests are replayed */
    public boolean isReplay() {
        return replay;
    }

    /**
     * How request replay ended the recoveries of this data source's cluster: replayed, found
     * committed already, refused (by refusal), and the outcome checks run. Summed over every data
     * source of the cluster; the cluster's MXBean shows the same ({@code Replays}, ...).
     *
     * @return the cluster's counts
     * @throws SQLException if initialisation fails
     */
    public ReplayCounts getReplayCounts() throws SQLException {
        return ReplayCounts.of(running().cluster);
    }

    /** @return the partition-map reload period (0: start and HA events only) */
    public long getPartitionMapReloadMillis() {
        return partitionMapReloadMillis;
    }

    /**
     * How often pool upkeep looks at node states (default 200 ms): a Draining
     * node's pool is drained, and the loader runs after a state change.
     * {@link #applyEvent} runs a round at once.
     *
     * @param millis the period in milliseconds (> 0)
     */
    public void setPoolMaintenanceMillis(long millis) {
        checkNotStarted();
        if (millis <= 0) {
            throw new IllegalArgumentException("poolMaintenanceMillis must be > 0");
        }
        this.poolMaintenanceMillis = millis;
    }

    /** @return how often pool upkeep runs, in milliseconds */
    public long getPoolMaintenanceMillis() {
        return poolMaintenanceMillis;
    }

    /**
     * JTA routing: the {@code jakarta.transaction.TransactionSynchronizationRegistry} whose
     * active transaction a connection follows (typed {@code Object} so that this class loads
     * without the JTA API). Inside an active transaction every {@code getConnection()}, from
     * any thread of the transaction, goes to the transaction's node (the core's transaction
     * affinity, keyed by the transaction's gtrid when it can be read); the affinity ends at
     * {@code afterCompletion}. Without it, the registry is looked up at initialisation under
     * {@link #setTransactionSynchronizationRegistryJndiName}.
     *
     * @param registry the registry, or null
     */
    public void setTransactionSynchronizationRegistry(Object registry) {
        checkNotStarted();
        this.transactionSynchronizationRegistry = registry;
    }

    /**
     * The {@code jakarta.transaction.TransactionManager}: it gives the transaction's Xid (so that
     * JTA routing and {@code AffinityXADataSource} agree on the gtrid) and the transaction whose end
     * a rollback-only transaction is watched by. JTA routing needs it: a registry set without one
     * fails the initialisation; one found in JNDI without one leaves JTA routing off (warned).
     *
     * @param tm the transaction manager, or null
     */
    public void setTransactionManager(Object tm) {
        checkNotStarted();
        this.transactionManager = tm;
    }

    /**
     * JNDI name of the TransactionSynchronizationRegistry for JTA routing (default
     * {@code java:comp/TransactionSynchronizationRegistry}; empty turns JTA routing off).
     * Not finding it (Tomcat without a TM, plain Java SE) just leaves JTA routing off.
     *
     * @param name the JNDI name
     */
    public void setTransactionSynchronizationRegistryJndiName(String name) {
        checkNotStarted();
        this.transactionSynchronizationRegistryJndiName = name;
    }

    /**
     * JNDI name of the TransactionManager (default: {@code java:comp/TransactionManager},
     * {@code java:jboss/TransactionManager} and {@code java:/TransactionManager} are tried
     * when the registry came from JNDI).
     *
     * @param name the JNDI name
     */
    public void setTransactionManagerJndiName(String name) {
        checkNotStarted();
        this.transactionManagerJndiName = name;
    }

    /** @return whether connections follow JTA transactions (after initialisation) */
    public boolean isJtaRouting() {
        return runningOrNull() != null && jta != null;
    }

    private TransactionAffinity transactionAffinity(Cluster c, Redactor redactor) throws SQLException {
        Object registry = transactionSynchronizationRegistry;
        Object tm = transactionManager;
        boolean fromJndi = false;
        if (registry == null) {
            String name = transactionSynchronizationRegistryJndiName;
            if (name == null || name.isBlank() || !jtaApiPresent()) {
                return null;
            }
            InitialContext ctx = null;
            try {
                // The server's own naming context (not jndiEnvironment, which is for node pools).
                ctx = new InitialContext();
                registry = ctx.lookup(name);
                fromJndi = true;
                if (tm == null) {
                    for (String n : transactionManagerJndiName != null ? List.of(transactionManagerJndiName)
                            : TM_JNDI_NAMES) {
                        try {
                            tm = ctx.lookup(n);
                            break;
                        } catch (NamingException | RuntimeException e) {
                            // try the next
                        }
                    }
                }
            } catch (NamingException | RuntimeException | LinkageError e) {
                log.log(Level.DEBUG, () -> "no JTA routing: " + name + " not found (" + e.getClass().getSimpleName()
                        + ")");
                return null;
            } finally {
                if (ctx != null) {
                    try {
                        ctx.close();
                    } catch (NamingException e) {
                        // nothing to do
                    }
                }
            }
        }
        if (!jtaApiPresent()) {
            throw new SQLNonTransientException("AffinityDataSource " + c.name() + ": JTA routing needs the"
                    + " jakarta.transaction API on the class path", "HY000");
        }
        try {
            TransactionAffinity jta = TransactionAffinity.of(c, registry, tm);
            final Object tmf = tm;
            log.log(Level.DEBUG, () -> "AffinityDataSource " + c.name() + ": connections follow JTA transactions ("
                    + jta + (tmf != null ? ", gtrid from the TransactionManager" : "") + ")");
            return jta;
        } catch (IllegalArgumentException e) {
            if (fromJndi) {
                log.log(Level.WARNING, "AffinityDataSource " + c.name() + ": no JTA routing: "
                        + redactor.redact(e.getMessage()));
                return null;
            }
            throw new SQLNonTransientException("AffinityDataSource " + c.name() + ": " + e.getMessage(), "HY000");
        }
    }

    private static boolean jtaApiPresent() {
        try {
            Class.forName("jakarta.transaction.TransactionSynchronizationRegistry", false,
                    AffinityDataSource.class.getClassLoader());
            return true;
        } catch (ClassNotFoundException | LinkageError e) {
            return false;
        }
    }

    // ---- lifecycle ------------------------------------------------------------

    @Override
    DataSource[] probes(DataSource[] byId) {
        return byId;
    }

    @Override
    void started(Running<DataSource> r) throws SQLException {
        jta = transactionAffinity(r.cluster, nodes.redactor());
        lastFailure = new String[r.byId.length];
        failover = new NodeFailover(r.byId.length);
        maintenance = new PoolMaintenance(kind + " " + r.cluster.name(), r.cluster, r.byId, failover,
                this::lastFailure,
                poolMaintenanceMillis, partitionMapLoader, partitionMapReloadMillis, nodes.redactor(), r.upkeepLog);
    }

    @Override
    boolean logsStateChanges() {
        return true;
    }

    @Override
    List<Thread> stopping(long byNanos) {
        PoolMaintenance m = maintenance;
        List<Thread> upkeep = m == null ? List.of() : List.of(m.thread());
        if (m != null) {
            m.stop();
        }
        TransactionAffinity t = jta;
        if (t != null) {
            t.close(byNanos);
        }
        // After the upkeep's last round, which may evict what is aborted here.
        LibraryThreads.joinUntil(upkeep, byNanos);
        List<Thread> threads = new ArrayList<>(upkeep);
        threads.addAll(abortInUse(byNanos));
        return threads;
    }

    /**
     * Closes the data source as HikariCP's {@code close()} closes its pool: the connections still in
     * use are aborted ({@link Connection#abort}: their next call fails with an SQLState {@code 08},
     * their {@code close()} gives back what they hold), whatever the node data sources; then the
     * heartbeat stops, the MXBean is unregistered, and the node data sources this data source created
     * and the cluster it built are closed (not those it was given). Each node's aborts run on a thread of their
     * own, waited for within close()'s one bound: a node driver whose abort blocks holds neither close() nor the
     * other nodes' aborts. For a graceful end, close the connections (let the requests finish) first. Idempotent.
     */
    @Override
    public void close() {
        super.close();
    }

    /**
     * Ends the connections still in use at close(), as HikariCP's close() ends those of its pool, whatever
     * the node pool: a node pool the application gave outlives the data source and an unpooled node has
     * no close of its own, so only the HikariCP pools this data source built used to abort theirs. Each
     * is dropped from its HikariCP pool at once, so that a pool the application shares never hands it out
     * again. A call that then fails on it reports no node failure ({@link AffinityConnection}).
     *
     * <p>Each connection's on a library thread of its own ({@code racaffinity-close-abort-<cluster>}), all waited
     * for until {@code byNanos}: a driver whose abort blocks (a dead node; one that ignores the interrupt) holds
     * neither close() past its bound nor the aborts of other connections, of its node or another. A thread still
     * aborting then ends with its driver's call, not interrupted (an abort under way is all it does).
     *
     * @return the threads started (ended, or still aborting), for close() to wait for until its deadline
     */
    private List<Thread> abortInUse(long byNanos) {
        Running<DataSource> r = runningOrNull();
        if (r == null) {
            return List.of();
        }
        NodeFailover f = failover;
        AtomicInteger aborted = new AtomicInteger();
        List<Thread> aborting = new ArrayList<>();
        for (int node = 0; node < r.byId.length; node++) {
            DataSource ds = r.byId[node];
            aborting.addAll(f.abortBorrowed(node, "racaffinity-close-abort-" + r.cluster.name(), c -> {
                aborted.incrementAndGet();
                if (ds != null) {
                    PoolMaintenance.Hikari.evictHikari(ds, c);
                }
            }));
        }
        LibraryThreads.joinUntil(aborting, byNanos);
        int n = aborted.get();
        if (n > 0) {
            log.log(Level.INFO, () -> kind + " " + r.cluster.name() + ": closed with " + n
                    + " connection(s) in use: aborted");
        }
        return aborting;
    }

    /**
     * A URL template with its instance placeholder replaced.
     *
     * @param template the template
     * @param instance the instance (node) name
     * @return the URL
     */
    static String instanceUrl(String template, String instance) {
        String url = template;
        boolean found = false;
        for (String p : PLACEHOLDERS) {
            if (url.contains(p)) {
                url = url.replace(p, instance);
                found = true;
            }
        }
        if (!found) {
            throw new IllegalArgumentException("urlTemplate has no instance placeholder: use " + PLACEHOLDERS);
        }
        return url;
    }

    // ---- routing --------------------------------------------------------------

    /**
     * The node DataSource of a node (for tools and tests).
     *
     * @param nodeName node name
     * @return its DataSource
     * @throws SQLException if initialisation fails or the node is unknown
     */
    public DataSource getNodeDataSource(String nodeName) throws SQLException {
        return nodeSource(nodeName);
    }

    /**
     * Pins the calling thread: until the scope closes, every {@code getConnection()}
     * of this thread (without a sharding key or session scope) goes to one node.
     *
     * @return the pin scope
     * @throws SQLException if initialisation fails or the pin is refused
     */
    public Pin pin() throws SQLException {
        Cluster c = running().cluster;
        try {
            return c.pin();
        } catch (AffinityException e) {
            throw SqlErrors.routing(e);
        }
    }

    /**
     * Opens a web-session scope on the calling thread: until it closes,
     * {@code getConnection()} routes by the session's affinity.
     *
     * @param sessionId the session id (e.g. the JSESSIONID)
     * @return the scope
     * @throws io.racaffinity.InvalidArgumentException if the id holds a lone surrogate (it has no UTF-8)
     */
    public SessionScope withSession(String sessionId) {
        Objects.requireNonNull(sessionId, "sessionId");
        return new SessionScope(session, Cluster.keyBytes(sessionId, "sessionId"));
    }

    /**
     * Opens a web-session scope for every affinity data source on the calling thread
     * ({@code AffinityDataSource} and {@code AffinityXADataSource}, whatever their
     * cluster): until it closes, their connections route by the session's affinity
     * (a data source's own {@link #withSession} scope wins). This is what
     * {@code io.racaffinity.web.AffinityFilter} opens around each request.
     *
     * @param sessionId the session id (e.g. the JSESSIONID)
     * @return the scope; close it on the same thread
     * @throws io.racaffinity.InvalidArgumentException if the id holds a lone surrogate (it has no UTF-8)
     */
    public static SessionScope withRequestSession(String sessionId) {
        Objects.requireNonNull(sessionId, "sessionId");
        return new SessionScope(REQUEST_SESSION, Cluster.keyBytes(sessionId, "sessionId"));
    }

    /**
     * Opens a routing-token scope on the calling thread (seed 001, what
     * {@code io.racaffinity.web.AffinityFilter} opens around a request in token
     * mode): until it closes, a connection of an affinity data source on
     * {@code cluster} goes to the node {@link Cluster#routeToken} decided, unless a
     * transaction, a sharding key or the data source's own {@link #withSession}
     * scope routes it.
     *
     * @param cluster the cluster that decided
     * @param route the decision
     * @return the scope; close it on the same thread
     */
    public static RouteScope withRequestRoute(Cluster cluster, Route route) {
        return new RouteScope(cluster, route, null);
    }

    /**
     * {@link #withRequestRoute(Cluster, Route)} that also keeps the request's routing
     * {@code token}: a new transaction the request begins (an XA branch, a JTA
     * transaction's first connection) is placed by it ({@link Cluster#txBeginFor(byte[],
     * byte[], byte[], String)}), so the request's session work and its transaction share
     * a node. {@code io.racaffinity.web.AffinityFilter} opens this one.
     *
     * @param cluster the cluster that decided
     * @param route the decision
     * @param token the token the decision was made for (the one the client keeps), or null
     * @return the scope; close it on the same thread
     */
    public static RouteScope withRequestRoute(Cluster cluster, Route route, String token) {
        return new RouteScope(cluster, route, token);
    }

    /**
     * Opens a refusal scope on the calling thread: the core refused to route the request's
     * routing token ({@code Cluster.routeToken}/{@code sessionToken} threw, e.g. a
     * {@code StrictAffinityException} or {@code NoNodeAvailableException}). The request
     * runs on; until the scope closes, a connection it asks of an affinity data source on
     * {@code cluster} (with no transaction, sharding key or own session scope) is refused
     * with that error rather than opened on some other node.
     *
     * @param cluster the cluster that refused
     * @param refusal its error
     * @return the scope; close it on the same thread
     */
    public static RouteScope withRequestRefusal(Cluster cluster, AffinityException refusal) {
        return new RouteScope(cluster, refusal, null);
    }

    /**
     * {@link #withRequestRefusal(Cluster, AffinityException)} that also keeps the request's
     * routing {@code token}: the refusal applies to the session's work, never to a new
     * transaction, which is placed by the token ({@link Cluster#txBeginFor(byte[], byte[],
     * byte[], String)}; no branch exists yet, so placing it elsewhere splits nothing).
     *
     * @param cluster the cluster that refused
     * @param refusal its error
     * @param token the request's token, or null
     * @return the scope; close it on the same thread
     */
    public static RouteScope withRequestRefusal(Cluster cluster, AffinityException refusal, String token) {
        return new RouteScope(cluster, refusal, token);
    }

    /** @return the routing token of the calling thread's route scope for {@code cluster}, or null */
    static String requestToken(Cluster cluster) {
        RouteScope scope = RouteScope.everOpened ? RouteScope.current(cluster) : null;
        return scope == null ? null : scope.token();
    }

    /** @return the calling thread's request session key ({@link #withRequestSession}), or null */
    static byte[] requestSession() {
        return REQUEST_SESSION.get();
    }

    @Override
    public Connection getConnection() throws SQLException {
        return connect(null, null, null);
    }

    @Override
    public Connection getConnection(String username, String pass) throws SQLException {
        return connect(username, pass, null);
    }

    Connection connect(String username, String pass, AffinityShardingKey key) throws SQLException {
        try {
            // Only replay asks whether the call joined a transaction: without it, nothing to allocate.
            boolean[] inTx = replay ? new boolean[1] : null;
            Connection c = connectRouted(username, pass, key, inTx);
            // XA and JTA branches are the transaction manager's to recover, never replayed.
            return replay && !inTx[0] ? ReplayConnection.open(this, (AffinityConnection) c, username, pass) : c;
        } catch (SQLException e) {
            // Drivers write the URL (credentials and all) into their messages; classified already, so only redact.
            throw nodes.redactor().sql(e, pass);
        }
    }

    private Connection connectRouted(String username, String pass, AffinityShardingKey key, boolean[] inTx)
            throws SQLException {
        if (isClosed()) {
            throw closedException();
        }
        Running<DataSource> s = running();
        if (key != null || jta != null || affinityCallback != null || SessionScope.everOpened
                || RouteScope.everOpened) {
            return connectRequest(s, username, pass, key, inTx);
        }
        // The commonest borrow: nothing routes it but the thread's pin or balancing, which
        // Cluster.pick() answers in one crossing at most. Apart from connectRequest so that this
        // path is small enough for the JIT to inline into its caller (it was not, at 578 bytecodes).
        Cluster c = s.cluster;
        Lease lease;
        try {
            lease = c.pick();
        } catch (AffinityException e) {
            throw SqlErrors.routing(e);
        }
        try {
            return open(s, lease, username, pass);
        } catch (SQLException e) {
            return retry(s, lease.node(), null, true, null, null, username, pass, e);
        }
    }

    /** {@link #connectRouted} with a key, a transaction manager, a callback or a scope. */
    private Connection connectRequest(Running<DataSource> s, String username, String pass, AffinityShardingKey key,
            boolean[] inTx) throws SQLException {
        Cluster c = s.cluster;
        Lease lease;
        // How to route again if the node cannot give a connection: by the callback's context,
        // or by the request's key and session; neither for a transaction's branch, whose node
        // must not change, or a routing token, decided before this call. Kept as plain values
        // so that the common path allocates nothing for a retry it will not make.
        CallbackPick retryPick = null;
        boolean retryRequest = false;
        byte[] retryKey = null;
        byte[] retrySession = null;
        try {
            // A new JTA transaction is placed by the core from this call's key and session, as an XA branch begun
            // here would be (docs/semantics.md): without them it landed by its gtrid alone, off the session's node.
            TransactionAffinity.Joined tx = null;
            if (jta != null) {
                byte[] own = SessionScope.everOpened ? session.get() : null;
                tx = jta.joinFor(key == null ? null : key.raw(),
                        own != null || !SessionScope.everOpened ? own : REQUEST_SESSION.get(), requestToken(c));
            }
            if (inTx != null) {
                inTx[0] = tx != null;
            }
            ConnectionAffinityCallback cb = affinityCallback;
            if (tx != null && tx.placed() != null) {
                // The transaction's first connection placed it (an explicit txBegin): go there.
                lease = c.lease(tx.placed());
            } else if (cb != null && key == null && tx == null
                    && cb.getAffinityPolicy() != ConnectionAffinityCallback.AffinityPolicy.DATA_BASED_AFFINITY) {
                // (data-based: the sharding key is the affinity, and without one the call routes as without a
                // callback)
                retryPick = callbackLease(c, cb);
                lease = retryPick.lease;
            } else {
                // Everything this call knows goes to the core, which decides the precedence.
                // Each scope's thread-local is looked up only once a scope of its kind was ever opened:
                // three lookups on every borrow showed in a profile of the pinned borrow, which
                // applications without scopes paid for nothing (docs/benchmarks.md).
                byte[] sess = SessionScope.everOpened ? session.get() : null;
                RouteScope scope = tx == null && key == null && sess == null && RouteScope.everOpened
                        ? RouteScope.current(c) : null;
                if (scope != null && scope.refusal() != null) {
                    // The request's routing token was refused (strict session affinity, no
                    // node): a connection elsewhere would break that affinity.
                    throw SqlErrors.routing(scope.refusal());
                }
                Route decided = scope == null ? null : scope.route();
                if (decided != null) {
                    // The request's routing token: Cluster.routeToken decided the node.
                    lease = c.lease(decided);
                } else {
                    if (sess == null && SessionScope.everOpened) {
                        sess = REQUEST_SESSION.get();
                    }
                    byte[] k = key == null ? null : key.raw();
                    lease = c.pickFor(tx == null ? null : tx.gtrid(), k, sess);
                    retryRequest = tx == null;
                    retryKey = k;
                    retrySession = sess;
                }
            }
        } catch (AffinityException e) {
            throw SqlErrors.routing(e);
        }
        try {
            return open(s, lease, username, pass);
        } catch (SQLException e) {
            return retry(s, lease.node(), retryPick, retryRequest, retryKey, retrySession, username, pass, e);
        }
    }

    /**
     * After {@code failed} gave no connection ({@code e}): the one retry of a borrow that may move
     * (by the callback's context {@code retryPick}, or, with {@code retryRequest}, by the request's
     * key and session), else {@code e}. A retry whose wait on its node's pool was ended by that
     * node's Down ({@link NodeFailover.NodeWentDown}) is routed again: the core marked the node
     * Down and never names it for a retry, so each route is a node fewer (bounded by the node count
     * besides); any other failure of the retry ends the call.
     */
    private Connection retry(Running<DataSource> s, int failed, CallbackPick retryPick, boolean retryRequest,
            byte[] retryKey, byte[] retrySession, String username, String pass, SQLException e) throws SQLException {
        Cluster c = s.cluster;
        // A closed data source's 08003 is no node failure: nothing to move the affinity away from.
        if ((retryPick == null && !retryRequest) || isClosed() || !isNodeFailure(e)) {
            throw e;
        }
        SQLException cause = e;
        for (int routes = 1;; routes++) {
            // Soft failover within the caller's one call: the core names the next node and moves
            // the affinity that chose the failed one (strict scopes get null and refuse as before).
            Lease next;
            try {
                next = retryPick != null ? retryPick.repick(failed)
                        : c.repickFor(retryKey, retrySession, failed);
            } catch (AffinityException routing) {
                cause.addSuppressed(SqlErrors.routing(routing));
                throw cause;
            }
            if (next == null) {
                throw cause;
            }
            String failedNode = c.nodeName(failed);
            SQLException why = cause;
            log.log(Level.DEBUG, () -> kind + " " + c.name() + ": node " + failedNode + " gave no connection"
                    + " (SQLState " + why.getSQLState() + "): retrying on node " + next.nodeName());
            try {
                return open(s, next, username, pass);
            } catch (SQLException again) {
                again.addSuppressed(cause);
                if (!(again instanceof NodeFailover.NodeWentDown) || routes >= c.nodeIds().length) {
                    throw again;
                }
                cause = again;
                failed = next.node();
            }
        }
    }

    /** One node's connection under {@code lease}; every failure path releases the lease. */
    private Connection open(Running<DataSource> s, Lease lease, String username, String pass) throws SQLException {
        Cluster c = s.cluster;
        int node = lease.node();
        DataSource ds = node < s.byId.length ? s.byId[node] : null;
        if (ds == null) {
            release(lease, Outcome.NEUTRAL);
            throw new SQLNonTransientException(kind + " " + c.name() + ": node " + c.nodeName(node)
                    + " has no DataSource (added at runtime?)", "HY000");
        }
        NodeFailover f = failover;
        // The thread's slot on the node: it waits in it, then its connection is kept there.
        int slot = f.waiting(node);
        Connection physical;
        try {
            physical = borrow(s, f, ds, node, slot, username, pass);
        } catch (NodeFailover.NodeWentDown e) {
            // The node is Down already (that is why the wait ended): nothing more to count.
            release(lease, Outcome.NEUTRAL);
            throw e;
        } catch (SQLException e) {
            if (isNodeFailure(e)) {
                reportFailure(c, lease, e);
            } else {
                release(lease, Outcome.NEUTRAL);
            }
            throw e;
        } catch (RuntimeException | Error e) {
            release(lease, Outcome.NEUTRAL);
            throw e;
        }
        if (physical == null) {
            release(lease, Outcome.NEUTRAL);
            throw new SQLException("node " + c.nodeName(node) + "'s DataSource returned no connection", "08001");
        }
        if (isClosed()) {
            // Closed while this call waited on the node's pool: a given cluster and given pools stay
            // open, and would have this closed data source hand out a connection.
            f.returned(node, slot);
            try {
                physical.close();
            } catch (SQLException | RuntimeException e) {
                // going away anyway
            }
            release(lease, Outcome.NEUTRAL);
            throw closedException();
        }
        return new AffinityConnection(this, physical, lease, f, slot);
    }

    /** Checks of one borrow's suspect connections before the borrow fails (a pool holds this many at most). */
    private static final int MAX_SUSPECT_CHECKS = 64;

    /**
     * A connection from a node's pool, borrowed by the thread waiting in {@code slot} (a Down ends
     * the wait: {@link NodeFailover.NodeWentDown}), checked first if the node failed since it was
     * last known good (a connection that fails its check is dropped from the pool and the next one
     * taken). On return the slot holds the connection; on a throw or a null connection it is free.
     */
    private Connection borrow(Running<DataSource> s, NodeFailover f, DataSource ds, int node, int slot,
            String username, String pass) throws SQLException {
        for (int checks = 0;; checks++) {
            Connection physical;
            try {
                boolean started = s.started[node];
                physical = NodeConnect.open(ds, started, username, pass);
                if (!started) {
                    // Written once: a store on every call would move this array's cache line
                    // between the cores of every thread that gets connections.
                    s.started[node] = true;
                }
            } catch (SQLException | RuntimeException e) {
                if (f.done(node, slot, null)) {
                    throw NodeFailover.wentDown(s.cluster.nodeName(node), e instanceof SQLException
                            ? (SQLException) e : new SQLException(e));
                }
                throw e;
            } catch (Error e) {
                f.done(node, slot, null);
                throw e;
            }
            if (f.done(node, slot, physical)) {
                // The node went Down as the pool answered: this connection is on it.
                if (physical != null) {
                    PoolMaintenance.Hikari.evict(ds, physical);
                }
                throw NodeFailover.wentDown(s.cluster.nodeName(node), null);
            }
            // An unpooled source's connection is new: nothing to suspect.
            if (physical == null || ds instanceof DriverDataSource || !f.suspect(node, physical)) {
                return physical;
            }
            boolean ok;
            try {
                ok = physical.isValid(nodes.heartbeatTimeoutSeconds());
            } catch (SQLException e) {
                ok = false;
            } catch (RuntimeException | Error e) {
                f.returned(node, slot);
                PoolMaintenance.Hikari.evict(ds, physical);
                throw e;
            }
            if (ok) {
                f.good(node, physical);
                return physical;
            }
            PoolMaintenance.Hikari.evict(ds, physical);
            if (checks + 1 >= MAX_SUSPECT_CHECKS) {
                f.returned(node, slot);
                throw new SQLTransientConnectionException("node " + s.cluster.nodeName(node) + ": "
                        + MAX_SUSPECT_CHECKS + " pooled connections in a row failed their check", "08006");
            }
            f.waitAgain(node, slot);
        }
    }

    // ---- seed 002 (UCP) parity ----------------------------------------------------

    /**
     * Registers UCP's connection affinity callback (one per data source, as in
     * UCP): from now on, {@code getConnection()} without a sharding key or a JTA
     * transaction routes by the callback's context (see {@link ConnectionAffinityCallback}).
     *
     * @param callback the callback
     * @throws SQLException (SQLState HY000) if a callback is already registered
     */
    public synchronized void registerConnectionAffinityCallback(ConnectionAffinityCallback callback)
            throws SQLException {
        Objects.requireNonNull(callback, "callback");
        if (affinityCallback != null) {
            throw new SQLNonTransientException("AffinityDataSource " + clusterName() + " already has a connection"
                    + " affinity callback (" + affinityCallback.getClass().getName() + "): one per data source;"
                    + " removeConnectionAffinityCallback() first", "HY000");
        }
        affinityCallback = callback;
    }

    /**
     * Removes the connection affinity callback (no-op without one). Contexts it
     * holds release their affinity once unreachable.
     */
    public synchronized void removeConnectionAffinityCallback() {
        affinityCallback = null;
    }

    /** @return the registered connection affinity callback, or null */
    public ConnectionAffinityCallback getConnectionAffinityCallback() {
        return affinityCallback;
    }

    /**
     * The lease of one {@code getConnection()} by the callback's context: the
     * context's instance, or a new affinity handed to the callback. Every
     * decision (placement, soft move, strict refusal, {@code aff=FALSE}
     * release) is the core's ({@link AffinityContext}).
     */
    private CallbackPick callbackLease(Cluster c, ConnectionAffinityCallback cb) {
        ConnectionAffinityCallback.AffinityPolicy policy = cb.getAffinityPolicy();
        if (policy == null) {
            policy = ConnectionAffinityCallback.AffinityPolicy.TRANSACTION_BASED_AFFINITY;
        }
        Object current = cb.getConnectionAffinityContext();
        ConnectionAffinityContext ctx = current instanceof ConnectionAffinityContext
                && ((ConnectionAffinityContext) current).owner == this
                && ((ConnectionAffinityContext) current).policy() == policy ? (ConnectionAffinityContext) current
                        : null;
        if (ctx != null && ctx.context.pinnedNode().isPresent()) {
            Lease lease = ctx.context.pick(); // strict: StrictAffinityException
            if (lease.kind() != io.racaffinity.RouteKind.BALANCED) {
                if (lease.node() != ctx.node) {
                    // Soft failover moved the affinity: a fresh context names the new instance.
                    tellCallback(cb, new ConnectionAffinityContext(this, ctx.context, lease.node(),
                            lease.nodeName(), policy), lease);
                }
                return new CallbackPick(cb, ctx.context, policy, lease);
            }
            // The pin went between the two calls (aff=FALSE): place a new one.
            release(lease, Outcome.NEUTRAL);
        }
        // None set, a foreign one or one of another policy, or one the instance released: place anew.
        AffinityContext ac = ctx != null ? ctx.context
                : c.newAffinityContext(policy == ConnectionAffinityCallback.AffinityPolicy.WEBSESSION_BASED_AFFINITY
                        ? Scope.SESSION : Scope.TRANSACTION);
        Route r = ac.pin();
        Lease lease = c.lease(r);
        tellCallback(cb, new ConnectionAffinityContext(this, ac, r.node(), r.nodeName(), policy), lease);
        return new CallbackPick(cb, ac, policy, lease);
    }

    /** A callback context's lease, and how to move the context if its node gives no connection. */
    private final class CallbackPick {
        final ConnectionAffinityCallback cb;
        final AffinityContext context;
        final ConnectionAffinityCallback.AffinityPolicy policy;
        final Lease lease;

        CallbackPick(ConnectionAffinityCallback cb, AffinityContext context,
                ConnectionAffinityCallback.AffinityPolicy policy, Lease lease) {
            this.cb = cb;
            this.context = context;
            this.policy = policy;
            this.lease = lease;
        }

        Lease repick(int failed) {
            Lease next = context.repick(failed);
            if (next != null) {
                // The core moved the pin: the callback's context names the new instance, as after a soft move.
                tellCallback(cb, new ConnectionAffinityContext(AffinityDataSource.this, context,
                        next.node(), next.nodeName(), policy), next);
            }
            return next;
        }
    }

    /**
     * Hands the callback a new or moved context. The callback is the application's (it may store the
     * context in an HTTP session invalidated meanwhile): what it throws reaches the caller, and the
     * lease taken for the call is released, not left in flight until the garbage collector finds it.
     * A callback that answers false did not store it, so no affinity was established (UCP's meaning):
     * its pin is released now rather than held, unreachable, until the garbage collector finds it; the
     * call's connection is still served from the lease's node.
     */
    private static void tellCallback(ConnectionAffinityCallback cb, ConnectionAffinityContext context, Lease lease) {
        boolean stored;
        try {
            stored = cb.setConnectionAffinityContext(context);
        } catch (RuntimeException | Error e) {
            release(lease, Outcome.NEUTRAL);
            throw e;
        }
        if (!stored) {
            context.context.close();
        }
    }

    /**
     * Applies a FAN event or RLB advisory line to the cluster
     * ({@link Cluster#applyEvent}) and runs pool upkeep at once: a planned
     * drain ({@code reason=USER}, {@code drain_timeout=}) starts draining the
     * node's pool, and the partition-map loader reloads after a state change.
     *
     * @param line the event line
     * @return the number of node state changes
     * @throws SQLException if initialisation fails or the line is refused (message from the core)
     */
    public int applyEvent(String line) throws SQLException {
        Running<DataSource> s = running();
        int changed;
        try {
            changed = s.cluster.applyEvent(line);
        } catch (AffinityException e) {
            throw SqlErrors.routing(e);
        }
        PoolMaintenance m = maintenance;
        if (m != null) {
            m.poke();
        }
        return changed;
    }

    /**
     * Reloads the partition map from the loader now (as after an HA event).
     *
     * @return whether the load succeeded (a failure keeps the last good map)
     * @throws SQLException if initialisation fails or no loader is set
     */
    public boolean reloadPartitionMap() throws SQLException {
        running();
        PoolMaintenance m = maintenance;
        if (m == null || partitionMapLoader == null) {
            throw new SQLNonTransientException("AffinityDataSource " + clusterName() + " has no partitionMapLoader",
                    "HY000");
        }
        return m.reload("reloadPartitionMap()");
    }

    /** @return successful partition-map loads so far */
    public long getPartitionMapLoads() {
        PoolMaintenance m = maintenance;
        return m == null ? 0 : m.loads();
    }

    /** @return failed partition-map loads so far (each kept the last good map) */
    public long getPartitionMapLoadFailures() {
        PoolMaintenance m = maintenance;
        return m == null ? 0 : m.failures();
    }

    /**
     * @return the last load's error if it failed, else null: the exception and each cause, with its
     *     SQLState ({@code ...; caused by java.sql.SQLException (SQLState 42P01): relation ... does not
     *     exist}), credentials masked, at most 512 characters; the same text is the core's last error,
     *     and the WARNING record of the failure carries the exception itself
     */
    public String getPartitionMapLoadError() {
        PoolMaintenance m = maintenance;
        return m == null ? null : m.lastError();
    }

    /** Releases a lease on an error path without masking the error if the cluster was closed meanwhile. */
    private static void release(Lease lease, Outcome outcome) {
        try {
            lease.tryRelease(outcome);
        } catch (AffinityException e) {
            // closed concurrently: nothing to release
        }
    }

    void nodeFailureReported(AffinityConnection conn, SQLException e) {
        Running<DataSource> s = runningOrNull();
        if (s != null) {
            noteFailure(s.cluster, conn.node(), e);
        }
    }

    /**
     * The application aborted {@code physical}, a connection of {@code node}'s pool, through
     * {@code executor}: the pool drops it, since the application's close() after the abort no longer
     * reaches the pool's handle.
     */
    void aborted(int node, Connection physical, Executor executor) {
        Running<DataSource> s = runningOrNull();
        DataSource ds = s != null && node < s.byId.length ? s.byId[node] : null;
        // An unpooled connection is closed by the abort itself.
        if (ds != null && !(ds instanceof DriverDataSource)) {
            PoolMaintenance.Hikari.evictAborted(ds, physical, executor);
        }
    }

    /** @return pool upkeep rounds done so far (for tests: a round that began after a change saw it) */
    long upkeepRounds() {
        PoolMaintenance m = maintenance;
        return m == null ? 0 : m.rounds();
    }

    /**
     * A connection on {@code node} for a replay, or after a commit found committed ({@code node}
     * -1: routed as a plain {@code getConnection()}), without replay of its own.
     */
    AffinityConnection connectForReplay(int node, String username, String pass) throws SQLException {
        try {
            Running<DataSource> s = running();
            if (node < 0) {
                boolean[] inTx = new boolean[1];
                return (AffinityConnection) connectRouted(username, pass, null, inTx);
            }
            Lease lease;
            try {
                lease = s.cluster.lease(node);
            } catch (AffinityException e) {
                throw SqlErrors.routing(e);
            }
            return (AffinityConnection) open(s, lease, username, pass);
        } catch (SQLException e) {
            // As getConnection's: the application sees it (the refusal's suppressed error, or the call's).
            throw nodes.redactor().sql(e, pass);
        }
    }

    /** @return the cluster of a started data source */
    Cluster clusterOf() throws SQLException {
        return running().cluster;
    }

    /**
     * @return seconds a check of a node may take: the heartbeat's probe timeout, and the deadline of
     *     a replay's outcome check, its connection included
     */
    int checkTimeoutSeconds() {
        return nodes.heartbeatTimeoutSeconds();
    }

    @Override
    void stateMayHaveChanged() {
        PoolMaintenance m = maintenance;
        if (m != null) {
            m.poke();
        }
    }

    /** Releases a lease whose node failed, so that ejection counts it, and notes why. */
    private void reportFailure(Cluster c, Lease lease, SQLException e) {
        release(lease, Outcome.FAILED);
        noteFailure(c, lease.node(), e);
    }

    private void noteFailure(Cluster c, int node, SQLException e) {
        failover.failed(node);
        // The failure may have ejected the node: upkeep acts on a Down at once, not at its tick.
        stateMayHaveChanged();
        String why = "SQLState " + e.getSQLState() + ": " + nodes.redactor().redact(e.getMessage());
        String[] seen = lastFailure;
        if (node < seen.length) {
            seen[node] = why;
        }
        log.log(Level.DEBUG, () -> kind + " " + c.name() + ": connection failure on node " + c.nodeName(node)
                + " reported (" + why + ")");
    }

    /** @return the last connection failure seen on {@code node} (for the Down line of pool upkeep), or null */
    private String lastFailure(int node) {
        String[] seen = lastFailure;
        return node < seen.length ? seen[node] : null;
    }

    @Override
    public ShardingKeyBuilder createShardingKeyBuilder() {
        return new AffinityShardingKeyBuilder();
    }

    @Override
    public ConnectionBuilder createConnectionBuilder() {
        return new AffinityConnectionBuilder(this);
    }

    // ---- DataSource ---------------------------------------------------------------

    @Override
    public <T> T unwrap(Class<T> iface) throws SQLException {
        if (iface.isInstance(this)) {
            return iface.cast(this);
        }
        if (iface == Cluster.class) {
            return iface.cast(getCluster());
        }
        throw new SQLException("AffinityDataSource is not a wrapper for " + iface.getName());
    }

    /**
     * Wrapper's contract: true only where {@link #unwrap} with the same argument succeeds, so not for
     * {@code Cluster} once the data source is closed (its unwrap then answers 08003, as a closed
     * HikariDataSource does). Before the start it is true: unwrap starts the data source.
     */
    @Override
    public boolean isWrapperFor(Class<?> iface) {
        return iface.isInstance(this) || iface == Cluster.class && !isClosed();
    }
}
