package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** Seed 001's routing tokens through JNI: {@link Cluster#sessionRouting}, {@link Cluster#sessionToken}, {@link Cluster#routeToken}. */
class SessionTokenTest {
    static final String CONFIG = "nodes = RAC1, RAC2, RAC3; node.RAC1.machine = mA; node.RAC2.machine = mA;"
            + " node.RAC3.machine = mB";
    static final Map<String, String> MACHINE = Map.of("RAC1", "mA", "RAC2", "mA", "RAC3", "mB");

    static String[] parse(String token) {
        int bang = token.lastIndexOf('!');
        String[] r = token.substring(bang + 1).split("\\.");
        assertEquals("ra1", r[0], token);
        return new String[] {token.substring(0, bang), r[1], r[2]};
    }

    @Test
    void everyBackupIsOnAnotherMachineWhenTheTopologyHasOne() {
        try (Cluster c = Cluster.fromConfig(CONFIG)) {
            Set<String> primaries = new HashSet<>();
            for (int i = 0; i < 300; i++) {
                SessionRouting r = c.sessionRouting(("s-" + i).getBytes(StandardCharsets.UTF_8));
                assertTrue(r.backup().isPresent(), r.toString());
                assertEquals(c.nodeName(r.backup().getAsInt()), r.backupName().orElseThrow());
                assertNotEquals(MACHINE.get(r.primaryName()), MACHINE.get(r.backupName().get()), r.toString());
                primaries.add(r.primaryName());
            }
            assertEquals(Set.of("RAC1", "RAC2", "RAC3"), primaries);
            c.setNodeState("RAC2", NodeState.DOWN);
            c.setNodeState("RAC3", NodeState.DOWN);
            SessionRouting alone = c.sessionRouting("s-1".getBytes(StandardCharsets.UTF_8));
            assertEquals(new SessionRouting(c.nodeId("RAC1"), "RAC1", OptionalInt.empty(), Optional.empty()), alone);
        }
    }

    /**
     * {@link Cluster#txBeginFor(byte[], byte[], byte[], String)} through JNI: a new gtrid goes where the token
     * routes the request, over the thread's pin; a null token is none; a malformed token or one holding a lone
     * surrogate (no UTF-8) is refused and registers nothing.
     */
    @Test
    void aNewGtridFollowsTheTokenAndBadTokensAreRefusedRegisteringNothing() {
        try (Cluster c = Cluster.fromConfig(CONFIG); Pin pin = c.pin()) {
            int elsewhere = 0;
            for (int i = 0; i < 24; i++) {
                String token = c.sessionToken("jni-" + i);
                int node = c.routeToken(token).route().node();
                elsewhere += node != pin.node() ? 1 : 0;
                byte[] g = ("jni-g-" + i).getBytes(StandardCharsets.UTF_8);
                assertEquals(node, c.txBeginFor(g, null, null, token).node(), token);
                c.txComplete(g);
            }
            assertTrue(elsewhere > 0, "some tokens name another node than the pin's");
            byte[] plain = "jni-no-token".getBytes(StandardCharsets.UTF_8);
            assertEquals(c.txBeginFor(plain, null, null).node(), c.txRoute(plain).node());
            c.txComplete(plain);
            for (String bad : new String[] {"s!ra9.00000000.none", "no-routing-data", "s\uD800!ra1.00000000.none"}) {
                byte[] g = "jni-bad".getBytes(StandardCharsets.UTF_8);
                assertThrows(InvalidArgumentException.class, () -> c.txBeginFor(g, null, null, bad), bad);
                assertThrows(UnknownTransactionException.class, () -> c.txRoute(g), "registered nothing: " + bad);
            }
        }
    }

    /**
     * {@link Cluster#routeTokens} through JNI: the core's choice (the first token naming a node of the cluster,
     * else the first well-formed one), none well-formed is empty, a lone surrogate is a malformed candidate, and a
     * strict refusal keeps the chosen index.
     */
    @Test
    void ofSeveralTokensTheCoreChoosesTheOneToRoute() {
        try (Cluster c = Cluster.fromConfig(CONFIG); Cluster other = Cluster.fromConfig("nodes = X1, X2");
                Cluster strict = Cluster.fromConfig(CONFIG + "; session.strict = true")) {
            String current = c.sessionToken("current");
            String stale = other.sessionToken("stale");
            TokenChoice chosen = c.routeTokens(java.util.List.of("s\uD800!ra1.00000000.none", stale, current))
                    .orElseThrow();
            assertEquals(2, chosen.index());
            assertEquals(current, chosen.token());
            assertEquals(c.routeToken(current).route().nodeName(), chosen.route().route().nodeName());
            assertFalse(chosen.route().changed());
            TokenChoice fallback = c.routeTokens(java.util.List.of("garbage", stale)).orElseThrow();
            assertEquals(1, fallback.index());
            assertTrue(fallback.route().token().orElseThrow().startsWith("stale!"));
            assertEquals(Optional.empty(), c.routeTokens(java.util.List.of("garbage", "s!ra9.00000000.none")));
            assertEquals(Optional.empty(), c.routeTokens(java.util.List.of()));
            for (String n : new String[] {"RAC1", "RAC2", "RAC3"}) {
                strict.setNodeState(n, NodeState.DOWN);
            }
            TokenChoice refused = strict.routeTokens(java.util.List.of(stale, current)).orElseThrow();
            assertEquals(1, refused.index(), "the choice stands");
            assertThrows(StrictAffinityException.class, refused::route);
        }
    }

    @Test
    void aTokenHoldsUntilItsPrimaryIsDownThenTheBackupIsPromoted() {
        try (Cluster c = Cluster.fromConfig(CONFIG)) {
            String token = c.sessionToken("ABC123");
            String[] t = parse(token);
            SessionRouting r = c.sessionRouting("ABC123".getBytes(StandardCharsets.UTF_8));
            assertEquals("ABC123", t[0]);
            TokenRoute same = c.routeToken(token);
            assertFalse(same.changed());
            assertEquals(r.primaryName(), same.route().nodeName());
            assertEquals(RouteKind.AFFINITY, same.route().kind());

            c.setNodeState(r.primaryName(), NodeState.DOWN);
            TokenRoute moved = c.routeToken(token);
            assertTrue(moved.changed());
            assertEquals(r.backupName().orElseThrow(), moved.route().nodeName());
            assertEquals(RouteKind.REPINNED, moved.route().kind());
            String[] m = parse(moved.token().orElseThrow());
            assertEquals("ABC123", m[0]);
            assertEquals(t[2], m[1], "the backup moved forward");
            assertFalse(c.routeToken(moved.token().get()).changed());
        }
    }

    @Test
    void badTokensAndIdsAreTypedErrorsAndStrictModeRefuses() {
        try (Cluster c = Cluster.fromConfig(CONFIG + "; session.strict = true")) {
            for (String bad : new String[] {"", "plain", "a!ra1.zz.none", "a!ra2.00000000.none"}) {
                assertThrows(InvalidArgumentException.class, () -> c.routeToken(bad), bad);
            }
            assertThrows(InvalidArgumentException.class, () -> c.sessionToken("has space"));
            assertThrows(NullPointerException.class, () -> c.routeToken(null));
            assertThrows(NullPointerException.class, () -> c.sessionRouting(null));
            String token = c.sessionToken("strict");
            c.setNodeState(c.routeToken(token).route().nodeName(), NodeState.DOWN);
            assertThrows(StrictAffinityException.class, () -> c.routeToken(token));
            c.close();
            assertThrows(ClusterClosedException.class, () -> c.sessionToken("x"));
        }
    }
}
