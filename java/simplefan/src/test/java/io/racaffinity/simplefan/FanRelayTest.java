package io.racaffinity.simplefan;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.NodeState;
import io.racaffinity.testsupport.Await;
import io.racaffinity.testsupport.EtcdNodesScript;
import java.time.Duration;
import java.util.function.BooleanSupplier;
import oracle.simplefan.ServiceDownEvent;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The ONS relay ({@code relayToFeed}): simplefan's event classes, as in {@link FanAdapterTest},
 * through an adapter that publishes into the topology feed of a real 3-member etcd of this
 * class's own (tests/cluster/etcdnodes on RACAFF_JAVA_ETCD_BASE_PORT, default 25320;
 * destroyed at the end), read back from a second subscribed cluster that has no simplefan.
 */
class FanRelayTest {
    static EtcdNodesScript etcd;

    @BeforeAll
    static void startEtcd() throws Exception {
        etcd = EtcdNodesScript.start(3, 25320);
    }

    @AfterAll
    static void destroyEtcd() throws Exception {
        if (etcd != null) {
            etcd.close();
        }
    }

    static Cluster subscriber(String name, String url) {
        return Cluster.fromConfig(FanAdapterTest.CONFIG.replace("name = fan", "name = " + name)
                + "; topology.feed = " + url + "; topology.feed_timeout = 1s");
    }

    static void await(String what, BooleanSupplier condition) throws InterruptedException {
        assertTrue(Await.until(Duration.ofSeconds(30), Duration.ofMillis(20), condition), what);
    }

    static boolean recordsUnder(String prefix) throws Exception {
        String from = java.util.Base64.getEncoder().encodeToString(prefix.getBytes());
        String to = java.util.Base64.getEncoder().encodeToString(
                (prefix.substring(0, prefix.length() - 1) + (char) (prefix.charAt(prefix.length() - 1) + 1)).getBytes());
        return etcd.call("/v3/kv/range", "{\"key\":\"" + from + "\",\"range_end\":\"" + to + "\"}").contains("\"kvs\"");
    }

    /**
     * etcd's store revision: what moves with every write. A subscriber's feed revision is not
     * that: it reaches its own write's revision when the watch brings the record back.
     */
    static long storeRevision() throws Exception {
        String r = etcd.call("/v3/kv/range", "{\"key\":\""
                + java.util.Base64.getEncoder().encodeToString("r1/".getBytes()) + "\"}");
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("\"revision\":\"(\\d+)\"").matcher(r);
        assertTrue(m.find(), r);
        return Long.parseLong(m.group(1));
    }

    @Test
    void relayedEventsReachASubscriberWithoutSimplefan() throws Exception {
        try (Cluster relayCluster = subscriber("fan-relay", etcd.url("r1"));
                Cluster there = subscriber("fan-there", etcd.url("r1"))) {
            FanAdapter fan = FanAdapter.relayToFeed(relayCluster);
            assertTrue(fan.relaysToFeed());
            fan.handleEvent(FanAdapterTest.serviceDown("RAC2", "host2", ServiceDownEvent.Reason.FAILURE, 0,
                    ServiceDownEvent.EventKind.MEMBER, "svc"));
            assertEquals(NodeState.DOWN, relayCluster.nodeState("RAC2"), "applied here at its revision");
            await("RAC2 down in the other subscriber", () -> there.nodeState("RAC2") == NodeState.DOWN);
            assertTrue(recordsUnder("r1/fan/"), "the event is a fan/ record in etcd");

            fan.handleEvent(FanAdapterTest.serviceUp("RAC2", "host2"));
            await("RAC2 up again there", () -> there.nodeState("RAC2") == NodeState.UP);
            fan.handleEvent(FanAdapterTest.nodeDown("host3"));
            await("RAC3 down there (NODE host=host3)", () -> there.nodeState("RAC3") == NodeState.DOWN);
            assertEquals(NodeState.DOWN, relayCluster.nodeState("RAC3"));

            // A foreign event is refused before anything is written, and not thrown at simplefan.
            long before = storeRevision();
            fan.handleEvent(FanAdapterTest.serviceDown("RAC1", "host1", ServiceDownEvent.Reason.FAILURE, 0,
                    ServiceDownEvent.EventKind.MEMBER, "other_service"));
            assertEquals(NodeState.UP, relayCluster.nodeState("RAC1"));
            assertEquals(before, storeRevision(), "nothing written");
        }
    }

    @Test
    void withEtcdAwayTheEventIsAppliedHereOnly() {
        try (Cluster cut = subscriber("fan-cut", "etcd://127.0.0.1:1/r2")) {
            FanAdapter fan = FanAdapter.relayToFeed(cut);
            fan.handleEvent(FanAdapterTest.serviceDown("RAC1", "host1", ServiceDownEvent.Reason.FAILURE, 0,
                    ServiceDownEvent.EventKind.MEMBER, "svc"));
            assertEquals(NodeState.DOWN, cut.nodeState("RAC1"), "not dropped because etcd is away");
            assertFalse(cut.feedStatus().orElseThrow().connected());
        }
    }

    @Test
    void relayingNeedsAFeed() {
        try (Cluster plain = Cluster.fromConfig(FanAdapterTest.CONFIG)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> FanAdapter.relayToFeed(plain));
            assertTrue(e.getMessage().contains("topology.feed"), e.getMessage());
        }
    }
}
