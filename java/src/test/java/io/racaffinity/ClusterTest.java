package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

class ClusterTest {
    private static final String DOWN2 = "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=MYDB2 host=h2"
            + " status=down reason=FAILURE card=1 timestamp=2026-11-29 08:00:00";

    private static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static byte[] le(long v) {
        return java.nio.ByteBuffer.allocate(8).order(java.nio.ByteOrder.LITTLE_ENDIAN).putLong(v).array();
    }

    private static Cluster three(String extra) {
        return Cluster.fromConfig("name = unit\nnodes = MYDB1, MYDB2, MYDB3\n" + extra);
    }

    // ---- construction and config -------------------------------------------

    @Test
    void nodeAddressesComeBackAsTheCoreParsedThem() {
        try (Cluster c = Cluster.fromConfig("nodes = A, B, C\nnode.A.address = h1:1522\nnode.B.address = [::1]:1521")) {
            assertEquals(Optional.of("h1:1522"), c.nodeAddress(0));
            assertEquals(Optional.of("[::1]:1521"), c.nodeAddress(1));
            assertEquals(Optional.empty(), c.nodeAddress(2));
            assertThrows(UnknownNodeException.class, () -> c.nodeAddress(9));
        }
    }

    @Test
    void recoveryScopeComesFromTheConfig() {
        try (Cluster c = Cluster.fromConfig("nodes = A, B")) {
            assertEquals(RecoveryScope.NODE, c.recoveryScope());
        }
        try (Cluster c = Cluster.fromConfig("nodes = A, B\nrecovery.scope = database")) {
            assertEquals(RecoveryScope.DATABASE, c.recoveryScope());
        }
    }

    @Test
    void buildsFromConfigTextAndNamesNodesInIdOrder() {
        try (Cluster c = Cluster.fromConfig("name = orcl; nodes = MYDB1, MYDB2, MYDB3")) {
            assertEquals("orcl", c.name());
            assertEquals(List.of("MYDB1", "MYDB2", "MYDB3"), c.nodeNames());
            assertEquals(1, c.nodeId("mydb2"), "names match case-insensitively");
            assertEquals("MYDB3", c.nodeName(2));
            assertEquals(NodeState.UP, c.nodeState("MYDB1"));
            assertEquals(Duration.ofSeconds(10), c.heartbeatInterval());
            assertEquals("Cluster[orcl, nodes=[MYDB1, MYDB2, MYDB3]]", c.toString());
        }
    }

    @Test
    void builderRendersConfigTextForTheCore() {
        Cluster.Builder b = Cluster.builder()
                .name("orcl")
                .nodes("A", "B")
                .address("A", "dbhost1:1522")
                .weight("B", 3)
                .policy("random")
                .strict(Scope.TRANSACTION, true)
                .heartbeatInterval(Duration.ofMillis(250))
                .heartbeatMisses(2);
        assertEquals("name = orcl\nnodes = A, B\nnode.A.address = dbhost1:1522\nnode.B.weight = 3\npolicy = random\n"
                + "transaction.strict = true\nheartbeat.interval = 250ms\nheartbeat.misses = 2\n", b.toConfig());
        try (Cluster c = b.build()) {
            assertEquals(List.of("A", "B"), c.nodeNames());
            assertTrue(c.isStrict(Scope.TRANSACTION));
            assertFalse(c.isStrict(Scope.SESSION));
            assertEquals(Duration.ofMillis(250), c.heartbeatInterval());
            assertEquals(3, c.nodeMetrics().get(1).weight());
        }
    }

    @Test
    void builderReplacesANodeSettingGivenAgainUnderAnotherCase() {
        // Node names match case-insensitively, so node.b.weight and node.B.weight are one key to the
        // core ("given more than once" when both are sent): setting it again replaces it.
        Cluster.Builder b = Cluster.builder().nodes("A", "B").weight("b", 2).weight("B", 3).address("a", "h1:1")
                .address("A", "h2:2");
        try (Cluster c = b.build()) {
            assertEquals(3, c.nodeMetrics().get(1).weight());
            assertEquals("h2:2", c.nodeAddress(0).orElseThrow());
        }
        assertEquals("nodes = A, B\nnode.B.weight = 3\nnode.A.address = h2:2\n", b.toConfig());
    }

