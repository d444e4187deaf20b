package io.racaffinity.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.racaffinity.NodeState;
import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.testsupport.Await;
import io.racaffinity.testsupport.PgNodesScript;
import java.time.Duration;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.function.BooleanSupplier;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.health.actuate.endpoint.HealthDescriptor;
import org.springframework.boot.health.actuate.endpoint.HealthEndpoint;
import org.springframework.boot.health.actuate.endpoint.IndicatedHealthDescriptor;
import org.springframework.boot.health.contributor.Status;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A Spring Boot application with the starter, Actuator and spring-boot-starter-jdbc,
 * configured only by {@code racaffinity.*} properties, against the 3 local PostgreSQL nodes
 * (java/run_module_tests.sh starts them and exports RACAFF_NODEi_PORT); a node is killed
 * (SIGKILL, pgnodes kill) and restarted.
 */
@SpringBootTest(properties = {
    "racaffinity.data-source-properties.maximumPoolSize=2",
    "racaffinity.data-source-properties.connectionTimeout=2000",
    "racaffinity.username=postgres",
    "racaffinity.password=not-used-S3cret",
    "racaffinity.heartbeat-interval-millis=300",
    "racaffinity.register-mbean=false",
    "racaffinity.settings.policy=round_robin",
    "management.endpoint.health.show-details=always",
})
class RacAffinityStarterTest {
    @SpringBootApplication
    static class App {}

    static String port(int i) {
        String p = System.getenv("RACAFF_NODE" + i + "_PORT");
        if (p == null) {
            fail("RACAFF_NODE" + i + "_PORT is not set: run java/run_module_tests.sh java/spring-boot-starter");
        }
        return p;
    }

    @DynamicPropertySource
    static void nodes(DynamicPropertyRegistry r) {
        r.add("racaffinity.config", () -> "name = boot; nodes = N1, N2, N3");
        for (int i = 1; i <= 3; i++) {
            String url = "jdbc:postgresql://127.0.0.1:" + port(i) + "/postgres";
            r.add("racaffinity.node-urls.N" + i, () -> url);
        }
    }

    @Autowired
    DataSource dataSource;

    @Autowired
    JdbcTemplate jdbc;

    @Autowired
    HealthEndpoint health;

    static boolean await(BooleanSupplier c) throws InterruptedException {
        return Await.until(Duration.ofSeconds(20), Duration.ofMillis(100), c);
    }

    @SuppressWarnings("unchecked")
    String nodeStatus(String node) {
        IndicatedHealthDescriptor d = (IndicatedHealthDescriptor) health.healthForPath("racaffinity");
        Map<String, Object> nodes = (Map<String, Object>) d.getDetails().get("nodes");
        return (String) ((Map<String, Object>) nodes.get(node)).get("status");
    }

    Status component() {
        return health.healthForPath("racaffinity").getStatus();
    }

    @Test
    void propertiesMakeTheAffinityDataSourceAndHealthFollowsTheNodes() throws Exception {
        AffinityDataSource ds = assertInstanceOf(AffinityDataSource.class, dataSource,
                "the starter's bean, not Spring Boot's own DataSource");
        // Spring's JdbcTemplate over it: round robin over the three servers (their own ports).
        Set<Integer> ports = new HashSet<>();
        for (int i = 0; i < 9; i++) {
            ports.add(jdbc.queryForObject("select inet_server_port()", Integer.class));
        }
        assertEquals(Set.of(Integer.valueOf(port(1)), Integer.valueOf(port(2)), Integer.valueOf(port(3))), ports);

        HealthDescriptor root = health.health();
        assertEquals(Status.UP, root.getStatus());
        assertEquals(Status.UP, component());
        assertEquals("UP", nodeStatus("N3"));

        PgNodesScript.run("kill", "3");
        try {
            assertTrue(await(() -> "DOWN".equals(nodeStatus("N3"))), "the heartbeat finds N3 down");
            assertEquals(Status.UP, component(), "the component stays up while N1 and N2 serve");
            assertEquals(Status.UP, health.health().getStatus(), "and so does the application");
            for (int i = 0; i < 6; i++) {
                int p = jdbc.queryForObject("select inet_server_port()", Integer.class);
                assertTrue(p != Integer.parseInt(port(3)), "no request on the dead node");
            }

            // No node taking work (the other two marked down by the operator): the component is down.
            ds.getCluster().setNodeState("N1", NodeState.DOWN);
            ds.getCluster().setNodeState("N2", NodeState.DOWN);
            assertEquals(Status.DOWN, component());
            assertEquals(Status.DOWN, health.health().getStatus());
            ds.getCluster().setNodeState("N1", NodeState.UP);
            ds.getCluster().setNodeState("N2", NodeState.UP);
            assertEquals(Status.UP, health.health().getStatus());
        } finally {
            PgNodesScript.run("restart", "3");
        }
        assertTrue(await(() -> "UP".equals(nodeStatus("N3"))), "N3 is up again after its restart");
    }
}
