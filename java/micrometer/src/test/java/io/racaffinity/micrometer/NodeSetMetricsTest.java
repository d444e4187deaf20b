package io.racaffinity.micrometer;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.racaffinity.Cluster;
import io.racaffinity.jdbc.AffinityDataSource;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * The node meters follow the cluster's node set, as Python's exporter does (it reports every node of each
 * snapshot): a node added after binding (Cluster.addNode, a topology feed) is reported, a removed one goes.
 * No database: the node data sources are never asked for a connection.
 */
class NodeSetMetricsTest {
    private static final Pattern NODE = Pattern.compile(AffinityMetrics.NODE.replace(".", "\\.") + "=\"?(\\w+)");
    private AffinityDataSource ds;

    @BeforeEach
    void start() {
        ds = new AffinityDataSource();
        ds.setConfig("name = node-set-meters; nodes = A, B");
        Map<String, DataSource> nodes = new LinkedHashMap<>();
        nodes.put("A", new PGSimpleDataSource());
        nodes.put("B", new PGSimpleDataSource());
        ds.setNodeDataSources(nodes);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
    }

    @AfterEach
    void stop() {
        ds.close();
    }

    /** The nodes a registry scrape shows in {@code name}, reading every meter as a scrape does. */
    private static TreeSet<String> scraped(MeterRegistry registry, String name) {
        TreeSet<String> seen = new TreeSet<>();
        for (Meter m : registry.getMeters()) {
            double v = 0;
            for (var ms : m.measure()) {
                v += ms.getValue();
            }
            if (m.getId().getName().equals(name) && !Double.isNaN(v)) {
                seen.add(m.getId().getTag(AffinityMetrics.NODE));
            }
        }
        return seen;
    }

    private static TreeSet<String> collected(CollectingReader reader, String name) {
        TreeSet<String> seen = new TreeSet<>();
        for (String point : reader.points(name)) {
            Matcher m = NODE.matcher(point);
            if (m.find()) {
                seen.add(m.group(1));
            }
        }
        return seen;
    }

    /** Scrapes until the binder's snapshot (read at most every 100 ms) is newer than the change. */
    private static void scrapes(Runnable scrape) throws InterruptedException {
        for (int i = 0; i < 3; i++) {
            Thread.sleep(150);
            scrape.run();
        }
    }

    @Test
    void micrometerReportsANodeAddedAfterBindingAndDropsARemovedOne() throws Exception {
        MeterRegistry registry = new SimpleMeterRegistry();
        new AffinityMetrics(ds).bindTo(registry);
        Cluster c = ds.getCluster();
        assertEquals(new TreeSet<>(List.of("A", "B")), scraped(registry, "racaffinity.node.picks"));
        c.addNode("C", null, 1);
        scrapes(() -> scraped(registry, "racaffinity.node.picks"));
        for (String meter : List.of("racaffinity.node.picks", "racaffinity.node.in_flight", "racaffinity.node.status")) {
            assertEquals(new TreeSet<>(List.of("A", "B", "C")), scraped(registry, meter), meter + " after addNode");
        }
        c.removeNode("A");
        scrapes(() -> scraped(registry, "racaffinity.node.picks"));
        List<String> left = registry.getMeters().stream().map(Meter::getId)
                .filter(id -> "A".equals(id.getTag(AffinityMetrics.NODE))).map(id -> id.getName()).toList();
        assertEquals(List.of(), left, "meters of the removed node A");
        assertEquals(new TreeSet<>(List.of("B", "C")), scraped(registry, "racaffinity.node.picks"));
    }

    /** The names of the meters of {@code node}, sorted (a node's meters twice would show here). */
    private static List<String> metersOf(MeterRegistry registry, String node) {
        return registry.getMeters().stream().map(Meter::getId).filter(id -> node.equals(id.getTag(AffinityMetrics.NODE)))
                .map(id -> id.getName() + id.getTags()).sorted().toList();
    }

    /** A removal then an addition leave the node count as it was: the set still changes. */
    @Test
    void micrometerFollowsARemovalThenAnAddition() throws Exception {
        MeterRegistry registry = new SimpleMeterRegistry();
        new AffinityMetrics(ds).bindTo(registry);
        Cluster c = ds.getCluster();
        List<String> metersOfB = metersOf(registry, "B");
        c.removeNode("A");
        c.addNode("C", null, 1);
        scrapes(() -> scraped(registry, "racaffinity.node.picks"));
        for (String meter : List.of("racaffinity.node.picks", "racaffinity.node.in_flight", "racaffinity.node.status")) {
            assertEquals(new TreeSet<>(List.of("B", "C")), scraped(registry, meter), meter + " after A went, C came");
        }
        assertEquals(List.of(), metersOf(registry, "A"), "meters of the removed node A");
        assertEquals(metersOfB.size(), metersOf(registry, "C").size(), "C has a node's meters");
    }

