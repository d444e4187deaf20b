package io.racaffinity.jdbc;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.jmx.ClusterMonitor;
import io.racaffinity.xa.AffinityXAConnection;
import io.racaffinity.xa.XaRouter;
import java.io.PrintWriter;
import java.lang.System.Logger.Level;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.sql.SQLNonTransientConnectionException;
import java.sql.SQLNonTransientException;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.logging.Logger;
import javax.management.InstanceAlreadyExistsException;
import javax.management.ObjectName;
import javax.naming.InitialContext;
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
public class AffinityXADataSource implements XADataSource, AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.racaffinity.jdbc.AffinityXADataSource");

    private final NodeSources<XADataSource> nodes = new NodeSources<>("AffinityXADataSource", XADataSource.class,
            "nodeXADataSources",
            "node URLs need xaDataSourceClassName (e.g. oracle.jdbc.xa.client.OracleXADataSource)",
            this::checkNotStarted);
    private boolean transactionAffinity = true;
    private PrintWriter logWriter;
    private int loginTimeout;

    private volatile State state;
    private volatile boolean closed;
    /**
     * The credentials the application last passed to {@link #getXAConnection(String, String)}
     * (an app server's pool, e.g. WildFly's {@code <security>}), or null: the heartbeat probes
     * with them, since the node data sources' own defaults may not log in.
     */
    private volatile String[] appCredentials;

    private static final class State {
        final Cluster cluster;
        final boolean ownsCluster;
        final XADataSource[] byId;
        final XaRouter router;
        final Heartbeat heartbeat;
        final ObjectName mbean;

        State(Cluster cluster, boolean ownsCluster, XADataSource[] byId, XaRouter router, Heartbeat heartbeat,
                ObjectName mbean) {
            this.cluster = cluster;
            this.ownsCluster = ownsCluster;
            this.byId = byId;
            this.router = router;
            this.heartbeat = heartbeat;
            this.mbean = mbean;
        }
    }

    /** Creates an unconfigured data source; set its properties, then use it. */
    public AffinityXADataSource() {}

    private void checkNotStarted() {
        if (state != null || closed) {
            throw new IllegalStateException("AffinityXADataSource is already initialised (or closed): set its"
                    + " properties before the first getXAConnection()");
        }
    }

    // ---- properties -------------------------------------------------------------

    /** @param config the core config text, e.g. {@code name = orcl; nodes = RAC1, RAC2; transaction.strict = true} */
    public void setConfig(String config) {
        nodes.setConfig(config);
    }

    /** @return the config text, or null */
    public String getConfig() {
        return nodes.getConfig();
    }

    /**
     * Uses an existing cluster (shared, e.g. with an {@link AffinityDataSource} of the same
     * database, so both route a gtrid alike); not closed by {@link #close()}.
     *
     * @param cluster the cluster
     */
    public void setCluster(Cluster cluster) {
        nodes.setCluster(cluster);
    }

    /** @param nodeXADataSources node name → XADataSource, in node order (built by the application) */
    public void setNodeXADataSources(Map<String, ? extends XADataSource> nodeXADataSources) {
        nodes.setGiven(nodeXADataSources);
    }

    /** @param nodeJndiNames node name → JNDI name of that instance's XADataSource */
    public void setNodeJndiNames(Map<String, String> nodeJndiNames) {
        nodes.setNodeJndiNames(nodeJndiNames);
    }

    /** @param list {@code RAC1=java:comp/env/xa/rac1 | RAC2=...} */
    public void setNodeJndiNameList(String list) {
        nodes.setNodeJndiNameList(list);
    }

    /** @param env environment of the {@link InitialContext} for {@link #setNodeJndiNames} */
    public void setJndiEnvironment(Properties env) {
        nodes.setJndiEnvironment(env);
    }

    /** @param nodeUrls node name → JDBC URL */
    public void setNodeUrls(Map<String, String> nodeUrls) {
        nodes.setNodeUrls(nodeUrls);
    }

    /** @param list {@code RAC1=jdbc:... | RAC2=jdbc:...} */
    public void setNodeUrlList(String list) {
        nodes.setNodeUrlList(list);
    }

    /** @param urlTemplate a URL with {@code {instance}} (see {@link AffinityDataSource#setUrlTemplate}) */
    public void setUrlTemplate(String urlTemplate) {
        nodes.setUrlTemplate(urlTemplate);
    }

    /** @return the URL template, or null */
    public String getUrlTemplate() {
        return nodes.getUrlTemplate();
    }

    /**
     * The node XADataSource class for URLs, e.g. {@code oracle.jdbc.xa.client.OracleXADataSource}
     * or {@code org.postgresql.xa.PGXADataSource}, configured by reflection (URL through
     * {@code setURL}/{@code setUrl}, {@code setUser}, {@code setPassword}, extra properties).
     *
     * @param className the class name
     */
    public void setXaDataSourceClassName(String className) {
        nodes.setDataSourceClassName(className);
    }

    /** @return the node XADataSource class name */
    public String getXaDataSourceClassName() {
        return nodes.getDataSourceClassName();
    }

    /** @param className alias of {@link #setXaDataSourceClassName} (same property name as AffinityDataSource) */
    public void setDataSourceClassName(String className) {
        setXaDataSourceClassName(className);
    }

    /** @param properties extra setters on every node XADataSource */
    public void setDataSourceProperties(Properties properties) {
        nodes.setDataSourceProperties(properties);
    }

    /** @param list {@code connectTimeout=5 | ...} */
    public void setDataSourcePropertyList(String list) {
        nodes.setDataSourcePropertyList(list);
    }

    /** @param user user of the node XADataSources built from URLs */
    public void setUser(String user) {
        nodes.setUser(user);
    }

    /** @param password password of the node XADataSources built from URLs; never shown */
    public void setPassword(String password) {
        nodes.setPassword(password);
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

    /** @param millis heartbeat period: -1 (default) the config's {@code heartbeat.interval}, 0 none */
    public void setHeartbeatIntervalMillis(long millis) {
        nodes.setHeartbeatIntervalMillis(millis);
    }

    /** @param seconds {@code isValid} timeout of one probe (5) */
    public void setHeartbeatTimeoutSeconds(int seconds) {
        nodes.setHeartbeatTimeoutSeconds(seconds);
    }

    /** @param register register the cluster's MXBean (true; skipped with a warning if one is registered) */
    public void setRegisterMBean(boolean register) {
        nodes.setRegisterMBean(register);
    }

    /** @param prefixes SQLState prefixes that report a node failure (default {@code 08,57P02,57P03}) */
    public void setNodeFailureSqlStates(String prefixes) {
        nodes.setNodeFailureSqlStates(prefixes);
    }

    // ---- lifecycle --------------------------------------------------------------

    private State state() throws SQLException {
        State s = state;
        if (s != null) {
            return s;
        }
        synchronized (this) {
            if (closed) {
                throw new SQLNonTransientConnectionException("AffinityXADataSource is closed", "08003");
            }
            if (state == null) {
                state = start();
            }
            return state;
        }
    }

    /**
     * Builds the cluster and resolves the node XADataSources (done lazily otherwise).
     *
     * @throws SQLException if the configuration is incomplete or invalid
     */
    public void init() throws SQLException {
        state();
    }

    private State start() throws SQLException {
        Redactor redactor = nodes.redactor();
        Cluster c = nodes.givenCluster();
        boolean owns = false;
        Heartbeat hb = null;
        ObjectName mbean = null;
        try {
            if (c == null) {
                c = nodes.newCluster();
                owns = true;
            }
            XADataSource[] byId = nodes.resolve(c, redactor, ds -> {});
            long interval = nodes.heartbeatInterval(c);
            if (interval > 0) {
                DataSource[] probes = new DataSource[byId.length];
                for (int i = 0; i < byId.length; i++) {
                    probes[i] = byId[i] == null ? null : probeDataSource(byId[i], () -> appCredentials);
                }
                hb = new Heartbeat(c, probes, interval, nodes.heartbeatTimeoutSeconds(), redactor);
            }
            if (nodes.registerMBean()) {
                try {
                    mbean = ClusterMonitor.register(c);
                } catch (InstanceAlreadyExistsException e) {
                    LOG.log(Level.DEBUG, "MBean " + ClusterMonitor.objectName(c.name()) + " is already registered");
                }
            }
            final List<String> fs = nodes.nodeFailureStates();
            XaRouter router = new XaRouter(c, byId, transactionAffinity, e -> SqlErrors.isNodeFailure(e, fs),
                    redactor::redact, AffinityDataSource::requestSession);
            return new State(c, owns, byId, router, hb, mbean);
        } catch (SQLException | RuntimeException | Error e) {
            if (hb != null) {
                hb.close();
            }
            if (mbean != null) {
                ClusterMonitor.unregister(mbean);
            }
            if (owns) {
                c.close();
            }
            throw e;
        }
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

    /**
     * Stops the heartbeat, unregisters the MXBean and closes the cluster it built.
     * XAConnections already handed out keep working until closed. Idempotent.
     */
    @Override
    public void close() {
        State s;
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            s = state;
        }
        if (s == null) {
            return;
        }
        if (s.heartbeat != null) {
            s.heartbeat.close();
        }
        if (s.mbean != null) {
            ClusterMonitor.unregister(s.mbean);
        }
        if (s.ownsCluster) {
            s.cluster.close();
        }
    }

    /** @return whether {@link #close()} was called */
    public boolean isClosed() {
        return closed;
    }

    // ---- use ----------------------------------------------------------------------

    /**
     * @return the cluster (initialising the data source if needed)
     * @throws SQLException if initialisation fails
     */
    public Cluster getCluster() throws SQLException {
        return state().cluster;
    }

    /**
     * @return the XA engine (branch table, statistics)
     * @throws SQLException if initialisation fails
     */
    public XaRouter getRouter() throws SQLException {
        return state().router;
    }

    /**
     * @param nodeName node name
     * @return that node's XADataSource
     * @throws SQLException if initialisation fails or the node is unknown
     */
    public XADataSource getNodeXADataSource(String nodeName) throws SQLException {
        State s = state();
        try {
            int id = s.cluster.nodeId(nodeName);
            if (id < s.byId.length && s.byId[id] != null) {
                return s.byId[id];
            }
        } catch (AffinityException e) {
            throw SqlErrors.routing(e);
        }
        throw new SQLNonTransientException("no XADataSource for node " + nodeName, "22023");
    }

    @Override
    public XAConnection getXAConnection() throws SQLException {
        if (closed) {
            throw new SQLNonTransientConnectionException("AffinityXADataSource is closed", "08003");
        }
        return state().router.connect(null, null);
    }

    @Override
    public XAConnection getXAConnection(String username, String pass) throws SQLException {
        if (closed) {
            throw new SQLNonTransientConnectionException("AffinityXADataSource is closed", "08003");
        }
        if (username != null) {
            appCredentials = new String[] {username, pass};
        }
        return state().router.connect(username, pass);
    }

    @Override
    public PrintWriter getLogWriter() {
        return logWriter;
    }

    @Override
    public void setLogWriter(PrintWriter out) {
        this.logWriter = out;
    }

    @Override
    public void setLoginTimeout(int seconds) {
        this.loginTimeout = seconds;
    }

    @Override
    public int getLoginTimeout() {
        return loginTimeout;
    }

    @Override
    public Logger getParentLogger() {
        return Logger.getLogger("io.racaffinity");
    }

    @Override
    public String toString() {
        Redactor r = nodes.redactor();
        StringBuilder sb = new StringBuilder("AffinityXADataSource[");
        State s = state;
        Cluster given = nodes.givenCluster();
        sb.append(s != null ? s.cluster.name() : given != null ? given.name() : "(not initialised)");
        if (!transactionAffinity) {
            sb.append(", plain balancing");
        }
        nodes.describe(sb, r, "xaDataSourceClassName");
        if (nodes.hasCredentials()) {
            sb.append(", credentials=<set>");
        }
        return sb.append(closed ? ", closed]" : "]").toString();
    }
}
