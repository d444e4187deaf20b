package io.racaffinity.jdbc;

import static io.racaffinity.test.Pools.serverPort;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.zaxxer.hikari.HikariDataSource;
import io.racaffinity.Cluster;
import io.racaffinity.ClusterClosedException;
import io.racaffinity.InvalidConfigException;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import io.racaffinity.Pin;
import io.racaffinity.RouteKind;
import io.racaffinity.Scope;
import io.racaffinity.StrictAffinityException;
import io.racaffinity.test.LogCapture;
import io.racaffinity.test.MemoryContextFactory;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.test.Stubs;
import io.racaffinity.test.Vectors;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.sql.Connection;
import java.sql.JDBCType;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.sql.SQLTransientConnectionException;
import java.sql.ShardingKey;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.LogRecord;
import javax.naming.Context;
import javax.sql.DataSource;
import org.junit.jupiter.api.AutoClose;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.postgresql.PGConnection;

@ExtendWith(PgNodes.class)
@SuppressWarnings("try") // scopes opened only for their effect on getConnection()
class AffinityDataSourceTest {
    static final List<String> NAMES = List.of("MYDB1", "MYDB2", "MYDB3");
    private static final String SECRET = "tiger-S3cret!";

    @AutoClose // after each test, with the data sources built on it
    private final Pools pools = new Pools(NAMES);

    private AffinityDataSource ds(String name, String extra) {
        return pools.affinity("name = " + name + "; nodes = MYDB1, MYDB2, MYDB3; policy = random; " + extra);
    }

    /** A data source of node A over {@code dataSourceClassName}, its password {@link #SECRET}. */
    private AffinityDataSource withSecretPassword(String dataSourceClassName) {
        AffinityDataSource ds = pools.own(new AffinityDataSource());
        ds.setConfig("nodes = A");
        ds.setDataSourceClassName(dataSourceClassName);
        ds.setPassword(SECRET);
        return ds;
    }

    static int portOf(String node) {
        return PgNodes.port(NAMES.indexOf(node.toUpperCase()) + 1);
    }

    private static NodeMetrics metrics(Cluster c, String node) {
        return c.nodeMetrics().stream().filter(m -> m.name().equals(node)).findFirst().orElseThrow();
    }

    // ---- routing ------------------------------------------------------------

    @Test
    void aPinnedThreadGetsEveryConnectionFromOneNode() throws Exception {
        AffinityDataSource ds = ds("pinned", "");
        for (int round = 0; round < 5; round++) {
            try (Pin pin = ds.pin()) {
                for (int i = 0; i < 20; i++) {
                    try (Connection c = ds.getConnection()) {
                        assertEquals(portOf(pin.nodeName()), serverPort(c));
                        AffinityConnection ac = c.unwrap(AffinityConnection.class);
                        assertEquals(pin.nodeName(), ac.nodeName());
                        assertEquals(RouteKind.AFFINITY, ac.routeKind());
                    }
                }
            }
        }
    }

    @Test
    void unpinnedConnectionsAreLoadBalanced() throws Exception {
        AffinityDataSource ds = ds("balanced", "");
        Set<Integer> ports = new HashSet<>();
        for (int i = 0; i < 60; i++) {
            try (Connection c = ds.getConnection()) {
                ports.add(serverPort(c));
            }
        }
        assertEquals(Set.of(portOf("MYDB1"), portOf("MYDB2"), portOf("MYDB3")), ports);
    }

    @Test
    void shardingKeysRouteByDataAffinityWithUcpsCallShape() throws Exception {
        AffinityDataSource ds = ds("sharding", "");
        Cluster cluster = ds.getCluster();
        for (int k = 0; k < 30; k++) {
            ShardingKey key = ds.createShardingKeyBuilder().subkey(1000 + k, JDBCType.INTEGER).build();
            try (Connection c = ds.createConnectionBuilder().shardingKey(key).build()) {
                String owner = cluster.routeKey(1000L + k).nodeName();
                assertEquals(portOf(owner), serverPort(c), "key " + (1000 + k));
                assertEquals(RouteKind.AFFINITY, c.unwrap(AffinityConnection.class).routeKind());
            }
        }
        ShardingKey text = ds.createShardingKeyBuilder().subkey("customer:42", JDBCType.VARCHAR).build();
        try (Connection c = ds.createConnectionBuilder().shardingKey(text).build()) {
            assertEquals(portOf(cluster.routeKey("customer:42").nodeName()), serverPort(c));
        }
    }

