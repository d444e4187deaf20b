package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.test.Stubs;
import io.racaffinity.web.AffinityFilter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.http.Cookie;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpSession;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;

/**
 * {@link AffinityFilter} on one container thread, with servlet stubs (no container): an HTTP session
 * that another request invalidated after this one got it (its attribute calls throw
 * IllegalStateException, as Tomcat's do) and a failing chain or getSession leave no request scope on
 * the thread for its next request. In this package for {@link AffinityDataSource#requestSession()}.
 */
class AffinityFilterSessionTest {
    /** A session another request invalidated after this one got it: Tomcat's attribute calls throw then. */
    static HttpSession invalidated(String id) {
        return Stubs.proxy(HttpSession.class, "InvalidatedSession[" + id + "]", (p, m, a) -> {
            if (m.getName().equals("getId")) {
                return id;
            }
            throw new IllegalStateException(m.getName() + ": Session already invalidated");
        });
    }

    /** A request of {@code session} (null: none, and none is created). */
    static HttpServletRequest request(HttpSession session) {
        return Stubs.proxy(HttpServletRequest.class, "Request", (p, m, a) -> switch (m.getName()) {
            case "getSession" -> session;
            case "getCookies" -> new Cookie[0];
            case "getContextPath" -> "";
            case "isSecure" -> false;
            default -> null;
        });
    }

    static HttpServletResponse response() {
        return Stubs.proxy(HttpServletResponse.class, "Response", (p, m, a) -> null);
    }

    @Test
    void aRequestWhoseSessionWasInvalidatedMeanwhileRunsWithoutASessionScope() throws Exception {
        AffinityFilter f = new AffinityFilter();
        f.addDataSource(new AffinityDataSource());
        AtomicBoolean ran = new AtomicBoolean();
        byte[][] inRequest = new byte[1][];
        FilterChain chain = (rq, rs) -> {
            ran.set(true);
            inRequest[0] = AffinityDataSource.requestSession();
        };
        f.doFilter(request(invalidated("gone-1")), response(), chain);
        assertTrue(ran.get(), "the request ran");
        assertNull(inRequest[0], "no affinity for a session that no longer exists");
        assertNull(AffinityDataSource.requestSession(), "nothing left on the thread");
    }

    @Test
    void inTokenModeARequestWhoseSessionWasInvalidatedMeanwhileRunsWithANewToken() throws Exception {
        try (Cluster cluster = Cluster.fromConfig("name = filter-invalidated; nodes = A, B, C")) {
            for (AffinityFilter.TokenStore store : List.of(AffinityFilter.TokenStore.COOKIE,
                    AffinityFilter.TokenStore.ATTRIBUTE)) {
                AffinityFilter f = new AffinityFilter();
                f.addDataSource(new AffinityDataSource());
                f.setRoutingToken(store, cluster);
                List<String> routes = new ArrayList<>();
                FilterChain chain = (rq, rs) -> routes.add(String.valueOf(rq.getAttribute(AffinityFilter.ROUTE_ATTRIBUTE)));
                HttpServletRequest request = Stubs.proxy(HttpServletRequest.class, "Request", (p, m, a) -> switch (
                        m.getName()) {
                    case "getSession" -> invalidated("gone-2");
                    case "getCookies" -> new Cookie[0];
                    case "getContextPath" -> "";
                    case "isSecure" -> false;
                    default -> null;
                });
                f.doFilter(request, response(), chain);
                assertEquals(1, routes.size(), store + ": the request ran");
                assertNull(RouteScope.current(cluster), store + ": nothing left on the thread");
            }
        }
    }

    /** A container thread serves the next request: nothing the filter set may outlive a failed one, however it failed. */
    @Test
    void aFailedRequestLeavesNoScopeOnTheThread() throws Exception {
        AffinityFilter f = new AffinityFilter();
        f.addDataSource(new AffinityDataSource());
        HttpSession live = Stubs.proxy(HttpSession.class, "Session", (p, m, a) -> m.getName().equals("getId") ? "s-1"
                : null);
        FilterChain failing = (rq, rs) -> {
            assertNotNull(AffinityDataSource.requestSession());
            throw new IllegalStateException("the application failed");
        };
        assertThrows(IllegalStateException.class, () -> f.doFilter(request(live), response(), failing));
        assertNull(AffinityDataSource.requestSession());

        HttpServletRequest committed = Stubs.proxy(HttpServletRequest.class, "Request", (p, m, a) -> {
            throw new IllegalStateException("Cannot create a session after the response has been committed");
        });
        f.setCreateSession(true);
        assertThrows(IllegalStateException.class, () -> f.doFilter(committed, response(), (rq, rs) -> { }));
        assertNull(AffinityDataSource.requestSession());
    }
}