    @Test
    void builderRefusesADurationTooLongForItsKey() {
        // Duration.toMillis overflows past Long.MAX_VALUE ms: a config error naming the key, as the core
        // names a duration it cannot hold, not an ArithmeticException.
        InvalidConfigException e = assertThrows(InvalidConfigException.class,
                () -> Cluster.builder().nodes("A").sessionIdleTtl(Duration.ofSeconds(Long.MAX_VALUE)));
        assertTrue(e.getMessage().contains("`session.idle_ttl`"), e.getMessage());
        assertThrows(InvalidConfigException.class,
                () -> Cluster.builder().nodes("A").heartbeatInterval(Duration.ofSeconds(Long.MAX_VALUE / 100)));
    }

    @Test
    void builderRefusesADurationFinerThanAMillisecondNamingItsKey() {
        // The core's durations are whole milliseconds at the finest (ms, s, m, h): 1.5 ms rendered as "1ms"
        // was a silent cut, and 0.5 ms as "0ms" a refusal ("must be > 0") of a value the caller never gave.
        Map<String, java.util.function.Function<Duration, Cluster.Builder>> setters = new LinkedHashMap<>();
        setters.put("session.idle_ttl", d -> Cluster.builder().nodes("A").sessionIdleTtl(d));
        setters.put("health.eject_backoff", d -> Cluster.builder().nodes("A").ejectBackoff(d));
        setters.put("health.eject_backoff_max", d -> Cluster.builder().nodes("A").ejectBackoffMax(d));
        setters.put("heartbeat.interval", d -> Cluster.builder().nodes("A").heartbeatInterval(d));
        for (Map.Entry<String, java.util.function.Function<Duration, Cluster.Builder>> s : setters.entrySet()) {
            for (Duration d : List.of(Duration.ofNanos(500_000), Duration.ofNanos(1_500_000), Duration.ofNanos(1))) {
                InvalidConfigException e = assertThrows(InvalidConfigException.class,
                        () -> s.getValue().apply(d).build(), s.getKey() + " " + d);
                assertTrue(e.getMessage().contains("`" + s.getKey() + "`") && e.getMessage().contains("millisecond"),
                        e.getMessage());
            }
            // exact milliseconds, however written (seconds and nanoseconds), are taken
            s.getValue().apply(Duration.ofSeconds(1, 500_000_000)).build().close();
        }
        try (Cluster c = Cluster.builder().nodes("A").heartbeatInterval(Duration.ofNanos(1_500_000_000)).build()) {
            assertEquals(Duration.ofMillis(1500), c.heartbeatInterval());
        }
    }

    @Test
    void builderRefusesANullNodeName() {
        // A null argument is a NullPointerException (docs/java-datasource.md, "Exceptions"), not a
        // node named "null": String.join and string concatenation would render one.
        assertThrows(NullPointerException.class, () -> Cluster.builder().nodes("A", null));
        assertThrows(NullPointerException.class, () -> Cluster.builder().nodes(Arrays.asList("A", null)));
        assertThrows(NullPointerException.class, () -> Cluster.builder().nodes("A").address(null, "h:1"));
        assertThrows(NullPointerException.class, () -> Cluster.builder().nodes("A").weight(null, 2));
    }

    @Test
    void anEmptyNodeListIsRefusedWhereTheClusterIsBuilt() {
        // Every pick of an empty cluster would fail, blaming down nodes.
        InvalidConfigException e = assertThrows(InvalidConfigException.class, () -> Cluster.builder().nodes().build());
        assertTrue(e.getMessage().contains("at least one node"), e.getMessage());
        assertThrows(InvalidConfigException.class, () -> Cluster.fromConfig("nodes = "));
    }

    @Test
    void builderRefusesValuesThatWouldInjectAnotherKey() {
        InvalidConfigException e = assertThrows(
                InvalidConfigException.class, () -> Cluster.builder().nodes("A").policy("random; panic = fail"));
        assertTrue(e.getMessage().contains("`policy`"), e.getMessage());
        assertThrows(InvalidConfigException.class, () -> Cluster.builder().name("x\nnodes = EVIL"));
        assertThrows(InvalidConfigException.class, () -> Cluster.builder().set("a=b", "c"));
    }

