package io.racaffinity.jdbc;

import io.racaffinity.Cluster;
import io.racaffinity.LibraryThreads;
import io.racaffinity.xa.AffinityXAConnection;
import io.racaffinity.xa.XaRouter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import javax.sql.DataSource;
import javax.sql.XAConnection;
import javax.sql.XADataSource;

/**
 * An {@link XADataSource} over one node XADataSource per RAC instance
 * ({@code oracle.jdbc.xa.client.OracleXADataSource} in production,
 * {@code org.postgresql.xa.PGXADataSource} in the tests) that keeps every branch
 * of a global transaction, and its two-phase commit and recovery, on one
 * instance (seed 000: no split transactions, no ORA-2049/ORA-24756/ORA-1591).
 *
 * <p>Give it to the transaction manager or app server as its XA data source. Its
 * {@link XAConnection}s ({@link AffinityXAConnection}) are not tied to a node: the
 * node is chosen when the TM calls {@code start(xid)} on the XAResource, by the
 * xid's gtrid (the core's transaction affinity), and every later call for that
 * xid, from any XAConnection, goes to the same node. See {@link
 * io.racaffinity.xa.AffinityXAResource} for each XA call's routing and the
 * {@code XAException} codes of refusals.
 *
 * <p>Configure it like {@link AffinityDataSource} (bean properties, settable
 * until the first {@code getXAConnection()} or {@link #init()}): {@code config}
 * (the core config; {@code transaction.strict = true} is UCP's
 * {@code useStrictXAAffinity}), then the nodes from {@link #setNodeXADataSources},
 * {@link #setNodeJndiNames} or URLs ({@link #setNodeUrls}, {@link #setUrlTemplate})
 * with {@link #setXaDataSourceClassName}, {@code user}, {@code password} and
 * extra {@link #setDataSourceProperties properties}.
 */
public class AffinityXADataSource extends AbstractAffinityDataSource<XADataSource> implements XADataSource {
    private boolean transactionAffinity = true;
    /** The XA engine, built at the start. */
    private volatile XaRouter router;
    /** Follows the node states for fast connection failover (XaRouter#nodeFailed), built at the start. */
    private volatile PoolMaintenance watch;
    /**
     * The credentials the application last passed to {@link #getXAConnection(String, String)}
     * (an app server's pool, e.g. WildFly's {@code <security>}), or null: the heartbeat probes
     * with them, since the node data sources' own defaults may not log in.
     */
    private volatile String[] appCredentials;

    /** Creates an unconfigured data source; set its properties, then use it. */
    public AffinityXADataSource() {
        super(XADataSource.class, "nodeXADataSources",
                "node URLs need xaDataSourceClassName (e.g. oracle.jdbc.xa.client.OracleXADataSource)");
    }

    // ---- properties (the shared ones are AbstractAffinityDataSource's) ---------------

    /** @param nodeXADataSources node name → XADataSource, in node order (built by the application) */
    public void setNodeXADataSources(Map<String, ? extends XADataSource> nodeXADataSources) {
        nodes.setGiven(nodeXADataSources);
    }

    /**
     * The node XADataSource class for URLs: {@link #setDataSourceClassName} under the name
     * app servers use for XA data sources.
     *
     * @param className the class name, e.g. {@code oracle.jdbc.xa.client.OracleXADataSource}
     */
    public void setXaDataSourceClassName(String className) {
        setDataSourceClassName(className);
    }

    /** @return the node XADataSource class name */
    public String getXaDataSourceClassName() {
        return getDataSourceClassName();
    }

    /**
     * True (default): every branch of a gtrid on the gtrid's node. False: each
     * {@code start} is load-balanced like a plain pool of XA connections (2PC still
     * goes to the node each branch started on); this reproduces split transactions
     * and exists for comparisons.
     *
     * @param affinity the mode
     */
    public void setTransactionAffinity(boolean affinity) {
        checkNotStarted();
        this.transactionAffinity = affinity;
    }

    /** @return whether branches follow their gtrid */
    public boolean isTransactionAffinity() {
        return transactionAffinity;
    }

    // ---- lifecycle --------------------------------------------------------------

    @Override
    DataSource[] probes(XADataSource[] byId) {
        DataSource[] probes = new DataSource[byId.length];
        for (int i = 0; i < byId.length; i++) {
            probes[i] = byId[i] == null ? null : probeDataSource(byId[i], () -> appCredentials);
        }
        return probes;
    }

    @Override
    void started(Running<XADataSource> r) {
        final List<String> fs = nodes.nodeFailureStates();
        Cluster c = r.cluster;
        XaRouter x = new XaRouter(c, r.byId, transactionAffinity, e -> SqlErrors.isNodeFailure(e, fs),
                nodes.redactor()::redact, AffinityDataSource::requestSession, () -> requestRoute(c),
                () -> AffinityDataSource.requestToken(c));
        router = x;
        // AffinityDataSource's upkeep, with no pool of its own to keep: only its decisions on a hard Down and on
        // a Down and Up it missed are used.
        watch = new PoolMaintenance(kind + " " + c.name(), c, probes(r.byId), new NodeFailover(r.byId.length),
                node -> null, WATCH_MILLIS, null, 0, nodes.redactor(), r.upkeepLog, x::nodeFailed,
                x::nodeRenewed, false);
    }

    /** How often node states are looked at when nothing pokes (AffinityDataSource's poolMaintenanceMillis default). */
    static final long WATCH_MILLIS = 200;

