package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.test.LogCapture;
import java.sql.SQLException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.logging.Level;
import javax.sql.DataSource;
import javax.sql.XADataSource;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;
import org.postgresql.xa.PGXADataSource;

/**
 * The configuration both data sources share (AbstractAffinityDataSource): one set of setters,
 * sealed at the start, and a WARNING naming the data source for each setting another overrides.
 * No node is contacted: the nodes are data source objects whose start opens no connection.
 */
class DataSourceConfigTest {
    private static final List<String> NODES = List.of("N1", "N2");

    private static <T> Map<String, T> byNode(java.util.function.Supplier<T> make) {
        Map<String, T> m = new LinkedHashMap<>();
        NODES.forEach(n -> m.put(n, make.get()));
        return m;
    }

    /** Cluster.Builder's setters live in a package-private base: chains must still compile out here. */
    private static Cluster.Builder builder(String name) {
        Cluster.Builder b = Cluster.builder().name(name).nodes(NODES).policy("random");
        return b.heartbeatInterval(java.time.Duration.ofSeconds(10));
    }

    /**
     * An app server may call {@code CommonDataSource.setLoginTimeout} again after the start with the value
     * it gave before (HikariDataSource never refuses it): that is no change, so no error; another value would
     * apply to no connection and stays a clear error. Both data sources, before their start, after it, closed.
     */
    @Test
    void aLateSetLoginTimeoutWithTheValueInForceIsANoOpAndAnotherValueAClearError() throws SQLException {
        AffinityDataSource ds = new AffinityDataSource();
        AffinityXADataSource xa = new AffinityXADataSource();
        try (ds; xa) {
            ds.setConfig("name = late-login; nodes = N1, N2");
            ds.setUrlTemplate("jdbc:postgresql://127.0.0.1:1/{instance}");
            xa.setConfig("name = late-login-xa; nodes = N1, N2");
            xa.setNodeXADataSources(byNode(PGXADataSource::new));
            for (AbstractAffinityDataSource<?> d : List.of(ds, xa)) {
                d.setHeartbeatIntervalMillis(0);
                d.setRegisterMBean(false);
                d.setLoginTimeout(7);
                d.setLoginTimeout(7);
                d.init();
                d.setLoginTimeout(7); // what an app server repeats: no change
                assertEquals(7, d.getLoginTimeout());
                IllegalStateException e = assertThrows(IllegalStateException.class, () -> d.setLoginTimeout(3));
                assertTrue(e.getMessage().contains("loginTimeout") && e.getMessage().contains("7 s"), e.getMessage());
                assertEquals(7, d.getLoginTimeout(), "unchanged");
                assertThrows(IllegalStateException.class, () -> d.setHeartbeatIntervalMillis(0),
                        "bean setters stay sealed whatever the value, as HikariConfig's");
            }
        }
        ds.setLoginTimeout(7);
        assertThrows(IllegalStateException.class, () -> ds.setLoginTimeout(0), "closed");
    }

