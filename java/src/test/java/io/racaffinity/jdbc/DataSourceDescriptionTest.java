package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.RecoveryScope;
import io.racaffinity.Scope;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** What the data sources show of their configuration, and how the JNDI factory reads its attributes. */
class DataSourceDescriptionTest {
    static final String THIN = "RAC1=jdbc:oracle:thin:scott/tiger@//h1:1521/svc/RAC1"
            + " | RAC2=jdbc:oracle:thin:scott/tiger@h2:1521:orcl";

    @Test
    void oracleThinInlineCredentialsNeverAppearInToString() {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = thin; nodes = RAC1, RAC2");
        ds.setNodeUrlList(THIN);
        assertFalse(ds.toString().contains("tiger"), ds.toString());
        assertTrue(ds.toString().contains("scott/****@//h1:1521"), ds.toString());
        try (AffinityXADataSource xa = new AffinityXADataSource()) {
            xa.setConfig("name = thin; nodes = RAC1, RAC2");
            xa.setNodeUrlList(THIN);
            assertFalse(xa.toString().contains("tiger"), xa.toString());
            assertTrue(xa.toString().contains("scott/****@h2:1521:orcl"), xa.toString());
        }
    }

    /**
     * The two data sources describe one configuration alike: AffinityXADataSource's toString() left out the
     * dataSourceProperties (where a pool's settings and a driver's secrets go) and started differently
     * ({@code AffinityXADataSource[name, ...} where the other says {@code AffinityDataSource[cluster=name, ...}).
     * Secrets stay redacted in both: the property values, the URL's inline password, user and password.
     */
    @Test
    void bothDataSourcesShowTheirPropertiesAlikeWithSecretsRedacted() {
        String props = "loginTimeout=5 | password=hunter2 | sslpassword=hunter3 | user=scott";
        AffinityDataSource ds = new AffinityDataSource();
        try (AffinityXADataSource xa = new AffinityXADataSource()) {
            for (AbstractAffinityDataSource<?> d : List.of(ds, xa)) {
                d.setConfig("name = shown; nodes = RAC1, RAC2");
                d.setNodeUrlList(THIN);
                d.setDataSourceClassName("org.example.NodeDataSource");
                d.setDataSourcePropertyList(props);
                d.setUser("scott");
                d.setPassword("tiger2");
            }
            for (AbstractAffinityDataSource<?> d : List.of(ds, xa)) {
                String shown = d.toString();
                for (String secret : List.of("tiger", "hunter2", "hunter3", "=scott")) {
                    assertFalse(shown.contains(secret), secret + " shows: " + shown);
                }
                assertTrue(shown.contains("dataSourceProperties={loginTimeout=5, password=****, sslpassword=****,"
                        + " user=****}"), shown);
                assertTrue(shown.contains("credentials=<set>"), shown);
            }
            assertEquals(ds.toString().replace("AffinityDataSource[", "AffinityXADataSource[")
                    .replace("dataSourceClassName=", "xaDataSourceClassName="), xa.toString());
        } finally {
            ds.close();
        }
    }

    @Test
    void theFactoryReadsACapitalisedConfigAttributeLikeTheLowerCaseOne() throws Exception {
        Map<String, String> attrs = factoryAttributes();
        attrs.remove("nodes"); // named by the Config text
        attrs.put("Config", "name = factory-caps; nodes = RAC1, RAC2");
        attrs.put("transactionStrict", "true");
        try (AffinityXADataSource ds = (AffinityXADataSource) AffinityDataSourceFactory.create(attrs, true)) {
            Cluster c = ds.getCluster();
            assertEquals(List.of("RAC1", "RAC2"), c.nodeNames());
            assertEquals("factory-caps", c.name());
            assertTrue(c.isStrict(Scope.TRANSACTION), "the attribute key joins the Config text");
        }
    }

