package io.racaffinity.xa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.arjuna.ats.arjuna.recovery.RecoveryManager;
import com.arjuna.ats.internal.jta.recovery.arjunacore.XARecoveryModule;
import com.arjuna.ats.jta.recovery.XAResourceRecoveryHelper;
import io.racaffinity.Cluster;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.test.Faults;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.XaRows;
import io.racaffinity.xa.AffinityXAResourceTest.TestXid;
import java.io.PrintWriter;
import java.net.ServerSocket;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import javax.sql.XAConnection;
import javax.sql.XADataSource;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.postgresql.xa.PGXADataSource;

/**
 * What the XA tests share, so each fixture and check is written once: the data sources and
 * XAConnections a test opens (closed by {@link #close()} in its {@code @AfterEach}, or after each
 * test when registered as an extension over the test's {@link Proxies}), node data
 * sources with driver timeouts, steering a branch to a node, the rows and prepared transactions
 * on the nodes, the leak check, and delegating wrappers for the tests' fault and tap resources.
 */
final class XaSupport implements AutoCloseable, AfterEachCallback {
    static final int FORMAT = AffinityXAResourceTest.FORMAT;

    private final List<AffinityXADataSource> opened = new ArrayList<>();
    private final List<XAConnection> connections = new ArrayList<>();
    private final Proxies proxies;

    /** For a test that calls {@link #close()} in its own {@code @AfterEach}. */
    XaSupport() {
        this(null);
    }

    /**
     * For a test over {@code proxies} that registers it ({@code @RegisterExtension}): after each
     * test the faults are healed first (closing over a blackholed proxy would hang), then what the
     * test opened is closed and the prepared transactions on the nodes behind the proxies are rolled
     * back.
     */
    XaSupport(Proxies proxies) {
        this.proxies = proxies;
    }

    @Override
    public void afterEach(ExtensionContext context) throws Exception {
        if (proxies != null) {
            Faults.healAll();
        }
        close();
        if (proxies != null) {
            rollbackPrepared(proxies.nodesBehind());
        }
    }

    // ---- what one test opens -------------------------------------------------------------

    /** An AffinityXADataSource over {@code nodes} without heartbeat or MBean, closed with the test. */
    AffinityXADataSource ds(String config, Map<String, ? extends XADataSource> nodes) {
        AffinityXADataSource ds = new AffinityXADataSource();
        ds.setConfig(config);
        ds.setNodeXADataSources(new LinkedHashMap<>(nodes));
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        return track(ds);
    }

    /**
     * An AffinityXADataSource over RAC1..RAC3, this extension's {@link Proxies} (the Toxiproxy instances in front of
     * the nodes, so a test can blackhole one), named {@code name} and a fresh suffix, its node data sources set by
     * {@code timeouts} (the test's driver timeouts); closed with the test.
     */
    AffinityXADataSource proxied(String name, java.util.function.Consumer<PGXADataSource> timeouts) {
        Map<String, PGXADataSource> m = instances("RAC", proxies.ports());
        m.values().forEach(timeouts);
        return ds("name = " + name + "-" + UUID.randomUUID() + "; nodes = RAC1, RAC2, RAC3", m);
    }

    AffinityXADataSource track(AffinityXADataSource ds) {
        opened.add(ds);
        return ds;
    }

    int openedCount() {
        return opened.size();
    }

    XAConnection connect(AffinityXADataSource ds) throws SQLException {
        return track(ds.getXAConnection());
    }

    XAConnection track(XAConnection c) {
        connections.add(c);
        return c;
    }

    List<XAConnection> connections() {
        return connections;
    }

    /** Closes the XAConnections, then the data sources: what each test's {@code @AfterEach} does first. */
    @Override
    public void close() throws SQLException {
        for (XAConnection c : connections) {
            c.close();
        }
        connections.clear();
        opened.forEach(AffinityXADataSource::close);
        opened.clear();
    }

    // ---- node data sources ---------------------------------------------------------------

    /** A node XADataSource with driver timeouts: no call of these tests can hang on a node. */
    static PGXADataSource pg(int port) {
        PGXADataSource ds = new PGXADataSource();
        ds.setUrl("jdbc:postgresql://127.0.0.1:" + port + "/postgres");
        ds.setUser("postgres");
        ds.setConnectTimeout(3);
        ds.setLoginTimeout(5);
        ds.setSocketTimeout(20);
        return ds;
    }

    static PGXADataSource node(int i) {
        return pg(PgNodes.port(i));
    }

