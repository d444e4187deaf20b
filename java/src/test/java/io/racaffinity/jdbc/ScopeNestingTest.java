package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.racaffinity.Cluster;
import io.racaffinity.Route;
import io.racaffinity.StrictAffinityException;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/**
 * Session and route scopes closed out of order (an outer scope's finally running before an inner
 * scope's, as when the inner one is closed by a later callback on the same thread): once every scope
 * is closed, none is left on the thread, which in a pool thread would route the next, unrelated work.
 */
class ScopeNestingTest {

    @Test
    void sessionScopesClosedOutOfOrderLeaveNoSessionOnTheThread() {
        SessionScope outer = AffinityDataSource.withRequestSession("outer");
        SessionScope inner = AffinityDataSource.withRequestSession("inner");
        outer.close();
        inner.close();
        byte[] left = AffinityDataSource.requestSession();
        assertNull(left, () -> "session left on the thread: "
                + new String(left, StandardCharsets.UTF_8));
    }

    @Test
    void closingAnOuterSessionScopeEndsTheInnerOne() {
        try (SessionScope outer = AffinityDataSource.withRequestSession("outer")) {
            SessionScope inner = AffinityDataSource.withRequestSession("inner");
            SessionScope middle = AffinityDataSource.withRequestSession("middle");
            inner.close();
            assertArrayEquals("outer".getBytes(StandardCharsets.UTF_8), AffinityDataSource.requestSession(),
                    "closing a scope ends the scopes opened inside it");
            middle.close();
            assertArrayEquals("outer".getBytes(StandardCharsets.UTF_8), AffinityDataSource.requestSession());
        }
        assertNull(AffinityDataSource.requestSession());
    }

    @Test
    void routeScopesClosedOutOfOrderLeaveNoRouteOnTheThread() {
        try (Cluster cluster = Cluster.fromConfig("name = scopes; nodes = A, B")) {
            Route a = cluster.route();
            RouteScope outer = AffinityDataSource.withRequestRoute(cluster, a);
            RouteScope inner = AffinityDataSource.withRequestRoute(cluster, a);
            assertSame(inner, RouteScope.current(cluster));
            outer.close();
            inner.close();
            RouteScope left = RouteScope.current(cluster);
            assertNull(left, () -> "route scope left on the thread: " + left.route());
        }
    }

    /**
     * Two AffinityFilters, one per cluster (two databases), nest their route scopes: the inner one's
     * cluster must not hide the outer one's decision, here a strict refusal.
     */
    @Test
    void aRouteScopeHoldsInsideAnotherClustersScope() throws Exception {
        java.util.Map<String, javax.sql.DataSource> nodes = new java.util.LinkedHashMap<>();
        nodes.put("A", PartitionMapLoaderErrorTest.unused("A"));
        nodes.put("B", PartitionMapLoaderErrorTest.unused("B"));
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = scopes-outer; nodes = A, B");
        ds.setNodeDataSources(nodes);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        try (ds; Cluster other = Cluster.fromConfig("name = scopes-inner; nodes = C, D")) {
            Cluster cluster = ds.getCluster();
            StrictAffinityException refusal = new StrictAffinityException("the session's node A is down (strict)");
            try (RouteScope outer = AffinityDataSource.withRequestRefusal(cluster, refusal);
                    RouteScope inner = AffinityDataSource.withRequestRoute(other, other.route())) {
                assertSame(outer, RouteScope.current(cluster), "the outer cluster's decision");
                assertSame(inner, RouteScope.current(other));
                java.sql.SQLException e = assertThrows(java.sql.SQLException.class, ds::getConnection,
                        "refused as the request was");
                assertSame(refusal, e.getCause(), String.valueOf(e));
            }
        }
    }

    @Test
    void aLeakedSessionScopeLeavesOnlyJdkTypesOnTheThread() throws Exception {
        SessionScope leaked = AffinityDataSource.withRequestSession("leaked");
        try {
            java.lang.reflect.Field top = SessionScope.class.getDeclaredField("TOP");
            top.setAccessible(true);
            Object value = ((ThreadLocal<?>) top.get(null)).get();
            // An app server's thread keeps its thread-locals: a class of the jar in WEB-INF/lib among
            // them keeps the web application's class loader after a redeploy.
            java.util.Deque<Object> todo = new java.util.ArrayDeque<>(java.util.List.of(value));
            while (!todo.isEmpty()) {
                Object o = todo.pop();
                assertSame(null, o.getClass().getClassLoader(), "a " + o.getClass().getName()
                        + " on the thread");
                if (o instanceof Object[] a) {
                    for (Object e : a) {
                        if (e != null) {
                            todo.push(e);
                        }
                    }
                }
            }
        } finally {
            leaked.close();
        }
    }
}