    /**
     * Every section's keys in camel case, as the factory's documentation promises of any core key: the
     * {@code recovery}, {@code local}, {@code locality} and {@code topology} sections were refused as "not a
     * config key".
     */
    @Test
    void theFactoryReadsEveryConfigSectionInCamelCase() throws Exception {
        Map<String, String> attrs = new LinkedHashMap<>();
        attrs.put("config", "name = factory-camel; nodes = RAC1, RAC2");
        attrs.put("xaDataSourceClassName", "org.postgresql.xa.PGXADataSource");
        attrs.put("nodeUrlList", "RAC1=jdbc:postgresql://127.0.0.1:1/a | RAC2=jdbc:postgresql://127.0.0.1:2/b");
        attrs.put("heartbeatIntervalMillis", "0");
        attrs.put("registerMBean", "false");
        attrs.put("recoveryScope", "database");
        attrs.put("localMachine", "m1");
        attrs.put("localZone", "z1");
        attrs.put("localitySpillPercent", "50");
        attrs.put("topologyFeedTimeout", "3s");
        try (AffinityXADataSource ds = (AffinityXADataSource) AffinityDataSourceFactory.create(attrs, true)) {
            assertEquals(RecoveryScope.DATABASE, ds.getCluster().recoveryScope());
        }
        attrs.put("recoveryScope", "instance");
        java.sql.SQLException e = assertThrows(java.sql.SQLException.class,
                () -> AffinityDataSourceFactory.create(attrs, true));
        assertTrue(e.getMessage().contains("recovery.scope"), "the core's message on the key: " + e.getMessage());
    }

    /**
     * {@code name} written as the core's key, like {@code nodes} or {@code policy}: Tomcat keeps a
     * {@code <Resource name=...>} as the JNDI name and never passes it, so an attribute {@code name} that reaches
     * the factory is the user's cluster name. It was dropped as a container attribute, and the cluster went
     * unnamed.
     */
    @Test
    void theFactoryTakesANameAttributeAsTheClustersName() throws Exception {
        Map<String, String> attrs = factoryAttributes();
        attrs.put("name", "factory-named");
        try (AffinityXADataSource ds = (AffinityXADataSource) AffinityDataSourceFactory.create(attrs, true)) {
            assertEquals("factory-named", ds.getCluster().name());
        }
        attrs.put("config", "name = twice; nodes = RAC1, RAC2");
        attrs.remove("nodes");
        java.sql.SQLException e = assertThrows(java.sql.SQLException.class,
                () -> AffinityDataSourceFactory.create(attrs, true));
        assertTrue(e.getMessage().contains("attribute `name`"), e.getMessage());
    }

    /**
     * A value the core refuses names the attribute as the user wrote it ({@code transactionStrict}, not only the
     * core's {@code transaction.strict}, a key that appears nowhere in their context.xml).
     */
    @Test
    void aConfigValueTheCoreRefusesNamesTheAttributeAsWritten() {
        Map<String, String> attrs = factoryAttributes();
        attrs.put("transactionStrict", "maybe");
        java.sql.SQLException e = assertThrows(java.sql.SQLException.class,
                () -> AffinityDataSourceFactory.create(attrs, true));
        assertTrue(e.getMessage().contains("attribute `transactionStrict`"), e.getMessage());
        assertTrue(e.getMessage().contains("transaction.strict") && e.getMessage().contains("maybe"),
                "the core's reason stays: " + e.getMessage());
        attrs.remove("transactionStrict");
        attrs.put("node.rac1.weight", "heavy");
        e = assertThrows(java.sql.SQLException.class, () -> AffinityDataSourceFactory.create(attrs, true));
        assertTrue(e.getMessage().contains("attribute `node.rac1.weight`"), e.getMessage());
    }

    /**
     * {@code create} takes any map (a properties file's entries, a container's attributes): an entry without a
     * name is refused as an unknown attribute is, saying so, not with an index error from the setter lookup.
     */
    @Test
    void aFactoryAttributeWithoutANameIsRefusedSayingSo() {
        for (String blank : new String[] {"", "  "}) {
            Map<String, String> attrs = factoryAttributes();
            attrs.put(blank, "x");
            java.sql.SQLException e = assertThrows(java.sql.SQLException.class,
                    () -> AffinityDataSourceFactory.create(attrs, true));
            assertTrue(e.getMessage().contains("attribute without a name"), e.getMessage());
        }
    }

    private static Map<String, String> factoryAttributes() {
        Map<String, String> attrs = new LinkedHashMap<>();
        attrs.put("nodes", "RAC1, RAC2");
        attrs.put("xaDataSourceClassName", "org.postgresql.xa.PGXADataSource");
        attrs.put("nodeUrlList", "RAC1=jdbc:postgresql://127.0.0.1:1/a | RAC2=jdbc:postgresql://127.0.0.1:2/b");
        attrs.put("heartbeatIntervalMillis", "0");
        attrs.put("registerMBean", "false");
        return attrs;
    }
}
