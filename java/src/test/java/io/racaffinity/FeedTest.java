package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.test.Stubs;
import io.racaffinity.testsupport.Await;
import io.racaffinity.testsupport.EtcdNodesScript;
import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import javax.management.RuntimeMBeanException;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The topology feed through the Java binding, over a real 3-member etcd of this class's own
 * (tests/cluster/etcdnodes on RACAFF_JAVA_ETCD_BASE_PORT, default 25290; destroyed at the
 * end): records reach a Cluster and an AffinityDataSource in revision order; JMX operator
 * calls write through etcd to another subscribed cluster, and fail with nothing changed when
 * etcd is unreachable; a relayed FAN line reaches another subscriber; the feed's health is
 * readable as {@link FeedStatus} and as JMX attributes.
 */
class FeedTest {
    private static final MBeanServer MBS = ManagementFactory.getPlatformMBeanServer();
    private static final String[] STRING = {String.class.getName()};
    private static final String NODES = "database = orcl; service = svc; nodes = RAC1, RAC2, RAC3;"
            + " node.RAC1.address = host1:1521; node.RAC2.address = host2:1521; node.RAC3.address = host3:1521";
    static EtcdNodesScript etcd;

    @BeforeAll
    static void startEtcd() throws Exception {
        etcd = EtcdNodesScript.start(3, 25290);
    }

    @AfterAll
    static void destroyEtcd() throws Exception {
        if (etcd != null) {
            etcd.close();
        }
    }

    static String config(String name, String url) {
        return "name = " + name + "; " + NODES + "; topology.feed = " + url + "; topology.feed_timeout = 1s";
    }

    static Cluster subscriber(String name, String prefix) {
        return Cluster.fromConfig(config(name, etcd.url(prefix)));
    }

    static AffinityDataSource dataSource(String name, String url) {
        Map<String, DataSource> stubs = new LinkedHashMap<>();
        for (String n : new String[] {"RAC1", "RAC2", "RAC3"}) {
            stubs.put(n, Stubs.dataSource(n, Map.of(), new AtomicInteger()));
        }
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig(config(name, url));
        ds.setNodeDataSources(stubs);
        ds.setHeartbeatIntervalMillis(0);
        return ds;
    }

    static FeedStatus feed(Cluster c) {
        return c.feedStatus().orElseThrow(() -> new AssertionError("a subscribed cluster reports its feed"));
    }

    static void await(String what, BooleanSupplier condition) throws InterruptedException {
        assertTrue(Await.until(Duration.ofSeconds(30), Duration.ofMillis(20), condition), what);
    }

    @Test
    void recordsReachAClusterAndADataSourceInRevisionOrder() throws Exception {
        etcd.put("j1/node/RAC1/state", "down");
        try (Cluster c = subscriber("feed-order", "j1"); AffinityDataSource ds = dataSource("feed-order-ds", etcd.url("j1"))) {
            Cluster dc = ds.getCluster();
            assertEquals(NodeState.DOWN, c.nodeState("RAC1"), "read before the constructor returns");
            assertEquals(NodeState.DOWN, dc.nodeState("RAC1"), "read before the data source starts");
            etcd.put("j1/node/RAC2/state", "draining timeout=30s");
            etcd.put("j1/node/RAC1/state", "up");
            etcd.put("j1/node/RAC3/weight", "5");
            long last = etcd.put("j1/node/RAC3/weight", "6");
            for (Cluster x : new Cluster[] {c, dc}) {
                await("revision " + last + " applied", () -> feed(x).revision() >= last);
                assertEquals(NodeState.UP, x.nodeState("RAC1"));
                assertEquals(NodeState.DRAINING, x.nodeState("RAC2"));
                assertEquals(6, x.nodeMetrics().get(2).weight(), "the later revision wins");
                FeedStatus f = feed(x);
                assertEquals(5, f.applied() + f.stale(), f.toString());
                assertEquals(0, f.refused(), f.toString());
                assertTrue(f.connected(), f.toString());
                assertEquals(etcd.url("j1"), f.url());
                assertTrue(f.leaderRevision() >= last, f.toString());
                assertEquals(0, f.lag(), f.toString());
                assertTrue(f.lastError().isEmpty(), f.toString());
            }
            assertEquals(c.metricsJson().replaceAll(".*\"fingerprint\":\"(\\w+)\".*", "$1"),
                    dc.metricsJson().replaceAll(".*\"fingerprint\":\"(\\w+)\".*", "$1"), "the same view");

            // A refused record: counted, named, nothing changed.
            long bad = etcd.put("j1/node/RAC9/state", "down");
            await("the refused record counted", () -> feed(c).revision() >= bad);
            assertEquals(1, feed(c).refused());
            assertTrue(feed(c).lastRefused().orElse("").contains("RAC9"), feed(c).toString());
        }
    }

    @Test
    void aClusterWithoutAFeedHasNoFeedStatus() {
        Cluster c = Cluster.fromConfig("name = feed-none; " + NODES);
        assertTrue(c.feedStatus().isEmpty());
        c.close();
        assertThrows(ClusterClosedException.class, c::feedStatus);
    }

