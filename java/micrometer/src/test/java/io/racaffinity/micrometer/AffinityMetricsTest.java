package io.racaffinity.micrometer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.jdbc.SessionScope;
import io.racaffinity.testsupport.Await;
import io.racaffinity.testsupport.PgNodesScript;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The binder against 3 local PostgreSQL nodes (java/run_module_tests.sh starts them and
 * exports RACAFF_NODEi_PORT): the pool metrics move as connections are borrowed, held,
 * waited for and timed out, the affinity counters as requests are routed, and a node's
 * state and its sessions' re-pins when the node is killed (SIGKILL, pgnodes kill).
 */
class AffinityMetricsTest {
    static final String NAME = "metrics";
    AffinityDataSource ds;
    MeterRegistry registry;
    String[] nodes = new String[3];

    static int port(int i) {
        String p = System.getenv("RACAFF_NODE" + i + "_PORT");
        if (p == null) {
            fail("RACAFF_NODE" + i + "_PORT is not set: run java/run_module_tests.sh java/micrometer");
        }
        return Integer.parseInt(p);
    }

    @BeforeEach
    void start() throws Exception {
        for (int i = 1; i <= 3; i++) {
            nodes[i - 1] = Integer.toString(port(i));
        }
        ds = dataSource(NAME);
        registry = new SimpleMeterRegistry();
        new AffinityMetrics(ds).bindTo(registry);
    }

    AffinityDataSource dataSource(String name) {
        AffinityDataSource d = new AffinityDataSource();
        // Node names are the ports, so the URL template places them and inet_server_port() names them.
        d.setConfig("name = " + name + "; nodes = " + String.join(", ", nodes)
                + "; policy = round_robin; health.eject_after_failures = 1");
        d.setUrlTemplate("jdbc:postgresql://127.0.0.1:{instance}/postgres?connectTimeout=2");
        d.setDataSourceClassName("com.zaxxer.hikari.HikariDataSource");
        d.setDataSourcePropertyList("maximumPoolSize=2 | minimumIdle=1 | connectionTimeout=500");
        d.setUser("postgres");
        d.setHeartbeatIntervalMillis(1000);
        d.setRegisterMBean(false);
        return d;
    }

    @AfterEach
    void stop() throws Exception {
        ds.close();
        PgNodesScript.run("restart", "3");
    }

    double sum(String name, String... tags) {
        return registry.find(name).tags(tags).meters().stream().mapToDouble(AffinityMetricsTest::value).sum();
    }

    static double value(Meter m) {
        if (m instanceof Timer t) {
            return t.count();
        }
        double v = 0;
        for (var ms : m.measure()) {
            v += ms.getValue();
        }
        return v;
    }

    static boolean await(BooleanSupplier c) throws InterruptedException {
        return Await.until(Duration.ofSeconds(15), Duration.ofMillis(50), c);
    }

    /** The binder reads the core at most every 100 ms (one read per scrape): let a new read happen. */
    static void settle() throws InterruptedException {
        System.gc(); // and the meters survive collections (Micrometer holds their state objects weakly)
        Thread.sleep(150);
    }