    @Test
    void shardingKeysRouteAsInTheSharedVectors() throws Exception {
        // Topology "three-equal" has 3 nodes MYDB1..3: exactly our 3 PostgreSQL nodes.
        JsonNode topo = null;
        for (JsonNode t : Vectors.load("rendezvous.json").get("topologies")) {
            if (t.get("name").asText().equals("three-equal")) {
                topo = t;
            }
        }
        assertNotNull(topo);
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = vectors\n" + topo.get("config").asText());
        ds.setNodeDataSources(pools.asMap());
        ds.setHeartbeatIntervalMillis(0);
        pools.own(ds);
        int checked = 0;
        for (JsonNode row : topo.get("data")) {
            ShardingKey key = row.has("key")
                    ? ds.createShardingKeyBuilder().subkey(Vectors.bytes(row.get("key")), JDBCType.VARBINARY).build()
                    : ds.createShardingKeyBuilder().subkey(Long.parseLong(row.get("i64").asText()), JDBCType.BIGINT)
                            .build();
            try (Connection c = ds.createConnectionBuilder().shardingKey(key).build()) {
                assertEquals(portOf(row.get("owner").asText()), serverPort(c), "vector " + row);
                checked++;
            }
        }
        assertEquals(topo.get("data").size(), checked);
        assertTrue(checked >= 10);
    }

    @Test
    void shardingKeyEncodingFollowsTheDocumentedRules() throws Exception {
        AffinityShardingKeyBuilder b = new AffinityShardingKeyBuilder();
        assertEquals(AffinityShardingKey.of(1000), b.subkey(1000, JDBCType.INTEGER).build());
        assertEquals(AffinityShardingKey.of(1000), new AffinityShardingKeyBuilder().subkey("1000", JDBCType.NUMERIC)
                .build(), "a numeric string with a numeric type is the integer");
        assertEquals(AffinityShardingKey.of("1000".getBytes()), new AffinityShardingKeyBuilder()
                .subkey("1000", JDBCType.VARCHAR).build());
        assertEquals(AffinityShardingKey.of(new byte[] {0, 0, 0, 1, 'a', 0, 0, 0, 1, 'b'}),
                new AffinityShardingKeyBuilder().subkey("a", JDBCType.VARCHAR).subkey("b", JDBCType.VARCHAR).build());
        assertThrows(SQLException.class, () -> new AffinityShardingKeyBuilder().subkey(new Object(), null).build());
        assertThrows(SQLException.class, () -> new AffinityShardingKeyBuilder().build());
        assertThrows(SQLException.class, () -> new AffinityShardingKeyBuilder().subkey(null, null).build());
    }

    @Test
    void superShardingKeysAndForeignKeysAreRefused() throws Exception {
        AffinityDataSource ds = ds("super", "");
        ShardingKey k = ds.createShardingKeyBuilder().subkey(1, JDBCType.INTEGER).build();
        assertThrows(SQLFeatureNotSupportedException.class,
                () -> ds.createConnectionBuilder().shardingKey(k).superShardingKey(k).build());
        ShardingKey foreign = new ShardingKey() {};
        assertThrows(SQLException.class, () -> ds.createConnectionBuilder().shardingKey(foreign).build());
    }

    @Test
    void aSessionScopeRoutesBySession() throws Exception {
        AffinityDataSource ds = ds("sessions", "");
        Cluster cluster = ds.getCluster();
        try (SessionScope s = ds.withSession("JSESSIONID=8F3A0C2B1D")) {
            int port = -1;
            for (int i = 0; i < 10; i++) {
                try (Connection c = ds.getConnection()) {
                    int p = serverPort(c);
                    if (port < 0) {
                        port = p;
                    }
                    assertEquals(port, p);
                }
            }
            assertEquals(portOf(cluster.routeSession("JSESSIONID=8F3A0C2B1D").nodeName()), port);
            try (SessionScope inner = ds.withSession("other")) {
                try (Connection c = ds.getConnection()) {
                    assertEquals(portOf(cluster.routeSession("other").nodeName()), serverPort(c));
                }
            }
            try (Connection c = ds.getConnection()) {
                assertEquals(port, serverPort(c), "the outer scope is back");
            }
        }
        assertTrue(ds.endSession("JSESSIONID=8F3A0C2B1D"));
        assertFalse(ds.endSession("JSESSIONID=8F3A0C2B1D"));
    }