    @Test
    void jmxMarkDownReachesAnotherSubscriberThroughEtcd() throws Exception {
        try (AffinityDataSource ds = dataSource("feed-jmx", etcd.url("j2")); Cluster there = subscriber("feed-jmx-there", "j2")) {
            ObjectName on = ds.getObjectName();
            Cluster here = ds.getCluster();
            MBS.invoke(on, "markDown", new Object[] {"RAC2"}, STRING);
            assertEquals(NodeState.DOWN, here.nodeState("RAC2"), "the caller reads its own write");
            await("RAC2 down there", () -> there.nodeState("RAC2") == NodeState.DOWN);
            assertEquals("down", etcd.get("j2/node/RAC2/state"));
            there.setNodeState("RAC2", NodeState.UP);
            await("RAC2 up here", () -> here.nodeState("RAC2") == NodeState.UP);
            MBS.invoke(on, "drain", new Object[] {"RAC3"}, STRING);
            await("RAC3 draining there", () -> there.nodeState("RAC3") == NodeState.DRAINING);
            // Its own drain is applied at once but comes back through the watch later (CI:
            // 'applied + stale' short by one): the counts below are read once every record is back.
            long written = etcd.storeRevision();
            await("every record back here", () -> feed(here).revision() >= written);

            // The feed's JMX attributes.
            assertEquals(etcd.url("j2"), MBS.getAttribute(on, "FeedUrl"));
            assertEquals(true, MBS.getAttribute(on, "FeedConnected"));
            long revision = (Long) MBS.getAttribute(on, "FeedRevision");
            assertTrue(revision > 0, "revision " + revision);
            assertEquals(feed(here).revision(), revision);
            assertEquals(0L, MBS.getAttribute(on, "FeedLag"));
            // Its own writes are applied when written and come back stale;
            // the other subscriber's up is applied from the watch.
            long applied = (Long) MBS.getAttribute(on, "FeedRecordsApplied");
            assertTrue(applied >= 1L, "applied " + applied);
            // Every record of the three calls reached it once, applied or stale.
            assertTrue(applied + feed(here).stale() >= 3L, "applied + stale");
            assertEquals(0L, MBS.getAttribute(on, "FeedRecordsRefused"));
            assertNull(MBS.getAttribute(on, "FeedLastError"));
        }
    }

    @Test
    void withAnUnreachableFeedMarkDownFailsAndNothingChanges() throws Exception {
        String url = "etcd://127.0.0.1:1/j3";
        try (AffinityDataSource ds = dataSource("feed-cut", url)) {
            Cluster c = ds.getCluster();
            FeedStatus f = feed(c);
            assertFalse(f.connected(), f.toString());
            assertTrue(f.lastError().orElse("").contains("127.0.0.1:1"), f.toString());
            FeedUnavailableException e = assertThrows(FeedUnavailableException.class,
                    () -> c.setNodeState("RAC2", NodeState.DOWN));
            assertTrue(e.getMessage().contains("127.0.0.1:1"), e.getMessage());
            assertEquals(NodeState.UP, c.nodeState("RAC2"), "nothing changed");

            // Through JMX: a JDK exception a remote console shows, carrying the core's message.
            ObjectName on = ds.getObjectName();
            RuntimeMBeanException jmx = assertThrows(RuntimeMBeanException.class,
                    () -> MBS.invoke(on, "markDown", new Object[] {"RAC2"}, STRING));
            IllegalStateException cause = assertInstanceOf(IllegalStateException.class, jmx.getCause(),
                    "etcd not taking a write is no bad argument: " + jmx.getCause());
            assertTrue(cause.getMessage().contains("127.0.0.1:1"), cause.getMessage());
            assertEquals(NodeState.UP, c.nodeState("RAC2"), "nothing changed");
            assertEquals(false, MBS.getAttribute(on, "FeedConnected"));
            assertTrue(((String) MBS.getAttribute(on, "FeedLastError")).contains("127.0.0.1:1"));
            assertThrows(FeedUnavailableException.class, () -> c.addNode("RAC4", null, 1));
            assertEquals(3, c.nodeNames().size(), "nothing added");
        }
    }

    @Test
    void aPublishedFanLineReachesAnotherSubscriber() throws Exception {
        try (Cluster relay = subscriber("feed-fan", "j4"); Cluster there = subscriber("feed-fan-there", "j4")) {
            long rev = relay.publishEvent("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=RAC3"
                    + " host=host3 status=down reason=FAILURE card=2 timestamp=2026-12-04 10:00:00");
            assertEquals(NodeState.DOWN, relay.nodeState("RAC3"), "applied here at its revision");
            await("RAC3 down there", () -> there.nodeState("RAC3") == NodeState.DOWN);
            assertTrue(feed(there).revision() >= rev);
            assertTrue(etcd.call("/v3/kv/range", "{\"key\":\"ajQvZmFuLw==\",\"range_end\":\"ajQvZmFuMA==\"}")
                            .contains("\"kvs\""), "the line is a fan/ record");
            assertThrows(EventParseException.class, () -> relay.publishEvent("NOT A FAN LINE"));
        }
    }
}