    static int serverPort(Connection c) throws SQLException {
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("select inet_server_port()")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    String pool(int i) {
        return NAME + "-" + nodes[i - 1];
    }

    @Test
    void poolMetricsCarryTheOpenTelemetryNamesAndMoveWithTraffic() throws Exception {
        for (int i = 0; i < 30; i++) {
            try (Connection c = ds.getConnection()) {
                serverPort(c);
            }
        }
        assertEquals(new TreeSet<>(List.of(pool(1), pool(2), pool(3))),
                registry.find("db.client.connection.max").meters().stream()
                        .map(m -> m.getId().getTag("db.client.connection.pool.name"))
                        .collect(Collectors.toCollection(TreeSet::new)), "one pool name per node");
        for (int i = 1; i <= 3; i++) {
            String p = pool(i);
            // Round robin: 10 requests per node; the heartbeat's probes borrow too.
            assertTrue(sum("db.client.connection.use_time", "db.client.connection.pool.name", p) >= 10, p);
            assertTrue(sum("db.client.connection.wait_time", "db.client.connection.pool.name", p) >= 10, p);
            assertEquals(2, sum("db.client.connection.max", "db.client.connection.pool.name", p));
            assertEquals(1, registry.find("db.client.connection.create_time")
                    .tags("db.client.connection.pool.name", p).meters().size(), p);
        }
        settle();
        assertEquals(30, sum("racaffinity.node.picks", "racaffinity.cluster", NAME));

        // Two connections held on node 1's pool: used 2 (HikariCP refreshes its counts each second).
        DataSource pool1 = ds.getNodeDataSource(nodes[0]);
        String p1 = pool(1);
        Connection a = pool1.getConnection();
        Connection b = pool1.getConnection();
        assertTrue(await(() -> sum("db.client.connection.count", "db.client.connection.pool.name", p1,
                "db.client.connection.state", "used") == 2), "2 used");
        assertEquals(0, sum("db.client.connection.count", "db.client.connection.pool.name", p1,
                "db.client.connection.state", "idle"));
        // HikariCP's first connection (its fail-fast check) comes before the tracker; the second is timed.
        assertTrue(sum("db.client.connection.create_time", "db.client.connection.pool.name", p1) >= 1);
        // A third request waits (pending), then times out after connectionTimeout.
        CompletableFuture<Void> third = CompletableFuture.runAsync(() -> {
            try (Connection c = pool1.getConnection()) {
                fail("the pool is full");
            } catch (SQLException expected) {
                // timed out
            }
        });
        assertTrue(await(() -> sum("db.client.connection.pending_requests", "db.client.connection.pool.name", p1)
                == 1), "1 pending request");
        third.get(10, TimeUnit.SECONDS);
        // At least the third request (a heartbeat probe of the full pool may time out too).
        assertTrue(sum("db.client.connection.timeouts", "db.client.connection.pool.name", p1) >= 1);
        a.close();
        b.close();
        assertTrue(await(() -> sum("db.client.connection.count", "db.client.connection.pool.name", p1,
                "db.client.connection.state", "used") == 0
                && sum("db.client.connection.count", "db.client.connection.pool.name", p1,
                        "db.client.connection.state", "idle") == 2), "returned: 0 used, 2 idle");
    }

    @Test
    void affinityCountersAndNodeStatesMoveWhenANodeIsKilled() throws Exception {
        // 6 sessions, 3 requests each: placements, then hits.
        int[] portOf = new int[6];
        for (int round = 0; round < 3; round++) {
            for (int s = 0; s < 6; s++) {
                try (SessionScope scope = ds.withSession("session-" + s); Connection c = ds.getConnection()) {
                    portOf[s] = serverPort(c);
                }
            }
        }
        settle();
        assertEquals(6, sum("racaffinity.scope.placements", "racaffinity.scope", "session"));
        assertEquals(12, sum("racaffinity.scope.hits", "racaffinity.scope", "session"));
        assertEquals(6, sum("racaffinity.scope.live", "racaffinity.scope", "session"));
        assertEquals(18, sum("racaffinity.node.picks"));
        assertEquals(12, sum("racaffinity.node.affinity_hits"));
        assertEquals(3, sum("racaffinity.node.status", "racaffinity.node.state", "up"), "3 nodes up");
        // The name of 0.2 and before, served one release more (deprecated).
        assertEquals(3, sum("racaffinity.node.state", "racaffinity.node.state.value", "up"), "deprecated name");

        PgNodesScript.run("kill", "3");
        String dead = nodes[2];
        assertTrue(await(() -> sum("racaffinity.node.status", "racaffinity.node", dead,
                "racaffinity.node.state", "down") == 1), "the heartbeat finds node 3 down");
        assertEquals(0, sum("racaffinity.node.status", "racaffinity.node", dead, "racaffinity.node.state",
                "up"));
        assertEquals(2, sum("racaffinity.node.status", "racaffinity.node.state", "up"));
        assertEquals(2, sum("racaffinity.node.state", "racaffinity.node.state.value", "up"), "deprecated name");

        settle();
        double picksOfDead = sum("racaffinity.node.picks", "racaffinity.node", dead);
        long movedSessions = 0;
        for (int s = 0; s < 6; s++) {
            try (SessionScope scope = ds.withSession("session-" + s); Connection c = ds.getConnection()) {
                int now = serverPort(c);
                assertTrue(now != Integer.parseInt(dead), "no request on the dead node");
                if (portOf[s] == Integer.parseInt(dead)) {
                    movedSessions++;
                }
            }
        }
        assertTrue(movedSessions >= 1, "round robin placed sessions on node 3 too");
        settle();
        assertEquals(movedSessions, sum("racaffinity.scope.repins", "racaffinity.scope", "session"),
                "each session of the dead node re-pinned once");
        assertEquals(movedSessions, sum("racaffinity.node.repins"), "re-pins counted on the nodes they moved to");
        assertEquals(0, sum("racaffinity.node.repins", "racaffinity.node", dead));
        assertEquals(picksOfDead, sum("racaffinity.node.picks", "racaffinity.node", dead), "no pick of the dead node");
    }

    @Test
    void aClosedDataSourceLeavesNoPoolMeters() throws Exception {
        try (Connection c = ds.getConnection()) {
            serverPort(c);
        }
        assertTrue(registry.find("db.client.connection.max").meters().size() >= 1, "the pool that served");
        ds.close();
        // A closed HikariCP pool still answers its configured maximum and minimum for as long
        // as something holds its stats, so the meters would show a pool that is gone (and keep
        // it from being collected); HikariCP's own Micrometer tracker removes them on close.
        List<String> left = registry.getMeters().stream().map(Meter::getId)
                .filter(id -> id.getName().startsWith("db.client.connection."))
                .map(id -> id.getName() + id.getTags()).toList();
        assertEquals(List.of(), left, "pool meters after close");
    }

    @Test
    void theCoreMetersOfAClosedDataSourceReadNaN() throws Exception {
        try (Connection c = ds.getConnection()) {
            serverPort(c);
        }
        settle();
        ds.close();
        settle();
        // docs/java-ecosystem.md: no value rather than a made-up one (AffinityOpenTelemetry
        // records no point). A 0 for every state would read as a node neither up nor down.
        List<String> read = registry.getMeters().stream()
                .filter(m -> m.getId().getName().startsWith("racaffinity.") && !Double.isNaN(value(m)))
                .map(m -> m.getId().getName() + m.getId().getTags() + "=" + value(m)).toList();
        assertEquals(List.of(), read, "racaffinity meters with a value after close");
    }

    @Test
    void aClosedDataSourceLeavesNoOpenTelemetryPoolPoints() throws Exception {
        AffinityDataSource other = dataSource(NAME + "-otel");
        CollectingReader reader = new CollectingReader();
        try (SdkMeterProvider provider = SdkMeterProvider.builder().registerMetricReader(reader).build();
                AffinityOpenTelemetry otel = AffinityOpenTelemetry.install(other, provider)) {
            try (Connection c = other.getConnection()) {
                serverPort(c);
            }
            assertTrue(reader.points("db.client.connection.max").size() >= 1, "the pool that served");
            other.close();
            for (String name : List.of("db.client.connection.count", "db.client.connection.max",
                    "db.client.connection.idle.min", "db.client.connection.pending_requests")) {
                assertEquals(List.of(), reader.points(name), name + " after close");
            }
        } finally {
            other.close();
        }
    }

    @Test
    void aPoolWithATrackerAlreadyIsAClearError() throws Exception {
        MeterRegistry other = new SimpleMeterRegistry();
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> new AffinityMetrics(ds).bindTo(other));
        assertTrue(e.getMessage().contains(pool(1)), e.getMessage());
    }
}
