package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.test.LogCapture;
import io.racaffinity.test.Pools;
import io.racaffinity.test.Stubs;
import java.sql.SQLException;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

/** A failing partition-map loader's cause reaches every place the failure is reported. */
class PartitionMapLoaderErrorTest {
    static DataSource unused(String name) {
        return Stubs.proxy(DataSource.class, name, (p, m, a) -> {
            throw new UnsupportedOperationException(m.getName());
        });
    }

    @Test
    void aFailingLoadersCauseIsKeptInTheLogTheErrorTextAndTheCoresMetrics() throws Exception {
        Map<String, DataSource> nodes = new LinkedHashMap<>();
        nodes.put("RAC1", unused("RAC1"));
        nodes.put("RAC2", unused("RAC2"));
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = loader-cause; nodes = RAC1, RAC2; data.partitions = 4");
        ds.setNodeDataSources(nodes);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        ds.setPartitionMapLoader(() -> {
            throw new IllegalStateException("loading the partition map failed",
                    new SQLException("relation \"ucp_partition_map\" does not exist", "42P01"));
        });
        try (LogCapture log = new LogCapture(); ds) {
            ds.init();
            assertEquals(1, ds.getPartitionMapLoadFailures());
            String err = ds.getPartitionMapLoadError();
            assertTrue(err.contains("loading the partition map failed"), err);
            assertTrue(err.contains("42P01") && err.contains("does not exist"), "the cause is gone: " + err);
            String json = ds.getCluster().metricsJson();
            assertTrue(json.contains("42P01"), "the core's last error lacks the cause: " + json);
            // The upkeep's lines are written by a thread of their own.
            assertTrue(Pools.await(Duration.ofSeconds(10), () -> !warnings(log).isEmpty()), log.all());
            List<LogRecord> warnings = warnings(log);
            assertEquals(1, warnings.size(), log.all());
            Throwable thrown = warnings.get(0).getThrown();
            assertNotNull(thrown, "the WARNING record carries no Throwable: " + warnings.get(0).getMessage());
            assertTrue(thrown.getCause() instanceof SQLException, String.valueOf(thrown.getCause()));
            assertEquals("42P01", ((SQLException) thrown.getCause()).getSQLState());
        }
    }

    @Test
    void aLoaderThatThrowsAnErrorFailsOneLoadNotThePoolUpkeep() throws Exception {
        Map<String, DataSource> nodes = new LinkedHashMap<>();
        nodes.put("RAC1", unused("RAC1"));
        nodes.put("RAC2", unused("RAC2"));
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = loader-error; nodes = RAC1, RAC2; data.partitions = 4");
        ds.setNodeDataSources(nodes);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        ds.setPoolMaintenanceMillis(20);
        ds.setPartitionMapReloadMillis(50);
        java.util.concurrent.atomic.AtomicInteger calls = new java.util.concurrent.atomic.AtomicInteger();
        ds.setPartitionMapLoader(() -> {
            if (calls.incrementAndGet() == 2) {
                // The application's loader needs a class its deployment lacks.
                throw new NoClassDefFoundError("com/example/PartitionDao");
            }
            return Map.of(0, "RAC1");
        });
        try (LogCapture log = new LogCapture(); ds) {
            ds.init();
            assertTrue(Pools.await(Duration.ofSeconds(10), () -> calls.get() >= 3),
                    "the periodic loads went on after the failed one: " + calls.get() + " load(s)");
            assertEquals(1, ds.getPartitionMapLoadFailures(), "counted as a failed load");
            assertTrue(Pools.await(Duration.ofSeconds(10), () -> warnings(log).stream()
                    .anyMatch(r -> r.getMessage().contains("PartitionDao"))), log.all());
            long rounds = ds.upkeepRounds();
            assertTrue(Pools.await(Duration.ofSeconds(10), () -> ds.upkeepRounds() > rounds + 2),
                    "the pool upkeep goes on");
        }
    }

    private static List<LogRecord> warnings(LogCapture log) {
        return log.records().stream()
                .filter(r -> r.getLevel().equals(Level.WARNING) && r.getMessage().contains("partition map load"))
                .toList();
    }
}