    @Override
    void stateMayHaveChanged() {
        PoolMaintenance w = watch;
        if (w != null) {
            w.poke();
        }
    }

    @Override
    List<Thread> stopping(long byNanos) {
        PoolMaintenance w = watch;
        List<Thread> threads = new ArrayList<>();
        if (w != null) {
            threads.add(w.thread());
            w.stop();
            LibraryThreads.joinUntil(threads, byNanos);
        }
        XaRouter x = router;
        if (x != null) {
            // Within close()'s bound, as its other parts: a node driver may block in the abort or close.
            List<Thread> ending = x.closeConnections(byNanos);
            threads.addAll(ending);
            int n = ending.size();
            if (n > 0) {
                log.log(System.Logger.Level.INFO, () -> kind + " " + clusterName() + ": closed with " + n
                        + " XA connection(s) open: closed (prepared branches stay for recovery)");
            }
        }
        return threads;
    }

    /**
     * Closes the data source as {@link AffinityDataSource#close()} closes its own: every XAConnection it handed
     * out that is still open is ended (the sessions behind its handles aborted, then it is closed; the TM's next
     * call on it answers {@code XAER_RMFAIL}), then the heartbeat and node upkeep stop, the MXBean is
     * unregistered, and the node data sources it built and the cluster it built are closed. A prepared branch
     * stays on its node, in doubt, for the TM's recovery (which uses a data source of its own); an unprepared
     * one is rolled back by the database with its session. Each XAConnection ends on a thread of its own, waited
     * for within close()'s one bound (and each further session behind its handle, on another node, is aborted on
     * a thread of its own): a node driver whose abort or close blocks holds neither close() nor another session's
     * end. For a graceful end, let the TM complete its transactions and close its
     * XAConnections first. Idempotent.
     */
    @Override
    public void close() {
        super.close();
    }

    /** The thread's routing-token decision for {@code c} (AffinityFilter in token mode), as AffinityDataSource. */
    private static io.racaffinity.Route requestRoute(Cluster c) {
        RouteScope scope = RouteScope.everOpened ? RouteScope.current(c) : null;
        if (scope == null) {
            return null;
        }
        if (scope.refusal() != null) {
            throw scope.refusal();
        }
        return scope.route();
    }

    /**
     * A DataSource view of a node XADataSource for the heartbeat: one XAConnection per probe,
     * with the application's credentials when it gave some.
     */
    private static DataSource probeDataSource(XADataSource xa, java.util.function.Supplier<String[]> credentials) {
        return (DataSource) Proxy.newProxyInstance(AffinityXADataSource.class.getClassLoader(),
                new Class<?>[] {DataSource.class}, (proxy, m, args) -> {
                    if (m.getName().equals("getConnection") && (args == null || args.length == 0)) {
                        String[] up = credentials.get();
                        XAConnection xac = up == null ? xa.getXAConnection() : xa.getXAConnection(up[0], up[1]);
                        Connection c;
                        try {
                            c = xac.getConnection();
                        } catch (SQLException e) {
                            xac.close();
                            throw e;
                        }
                        return Proxy.newProxyInstance(AffinityXADataSource.class.getClassLoader(),
                                new Class<?>[] {Connection.class}, (p2, m2, a2) -> {
                                    if (m2.getName().equals("close") && (a2 == null || a2.length == 0)) {
                                        try {
                                            c.close();
                                        } finally {
                                            xac.close();
                                        }
                                        return null;
                                    }
                                    try {
                                        return m2.invoke(c, a2);
                                    } catch (InvocationTargetException e) {
                                        throw e.getCause();
                                    }
                                });
                    }
                    if (m.getDeclaringClass() == Object.class) {
                        switch (m.getName()) {
                            case "equals":
                                return proxy == args[0];
                            case "hashCode":
                                return System.identityHashCode(proxy);
                            default:
                                return "probe[" + xa + "]";
                        }
                    }
                    throw new SQLFeatureNotSupportedException(m.getName());
                });
    }

    // ---- use ----------------------------------------------------------------------

    /**
     * @return the XA engine (branch table, statistics)
     * @throws SQLException if initialisation fails
     */
    public XaRouter getRouter() throws SQLException {
        running();
        return router;
    }

    /**
     * @param nodeName node name
     * @return that node's XADataSource
     * @throws SQLException if initialisation fails or the node is unknown
     */
    public XADataSource getNodeXADataSource(String nodeName) throws SQLException {
        return nodeSource(nodeName);
    }

    @Override
    public XAConnection getXAConnection() throws SQLException {
        if (isClosed()) {
            throw closedException();
        }
        return unlessClosed(getRouter().connect(null, null));
    }

    @Override
    public XAConnection getXAConnection(String username, String pass) throws SQLException {
        if (isClosed()) {
            throw closedException();
        }
        if (username != null) {
            appCredentials = new String[] {username, pass};
        }
        return unlessClosed(getRouter().connect(username, pass));
    }

    /**
     * {@code c}, registered with the router, unless close() began meanwhile: close() marks the data source
     * closed before it collects the router's open connections, and registering and collecting both hold the
     * router's set, so a connection registered too late for close() to see reads the data source closed here.
     */
    private XAConnection unlessClosed(AffinityXAConnection c) throws SQLException {
        if (isClosed()) {
            c.close();
            throw closedException();
        }
        return c;
    }

    @Override
    void describe(StringBuilder sb) {
        if (!transactionAffinity) {
            sb.append(", plain balancing");
        }
    }

    @Override
    String classNameProperty() {
        return "xaDataSourceClassName";
    }
}