    @Test
    void badConfigGivesAClearExceptionNamingTheKey() {
        InvalidConfigException e = assertThrows(
                InvalidConfigException.class, () -> Cluster.fromConfig("nodes = A, B\npolicy = fastest"));
        assertTrue(e.getMessage().contains("`policy`"), e.getMessage());
        assertTrue(e.getMessage().contains("fastest"), e.getMessage());
        e = assertThrows(InvalidConfigException.class, () -> Cluster.fromConfig("nodes = A\npolcy = random"));
        assertTrue(e.getMessage().contains("`polcy`"), e.getMessage());
        e = assertThrows(InvalidConfigException.class, () -> Cluster.builder().nodes("A").heartbeatMisses(2)
                .set("heartbeat.interval", "10").build());
        assertTrue(e.getMessage().contains("heartbeat.interval"), e.getMessage());
    }

    @Test
    void useAfterCloseGivesAClearException() {
        Cluster c = three("");
        Lease open = c.pick();
        Pin pin = c.pin();
        c.close();
        c.close(); // idempotent
        assertTrue(c.isClosed());
        ClusterClosedException e = assertThrows(ClusterClosedException.class, c::pick);
        assertTrue(e.getMessage().contains("closed"), e.getMessage());
        assertThrows(ClusterClosedException.class, () -> c.txBegin(b("g")));
        assertThrows(ClusterClosedException.class, c::metricsJson);
        assertThrows(ClusterClosedException.class, () -> open.release(Outcome.OK));
        open.close(); // quiet
        pin.close(); // quiet
        assertEquals("Cluster[unit, closed]", c.toString());
    }

    @Test
    void leasesAndPinsPrintAfterTheirClusterClosed() {
        // toString is what a log line or a debugger calls: it names the node by id once the
        // cluster can no longer name it, rather than throw ClusterClosedException.
        Cluster c = three("");
        Lease lease = c.pick();
        Pin pin = c.pin();
        c.close();
        assertTrue(lease.toString().startsWith("Lease[node=#" + lease.node() + " ("), lease.toString());
        assertTrue(pin.toString().startsWith("Pin[node=#" + pin.node() + " ("), pin.toString());
        lease.close();
        pin.close();
    }

    @Test
    void aSecondReleaseAfterTheClusterClosedIsStillAnInvalidLease() {
        // "a second release throws InvalidLeaseException": its message asked the closed cluster for the
        // node's name, so the caller got ClusterClosedException, for a lease released long before the close.
        Cluster c = three("");
        Lease lease = c.pick();
        lease.release(Outcome.OK);
        c.close();
        InvalidLeaseException e = assertThrows(InvalidLeaseException.class, () -> lease.release(Outcome.OK));
        assertTrue(e.getMessage().contains("#" + lease.node()), e.getMessage());
        // and of a lease whose node was removed since
        try (Cluster d = three("")) {
            Lease gone = d.pick();
            gone.release(Outcome.OK);
            d.removeNode(d.nodeName(gone.node()));
            assertThrows(InvalidLeaseException.class, () -> gone.release(Outcome.OK));
            assertTrue(gone.toString().startsWith("Lease[node="), gone.toString());
        }
    }

    @Test
    void nodeMetricsNameEachNodeByItsIdWhileNodesComeAndGo() throws InterruptedException {
        // Each entry's id is the node's own, from the same snapshot as its counters: never -1
        // (or another node's id) for a node removed, or added, while the snapshot was read.
        try (Cluster c = three("")) {
            AtomicBoolean stop = new AtomicBoolean();
            Thread churn = new Thread(() -> {
                for (int i = 0; !stop.get(); i++) {
                    c.addNode("X" + i, null, 1);
                    c.removeNode("X" + i);
                }
            }, "node-churn");
            churn.start();
            String wrong = null;
            int reads = 0;
            try {
                long deadline = System.nanoTime() + 8_000_000_000L;
                for (; reads < 3000 && wrong == null && System.nanoTime() < deadline; reads++) {
                    for (NodeMetrics m : c.nodeMetrics()) {
                        if (m.node() < 0 || !c.nodeName(m.node()).equals(m.name())) {
                            wrong = m.toString();
                        }
                    }
                }
            } finally {
                stop.set(true);
                churn.join();
            }
            assertEquals(null, wrong, "after " + reads + " reads");
        }
    }

    @Test
    void aClosedHandleIsNeverReusedByANewCluster() {
        Cluster a = three("");
        a.close();
        try (Cluster b = three("")) {
            assertThrows(ClusterClosedException.class, a::route);
            b.route();
        }
    }

    // ---- picks, leases, pins -----------------------------------------------