    // ---- connection proxies ---------------------------------------------------

    /**
     * A negative heartbeat timeout is refused where it is set: the heartbeat hands it to {@code isValid}, which
     * refuses a negative timeout (pgjdbc: "Invalid timeout (-1<0)"), so every probe missed and the heartbeat
     * marked every healthy node Down.
     */
    @Test
    void aNegativeHeartbeatTimeoutIsRefusedRatherThanTakeEveryNodeDown() throws Exception {
        AffinityDataSource ds = pools.affinity("name = hb-timeout; nodes = MYDB1, MYDB2, MYDB3; heartbeat.misses = 2");
        try {
            ds.setHeartbeatTimeoutSeconds(-1);
        } catch (IllegalArgumentException e) {
            assertTrue(e.getMessage().contains("heartbeatTimeoutSeconds"), e.getMessage());
            return;
        }
        ds.setHeartbeatIntervalMillis(50);
        Cluster c = ds.getCluster();
        Pools.await(Duration.ofSeconds(3), () -> NAMES.stream().allMatch(n -> c.nodeState(n) == NodeState.DOWN));
        List<String> down = NAMES.stream().filter(n -> c.nodeState(n) == NodeState.DOWN).toList();
        org.junit.jupiter.api.Assertions.fail("heartbeatTimeoutSeconds = -1 accepted; its heartbeat then marked "
                + down + " of " + NAMES + " Down");
    }

    /**
     * A result set answers the statement that produced it (JDBC's {@code ResultSet.getStatement}), as the one
     * object: Hibernate's resource registry and Spring's JdbcUtils look a result set's statement up by it.
     */
    @Test
    void aResultSetAnswersTheStatementThatProducedIt() throws Exception {
        AffinityDataSource ds = ds("rs-statement", "");
        try (Connection c = ds.getConnection(); Statement st = c.createStatement();
                PreparedStatement ps = c.prepareStatement("SELECT ?")) {
            try (ResultSet rs = st.executeQuery("SELECT 1")) {
                assertSame(st, rs.getStatement(), "a statement's result set");
            }
            ps.setInt(1, 2);
            try (ResultSet rs = ps.executeQuery()) {
                assertSame(ps, rs.getStatement(), "a prepared statement's result set");
            }
            assertTrue(st.execute("SELECT 3"));
            try (ResultSet rs = st.getResultSet()) {
                assertSame(st, rs.getStatement(), "getResultSet()'s result set");
            }
        }
    }

