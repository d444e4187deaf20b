package io.racaffinity.micrometer;

import com.zaxxer.hikari.HikariDataSource;
import com.zaxxer.hikari.metrics.IMetricsTracker;
import com.zaxxer.hikari.metrics.PoolStats;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.metrics.DoubleHistogram;
import io.opentelemetry.api.metrics.LongCounter;
import io.opentelemetry.api.metrics.Meter;
import io.opentelemetry.api.metrics.ObservableLongMeasurement;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.ToIntFunction;
import javax.sql.DataSource;

/**
 * The OpenTelemetry connection-pool metrics of the HikariCP node pools of one {@link
 * AffinityOpenTelemetry}, through HikariCP's tracker hooks (as {@link HikariSupport} does
 * for Micrometer; no Micrometer type here, so either binder loads without the other's
 * library). Pool counts are observed from the {@link PoolStats} HikariCP hands each tracker.
 */
final class HikariOpenTelemetry {
    private final Map<String, PoolStats> stats = new ConcurrentHashMap<>();
    private final List<AutoCloseable> observables = new ArrayList<>();
    private final DoubleHistogram wait;
    private final DoubleHistogram use;
    private final DoubleHistogram create;
    private final LongCounter timeouts;
    private volatile boolean live = true;

    HikariOpenTelemetry(Meter meter) {
        wait = duration(meter, "db.client.connection.wait_time",
                "The time it took to obtain an open connection from the pool");
        use = duration(meter, "db.client.connection.use_time",
                "The time between borrowing a connection and returning it to the pool");
        create = duration(meter, "db.client.connection.create_time", "The time it took to create a new connection");
        timeouts = meter.counterBuilder("db.client.connection.timeouts").setUnit("{timeout}")
                .setDescription("The number of connection timeouts that have occurred trying to obtain a connection"
                        + " from the pool")
                .build();
        observables.add(meter.upDownCounterBuilder("db.client.connection.count").setUnit("{connection}")
                .setDescription("The number of connections that are currently in state described by the state attribute")
                .buildWithCallback(m -> stats.forEach((pool, s) -> {
                    m.record(s.getIdleConnections(), Attributes.of(AffinityOpenTelemetry.POOL, pool,
                            AffinityOpenTelemetry.STATE, "idle"));
                    m.record(s.getActiveConnections(), Attributes.of(AffinityOpenTelemetry.POOL, pool,
                            AffinityOpenTelemetry.STATE, "used"));
                })));
        level(meter, "db.client.connection.pending_requests", "{request}",
                "The number of current pending requests for an open connection", PoolStats::getPendingThreads);
        level(meter, "db.client.connection.max", "{connection}", "The maximum number of open connections allowed",
                PoolStats::getMaxConnections);
        level(meter, "db.client.connection.idle.min", "{connection}",
                "The minimum number of idle open connections allowed", PoolStats::getMinConnections);
    }

    static boolean isHikari(DataSource ds) {
        for (Class<?> c = ds.getClass(); c != null; c = c.getSuperclass()) {
            if (c.getName().equals("com.zaxxer.hikari.HikariDataSource")) {
                return true;
            }
        }
        return false;
    }

    private static DoubleHistogram duration(Meter meter, String name, String description) {
        return meter.histogramBuilder(name).setUnit("s").setDescription(description)
                .setExplicitBucketBoundariesAdvice(DurationBuckets.SECONDS).build();
    }

    private void level(Meter meter, String name, String unit, String description, ToIntFunction<PoolStats> f) {
        observables.add(meter.upDownCounterBuilder(name).setUnit(unit).setDescription(description)
                .buildWithCallback((ObservableLongMeasurement m) -> stats.forEach(
                        (pool, s) -> m.record(f.applyAsInt(s), Attributes.of(AffinityOpenTelemetry.POOL, pool)))));
    }

    void bind(DataSource ds) {
        HikariDataSource hikari = (HikariDataSource) ds;
        if (hikari.getMetricsTrackerFactory() != null || hikari.getMetricRegistry() != null) {
            throw new IllegalStateException("AffinityOpenTelemetry: node pool " + hikari.getPoolName()
                    + " already has a metrics tracker, and HikariCP takes one per pool (bound twice?)");
        }
        hikari.setMetricsTrackerFactory((poolName, poolStats) -> {
            stats.put(poolName, poolStats);
            return tracker(poolName, poolStats);
        });
    }

    private IMetricsTracker tracker(String poolName, PoolStats poolStats) {
        Attributes pool = Attributes.of(AffinityOpenTelemetry.POOL, poolName);
        return new IMetricsTracker() {
            /**
             * HikariCP calls this when the pool shuts down: a closed pool's stats still answer
             * its last counts and configured limits, so it reports no more points.
             */
            @Override
            public void close() {
                stats.remove(poolName, poolStats);
            }

            @Override
            public void recordConnectionCreatedMillis(long millis) {
                if (live) {
                    create.record(millis / 1e3, pool);
                }
            }

            @Override
            public void recordConnectionAcquiredNanos(long nanos) {
                if (live) {
                    wait.record(nanos / 1e9, pool);
                }
            }

            @Override
            public void recordConnectionUsageMillis(long millis) {
                if (live) {
                    use.record(millis / 1e3, pool);
                }
            }

            @Override
            public void recordConnectionTimeout() {
                if (live) {
                    timeouts.add(1, pool);
                }
            }
        };
    }

    void close() {
        live = false;
        stats.clear();
        for (AutoCloseable c : observables) {
            try {
                c.close();
            } catch (Exception e) {
                // nothing to undo
            }
        }
        observables.clear();
    }
}
