package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.jdbc.SessionScope;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Boundary defects of issue 13 [chaos-fuzz] on the Java side: text that is not
 * valid Unicode is refused as C and Python refuse invalid UTF-8 (item 6), and a
 * lease dropped without release does not stay in flight forever.
 */
class BindingBoundaryTest {
    private static Cluster three(String extra) {
        return Cluster.fromConfig("name = unit\nnodes = MYDB1, MYDB2, MYDB3\n" + extra);
    }

    // ---- item 6: lone surrogates -------------------------------------------------

    @Test
    void loneSurrogatesInSessionAndDataKeysAreRefused() {
        try (Cluster c = three("")) {
            assertThrows(InvalidArgumentException.class, () -> c.routeSession("user-\uD800"));
            assertThrows(InvalidArgumentException.class, () -> c.endSession("user-\uDBFF"));
            assertThrows(InvalidArgumentException.class, () -> c.routeSession("user-\uDC00x"));
            assertThrows(InvalidArgumentException.class, () -> c.routeKey("\uDE00\uD83D")); // reversed pair
            assertThrows(InvalidArgumentException.class, () -> c.routeKey("k\uD83D"));
            // a well-formed pair is text like any other
            Route r = c.routeSession("user-\uD83D\uDE00");
            assertEquals(r.node(), c.routeSession("user-\uD83D\uDE00").node());
            assertTrue(c.endSession("user-\uD83D\uDE00"));
        }
    }

    @Test
    void twoLoneSurrogatesNeverNameOneSession() {
        try (Cluster c = three("")) {
            assertThrows(InvalidArgumentException.class, () -> c.routeSession("user-\uD800"));
            // nothing was created under a replacement character either
            assertFalse(c.endSession("user-\uFFFD"));
            assertFalse(c.endSession("user-?"));
        }
    }

    @Test
    void loneSurrogatesInSessionScopesAreRefused() {
        // getBytes(UTF_8) turns each lone surrogate into '?': these two would name one session.
        AffinityDataSource ds = new AffinityDataSource();
        for (String id : List.of("user-\uD800", "user-\uDBFF", "user-\uDC00x")) {
            String shown = String.format("user-U+%04X", (int) id.charAt(5));
            assertThrows(InvalidArgumentException.class, () -> ds.withSession(id), shown);
            assertThrows(InvalidArgumentException.class, () -> AffinityDataSource.withRequestSession(id), shown);
        }
        // a well-formed pair is text like any other
        try (SessionScope s = ds.withSession("user-\uD83D\uDE00");
                SessionScope r = AffinityDataSource.withRequestSession("user-\uD83D\uDE00")) {
            assertTrue(s != null && r != null);
        }
    }

    @Test
    void loneSurrogatesInStringShardingKeysAreRefused() throws Exception {
        // getBytes(UTF_8) would make both of these the key "user-?".
        AffinityDataSource ds = new AffinityDataSource();
        for (String k : List.of("user-\uD800", "user-\uDBFF")) {
            java.sql.SQLException e = assertThrows(java.sql.SQLException.class,
                    () -> ds.createShardingKeyBuilder().subkey(k, java.sql.JDBCType.VARCHAR).build());
            assertTrue(e.getMessage().contains("surrogate"), e.getMessage());
            assertEquals("22023", e.getSQLState());
        }
        assertTrue(ds.createShardingKeyBuilder().subkey("user-\uD83D\uDE00", java.sql.JDBCType.VARCHAR).build() != null);
    }

    @Test
    void loneSurrogatesInStringsPassedToTheLibraryAreRefused() {
        try (Cluster c = three("")) {
            assertThrows(InvalidArgumentException.class, () -> c.nodeId("MYDB1\uD800"));
            assertThrows(InvalidArgumentException.class, () -> c.addNode("MYDB4\uDBFF", null, 1));
            assertThrows(InvalidArgumentException.class, () -> c.setNodeState("MYDB1\uDC00", NodeState.DOWN));
            assertThrows(InvalidArgumentException.class, () -> c.applyEvent(
                    "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=MYDB2\uD800 host=h2"
                            + " status=down reason=FAILURE card=1 timestamp=2026-11-29 08:00:00"));
            assertEquals(List.of("MYDB1", "MYDB2", "MYDB3"), c.nodeNames());
            assertEquals(NodeState.UP, c.nodeState(1));
        }
        assertThrows(InvalidArgumentException.class, () -> Cluster.fromConfig("nodes = A\uD800, B"));
        // a well-formed supplementary character still passes through JNI unchanged
        // (to the core, which names it in its answer)
        InvalidConfigException e = assertThrows(InvalidConfigException.class,
                () -> Cluster.fromConfig("nodes = A\uD83D\uDE00, B"));
        assertTrue(e.getMessage().contains("A\uD83D\uDE00"), e.getMessage());
    }