    /** A node removed and then added again under its name is reported again, once, with the new node's counts. */
    @Test
    void micrometerReportsANodeRemovedAndAddedAgain() throws Exception {
        MeterRegistry registry = new SimpleMeterRegistry();
        new AffinityMetrics(ds).bindTo(registry);
        Cluster c = ds.getCluster();
        List<String> metersOfA = metersOf(registry, "A");
        c.removeNode("A");
        scrapes(() -> scraped(registry, "racaffinity.node.picks"));
        assertEquals(new TreeSet<>(List.of("B")), scraped(registry, "racaffinity.node.picks"), "A removed");
        c.addNode("A", null, 1);
        scrapes(() -> scraped(registry, "racaffinity.node.picks"));
        for (String meter : List.of("racaffinity.node.picks", "racaffinity.node.in_flight", "racaffinity.node.status")) {
            assertEquals(new TreeSet<>(List.of("A", "B")), scraped(registry, meter), meter + " after A came back");
        }
        assertEquals(metersOfA, metersOf(registry, "A"), "A's meters, once each");
        c.setNodeState("B", io.racaffinity.NodeState.DOWN);
        c.pick().close(); // only the new A takes work
        scrapes(() -> scraped(registry, "racaffinity.node.picks"));
        assertEquals(1.0, registry.get("racaffinity.node.picks").tag(AffinityMetrics.NODE, "A").functionCounter()
                .count(), "the new A's picks");
    }

    @Test
    void openTelemetryFollowsARemovalThenAnAdditionAndANodeAddedAgain() throws Exception {
        CollectingReader reader = new CollectingReader();
        try (SdkMeterProvider provider = SdkMeterProvider.builder().registerMetricReader(reader).build();
                AffinityOpenTelemetry otel = AffinityOpenTelemetry.install(ds, provider)) {
            Cluster c = ds.getCluster();
            c.removeNode("A");
            c.addNode("C", null, 1);
            scrapes(() -> collected(reader, "racaffinity.node.picks"));
            for (String meter : List.of("racaffinity.node.picks", "racaffinity.node.in_flight",
                    "racaffinity.node.status")) {
                assertEquals(new TreeSet<>(List.of("B", "C")), collected(reader, meter), meter + " after A went, C came");
            }
            c.addNode("A", null, 1);
            scrapes(() -> collected(reader, "racaffinity.node.picks"));
            assertEquals(new TreeSet<>(List.of("A", "B", "C")), collected(reader, "racaffinity.node.picks"),
                    "A came back");
        }
    }

    /**
     * Reading the node set at bindTo is no scrape: the first scrape, however soon after, reads the core again
     * (a check right after binding and one request saw 0 picks, the snapshot read at bindTo).
     */
    @Test
    void theFirstScrapeAfterBindingCountsWorkDoneSinceBinding() throws Exception {
        MeterRegistry registry = new SimpleMeterRegistry();
        new AffinityMetrics(ds).bindTo(registry);
        Cluster c = ds.getCluster();
        c.pick().close();
        double picks = 0;
        for (String node : List.of("A", "B")) {
            picks += registry.get("racaffinity.node.picks").tag(AffinityMetrics.NODE, node).functionCounter().count();
        }
        assertEquals(1.0, picks, "picks scraped right after binding and one pick");
    }

    @Test
    void openTelemetryReportsANodeAddedAfterInstallingAndDropsARemovedOne() throws Exception {
        CollectingReader reader = new CollectingReader();
        try (SdkMeterProvider provider = SdkMeterProvider.builder().registerMetricReader(reader).build();
                AffinityOpenTelemetry otel = AffinityOpenTelemetry.install(ds, provider)) {
            Cluster c = ds.getCluster();
            assertEquals(new TreeSet<>(List.of("A", "B")), collected(reader, "racaffinity.node.picks"));
            c.addNode("C", null, 1);
            scrapes(() -> collected(reader, "racaffinity.node.picks"));
            for (String meter : List.of("racaffinity.node.picks", "racaffinity.node.in_flight",
                    "racaffinity.node.status")) {
                assertEquals(new TreeSet<>(List.of("A", "B", "C")), collected(reader, meter), meter + " after addNode");
            }
            c.removeNode("A");
            scrapes(() -> collected(reader, "racaffinity.node.picks"));
            assertEquals(new TreeSet<>(List.of("B", "C")), collected(reader, "racaffinity.node.picks"));
        }
    }
}