    @Test
    void leasesAreReleasedExactlyOnce() {
        try (Cluster c = three("policy = least_outstanding")) {
            Lease l = c.pick();
            assertEquals(RouteKind.BALANCED, l.kind());
            assertEquals(1, c.nodeMetrics().get(l.node()).inFlight());
            l.release(Outcome.OK);
            assertEquals(0, c.nodeMetrics().get(l.node()).inFlight());
            assertThrows(InvalidLeaseException.class, () -> l.release(Outcome.OK));
            assertFalse(l.tryRelease(Outcome.FAILED));
            l.close();
            assertEquals(1, c.nodeMetrics().get(l.node()).successes());
        }
    }

    @Test
    void aPinnedThreadPicksItsNodeAndPinsNest() {
        try (Cluster c = three("policy = random")) {
            assertEquals(OptionalInt.empty(), c.pinnedNode());
            try (Pin pin = c.pin()) {
                assertEquals(RouteKind.PLACED, pin.kind());
                for (int i = 0; i < 50; i++) {
                    try (Lease l = c.pick()) {
                        assertEquals(pin.node(), l.node());
                        assertEquals(RouteKind.AFFINITY, l.kind());
                    }
                    assertEquals(pin.node(), c.route().node());
                }
                try (Pin inner = c.pin()) {
                    assertEquals(pin.node(), inner.node());
                    assertEquals(RouteKind.AFFINITY, inner.kind());
                }
                assertEquals(OptionalInt.of(pin.node()), c.pinnedNode(), "the outer pin survives the inner close");
            }
            assertEquals(OptionalInt.empty(), c.pinnedNode());
            Set<Integer> seen = new HashSet<>();
            for (int i = 0; i < 200; i++) {
                seen.add(c.route().node());
            }
            assertEquals(3, seen.size(), "unpinned picks load-balance");
        }
    }

    @Test
    void pinsBelongToJavaThreads() throws Exception {
        try (Cluster c = three("policy = round_robin")) {
            try (Pin mine = c.pin()) {
                AtomicReference<Integer> other = new AtomicReference<>();
                // An assertion failing on another thread ends only that thread: hand it to the test.
                AtomicReference<Throwable> failure = new AtomicReference<>();
                Thread t = new Thread(() -> {
                    try {
                        assertEquals(OptionalInt.empty(), c.pinnedNode(), "another thread does not see my pin");
                        try (Pin p = c.pin()) {
                            other.set(p.node());
                        }
                    } catch (Throwable e) {
                        failure.set(e);
                    }
                });
                t.start();
                t.join();
                if (failure.get() != null) {
                    throw new AssertionError("the other thread: " + failure.get().getMessage(), failure.get());
                }
                assertNotEquals(mine.node(), (int) other.get(), "round robin gave the second pin another node");
                assertEquals(mine.node(), c.route().node());
            }
        }
    }

    @Test
    void unpinAllReleasesEveryLevel() {
        try (Cluster c = three("")) {
            c.pin();
            c.pin();
            assertTrue(c.unpinAll());
            assertEquals(OptionalInt.empty(), c.pinnedNode());
            assertFalse(c.unpinAll());
        }
    }

    @Test
    void autoPinPinsOnFirstPick() {
        try (Cluster c = three("thread.auto_pin = true\npolicy = random")) {
            int first = c.route().node();
            for (int i = 0; i < 20; i++) {
                assertEquals(first, c.route().node());
            }
            assertTrue(c.unpinAll());
        }
    }

    // ---- transactions -------------------------------------------------------

    @Test
    void everyBranchOfAGtridGetsTheSameNodeFromAnyThread() throws Exception {
        try (Cluster c = three("")) {
            Route first = c.txBegin(b("gtrid-42"));
            assertEquals(RouteKind.PLACED, first.kind());
            Route second = CompletableFuture.supplyAsync(() -> c.txBegin(b("gtrid-42"))).get();
            assertEquals(first.node(), second.node());
            assertEquals(RouteKind.AFFINITY, second.kind());
            assertEquals(first.node(), c.txRoute(b("gtrid-42")).node());
            assertEquals(first.node(), c.txEnd(b("gtrid-42")));
            assertEquals(first.node(), c.txEnd(b("gtrid-42")));
            assertThrows(UnknownTransactionException.class, () -> c.txRoute(b("gtrid-42")));
        }
    }

