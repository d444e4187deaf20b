package io.racaffinity.micrometer;

import com.zaxxer.hikari.HikariDataSource;
import com.zaxxer.hikari.metrics.IMetricsTracker;
import com.zaxxer.hikari.metrics.MetricsTrackerFactory;
import com.zaxxer.hikari.metrics.PoolStats;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
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

    /**
     * A timer that Prometheus registries serve as a histogram with the buckets Python's
     * exporter and the OpenTelemetry binder use ({@link DurationBuckets}), where Micrometer's
     * default is a summary that no histogram query can join with Python's.
     */
    private static Timer.Builder timer(String name) {
        Duration[] slos = new Duration[DurationBuckets.SECONDS.size()];
        for (int i = 0; i < slos.length; i++) {
            slos[i] = Duration.ofNanos(Math.round(DurationBuckets.SECONDS.get(i) * 1e9));
        }
        return Timer.builder(name).serviceLevelObjectives(slos);
    }

    // No base unit on the gauges and the counter: Micrometer's Prometheus registry appends it
    // to the name (db_client_connection_count__connection_), where OpenTelemetry's exporters
    // drop an annotation unit like {connection}; the Prometheus names must be the same for
    // both languages. (Micrometer's OTLP registry has no up-down counters at all: OTLP users
    // take AffinityOpenTelemetry.)
    // HikariCP hands each tracker a PoolStats of its own and keeps no reference to it: the
    // gauges hold it strongly (Micrometer's default is a weak reference, which reads NaN
    // after the next collection).
    private static IMetricsTracker register(MeterRegistry registry, Tags tags, PoolStats stats) {
        List<Meter> meters = new ArrayList<>();
        meters.add(Gauge.builder("db.client.connection.count", stats, PoolStats::getIdleConnections)
                .tags(tags.and(STATE, "idle"))
                .description("The number of connections that are currently in state described by the state attribute")
                .strongReference(true)
                .register(registry));
        meters.add(Gauge.builder("db.client.connection.count", stats, PoolStats::getActiveConnections)
                .tags(tags.and(STATE, "used"))
                .description("The number of connections that are currently in state described by the state attribute")
                .strongReference(true)
                .register(registry));
        meters.add(Gauge.builder("db.client.connection.pending_requests", stats, PoolStats::getPendingThreads).tags(tags)
                .description("The number of current pending requests for an open connection")
                .strongReference(true)
                .register(registry));
        meters.add(Gauge.builder("db.client.connection.max", stats, PoolStats::getMaxConnections).tags(tags)
                .description("The maximum number of open connections allowed")
                .strongReference(true)
                .register(registry));
        meters.add(Gauge.builder("db.client.connection.idle.min", stats, PoolStats::getMinConnections).tags(tags)
                .description("The minimum number of idle open connections allowed")
                .strongReference(true)
                .register(registry));
        Timer wait = timer("db.client.connection.wait_time").tags(tags)
                .description("The time it took to obtain an open connection from the pool").register(registry);
        Timer use = timer("db.client.connection.use_time").tags(tags)
                .description("The time between borrowing a connection and returning it to the pool").register(registry);
        Timer create = timer("db.client.connection.create_time").tags(tags)
                .description("The time it took to create a new connection").register(registry);
        Counter timeouts = Counter.builder("db.client.connection.timeouts").tags(tags)
                .description("The number of connection timeouts that have occurred trying to obtain a connection"
                        + " from the pool")
                .register(registry);
        meters.addAll(List.of(wait, use, create, timeouts));
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

            /**
             * HikariCP calls this when the pool shuts down. A closed pool's stats still
             * answer its configured maximum and minimum (and hold the pool): its meters go,
             * as HikariCP's own Micrometer tracker's do.
             */
            @Override
            public void close() {
                meters.forEach(registry::remove);
            }
        };
    }
}