    /** RAC1..RAC3 on the pgnodes nodes. */
    static Map<String, XADataSource> realNodes() {
        Map<String, XADataSource> m = new LinkedHashMap<>();
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            m.put("RAC" + i, node(i));
        }
        return m;
    }

    /** {@code prefix}1..n on the given instance ports (Toxiproxy instances, tests/cluster/faults). */
    static Map<String, PGXADataSource> instances(String prefix, Map<Integer, Integer> ports) {
        Map<String, PGXADataSource> m = new LinkedHashMap<>();
        for (int i = 1; i <= ports.size(); i++) {
            m.put(prefix + i, pg(ports.get(i)));
        }
        return m;
    }

    /** A port nothing listens on: connections are refused. */
    static int refusedPort() throws Exception {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    /**
     * JUnit extension (a static {@code @RegisterExtension} field, after {@code @ExtendWith(PgNodes.class)}):
     * three Toxiproxy instances for the test class, healed before each test, stopped after the class.
     */
    static final class Proxies implements BeforeAllCallback, AfterAllCallback, BeforeEachCallback {
        private final boolean rac;
        private Map<Integer, Integer> ports;

        private Proxies(boolean rac) {
            this.rac = rac;
        }

        /** The RAC model: all three in front of node 1 (one database). */
        static Proxies rac() {
            return new Proxies(true);
        }

        /** Instance I in front of node I (independent databases). */
        static Proxies nodes() {
            return new Proxies(false);
        }

        /** instance number (1-based) → proxy port */
        Map<Integer, Integer> ports() {
            return ports;
        }

        /** The nodes behind the proxies. */
        int[] nodesBehind() {
            return rac ? new int[] {1} : allNodes();
        }

        @Override
        public void beforeAll(ExtensionContext context) throws Exception {
            XaRows.create();
            ports = rac ? Faults.startRac(3) : Faults.startNodes(3);
        }

        @Override
        public void afterAll(ExtensionContext context) throws Exception {
            Faults.stop();
        }

        @Override
        public void beforeEach(ExtensionContext context) throws Exception {
            Faults.healAll();
        }
    }

    // ---- branches ------------------------------------------------------------------------

    static Xid xid(int branch) {
        return TestXid.of("fault-" + UUID.randomUUID(), branch);
    }

    /** Makes the next new gtrid land on {@code node}: every other node drains (takes no new affinities). */
    static void steerTo(AffinityXADataSource ds, String node, Runnable start) throws SQLException {
        Cluster c = ds.getCluster();
        for (String n : c.nodeNames()) {
            if (!n.equals(node)) {
                c.setNodeState(n, NodeState.DRAINING);
            }
        }
        try {
            start.run();
        } finally {
            for (String n : c.nodeNames()) {
                if (!n.equals(node)) {
                    c.setNodeState(n, NodeState.UP);
                }
            }
        }
    }

    /** Starts branch {@code x} on {@code r} so that its gtrid lands on {@code node}. */
    static void startOn(AffinityXADataSource ds, String node, XAResource r, Xid x) throws SQLException {
        steerTo(ds, node, () -> {
            try {
                r.start(x, XAResource.TMNOFLAGS);
            } catch (XAException e) {
                throw new IllegalStateException(e);
            }
        });
    }

    /** A branch on {@code node} inserting one row of {@code run}, prepared through {@code c}; returns its xid. */
    static Xid preparedOn(AffinityXADataSource ds, String node, XAConnection c, String run) throws Exception {
        XAResource r = c.getXAResource();
        Xid x = xid(1);
        startOn(ds, node, r, x);
        insert(c, run, 1);
        r.end(x, XAResource.TMSUCCESS);
        assertEquals(XAResource.XA_OK, r.prepare(x));
        return x;
    }

    /** Starts a new branch on {@code c} and inserts one row of {@code run} in it; returns its xid. */
    static Xid startedWithRow(XAConnection c, String run) throws Exception {
        Xid x = xid(1);
        c.getXAResource().start(x, XAResource.TMNOFLAGS);
        insert(c, run, 1);
        return x;
    }

    /** One more transaction on {@code c} inserting a row of {@code run}: proves the connection usable. */
    static void commitOneRow(XAConnection c, String run, boolean onePhase) throws Exception {
        XAResource r = c.getXAResource();
        Xid x = startedWithRow(c, run);
        r.end(x, XAResource.TMSUCCESS);
        if (!onePhase) {
            assertEquals(XAResource.XA_OK, r.prepare(x));
        }
        r.commit(x, onePhase);
    }

    /** Starts, ends and prepares an empty branch {@code x} on {@code r}: the vote. */
    static int preparedEmpty(XAResource r, Xid x) throws XAException {
        r.start(x, XAResource.TMNOFLAGS);
        r.end(x, XAResource.TMSUCCESS);
        return r.prepare(x);
    }

    static void insert(XAConnection c, String run, int branch) throws SQLException {
        try (Connection h = c.getConnection()) {
            insert(h, run, branch);
        }
    }

    /** Inserts a row of {@code run} through the handle {@code h} the caller holds. */
    static void insert(Connection h, String run, int branch) throws SQLException {
        try (PreparedStatement ps = h.prepareStatement(XaRows.INSERT)) {
            ps.setString(1, run);
            ps.setInt(2, 1);
            ps.setInt(3, branch);
            ps.executeUpdate();
        }
    }

    static boolean contains(Xid[] xids, Xid x) {
        return times(xids, x) > 0;
    }

    /** How often a recovery scan listed {@code x}. */
    static int times(Xid[] xids, Xid x) {
        int n = 0;
        for (Xid y : xids) {
            n += XidKey.of(y).equals(XidKey.of(x)) ? 1 : 0;
        }
        return n;
    }

    static XAException xaFails(org.junit.jupiter.api.function.Executable call) {
        return assertThrows(XAException.class, call);
    }

    static int backendPid(Connection h) throws SQLException {
        try (Statement s = h.createStatement(); ResultSet rs = s.executeQuery("SELECT pg_backend_pid()")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    /** Ends one session on {@code node} (57P01, what a crashed node's sessions see). */
    static void terminateBackend(int node, int pid) throws SQLException {
        try (Connection admin = XaRows.connect(node); Statement s = admin.createStatement()) {
            s.execute("SELECT pg_terminate_backend(" + pid + ")");
        }
    }

    // ---- what the nodes hold ---------------------------------------------------------------

    /** Our prepared transactions on node i (format id of these tests). */
    static List<String> prepared(int node) throws SQLException {
        List<String> l = new ArrayList<>();
        for (String gid : XaRows.prepared(node)) {
            if (gid.startsWith(FORMAT + "_")) {
                l.add(gid);
            }
        }
        return l;
    }

    /** Rolls back our prepared transactions on each of {@code nodes}: a failed test leaves nothing in doubt. */
    static void rollbackPrepared(int... nodes) throws SQLException {
        for (int i : nodes) {
            for (String gid : prepared(i)) {
                try (Connection c = XaRows.connect(i); Statement s = c.createStatement()) {
                    s.execute("ROLLBACK PREPARED '" + gid + "'");
                }
            }
        }
    }

    static int[] allNodes() {
        return java.util.stream.IntStream.rangeClosed(1, PgNodes.COUNT).toArray();
    }

    static int rows(int node, String run) throws SQLException {
        try (Connection c = XaRows.connect(node);
                PreparedStatement ps = c.prepareStatement("SELECT count(*) FROM " + XaRows.TABLE + " WHERE run = ?")) {
            ps.setString(1, run);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return rs.getInt(1);
            }
        }
    }

    /** {@code run} left {@code expectedRows} rows on {@code node}, nothing of ours is in doubt there, nothing leaked. */
    static void assertCompleted(AffinityXADataSource ds, int node, String run, int expectedRows) throws Exception {
        assertEquals(expectedRows, rows(node, run));
        assertEquals(List.of(), prepared(node));
        assertNothingLeaked(ds);
    }

    // ---- what the binding holds --------------------------------------------------------------

    static NodeMetrics metrics(AffinityXADataSource ds, String node) throws SQLException {
        return ds.getCluster().nodeMetrics().stream().filter(m -> m.name().equals(node)).findFirst().orElseThrow();
    }

    static long totalInFlight(AffinityXADataSource ds) throws SQLException {
        return ds.getCluster().nodeMetrics().stream().mapToLong(NodeMetrics::inFlight).sum();
    }

    static void assertNothingLeaked(AffinityXADataSource ds) throws Exception {
        assertEquals(0, ds.getRouter().trackedBranches(), "the binding's branch map");
        assertEquals(0, NarayanaXaTest.liveTransactions(ds), "core tx live");
        assertEquals(0, totalInFlight(ds), "in-flight leases: " + ds.getCluster().nodeMetrics());
    }

    /** Two Narayana recovery scans (what completes in-doubt branches) over one recovery XAConnection. */
    static void recoveryScans(AffinityXADataSource ds) throws SQLException {
        RecoveryManager manager = RecoveryManager.manager(RecoveryManager.DIRECT_MANAGEMENT);
        XARecoveryModule xarm = XARecoveryModule.getRegisteredXARecoveryModule();
        XAConnection recovery = ds.getXAConnection();
        XAResourceRecoveryHelper helper = new XAResourceRecoveryHelper() {
            @Override
            public boolean initialise(String p) {
                return true;
            }

            @Override
            public XAResource[] getXAResources() throws Exception {
                return new XAResource[] {recovery.getXAResource()};
            }
        };
        xarm.addXAResourceRecoveryHelper(helper);
        try {
            manager.scan();
            manager.scan();
        } finally {
            xarm.removeXAResourceRecoveryHelper(helper);
            recovery.close();
        }
    }

    /** Records the io.racaffinity.xa log lines of one test. */
    static final class LogLines extends Handler implements AutoCloseable {
        final List<LogRecord> records = new CopyOnWriteArrayList<>();
        final Logger logger = Logger.getLogger("io.racaffinity.xa");

        LogLines() {
            logger.addHandler(this);
        }

        List<String> at(Level level) {
            List<String> l = new ArrayList<>();
            for (LogRecord r : records) {
                if (r.getLevel().intValue() >= level.intValue()) {
                    l.add(new java.util.logging.SimpleFormatter().formatMessage(r));
                }
            }
            return l;
        }

        @Override
        public void publish(LogRecord record) {
            records.add(record);
        }

        @Override
        public void flush() {}

        @Override
        public void close() {
            logger.removeHandler(this);
        }
    }

    // ---- delegating wrappers the tests build their taps and faults on -------------------------

    /**
     * An XAResource that passes every call to {@code d} through {@link #call}: a subclass intercepts
     * all calls there, or single ones by overriding them.
     */
    abstract static class ForwardingXAResource implements XAResource {
        final XAResource d;

        ForwardingXAResource(XAResource d) {
            this.d = d;
        }

        interface Call<T> {
            T run() throws XAException;
        }

        interface VoidCall {
            void run() throws XAException;
        }

        /** Every call but isSameRM and the timeouts; {@code xid} is null for recover. */
        <T> T call(String op, Xid xid, Call<T> body) throws XAException {
            return body.run();
        }

        private void run(String op, Xid xid, VoidCall body) throws XAException {
            call(op, xid, () -> {
                body.run();
                return null;
            });
        }

        @Override
        public void start(Xid xid, int flags) throws XAException {
            run("start", xid, () -> d.start(xid, flags));
        }

        @Override
        public void end(Xid xid, int flags) throws XAException {
            run("end", xid, () -> d.end(xid, flags));
        }

        @Override
        public int prepare(Xid xid) throws XAException {
            return call("prepare", xid, () -> d.prepare(xid));
        }

        @Override
        public void commit(Xid xid, boolean onePhase) throws XAException {
            run("commit", xid, () -> d.commit(xid, onePhase));
        }

        @Override
        public void rollback(Xid xid) throws XAException {
            run("rollback", xid, () -> d.rollback(xid));
        }

        @Override
        public void forget(Xid xid) throws XAException {
            run("forget", xid, () -> d.forget(xid));
        }

        @Override
        public Xid[] recover(int flag) throws XAException {
            return call("recover", null, () -> d.recover(flag));
        }

        /** Two wrappers of one kind are the same RM when what they wrap is. */
        @Override
        public boolean isSameRM(XAResource other) throws XAException {
            XAResource o = other != null && other.getClass() == getClass() ? ((ForwardingXAResource) other).d : other;
            return d.isSameRM(o);
        }

        @Override
        public int getTransactionTimeout() throws XAException {
            return d.getTransactionTimeout();
        }

        @Override
        public boolean setTransactionTimeout(int seconds) throws XAException {
            return d.setTransactionTimeout(seconds);
        }
    }

    /** An XADataSource that passes every call to {@code target}; a subclass intercepts the connections. */
    abstract static class ForwardingXADataSource implements XADataSource {
        final XADataSource target;

        ForwardingXADataSource(XADataSource target) {
            this.target = target;
        }

        @Override
        public XAConnection getXAConnection() throws SQLException {
            return target.getXAConnection();
        }

        @Override
        public XAConnection getXAConnection(String user, String password) throws SQLException {
            return target.getXAConnection(user, password);
        }

        @Override
        public PrintWriter getLogWriter() throws SQLException {
            return target.getLogWriter();
        }

        @Override
        public void setLogWriter(PrintWriter out) throws SQLException {
            target.setLogWriter(out);
        }

        @Override
        public void setLoginTimeout(int seconds) throws SQLException {
            target.setLoginTimeout(seconds);
        }

        @Override
        public int getLoginTimeout() throws SQLException {
            return target.getLoginTimeout();
        }

        @Override
        public Logger getParentLogger() throws java.sql.SQLFeatureNotSupportedException {
            return target.getParentLogger();
        }
    }
}
