package io.racaffinity.micrometer;

import static io.racaffinity.micrometer.AffinityMetricsTest.port;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.micrometer.core.instrument.MeterRegistry;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.racaffinity.Continuity.Refusal;
import io.racaffinity.Continuity.ReplayRefusedException;
import io.racaffinity.jdbc.AffinityDataSource;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The replay counters of {@link AffinityMetrics} and {@link AffinityOpenTelemetry}
 * (docs/java-ecosystem.md) against the 3 local nodes: a data source with replay on serves
 * {@code racaffinity.replay.*}, which follow its recoveries (a backend ended mid-transaction:
 * replayed elsewhere; the same after reading the node's port: refused, {@code results_differ});
 * one without replay serves none.
 */
class ReplayMetersTest {
    private AffinityDataSource ds;

    private static AffinityDataSource dataSource(String name, boolean replay) {
        AffinityDataSource ds = new AffinityDataSource();
        String nodes = port(1) + ", " + port(2) + ", " + port(3);
        ds.setConfig("name = " + name + "; nodes = " + nodes + "; policy = round_robin");
        ds.setUrlTemplate("jdbc:postgresql://127.0.0.1:{instance}/postgres?connectTimeout=2");
        ds.setDataSourceClassName("com.zaxxer.hikari.HikariDataSource");
        ds.setDataSourcePropertyList("maximumPoolSize=2 | minimumIdle=1 | connectionTimeout=2000");
        ds.setUser("postgres");
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        ds.setReplay(replay);
        return ds;
    }

    @AfterEach
    void close() {
        if (ds != null) {
            ds.close();
        }
    }

    private static int intOf(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) {
            rs.next();
            return rs.getInt(1);
        }
    }

    /** Ends the backend of {@code c} from a session of its own: its next statement fails (57P01). */
    private static void terminate(int port, int pid) throws SQLException {
        try (Connection admin = DriverManager.getConnection("jdbc:postgresql://127.0.0.1:" + port + "/postgres",
                "postgres", ""); PreparedStatement s = admin.prepareStatement("SELECT pg_terminate_backend(?, 5000)")) {
            s.setInt(1, pid);
            try (ResultSet rs = s.executeQuery()) {
                rs.next();
                assertTrue(rs.getBoolean(1));
            }
        }
    }

    /** The refusal an error carries: its cause, or a suppressed exception when the driver set a cause. */
    private static Refusal refusalOf(SQLException e) {
        if (e.getCause() instanceof ReplayRefusedException r) {
            return r.refusal();
        }
        for (Throwable t : e.getSuppressed()) {
            if (t instanceof ReplayRefusedException r) {
                return r.refusal();
            }
        }
        return null;
    }

    /** Every racaffinity.replay.* meter: name (with its refusal, if any) → value. */
    private static Map<String, Double> replayMeters(MeterRegistry registry) {
        Map<String, Double> m = new TreeMap<>();
        registry.getMeters().stream().filter(x -> x.getId().getName().startsWith("racaffinity.replay."))
                .forEach(x -> {
                    String refusal = x.getId().getTag(ReplayMeter.REFUSAL);
                    m.put(x.getId().getName() + (refusal == null ? "" : "{" + refusal + "}"),
                            AffinityMetricsTest.value(x));
                });
        return m;
    }

    private static Map<String, Double> expected(double replayed, double resultsDiffer) {
        Map<String, Double> m = new TreeMap<>();
        m.put("racaffinity.replay.replayed", replayed);
        m.put("racaffinity.replay.committed_already", 0.0);
        for (String r : new String[] {"not_recoverable", "not_replayable", "replayed_already", "outcome_unknown",
                "no_node"}) {
            m.put("racaffinity.replay.refused{" + r + "}", 0.0);
        }
        m.put("racaffinity.replay.refused{results_differ}", resultsDiffer);
        m.put("racaffinity.replay.outcome_checks", 0.0);
        m.put("racaffinity.replay.outcomes_forced", 0.0);
        return m;
    }

    @Test
    void theMicrometerCountersFollowTheRecoveries() throws Exception {
        MeterRegistry registry = new SimpleMeterRegistry();
        ds = dataSource("replay-meters", true);
        new AffinityMetrics(ds).bindTo(registry);
        recoveries(() -> replayMeters(registry));
    }

    @Test
    void theOpenTelemetryCountersFollowTheRecoveries() throws Exception {
        CollectingReader reader = new CollectingReader();
        ds = dataSource("replay-otel", true);
        try (SdkMeterProvider provider = SdkMeterProvider.builder().registerMetricReader(reader).build();
                AffinityOpenTelemetry otel = AffinityOpenTelemetry.install(ds, provider)) {
            recoveries(reader::replay);
        }
    }

    /** A replay, then a refusal ({@code results_differ}), each seen by {@code meters} as it ends. */
    private void recoveries(Supplier<Map<String, Double>> meters) throws Exception {
        assertEquals(expected(0, 0), meters.get());

        try (Connection c = ds.getConnection()) {
            int port = intOf(c, "SELECT inet_server_port()"); // auto-commit: not part of the replay
            int pid = intOf(c, "SELECT pg_backend_pid()");
            c.setAutoCommit(false);
            assertEquals(1, intOf(c, "SELECT 1"));
            terminate(port, pid);
            assertEquals(2, intOf(c, "SELECT 2"), "replayed on another node");
            c.commit();
        }
        assertEquals(expected(1, 0), meters.get());

        try (Connection c = ds.getConnection()) {
            int pid = intOf(c, "SELECT pg_backend_pid()");
            c.setAutoCommit(false);
            int port = intOf(c, "SELECT inet_server_port()"); // read in the transaction: the replay's differs
            terminate(port, pid);
            SQLException e = assertThrows(SQLException.class, () -> intOf(c, "SELECT 2"));
            assertEquals(Refusal.RESULTS_DIFFER, refusalOf(e), String.valueOf(e));
        }
        assertEquals(expected(1, 1), meters.get());
    }

    @Test
    void aDataSourceWithoutReplayServesNoReplayCounters() throws Exception {
        MeterRegistry registry = new SimpleMeterRegistry();
        ds = dataSource("replay-meters-off", false);
        new AffinityMetrics(ds).bindTo(registry);
        assertEquals(Map.of(), replayMeters(registry));
        ds.close();
        CollectingReader reader = new CollectingReader();
        ds = dataSource("replay-otel-off", false);
        try (SdkMeterProvider provider = SdkMeterProvider.builder().registerMetricReader(reader).build();
                AffinityOpenTelemetry otel = AffinityOpenTelemetry.install(ds, provider)) {
            assertEquals(Map.of(), reader.replay());
        }
    }
}