    @Test
    void aPreparedBranchNeverMoves() {
        try (Cluster c = three("")) {
            Route r = c.txBegin(b("g1"));
            assertEquals(r.node(), c.txPrepared(b("g1")));
            c.setNodeState(r.nodeName(), NodeState.DOWN);
            // Its 2PC still goes there: only that node holds the branch.
            assertEquals(r.node(), c.txRoute(b("g1")).node());
            PreparedNodeUnavailableException e =
                    assertThrows(PreparedNodeUnavailableException.class, () -> c.txBegin(b("g1")));
            assertTrue(e.getMessage().contains(r.nodeName()), e.getMessage());
            c.setNodeState(r.nodeName(), NodeState.UP);
            assertEquals(r.node(), c.txRoute(b("g1")).node());
            assertEquals(r.node(), c.txComplete(b("g1")));
        }
    }

    @Test
    void recoveryRecordsTheNodeAndASecondOwnerIsASplitTransaction() {
        try (Cluster c = three("")) {
            c.txRecovered(b("indoubt"), "MYDB3");
            assertEquals(2, c.txRoute(b("indoubt")).node());
            InvalidArgumentException e =
                    assertThrows(InvalidArgumentException.class, () -> c.txRecovered(b("indoubt"), 0));
            assertTrue(e.getMessage().contains("split transaction"), e.getMessage());
            assertThrows(UnknownNodeException.class, () -> c.txRecovered(b("x"), 7));
        }
    }

    @Test
    void txBeginPrefersThePinnedNodeForANewGtrid() {
        try (Cluster c = three("")) {
            for (int n = 0; n < 3; n++) {
                assertEquals(n, c.txBegin(b("pref-" + n), n).node());
            }
        }
    }

    @Test
    void gtridsAreOneTo64Bytes() {
        try (Cluster c = three("")) {
            assertThrows(InvalidArgumentException.class, () -> c.txBegin(new byte[0]));
            assertThrows(InvalidArgumentException.class, () -> c.txBegin(new byte[65]));
            c.txBegin(new byte[64]);
            assertThrows(NullPointerException.class, () -> c.txBegin(null));
        }
    }