    // ---- a lease dropped without release ------------------------------------------

    private static long inFlight(Cluster c) {
        return c.nodeMetrics().stream().mapToLong(NodeMetrics::inFlight).sum();
    }

    /**
     * A lease the library counts and a cleaner watches: routed by a data key. An unpinned
     * {@code pick()} on an Up node is a host lease instead, with no cleaner and a bounded
     * leak ({@code UnpinnedHostLeaseTest}).
     */
    private static Lease libraryLease(Cluster c, long key) {
        return c.pickFor(null, key, null);
    }

    /** Picks and drops the lease: no reference to it survives this frame. */
    private static int dropLeases(Cluster c, int n) {
        int node = -1;
        for (int i = 0; i < n; i++) {
            node = libraryLease(c, i).node();
        }
        return node;
    }

    @Test
    void aLeaseDroppedWithoutReleaseIsReleasedNeutralOnceCollected() throws InterruptedException {
        try (Cluster c = three("policy = least_outstanding")) {
            dropLeases(c, 5);
            assertEquals(5, inFlight(c));
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (inFlight(c) != 0) {
                if (System.nanoTime() > deadline) {
                    fail("dropped leases still in flight after 10 s of GC: " + inFlight(c));
                }
                System.gc();
                Thread.sleep(20);
            }
            // NEUTRAL: neither a success nor a failure of the node
            for (NodeMetrics m : c.nodeMetrics()) {
                assertEquals(0, m.successes(), m.name());
                assertEquals(0, m.failures(), m.name());
            }
        }
    }

    @Test
    void aReleasedLeaseIsNotReleasedAgainWhenCollected() throws InterruptedException {
        try (Cluster c = three("policy = least_outstanding")) {
            Lease kept = libraryLease(c, 100);
            for (int i = 0; i < 5; i++) {
                libraryLease(c, i).release(Outcome.OK);
            }
            for (int i = 0; i < 5; i++) {
                System.gc();
                Thread.sleep(20);
            }
            assertEquals(1, inFlight(c)); // the cleaner of a released lease releases nothing
            assertEquals(5, c.nodeMetrics().stream().mapToLong(NodeMetrics::successes).sum());
            kept.release(Outcome.OK);
            assertEquals(0, inFlight(c));
        }
    }

    @Test
    void aLeaseCollectedAfterItsClusterClosedIsQuiet() throws InterruptedException {
        Cluster c = three("");
        dropLeases(c, 3);
        c.close();
        for (int i = 0; i < 5; i++) {
            System.gc();
            Thread.sleep(20);
        }
        assertTrue(c.isClosed());
    }

    // ---- the native calls agree with the C ABI on a node id the cluster never had ----

    @Test
    void endingALeaseOnANodeTheClusterNeverHadIsRefusedAndCountsNothing() {
        try (Cluster c = three("")) {
            Lease live = c.lease(1);
            UnknownNodeException e = assertThrows(UnknownNodeException.class,
                    () -> Native.leaseEnd(c.handle(), 9, Outcome.OK.ordinal()));
            assertTrue(e.getMessage().contains("9"), e.getMessage());
            assertEquals(1, inFlight(c), "the live lease is still counted, nothing else moved");
            live.release(Outcome.OK);
            assertEquals(0, inFlight(c));
        }
    }

    @Test
    void aLeaseOnANodeRemovedMeanwhileStillEnds() {
        try (Cluster c = three("")) {
            Lease live = c.lease(1);
            c.removeNode("MYDB2");
            live.release(Outcome.OK); // a removed node's id is still the cluster's: no UnknownNodeException
            assertTrue(live.isReleased());
        }
    }
}
