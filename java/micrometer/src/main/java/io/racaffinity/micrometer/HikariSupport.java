package io.racaffinity.micrometer;

import com.zaxxer.hikari.HikariDataSource;
import com.zaxxer.hikari.metrics.IMetricsTracker;
import com.zaxxer.hikari.metrics.MetricsTrackerFactory;
import com.zaxxer.hikari.metrics.PoolStats;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;

/**
 * The OpenTelemetry connection-pool metrics of one HikariCP node pool, through HikariCP's
 * own hooks ({@link MetricsTrackerFactory}): it calls them on every acquire, release,
 * creation and timeout, and hands over its pool counts. Only loaded when a node pool is a
 * HikariCP one, so the binder works without HikariCP on the class path.
 */
final class HikariSupport {
    static final String POOL = "db.client.connection.pool.name";
    static final String STATE = "db.client.connection.state";

    private HikariSupport() {}

    static boolean isHikari(DataSource ds) {
        for (Class<?> c = ds.getClass(); c != null; c = c.getSuperclass()) {
            if (c.getName().equals("com.zaxxer.hikari.HikariDataSource")) {
                return true;
            }
        }
        return false;
    }

    static void bind(DataSource ds, MeterRegistry registry, Tags extraTags) {
        HikariDataSource hikari = (HikariDataSource) ds;
        if (hikari.getMetricsTrackerFactory() != null || hikari.getMetricRegistry() != null) {
            throw new IllegalStateException("AffinityMetrics: node pool " + hikari.getPoolName()
                    + " already has a metrics tracker, and HikariCP takes one per pool (bound twice?)");
        }
        hikari.setMetricsTrackerFactory((poolName, stats) -> register(registry, extraTags.and(POOL, poolName), stats));
    }

    // HikariCP hands each tracker a PoolStats of its own and keeps no reference to it: the
    // gauges hold it strongly (Micrometer's default is a weak reference, which reads NaN
    // after the next collection).
    private static IMetricsTracker register(MeterRegistry registry, Tags tags, PoolStats stats) {
        Gauge.builder("db.client.connection.count", stats, PoolStats::getIdleConnections)
                .tags(tags.and(STATE, "idle")).baseUnit("{connection}")
                .description("The number of connections that are currently in state described by the state attribute")
                .strongReference(true)
                .register(registry);
        Gauge.builder("db.client.connection.count", stats, PoolStats::getActiveConnections)
                .tags(tags.and(STATE, "used")).baseUnit("{connection}")
                .description("The number of connections that are currently in state described by the state attribute")
                .strongReference(true)
                .register(registry);
        Gauge.builder("db.client.connection.pending_requests", stats, PoolStats::getPendingThreads).tags(tags)
                .baseUnit("{request}").description("The number of current pending requests for an open connection")
                .strongReference(true)
                .register(registry);
        Gauge.builder("db.client.connection.max", stats, PoolStats::getMaxConnections).tags(tags)
                .baseUnit("{connection}").description("The maximum number of open connections allowed")
                .strongReference(true)
                .register(registry);
        Gauge.builder("db.client.connection.idle.min", stats, PoolStats::getMinConnections).tags(tags)
                .baseUnit("{connection}").description("The minimum number of idle open connections allowed")
                .strongReference(true)
                .register(registry);
        Timer wait = Timer.builder("db.client.connection.wait_time").tags(tags)
                .description("The time it took to obtain an open connection from the pool").register(registry);
        Timer use = Timer.builder("db.client.connection.use_time").tags(tags)
                .description("The time between borrowing a connection and returning it to the pool").register(registry);
        Timer create = Timer.builder("db.client.connection.create_time").tags(tags)
                .description("The time it took to create a new connection").register(registry);
        Counter timeouts = Counter.builder("db.client.connection.timeouts").tags(tags).baseUnit("{timeout}")
                .description("The number of connection timeouts that have occurred trying to obtain a connection"
                        + " from the pool")
                .register(registry);
        return new IMetricsTracker() {
            @Override
            public void recordConnectionCreatedMillis(long millis) {
                create.record(millis, TimeUnit.MILLISECONDS);
            }

            @Override
            public void recordConnectionAcquiredNanos(long nanos) {
                wait.record(nanos, TimeUnit.NANOSECONDS);
            }

            @Override
            public void recordConnectionUsageMillis(long millis) {
                use.record(millis, TimeUnit.MILLISECONDS);
            }

            @Override
            public void recordConnectionTimeout() {
                timeouts.increment();
            }
        };
    }
}