    /**
     * -1 means "the config's heartbeat.interval" and 0 "no heartbeat": any other negative value is a typo,
     * refused naming the property (as HikariConfig refuses a negative timeout), in the setter and through
     * the JNDI factory, rather than silently taken as -1.
     */
    @Test
    void aNullNodeFailureSqlStatesIsRefusedNamingThePropertyAndAnEmptyOneMeansNone() {
        for (AbstractAffinityDataSource<?> d : List.of(new AffinityDataSource(), new AffinityXADataSource())) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> d.setNodeFailureSqlStates(null), "null, not a NullPointerException from inside");
            assertTrue(e.getMessage().contains("nodeFailureSqlStates"), e.getMessage());
            assertEquals("08,57P02,57P03", d.getNodeFailureSqlStates(), "unchanged");
            d.setNodeFailureSqlStates(" , ");
            assertEquals("", d.getNodeFailureSqlStates(), "empty: no SQLState counts");
        }
    }

    @Test
    void aNegativeHeartbeatIntervalOtherThanMinusOneIsRefusedNamingTheProperty() {
        for (AbstractAffinityDataSource<?> d : List.of(new AffinityDataSource(), new AffinityXADataSource())) {
            d.setHeartbeatIntervalMillis(-1);
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> d.setHeartbeatIntervalMillis(-5), "-5 taken as -1");
            assertTrue(e.getMessage().contains("heartbeatIntervalMillis") && e.getMessage().contains("-5"),
                    e.getMessage());
            assertEquals(-1, d.getHeartbeatIntervalMillis(), "unchanged");
        }
        Map<String, String> attrs = new LinkedHashMap<>();
        attrs.put("config", "name = negative-hb; nodes = N1, N2");
        attrs.put("urlTemplate", "jdbc:postgresql://127.0.0.1:1/{instance}");
        attrs.put("registerMBean", "false");
        attrs.put("heartbeatIntervalMillis", "-5");
        SQLException e = assertThrows(SQLException.class, () -> AffinityDataSourceFactory.create(attrs, false));
        assertTrue(e.getMessage().startsWith("attribute `heartbeatIntervalMillis`: "), e.getMessage());
    }

    @Test
    void severalNodeSourcesAreWarnedAboutWithTheDataSourcesName() throws SQLException {
        try (LogCapture log = new LogCapture(); AffinityDataSource ds = new AffinityDataSource()) {
            ds.setConfig("name = warned; nodes = N1, N2");
            ds.setNodeDataSources(byNode(PGSimpleDataSource::new));
            ds.setUrlTemplate("jdbc:postgresql://127.0.0.1:1/{instance}");
            ds.setUser("scott");
            ds.setLoginTimeout(5);
            ds.setHeartbeatIntervalMillis(0);
            ds.setRegisterMBean(false);
            ds.init();
            List<String> warnings = log.at(Level.WARNING);
            assertTrue(warnings.contains("AffinityDataSource warned: several node sources are set (nodeDataSources,"
                    + " urlTemplate): nodeDataSources is used, urlTemplate ignored"), log.all());
            assertTrue(warnings.contains("AffinityDataSource warned: user/password, loginTimeout only apply to node"
                    + " URLs, and the nodes come from nodeDataSources: ignored"), log.all());
            assertTrue(log.at(Level.INFO).contains("AffinityDataSource warned: nodes [N1, N2], no heartbeat"),
                    log.all());
            assertTrue(ds.getNodeDataSource("N2") instanceof PGSimpleDataSource, "the given node data sources won");
        }
        try (LogCapture log = new LogCapture(); AffinityXADataSource xa = new AffinityXADataSource();
                Cluster shared = builder("warned-xa").build()) {
            xa.setCluster(shared);
            xa.setConfig("nodes = N1, N2");
            xa.setNodeXADataSources(byNode(PGXADataSource::new));
            xa.setNodeJndiNames(Map.of("N1", "java:comp/env/n1", "N2", "java:comp/env/n2"));
            xa.setHeartbeatIntervalMillis(0);
            xa.setRegisterMBean(false);
            xa.init();
            List<String> warnings = log.at(Level.WARNING);
            assertTrue(warnings.contains("AffinityXADataSource warned-xa: several node sources are set"
                    + " (nodeXADataSources, nodeJndiNames): nodeXADataSources is used, nodeJndiNames ignored"),
                    log.all());
            assertTrue(warnings.contains("AffinityXADataSource warned-xa: both cluster and config are set: the given"
                    + " cluster is used, config ignored"), log.all());
            assertEquals(shared, xa.getCluster());
        }
    }

    /**
     * An app server's own threads may have a context class loader that sees neither the
     * library nor the driver: WildFly's recovery thread has its transaction manager's module
     * (org.jboss.jts), and after a restart it is the first to use an XA data source. The
     * library and the driver live in one module then, so the library's own loader sees the
     * driver. (Found in the real WildFly: recovery failed with ClassNotFoundException
     * org.postgresql.xa.PGXADataSource from Module "org.jboss.jts", every pass, and left the
     * crashed server's in-doubt branches on the node.)
     */
    @Test
    void nodeClassesTheThreadsLoaderCannotSeeLoadThroughTheLibrarysOwn() throws Exception {
        Thread t = Thread.currentThread();
        ClassLoader before = t.getContextClassLoader();
        try (java.net.URLClassLoader blind =
                new java.net.URLClassLoader(new java.net.URL[0], ClassLoader.getPlatformClassLoader())) {
            assertThrows(ClassNotFoundException.class, () -> blind.loadClass("org.postgresql.xa.PGXADataSource"));
            t.setContextClassLoader(blind);
            try (AffinityXADataSource xa = new AffinityXADataSource()) {
                xa.setConfig("name = blind-xa; nodes = N1, N2");
                xa.setUrlTemplate("jdbc:postgresql://127.0.0.1:1/{instance}");
                xa.setXaDataSourceClassName("org.postgresql.xa.PGXADataSource");
                xa.setHeartbeatIntervalMillis(0);
                xa.setRegisterMBean(false);
                xa.init();
                assertTrue(xa.getNodeXADataSource("N1") instanceof PGXADataSource);
            }
            try (AffinityDataSource ds = new AffinityDataSource()) {
                ds.setConfig("name = blind; nodes = N1, N2");
                ds.setUrlTemplate("jdbc:postgresql://127.0.0.1:1/{instance}");
                ds.setDataSourceClassName("org.postgresql.ds.PGSimpleDataSource");
                ds.setHeartbeatIntervalMillis(0);
                ds.setRegisterMBean(false);
                ds.init();
                assertTrue(ds.getNodeDataSource("N2") instanceof PGSimpleDataSource);
            }
        } finally {
            t.setContextClassLoader(before);
        }
    }

    @Test
    void oneConfigurationNoWarnings() throws SQLException {
        try (LogCapture log = new LogCapture(); AffinityDataSource ds = new AffinityDataSource()) {
            ds.setConfig("name = quiet; nodes = N1, N2");
            ds.setUrlTemplate("jdbc:postgresql://127.0.0.1:1/{instance}");
            ds.setNodeUrls(Map.of("N1", "jdbc:postgresql://127.0.0.1:1/one"));
            ds.setUser("scott");
            ds.setHeartbeatIntervalMillis(0);
            ds.setRegisterMBean(false);
            ds.init();
            assertEquals(List.of(), log.at(Level.WARNING), "node URLs over a template is documented, not a conflict");
        }
    }

    @Test
    void bothDataSourcesShareTheSettersAndSealThemAtTheStart() throws SQLException {
        AffinityDataSource ds = new AffinityDataSource();
        AffinityXADataSource xa = new AffinityXADataSource();
        List<AbstractAffinityDataSource<?>> both = List.of(ds, xa);
        ds.setNodeDataSources(byNode(PGSimpleDataSource::new));
        xa.setNodeXADataSources(byNode(PGXADataSource::new));
        for (AbstractAffinityDataSource<?> d : both) {
            d.setConfig("name = sealed-" + d.getClass().getSimpleName() + "; nodes = N1, N2");
            d.setHeartbeatIntervalMillis(0);
            d.setNodeFailureSqlStates("08, 57P02");
            d.setRegisterMBean(false);
            assertEquals("08,57P02", d.getNodeFailureSqlStates());
            assertEquals(0, d.getHeartbeatIntervalMillis());
            d.init();
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> d.setUser("x"));
            assertTrue(e.getMessage().startsWith(d.getClass().getSimpleName() + " sealed-"), e.getMessage());
            assertThrows(IllegalStateException.class, () -> d.setConfig("nodes = N1"));
            d.close();
            assertTrue(d.isClosed());
            SQLException closed = assertThrows(SQLException.class, d instanceof AffinityDataSource
                    ? ((AffinityDataSource) d)::getConnection : ((AffinityXADataSource) d)::getXAConnection);
            assertEquals("08003", closed.getSQLState());
            assertTrue(closed.getMessage().contains("is closed"), closed.getMessage());
        }
        DataSource unusedDs = ds;
        XADataSource unusedXa = xa;
        // Closed: no longer a wrapper for its cluster, whose unwrap answers 08003.
        assertTrue(!unusedDs.isWrapperFor(Cluster.class) && unusedXa.getLoginTimeout() == 0);
    }
    @Test
    void anEmptyOrBlankNodeUrlFailsTheStartNamingItsNode() {
        for (String blank : new String[] {"", "  "}) {
            AffinityDataSource ds = withNodeUrls("name = blank-url; nodes = RAC1, RAC2",
                    "RAC1", "jdbc:postgresql://127.0.0.1:1/x", "RAC2", blank);
            try (ds) {
                java.sql.SQLException e = org.junit.jupiter.api.Assertions.assertThrows(java.sql.SQLException.class,
                        ds::init);
                org.junit.jupiter.api.Assertions.assertTrue(e.getMessage().contains("RAC2")
                        && e.getMessage().contains("empty URL"), e.getMessage());
            }
        }
    }

    /**
     * A node (or a property) given twice, in any case, is a mistake the core refuses in its own config ("given
     * more than once"); a node list took the last entry silently, so a copy-pasted `RAC1=` meant for RAC3 sent
     * RAC1's work to RAC3's server.
     */
    @Test
    void aNodeGivenTwiceInANodeListOrMapIsRefusedNamingIt() {
        AffinityDataSource ds = new AffinityDataSource();
        for (String list : new String[] {"RAC1=jdbc:postgresql://h1/x | RAC2=jdbc:postgresql://h2/x | RAC1=jdbc:postgresql://h3/x",
                "RAC1=jdbc:postgresql://h1/x | RAC2=jdbc:postgresql://h2/x | rac1=jdbc:postgresql://h3/x"}) {
            IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                    () -> ds.setNodeUrlList(list), list);
            assertTrue(e.getMessage().contains("nodeUrlList") && e.getMessage().contains("more than once")
                    && e.getMessage().toUpperCase(java.util.Locale.ROOT).contains("RAC1"), e.getMessage());
        }
        IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                () -> ds.setDataSourcePropertyList("maximumPoolSize=10 | connectionTimeout=2000 | maximumPoolSize=20"));
        assertTrue(e.getMessage().contains("maximumPoolSize"), e.getMessage());
        ds.close();

        AffinityDataSource map = withNodeUrls("name = twice-url; nodes = RAC1, RAC2",
                "RAC1", "jdbc:postgresql://127.0.0.1:1/x", "RAC2", "jdbc:postgresql://127.0.0.1:2/x",
                "rac1", "jdbc:postgresql://127.0.0.1:3/x");
        try (map) {
            java.sql.SQLException se = org.junit.jupiter.api.Assertions.assertThrows(java.sql.SQLException.class,
                    map::init);
            assertTrue(se.getMessage().contains("RAC1") && se.getMessage().contains("rac1"), se.getMessage());
        }
    }

    /**
     * A data source of {@code config} whose node URLs are set as a map ({@code setNodeUrls}) of the
     * name, URL pairs in their order; no heartbeat, no MBean, not started.
     */
    private static AffinityDataSource withNodeUrls(String config, String... nameUrlPairs) {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig(config);
        java.util.Map<String, String> urls = new java.util.LinkedHashMap<>();
        for (int i = 0; i < nameUrlPairs.length; i += 2) {
            urls.put(nameUrlPairs[i], nameUrlPairs[i + 1]);
        }
        ds.setNodeUrls(urls);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        return ds;
    }
}