    @Test
    void aStringOverTheLimitIsRefusedForItsLengthBeforeItsContentsAreRead() {
        // As from C: the length is checked first, so a huge string is refused without being copied
        // and decoded whole (a lone surrogate far inside it is never reached).
        try (Cluster c = three("")) {
            String huge = "n".repeat(4 << 20) + "\uD800";
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                    () -> c.setNodeState(huge, NodeState.DOWN));
            assertTrue(e.getMessage().contains("the limit is 1048576"), e.getMessage());
            // multi-byte text is measured in UTF-8: 400,000 three-byte characters are 1,200,000 bytes
            String wide = "\u20AC".repeat(400_000);
            e = assertThrows(InvalidArgumentException.class, () -> c.setNodeState(wide, NodeState.DOWN));
            assertTrue(e.getMessage().contains("is 1200000 bytes; the limit is 1048576"), e.getMessage());
            // at the limit, the text is read (and this is no node)
            assertThrows(UnknownNodeException.class, () -> c.setNodeState("n".repeat(1 << 20), NodeState.DOWN));
        }
    }

    // ---- strict mode ------------------------------------------------------

    @Test
    void strictTransactionAffinityThrowsWhenItsNodeIsDown() {
        try (Cluster c = three("transaction.strict = true")) {
            Route r = c.txBegin(b("strict-tx"));
            c.setNodeState(r.nodeName(), NodeState.DOWN);
            StrictAffinityException e = assertThrows(StrictAffinityException.class, () -> c.txBegin(b("strict-tx")));
            assertTrue(e.getMessage().contains("transaction"), e.getMessage());
            assertTrue(e.getMessage().contains(r.nodeName()), e.getMessage());
            c.setStrict(Scope.TRANSACTION, false); // soft at runtime: re-places
            Route moved = c.txBegin(b("strict-tx"));
            assertEquals(RouteKind.REPINNED, moved.kind());
            assertNotEquals(r.node(), moved.node());
        }
    }

    @Test
    void strictThreadSessionAndDataScopesThrow() {
        try (Cluster c = three("thread.strict = true\nsession.strict = true\ndata.strict = true")) {
            try (Pin pin = c.pin()) {
                c.setNodeState(pin.nodeName(), NodeState.DOWN);
                assertThrows(StrictAffinityException.class, c::pick);
                c.setNodeState(pin.nodeName(), NodeState.UP);
            }
            Route s = c.routeSession("JSESSIONID=1f2e");
            assertEquals(s.node(), c.routeSession("JSESSIONID=1f2e").node());
            c.setNodeState(s.nodeName(), NodeState.DOWN);
            assertThrows(StrictAffinityException.class, () -> c.routeSession("JSESSIONID=1f2e"));
            c.setNodeState(s.nodeName(), NodeState.UP);
            Route k = c.routeKey(4711L);
            c.setNodeState(k.nodeName(), NodeState.DOWN);
            assertThrows(StrictAffinityException.class, () -> c.routeKey(4711L));
            c.setStrict(Scope.DATA, false);
            Route fb = c.routeKey(4711L);
            assertEquals(RouteKind.FALLBACK, fb.kind());
            assertNotEquals(k.node(), fb.node());
        }
    }

    @Test
    void softPinsRepinOffADownNode() {
        try (Cluster c = three("")) {
            try (Pin pin = c.pin()) {
                c.setNodeState(pin.nodeName(), NodeState.DOWN);
                Lease l = c.pick();
                assertEquals(RouteKind.REPINNED, l.kind());
                assertNotEquals(pin.node(), l.node());
                l.release(Outcome.OK);
            }
        }
    }

    @Test
    void panicPolicyFailGivesNoNodeAvailable() {
        try (Cluster c = three("panic = fail")) {
            for (String n : c.nodeNames()) {
                c.setNodeState(n, NodeState.DOWN);
            }
            assertThrows(NoNodeAvailableException.class, c::pick);
        }
    }

    // ---- sessions and data ------------------------------------------------

    @Test
    void sessionsStickAndEnd() {
        try (Cluster c = three("")) {
            Route r = c.routeSession("s-1");
            for (int i = 0; i < 10; i++) {
                assertEquals(r.node(), c.routeSession("s-1").node());
            }
            assertTrue(c.endSession("s-1"));
            assertFalse(c.endSession("s-1"));
            assertThrows(InvalidArgumentException.class, () -> c.routeSession(""));
        }
    }

    @Test
    void integerKeysAreTheirLittleEndianBytes() {
        try (Cluster c = three("")) {
            byte[] le = {0x67, 0x12, 0, 0, 0, 0, 0, 0}; // 4711
            assertEquals(c.partitionOf(4711L), c.partitionOf(le));
            assertEquals(c.routeKey(4711L).node(), c.routeKey(le).node());
            int p = c.partitionOf(le);
            assertEquals(c.partitionOwner(p), c.routeKey(le).node());
            assertThrows(InvalidArgumentException.class, () -> c.partitionOwner(4096));
            assertThrows(InvalidArgumentException.class, () -> c.routeKey(new byte[1025]));
        }
    }

    @Test
    void pickForLeasesByTheCoresPrecedence() {
        try (Cluster c = three("policy = least_outstanding")) {
            byte[] gtrid = b("req-tx");
            assertEquals(2, c.txBegin(gtrid, 2).node());
            long intKey = 0;
            while (c.routeKey(intKey).node() == 2) {
                intKey++;
            }
            byte[] key = le(intKey);
            int keyNode = c.routeKey(intKey).node();
            byte[] found = null;
            for (int i = 0; found == null; i++) {
                byte[] s = b("req-s-" + i);
                if (c.routeSession(s).node() != keyNode && c.routeSession(s).node() != 2) {
                    found = s;
                }
            }
            byte[] session = found;
            int sessionNode = c.routeSession(session).node();

            Lease l = c.pickFor(gtrid, key, session);
            assertEquals(2, l.node(), "the transaction wins");
            assertEquals(RouteKind.AFFINITY, l.kind());
            assertEquals(1, c.nodeMetrics().get(2).inFlight());
            l.release(Outcome.OK);
            assertEquals(0, c.nodeMetrics().get(2).inFlight());
            assertThrows(InvalidLeaseException.class, () -> l.release(Outcome.OK));

            try (Lease k = c.pickFor(null, key, session)) {
                assertEquals(keyNode, k.node(), "then the data key");
            }
            try (Lease k = c.pickFor(null, intKey, session)) {
                assertEquals(keyNode, k.node(), "an integer key routes as its little-endian bytes");
            }
            try (Lease k = c.pickFor(null, null, session)) {
                assertEquals(sessionNode, k.node(), "then the session");
            }
            try (Pin p = c.pin(); Lease k = c.pickFor(null, null, null)) {
                assertEquals(p.node(), k.node(), "then the thread's pin");
            }
            assertThrows(UnknownTransactionException.class, () -> c.pickFor(b("no-such-tx"), key, session));
            assertThrows(InvalidArgumentException.class, () -> c.pickFor(null, new byte[1025], null));
        }
    }

    @Test
    void txBeginForPlacesNewGtridsBySessionElsePin() {
        try (Cluster c = three("")) {
            byte[] session = b("txf-s");
            int sessionNode = c.routeSession(session).node();
            try (Pin p = c.pin()) {
                int other = p.node();
                // A session on another node than the pin, so the precedence shows.
                byte[] s = session;
                for (int i = 0; c.routeSession(s).node() == other; i++) {
                    s = b("txf-s-" + i);
                }
                int sNode = c.routeSession(s).node();
                assertEquals(sNode, c.txBeginFor(b("txf-1"), null, s).node(), "a new gtrid follows the session");
                for (int i = 0; i < 6; i++) {
                    assertEquals(p.node(), c.txBeginFor(b("txf-2-" + i), null, null).node(), "else the thread's pin");
                }
                assertEquals(sNode, c.txBeginFor(b("txf-1"), null, null).node(), "an existing gtrid is joined");
                assertEquals(sNode, c.txRoute(b("txf-1")).node());
                assertEquals(sNode, c.routeFor(null, null, s).node(), "routeFor: the session wins over the pin");
                assertEquals(p.node(), c.routeFor(null, null, null).node(), "routeFor: else the pin");
            }
            assertEquals(sessionNode, c.txBeginFor(b("txf-3"), null, session).node());
            long intKey = 7;
            assertEquals(c.routeKey(intKey).node(), c.txBeginFor(b("txf-4"), intKey, session).node(),
                    "a data key wins over the session");
            assertThrows(NullPointerException.class, () -> c.txBeginFor(null, null, session));
            assertThrows(InvalidArgumentException.class, () -> c.txBeginFor(new byte[0], null, null));
            assertThrows(InvalidArgumentException.class, () -> c.txBeginFor(b("txf-5"), new byte[1025], null));
        }
    }

    // ---- nodes, events, health ------------------------------------------------

    @Test
    void nodesCanBeAddedAndRemoved() {
        try (Cluster c = three("")) {
            assertEquals(3, c.addNode("MYDB4", "h4:1521", 2));
            assertThrows(DuplicateNodeException.class, () -> c.addNode("mydb4", null, 1));
            assertEquals(List.of("MYDB1", "MYDB2", "MYDB3", "MYDB4"), c.nodeNames());
            assertEquals(1, c.removeNode("MYDB2"));
            assertEquals(List.of("MYDB1", "MYDB3", "MYDB4"), c.nodeNames());
            assertEquals("MYDB2", c.nodeName(1), "a removed id keeps its name");
            assertEquals(NodeState.DOWN, c.nodeState(1));
            assertThrows(UnknownNodeException.class, () -> c.removeNode("MYDB2"));
            assertThrows(UnknownNodeException.class, () -> c.nodeName(9));
            assertThrows(InvalidArgumentException.class, () -> c.addNode("bad name", null, 1));
        }
    }

    @Test
    void fanEventsChangeStateAndBadLinesChangeNothing() {
        try (Cluster c = three("database = orcl\nservice = svc")) {
            assertEquals(1, c.applyEvent(DOWN2));
            assertEquals(NodeState.DOWN, c.nodeState("MYDB2"));
            assertThrows(EventParseException.class, () -> c.applyEvent("SERVICEMEMBER garbage"));
            assertThrows(ForeignEventException.class, () -> c.applyEvent(DOWN2.replace("orcl", "other")
                    .replace("down", "up")));
            assertThrows(UnknownNodeException.class, () -> c.applyEvent(DOWN2.replace("MYDB2", "NOPE")));
            assertEquals(NodeState.DOWN, c.nodeState("MYDB2"));
            // The newest timestamp wins; in one second the more severe status (semantics.md, Agreement).
            String up = DOWN2.replace("status=down reason=FAILURE", "status=up");
            assertEquals(0, c.applyEvent(up), "an up in the second of the down changes nothing");
            assertEquals(1, c.applyEvent(up.replace("08:00:00", "08:00:01")));
            assertEquals(NodeState.UP, c.nodeState("MYDB2"));
            c.applyEvent(DOWN2.replace("reason=FAILURE", "reason=USER").replace("08:00:00", "08:00:02"));
            assertEquals(NodeState.DRAINING, c.nodeState("MYDB2"));
        }
    }

    @Test
    void heartbeatMissesMarkDownAndASuccessRestores() {
        try (Cluster c = three("heartbeat.misses = 3")) {
            assertFalse(c.reportProbe(1, false));
            assertFalse(c.reportProbe(1, false));
            assertTrue(c.reportProbe(1, false));
            assertEquals(NodeState.DOWN, c.nodeState(1));
            assertEquals("heartbeat", c.nodeMetrics().get(1).downCause());
            assertEquals(3, c.nodeMetrics().get(1).probeMisses());
            assertTrue(c.reportProbe(1, true));
            assertEquals(NodeState.UP, c.nodeState(1));
            assertThrows(UnknownNodeException.class, () -> c.reportProbe(-1, true));
        }
    }

    @Test
    void reportedFailuresEjectANode() {
        try (Cluster c = three("health.eject_after_failures = 2\nhealth.eject_backoff = 10m\nhealth.eject_backoff_max = 1h")) {
            assertFalse(c.reportOutcome(2, false));
            assertTrue(c.reportOutcome(2, false));
            assertEquals(NodeState.DOWN, c.nodeState(2));
            assertEquals("ejected", c.nodeMetrics().get(2).downCause());
            for (int i = 0; i < 100; i++) {
                assertNotEquals(2, c.route().node());
            }
        }
    }

    @Test
    void metricsRenderAsJsonAndPrometheus() {
        try (Cluster c = three("")) {
            c.pick().release(Outcome.OK);
            assertTrue(c.metricsJson().startsWith("{\"cluster\":\"unit\""), c.metricsJson());
            assertTrue(c.metricsPrometheus().contains("racaffinity_"), c.metricsPrometheus());
            List<NodeMetrics> m = c.nodeMetrics();
            assertEquals(3, m.size());
            assertEquals("MYDB1", m.get(0).name());
            assertEquals(1, m.stream().mapToLong(NodeMetrics::picks).sum());
            assertEquals(1, m.stream().mapToLong(NodeMetrics::successes).sum());
        }
    }

    @Test
    void feedRecordsJoinByVersionInAnyOrder() {
        String[][] records = {
            {"5", "node/MYDB2/state", "draining timeout=30s"},
            {"6", "node/MYDB2/state", "down"},
            {"7", "node/MYDB1/weight", "4"},
            {"8", "node/MYDB3/state", "down"},
            {"9", "node/MYDB2/state", null},
        };
        String[] fingerprints = new String[2];
        for (int order = 0; order < 2; order++) {
            try (Cluster c = three("transaction.strict = true")) {
                for (int i = 0; i < records.length; i++) {
                    String[] r = records[order == 0 ? i : records.length - 1 - i];
                    c.applyFeedRecord(Long.parseLong(r[0]), r[1], r[2]);
                }
                assertEquals(NodeState.UP, c.nodeState("MYDB2"), "the deletion at 9 is the last word");
                assertEquals(NodeState.DOWN, c.nodeState("MYDB3"));
                fingerprints[order] = c.metricsJson().replaceAll(".*\"fingerprint\":\"([0-9a-f]+)\".*", "$1");
            }
        }
        assertEquals(fingerprints[0], fingerprints[1], "any order, one state");
        try (Cluster c = three("")) {
            assertTrue(c.applyFeedRecord(3, "node/MYDB1/state", "down"));
            assertFalse(c.applyFeedRecord(2, "node/MYDB1/state", "up"), "older: nothing changes");
            assertThrows(UnknownNodeException.class, () -> c.applyFeedRecord(4, "node/NOPE/state", "down"));
            InvalidArgumentException e =
                    assertThrows(InvalidArgumentException.class, () -> c.applyFeedRecord(4, "nodes/MYDB1", "present"));
            assertTrue(e.getMessage().contains("unknown key"), e.getMessage());
            assertThrows(NullPointerException.class, () -> c.applyFeedRecord(4, null, "down"));
            assertEquals(NodeState.DOWN, c.nodeState("MYDB1"));
        }
    }
}