    @Test
    void closeReleasesTheLeaseOnceAndUnwrapReachesThePhysicalConnection() throws Exception {
        AffinityDataSource ds = ds("proxies", "");
        Cluster cluster = ds.getCluster();
        Connection c = ds.getConnection();
        AffinityConnection ac = c.unwrap(AffinityConnection.class);
        assertEquals(1, metrics(cluster, ac.nodeName()).inFlight());
        assertTrue(c.isWrapperFor(PGConnection.class));
        PGConnection pg = c.unwrap(PGConnection.class);
        assertNotNull(pg);
        assertTrue(pg.getBackendPID() > 0);
        assertInstanceOf(Connection.class, ac.physical());
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT 1")) {
            assertSame(c, st.getConnection(), "statements hand back the affinity connection");
            assertSame(c, rs.getStatement().getConnection());
            assertSame(c, c.getMetaData().getConnection());
        }
        c.close();
        c.close();
        assertTrue(c.isClosed());
        NodeMetrics m = metrics(cluster, ac.nodeName());
        assertEquals(0, m.inFlight());
        assertEquals(1, m.successes());
        assertTrue(c.toString().startsWith("AffinityConnection[node=" + ac.nodeName()), c.toString());
    }

    @Test
    void connectionExceptionsReportANodeFailureAndOthersDoNot() throws Exception {
        AtomicInteger closes = new AtomicInteger();
        Map<String, DataSource> stubs = new LinkedHashMap<>();
        stubs.put("A", Stubs.dataSource("A", Map.of(
                "createStatement", new SQLException("I/O error sending to the backend", "08006"),
                "commit", new SQLException("duplicate key", "23505")), closes));
        stubs.put("B", Stubs.dataSource("B", Map.of("getConnection", new SQLException("refused", "08001")), closes));
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = stubs; nodes = A, B; health.eject_after_failures = 0");
        ds.setNodeDataSources(stubs);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        pools.own(ds);
        Cluster cluster = ds.getCluster();

        Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "A")).build();
        SQLException app = assertThrows(SQLException.class, c::commit);
        assertEquals("23505", app.getSQLState());
        assertEquals(0, metrics(cluster, "A").failures(), "a statement error is not a node failure");
        SQLException io = assertThrows(SQLException.class, c::createStatement);
        assertEquals("08006", io.getSQLState(), "the original exception is rethrown");
        assertEquals(1, metrics(cluster, "A").failures());
        assertEquals(0, metrics(cluster, "A").inFlight(), "released FAILED at once");
        c.close();
        assertEquals(0, metrics(cluster, "A").successes(), "close does not release a second time");
        assertEquals(1, closes.get());

        // A refused connection is a node failure: counted, and (soft data scope) retried on the
        // node the core names next within the same call (SoftFailoverTest covers the real crash).
        try (Connection retried = ds.createConnectionBuilder().shardingKey(keyOn(ds, "B")).build()) {
            assertEquals("A", retried.unwrap(AffinityConnection.class).nodeName());
            assertEquals(RouteKind.FALLBACK, retried.unwrap(AffinityConnection.class).routeKind());
        }
        assertEquals(1, metrics(cluster, "B").failures());
        assertEquals(0, metrics(cluster, "B").inFlight());
        // Strict data affinity never moves: the original exception is rethrown.
        cluster.setStrict(Scope.DATA, true);
        SQLException refused = assertThrows(SQLException.class,
                () -> ds.createConnectionBuilder().shardingKey(keyOn(ds, "B")).build());
        assertEquals("08001", refused.getSQLState());
        assertEquals(2, metrics(cluster, "B").failures());
        assertEquals(0, metrics(cluster, "B").inFlight());
    }

    @Test
    void nodeFailureStatesIncludeServerShutdownAndRecoverableExceptionsAndAreConfigurable() throws Exception {
        java.util.function.BiFunction<String, SQLException, Long> failuresAfter = (states, thrown) -> {
            AffinityDataSource ds = new AffinityDataSource();
            pools.own(ds);
            ds.setConfig("name = states; nodes = A; health.eject_after_failures = 0");
            ds.setNodeDataSources(Map.of("A", Stubs.dataSource("A", Map.of("commit", thrown), new AtomicInteger())));
            ds.setHeartbeatIntervalMillis(0);
            ds.setRegisterMBean(false);
            if (states != null) {
                ds.setNodeFailureSqlStates(states);
            }
            try (Connection c = ds.getConnection()) {
                assertThrows(SQLException.class, c::commit);
                return metrics(ds.getCluster(), "A").failures();
            } catch (SQLException e) {
                throw new AssertionError(e);
            }
        };
        assertEquals(0L, failuresAfter.apply(null, new SQLException("one session terminated", "57P01")));
        assertEquals(1L, failuresAfter.apply(null, new SQLException("crash of another process", "57P02")));
        assertEquals(1L, failuresAfter.apply("08,57P01", new SQLException("postmaster exit", "57P01")));
        assertEquals(1L, failuresAfter.apply(null, new java.sql.SQLRecoverableException("ORA-03113", "99999")));
        assertEquals(1L, failuresAfter.apply(null, new SQLException("wrapped", "HY000",
                new SQLException("io", "08006"))));
        assertEquals(0L, failuresAfter.apply(null, new SQLException("deadlock", "40P01")));
        assertEquals(1L, failuresAfter.apply("08,40P01", new SQLException("deadlock", "40P01")));
        assertEquals(0L, failuresAfter.apply("08", new SQLException("postmaster exit", "57P01")));
    }

    /** A sharding key the cluster routes to {@code node}. */
    static ShardingKey keyOn(AffinityDataSource ds, String node) throws SQLException {
        Cluster c = ds.getCluster();
        for (long k = 0; ; k++) {
            if (c.routeKey(k).nodeName().equals(node)) {
                return AffinityShardingKey.of(k);
            }
        }
    }

    // ---- configuration ----------------------------------------------------------

    @Test
    void beanPropertiesBuildHikariNodePoolsByReflection() throws Exception {
        AffinityDataSource ds = new AffinityDataSource();
        pools.own(ds);
        ds.setConfig("name = beans; nodes = MYDB1, MYDB2, MYDB3; policy = random");
        ds.setNodeUrlList("MYDB1=" + PgNodes.url(1) + " | MYDB2=" + PgNodes.url(2) + "\nMYDB3=" + PgNodes.url(3));
        ds.setDataSourceClassName("com.zaxxer.hikari.HikariDataSource");
        ds.setUser("postgres");
        ds.setDataSourcePropertyList("maximumPoolSize=3 | connectionTimeout=5000 | autoCommit=true");
        ds.setHeartbeatIntervalMillis(0);
        try (Pin pin = ds.pin(); Connection c = ds.getConnection()) {
            assertEquals(portOf(pin.nodeName()), serverPort(c));
        }
        HikariDataSource node2 = (HikariDataSource) ds.getNodeDataSource("MYDB2");
        assertEquals(3, node2.getMaximumPoolSize());
        assertEquals(5000, node2.getConnectionTimeout());
        assertEquals("beans-MYDB2", node2.getPoolName());
        assertThrows(IllegalStateException.class, () -> ds.setUser("x"), "sealed after initialisation");
        ds.close();
        assertTrue(node2.isClosed(), "pools the data source created are closed with it");
    }

    @Test
    void aUrlTemplateGivesEachNodeItsInstanceUrl() throws Exception {
        AffinityDataSource ds = new AffinityDataSource();
        pools.own(ds);
        ds.setConfig("name = template; nodes = MYDB1, MYDB2, MYDB3");
        ds.setUrlTemplate(PgNodes.url(1) + "?ApplicationName=app-{instance}");
        ds.setDataSourceClassName("org.postgresql.ds.PGSimpleDataSource");
        ds.setUser("postgres");
        ds.setHeartbeatIntervalMillis(0);
        for (int i = 0; i < 6; i++) {
            try (Pin pin = ds.pin(); Connection c = ds.getConnection();
                    Statement st = c.createStatement();
                    ResultSet rs = st.executeQuery("SELECT current_setting('application_name')")) {
                rs.next();
                assertEquals("app-" + pin.nodeName(), rs.getString(1));
            }
        }
        assertEquals("jdbc:oracle:thin:@//h:1521/svc/RAC2",
                AffinityDataSource.instanceUrl("jdbc:oracle:thin:@//h:1521/svc/{instance}", "RAC2"));
        assertEquals("(INSTANCE_NAME=RAC2)", AffinityDataSource.instanceUrl("(INSTANCE_NAME=${INSTANCE_NAME})", "RAC2"));
        AffinityDataSource bad = new AffinityDataSource();
        pools.own(bad);
        bad.setConfig("nodes = A");
        bad.setUrlTemplate("jdbc:postgresql://h/db");
        SQLException e = assertThrows(SQLException.class, bad::getConnection);
        assertTrue(e.getMessage().contains("placeholder"), e.getMessage());
    }

    @Test
    void nodeDataSourcesAreLookedUpInJndiLazily() throws Exception {
        MemoryContextFactory.BINDINGS.clear();
        for (String n : NAMES) {
            MemoryContextFactory.BINDINGS.put("java:comp/env/jdbc/" + n.toLowerCase(), pools.get(n));
        }
        Map<String, String> names = new LinkedHashMap<>();
        for (String n : NAMES) {
            names.put(n, "java:comp/env/jdbc/" + n.toLowerCase());
        }
        Properties env = new Properties();
        env.setProperty(Context.INITIAL_CONTEXT_FACTORY, MemoryContextFactory.class.getName());
        AffinityDataSource ds = new AffinityDataSource();
        pools.own(ds);
        ds.setNodeJndiNames(names); // no config: nodes = MYDB1, MYDB2, MYDB3 from the map
        ds.setJndiEnvironment(env);
        ds.setHeartbeatIntervalMillis(0);
        int before = MemoryContextFactory.LOOKUPS.get();
        assertEquals(before, MemoryContextFactory.LOOKUPS.get(), "nothing is looked up before first use");
        try (Pin pin = ds.pin(); Connection c = ds.getConnection()) {
            assertEquals(portOf(pin.nodeName()), serverPort(c));
        }
        assertEquals(before + 3, MemoryContextFactory.LOOKUPS.get());
        assertEquals(List.of("MYDB1", "MYDB2", "MYDB3"), ds.getCluster().nodeNames());

        AffinityDataSource missing = new AffinityDataSource();
        pools.own(missing);
        missing.setNodeJndiNameList("MYDB1=java:comp/env/jdbc/mydb1 | MYDB2=java:comp/env/jdbc/nope");
        missing.setJndiEnvironment(env);
        SQLException e = assertThrows(SQLException.class, missing::getConnection);
        assertTrue(e.getMessage().contains("java:comp/env/jdbc/nope"), e.getMessage());
    }

    @Test
    void badConfigGivesAClearException() {
        AffinityDataSource ds = new AffinityDataSource();
        pools.own(ds);
        ds.setConfig("nodes = MYDB1, MYDB2, MYDB3\npolicy = fastest");
        ds.setNodeDataSources(pools.asMap());
        SQLException e = assertThrows(SQLException.class, ds::getConnection);
        assertInstanceOf(InvalidConfigException.class, e.getCause());
        assertTrue(e.getMessage().contains("`policy`"), e.getMessage());

        AffinityDataSource typo = ds("typo", "");
        Map<String, DataSource> m = new LinkedHashMap<>(pools.asMap());
        m.put("MYDB9", pools.get("MYDB1"));
        typo.setNodeDataSources(m);
        e = assertThrows(SQLException.class, typo::getConnection);
        assertTrue(e.getMessage().contains("MYDB9"), e.getMessage());

        AffinityDataSource none = new AffinityDataSource();
        pools.own(none);
        e = assertThrows(SQLException.class, none::getConnection);
        assertTrue(e.getMessage().contains("no nodes"), e.getMessage());
    }

    @Test
    void useAfterCloseGivesAClearException() throws Exception {
        AffinityDataSource ds = ds("closing", "");
        Cluster cluster = ds.getCluster();
        Connection open = ds.getConnection();
        ds.close();
        ds.close();
        SQLException e = assertThrows(SQLException.class, ds::getConnection);
        assertEquals("08003", e.getSQLState());
        assertTrue(e.getMessage().contains("closed"), e.getMessage());
        assertThrows(IllegalStateException.class, () -> ds.setConfig("nodes = A"));
        assertThrows(ClusterClosedException.class, cluster::pick, "the data source's own cluster is closed");
        // As a closed HikariDataSource answers, not with the closed cluster.
        for (org.junit.jupiter.api.function.Executable use : List.<org.junit.jupiter.api.function.Executable>of(
                ds::getCluster, () -> ds.unwrap(Cluster.class), ds::getObjectName)) {
            e = assertThrows(SQLException.class, use, "a closed data source handed out its closed cluster");
            assertEquals("08003", e.getSQLState());
        }
        // Wrapper's contract: true only where unwrap with the same argument succeeds.
        assertFalse(ds.isWrapperFor(Cluster.class), "isWrapperFor(Cluster) after close, where unwrap throws");
        assertTrue(ds.isWrapperFor(DataSource.class));
        open.close(); // a connection handed out before close still closes cleanly
        assertTrue(ds.toString().endsWith(", closed]"), ds.toString());
    }

    @Test
    void closeAbortsTheConnectionsStillInUseWhateverTheNodePool() throws Exception {
        // HikariCP's close() aborts the connections in use of the pools it closes; the data source
        // ends its own the same way over the application's pools and unpooled nodes too.
        AffinityDataSource given = ds("closegiven", "");
        AffinityDataSource built = pools.own(new AffinityDataSource());
        built.setConfig("name = closebuilt; nodes = MYDB1");
        built.setNodeUrlList("MYDB1=" + PgNodes.url(1));
        built.setDataSourceClassName("com.zaxxer.hikari.HikariDataSource");
        built.setUser("postgres");
        built.setHeartbeatIntervalMillis(0);
        AffinityDataSource unpooled = pools.own(new AffinityDataSource());
        unpooled.setConfig("name = closeunpooled; nodes = MYDB1");
        unpooled.setNodeUrlList("MYDB1=" + PgNodes.url(1));
        unpooled.setUser("postgres");
        unpooled.setHeartbeatIntervalMillis(0);
        // Over a cluster the application shares: the failures close() causes are no node's.
        Cluster sharedCluster = Cluster.fromConfig("name = closeshared; nodes = MYDB1, MYDB2, MYDB3");
        AffinityDataSource shared = pools.own(new AffinityDataSource());
        shared.setCluster(sharedCluster);
        shared.setNodeDataSources(pools.asMap());
        shared.setHeartbeatIntervalMillis(0);
        shared.setRegisterMBean(false);
        try (sharedCluster) {
            for (AffinityDataSource ds : List.of(given, built, unpooled, shared)) {
                Connection c = ds.getConnection();
                serverPort(c);
                ds.close();
                SQLException e = assertThrows(SQLException.class, () -> serverPort(c),
                        ds + ": a connection in use worked on after close()");
                assertTrue(e.getSQLState() != null && e.getSQLState().startsWith("08"), ds + ": " + e.getSQLState());
                c.close();
            }
            for (NodeMetrics m : sharedCluster.nodeMetrics()) {
                assertEquals(0, m.failures(), m.name() + ": the abort of close() counted as a node failure");
                assertEquals(0, m.inFlight(), m.name());
            }
        }
        for (String n : NAMES) {
            com.zaxxer.hikari.HikariPoolMXBean p = pools.get(n).getHikariPoolMXBean();
            assertTrue(Pools.await(Duration.ofSeconds(5), () -> p.getActiveConnections() == 0),
                    n + ": the application's pool did not get its entry back");
        }
    }

    @Test
    void loginTimeoutBoundsTheConnectOfNodesBuiltFromUrls() throws Exception {
        // A server that takes the TCP connection (the backlog does) and never answers the startup.
        try (java.net.ServerSocket silent = new java.net.ServerSocket(0, 50,
                java.net.InetAddress.getLoopbackAddress())) {
            AffinityDataSource ds = pools.own(new AffinityDataSource());
            ds.setConfig("name = login; nodes = A");
            ds.setNodeUrlList("A=jdbc:postgresql://127.0.0.1:" + silent.getLocalPort() + "/postgres?sslmode=disable");
            ds.setUser("postgres");
            ds.setHeartbeatIntervalMillis(0);
            ds.setLoginTimeout(1);
            assertEquals(1, ds.getLoginTimeout());
            long t0 = System.nanoTime();
            assertThrows(SQLException.class, ds::getConnection);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms < 5_000, "waited " + ms + " ms, not loginTimeout's 1 s (the default is 10 s)");
            assertThrows(IllegalStateException.class, () -> ds.setLoginTimeout(2), "sealed after the start");
        }
        assertThrows(IllegalArgumentException.class, () -> new AffinityDataSource().setLoginTimeout(-1));
    }

    @Test
    void strictSessionAffinityThrowsThroughJdbc() throws Exception {
        AffinityDataSource ds = ds("strict", "session.strict = true");
        Cluster cluster = ds.getCluster();
        try (SessionScope s = ds.withSession("strict-session")) {
            String node;
            try (Connection c = ds.getConnection()) {
                node = c.unwrap(AffinityConnection.class).nodeName();
            }
            cluster.setNodeState(node, NodeState.DOWN);
            SQLTransientConnectionException e = assertThrows(SQLTransientConnectionException.class,
                    ds::getConnection);
            assertInstanceOf(StrictAffinityException.class, e.getCause());
            assertEquals("08001", e.getSQLState());
            assertTrue(e.getMessage().contains(node), e.getMessage());
        }
    }

    // ---- credentials -----------------------------------------------------------

    @Test
    void credentialsNeverAppearInToStringLogsOrExceptions() throws Exception {
        try (LogCapture log = new LogCapture()) {
            List<LogRecord> records = log.records();
            // Nodes on a closed port, the password in the URL too: every probe fails and is logged.
            AffinityDataSource ds = new AffinityDataSource();
            pools.own(ds);
            ds.setConfig("name = secrets; nodes = MYDB1, MYDB2; heartbeat.misses = 2");
            ds.setUrlTemplate("jdbc:postgresql://127.0.0.1:1/postgres?password=" + SECRET
                    + "&connectTimeout=1&ApplicationName={instance}");
            ds.setUser("scott");
            ds.setPassword(SECRET);
            ds.setHeartbeatIntervalMillis(50);
            ds.setDataSourcePropertyList("password=" + SECRET);
            String before = ds.toString();
            assertFalse(before.contains(SECRET), before);
            assertFalse(before.contains("scott"), before);
            SQLException e = assertThrows(SQLException.class, ds::getConnection);
            assertFalse(stackTrace(e).contains(SECRET), stackTrace(e));
            assertTrue(Pools.await(Duration.ofSeconds(20), () -> ds.toString().contains("nodes=")
                    && records.stream().anyMatch(r -> r.getMessage().contains(" -> DOWN (cause heartbeat"))),
                    "the heartbeat marked a node down and logged it: " + messages(records));
            String after = ds.toString();
            assertFalse(after.contains(SECRET), after);
            assertTrue(after.contains("password=****"), after);
            for (LogRecord r : records) {
                assertFalse(r.getMessage().contains(SECRET), r.getMessage());
                if (r.getThrown() != null) {
                    assertFalse(stackTrace(r.getThrown()).contains(SECRET));
                }
            }

            // Reflection errors name the setter, never the value.
            AffinityDataSource noSetter = withSecretPassword(ThrowingUrlSetter.class.getName());
            noSetter.setNodeUrls(Map.of("A", "jdbc:postgresql://h/db?password=" + SECRET));
            e = assertThrows(SQLException.class, noSetter::getConnection);
            assertTrue(e.getMessage().contains("setUrl"), e.getMessage());
            assertFalse(stackTrace(e).contains(SECRET), stackTrace(e));

            AffinityDataSource throwing = withSecretPassword(EchoingPasswordSetter.class.getName());
            throwing.setUrlTemplate("jdbc:x:{instance}");
            e = assertThrows(SQLException.class, throwing::getConnection);
            assertTrue(e.getMessage().contains("setPassword"), e.getMessage());
            assertFalse(stackTrace(e).contains(SECRET), stackTrace(e));

            AffinityDataSource missing = withSecretPassword("com.example.Missing");
            missing.setUrlTemplate("jdbc:x:{instance}?password=" + SECRET);
            e = assertThrows(SQLException.class, missing::getConnection);
            assertFalse(stackTrace(e).contains(SECRET), stackTrace(e));
            assertFalse(missing.toString().contains(SECRET), missing.toString());
        }
    }

    private static String messages(List<LogRecord> records) {
        List<String> m = new ArrayList<>();
        records.forEach(r -> m.add(r.getMessage()));
        return m.toString();
    }

    private static String stackTrace(Throwable t) {
        StringWriter w = new StringWriter();
        t.printStackTrace(new PrintWriter(w));
        return w.toString();
    }

    /** A DataSource class whose URL setter throws. */
    public static final class ThrowingUrlSetter extends org.postgresql.ds.PGSimpleDataSource {
        private static final long serialVersionUID = 1L;

        @Override
        public void setUrl(String url) {
            throw new UnsupportedOperationException();
        }
    }

    /** A DataSource class whose password setter echoes the value in its exception. */
    public static final class EchoingPasswordSetter extends org.postgresql.ds.PGSimpleDataSource {
        private static final long serialVersionUID = 1L;

        @Override
        public void setUrl(String url) {}

        @Override
        public void setPassword(String password) {
            throw new IllegalArgumentException("bad password " + password);
        }
    }
}
