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
import jakarta.servlet.http.HttpSessionBindingEvent;
import jakarta.servlet.http.HttpSessionBindingListener;
import java.sql.Connection;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.List;
import javax.sql.DataSource;
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
            case "isSecure", "isAsyncSupported" -> false;
            default -> null;
        });
    }

    static HttpServletResponse response() {
        return Stubs.proxy(HttpServletResponse.class, "Response", (p, m, a) -> null);
    }

    /** A data source of {@code config} over stub nodes A, B and C: no heartbeat, no MBean. */
    private static AffinityDataSource overStubs(String config) {
        Map<String, DataSource> stubs = new LinkedHashMap<>();
        for (String n : new String[] {"A", "B", "C"}) {
            stubs.put(n, Stubs.dataSource(n, Map.of(), new AtomicInteger()));
        }
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig(config);
        ds.setNodeDataSources(stubs);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        return ds;
    }

    /** A request's work: one connection of {@code ds}, taken and given back. */
    private static FilterChain connecting(AffinityDataSource ds) {
        return (rq, rs) -> {
            try (Connection c = ds.getConnection()) {
                assertNotNull(c);
            } catch (java.sql.SQLException e) {
                throw new jakarta.servlet.ServletException(e);
            }
        };
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
                    case "isSecure", "isAsyncSupported" -> false;
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
        HttpSession live = Stubs.proxy(HttpSession.class, "Session", (p, m, a) -> switch (m.getName()) {
            case "getId" -> "s-1";
            case "getCreationTime" -> 0L;
            default -> null;
        });
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

    /**
     * A live session whose attributes behave as Tomcat's: a replaced or removed binding listener, and every one
     * at invalidation, is told it was unbound. {@code id[0]} is its id now ({@code changeSessionId} changes it and
     * keeps the attributes, with no binding event).
     */
    static HttpSession tomcatLike(String[] id, Runnable[] invalidate) {
        Map<String, Object> attributes = new HashMap<>();
        HttpSession[] self = new HttpSession[1];
        boolean[] invalidated = {false};
        self[0] = Stubs.proxy(HttpSession.class, "Session", (p, m, a) -> {
            if (invalidated[0] && !m.getName().equals("getId")) {
                throw new IllegalStateException(m.getName() + ": Session already invalidated");
            }
            switch (m.getName()) {
                case "getId":
                    return id[0];
                case "getCreationTime":
                case "getLastAccessedTime":
                    return 0L;
                case "getAttribute":
                    return attributes.get((String) a[0]);
                case "setAttribute": {
                    Object old = attributes.put((String) a[0], a[1]);
                    if (old != a[1] && old instanceof HttpSessionBindingListener) {
                        ((HttpSessionBindingListener) old).valueUnbound(
                                new HttpSessionBindingEvent(self[0], (String) a[0], old));
                    }
                    return null;
                }
                default:
                    return null;
            }
        });
        invalidate[0] = () -> {
            invalidated[0] = true;
            for (Map.Entry<String, Object> e : new ArrayList<>(attributes.entrySet())) {
                attributes.remove(e.getKey());
                if (e.getValue() instanceof HttpSessionBindingListener) {
                    ((HttpSessionBindingListener) e.getValue()).valueUnbound(
                            new HttpSessionBindingEvent(self[0], e.getKey(), e.getValue()));
                }
            }
        };
        return self[0];
    }

    /**
     * Tomcat changes a session's id at login ({@code changeSessionIdOnAuthentication}, on by default), keeping its
     * attributes: the filter's end of the affinity was bound once, to the first id, so the affinity of the id the
     * session's later requests routed by was never ended when the session was invalidated (it lived on until
     * {@code session.idle_ttl}).
     */
    @Test
    void theAffinityOfASessionWhoseIdChangedEndsWithTheSession() throws Exception {
        try (AffinityDataSource ds = overStubs("name = filter-id-change; nodes = A, B, C")) {
            AffinityFilter f = new AffinityFilter();
            f.addDataSource(ds);
            String[] id = {"before-login"};
            Runnable[] invalidate = new Runnable[1];
            HttpSession session = tomcatLike(id, invalidate);
            FilterChain chain = connecting(ds);
            f.doFilter(request(session), response(), chain);
            id[0] = "after-login"; // changeSessionId
            f.doFilter(request(session), response(), chain);
            f.doFilter(request(session), response(), chain);
            invalidate[0].run();
            assertEquals(false, ds.endSession("after-login"), "the affinity of the id the session routed by last"
                    + " ended with the session");
            assertEquals(false, ds.endSession("before-login"), "nor does its first id's outlive it");
        }
    }

    /**
     * Tomcat persists sessions when a webapp stops (its reload, or the server's restart) and restores them when
     * it starts: the filter's end of the affinity comes back deserialized, without its data sources (they are not
     * serializable). The filter saw an end bound to the session's id and bound no live one, so the affinity the
     * restored session's requests route by outlived the session (until {@code session.idle_ttl}).
     */
    @Test
    void theAffinityOfASessionRestoredFromPersistenceEndsWithTheSession() throws Exception {
        try (AffinityDataSource ds = overStubs("name = filter-restored; nodes = A, B, C")) {
            FilterChain chain = connecting(ds);
            String[] id = {"restored-1"};
            Runnable[] invalidateBefore = new Runnable[1];
            HttpSession before = tomcatLike(id, invalidateBefore);
            AffinityFilter first = new AffinityFilter();
            first.addDataSource(ds);
            first.doFilter(request(before), response(), chain);
            Object end = before.getAttribute(AffinityFilter.class.getName() + ".session");
            assertNotNull(end, "the filter bound the end of the affinity");

            // The webapp stops: its sessions are written out (StandardManager's SESSIONS.ser), then read back by
            // the webapp's next start, with a new filter instance.
            java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
            try (java.io.ObjectOutputStream out = new java.io.ObjectOutputStream(bytes)) {
                out.writeObject(end);
            }
            Object restored;
            try (java.io.ObjectInputStream in = new java.io.ObjectInputStream(
                    new java.io.ByteArrayInputStream(bytes.toByteArray()))) {
                restored = in.readObject();
            }
            Runnable[] invalidate = new Runnable[1];
            HttpSession after = tomcatLike(id, invalidate);
            after.setAttribute(AffinityFilter.class.getName() + ".session", restored);
            AffinityFilter second = new AffinityFilter();
            second.addDataSource(ds);
            second.doFilter(request(after), response(), chain);
            second.doFilter(request(after), response(), chain);
            invalidate[0].run();
            assertEquals(false, ds.endSession("restored-1"), "the restored session's affinity ended with it");
        }
    }

    /**
     * Two cookies of the token's name reach the filter when another webapp of the host (its root, path "/") keeps
     * a token too, or an old deployment's cookie remains: the client sends the most specific path first
     * (RFC 6265, 5.4), this webapp's own. The filter took the last one.
     */
    @Test
    void withTwoTokenCookiesTheFirstThatTheClusterRoutesWins() throws Exception {
        try (Cluster cluster = Cluster.fromConfig("name = filter-cookies; nodes = A, B, C")) {
            String mine = cluster.sessionToken("my-session");
            String mineNode = cluster.routeToken(mine).route().nodeName();
            for (String other : List.of("other-app-session!jvmroute1", cluster.sessionToken(otherNodeSession(cluster,
                    mineNode)))) {
                AffinityFilter f = new AffinityFilter();
                f.setRoutingToken(AffinityFilter.TokenStore.COOKIE, cluster);
                List<Cookie> written = new ArrayList<>();
                HttpServletResponse response = Stubs.proxy(HttpServletResponse.class, "Response", (p, m, a) -> {
                    if (m.getName().equals("addCookie")) {
                        written.add((Cookie) a[0]);
                    }
                    return null;
                });
                Map<String, Object> attributes = new HashMap<>();
                HttpServletRequest request = Stubs.proxy(HttpServletRequest.class, "Request", (p, m, a) -> switch (
                        m.getName()) {
                    case "setAttribute" -> attributes.put((String) a[0], a[1]);
                    case "getAttribute" -> attributes.get((String) a[0]);
                    case "getCookies" -> new Cookie[] {new Cookie(AffinityFilter.DEFAULT_COOKIE, mine),
                        new Cookie("JSESSIONID", "x"), new Cookie(AffinityFilter.DEFAULT_COOKIE, other)};
                    case "getContextPath" -> "/app";
                    case "isSecure", "isAsyncSupported" -> false;
                    default -> null;
                });
                Object[] seen = new Object[2];
                f.doFilter(request, response, (rq, rs) -> {
                    seen[0] = rq.getAttribute(AffinityFilter.TOKEN_ATTRIBUTE);
                    seen[1] = ((io.racaffinity.Route) rq.getAttribute(AffinityFilter.ROUTE_ATTRIBUTE)).nodeName();
                });
                assertEquals(mine, seen[0], "the request keeps this webapp's token (the other: " + other + ")");
                assertEquals(mineNode, seen[1], "and runs on its node");
                assertEquals(List.of(), written, "an unchanged token is not written again");
            }
        }
    }

    /**
     * A stale cookie under a longer path comes first (RFC 6265, 5.4): another cluster's token, or one from before
     * a re-configuration, is well-formed but names no node of this cluster. The filter routed the first token the
     * cluster accepted, so the stale one won: the session got a fresh pair of nodes and its cookie was rewritten.
     */
    @Test
    void aStaleWellFormedTokenThatNamesNoNodeOfTheClusterDoesNotMoveTheSession() throws Exception {
        try (Cluster cluster = Cluster.fromConfig("name = filter-stale; nodes = A, B, C");
                Cluster elsewhere = Cluster.fromConfig("name = filter-elsewhere; nodes = X, Y, Z")) {
            String mine = cluster.sessionToken(otherNodeSession(cluster, "A"));
            String mineNode = cluster.routeToken(mine).route().nodeName();
            String stale = elsewhere.sessionToken("stale-session");
            AffinityFilter f = new AffinityFilter();
            f.setRoutingToken(AffinityFilter.TokenStore.COOKIE, cluster);
            List<Cookie> written = new ArrayList<>();
            HttpServletResponse response = Stubs.proxy(HttpServletResponse.class, "Response", (p, m, a) -> {
                if (m.getName().equals("addCookie")) {
                    written.add((Cookie) a[0]);
                }
                return null;
            });
            Map<String, Object> attributes = new HashMap<>();
            HttpServletRequest request = Stubs.proxy(HttpServletRequest.class, "Request", (p, m, a) -> switch (
                    m.getName()) {
                case "setAttribute" -> attributes.put((String) a[0], a[1]);
                case "getAttribute" -> attributes.get((String) a[0]);
                case "getCookies" -> new Cookie[] {new Cookie(AffinityFilter.DEFAULT_COOKIE, stale),
                    new Cookie(AffinityFilter.DEFAULT_COOKIE, mine)};
                case "getContextPath" -> "/app";
                case "isSecure", "isAsyncSupported" -> false;
                default -> null;
            });
            Object[] seen = new Object[2];
            f.doFilter(request, response, (rq, rs) -> {
                seen[0] = rq.getAttribute(AffinityFilter.TOKEN_ATTRIBUTE);
                seen[1] = ((io.racaffinity.Route) rq.getAttribute(AffinityFilter.ROUTE_ATTRIBUTE)).nodeName();
            });
            assertEquals(mine, seen[0], "the request keeps the current token, not the stale " + stale);
            assertEquals(mineNode, seen[1], "and runs on its node");
            assertEquals(List.of(), written.stream().map(Cookie::getValue).toList(),
                    "the session's cookie is not rewritten");
        }
    }

    /**
     * A web application using XA (an {@link AffinityXADataSource} in JNDI): the filter's {@code dataSources} took
     * only an {@link AffinityDataSource} and refused to start, though XA branches are placed by the request's
     * session as any connection is, and that session's affinity must end with the HTTP session.
     */
    @Test
    void anXaDataSourceInJndiServesTheFilterAndItsSessionsEndWithTheirHttpSession() throws Exception {
        Map<String, javax.sql.XADataSource> stubs = new LinkedHashMap<>();
        for (String n : new String[] {"A", "B", "C"}) {
            stubs.put(n, Stubs.proxy(javax.sql.XADataSource.class, "XADataSource " + n, (p, m, a) -> null));
        }
        String name = "java:comp/env/jdbc/filter-xa";
        String factory = System.getProperty(javax.naming.Context.INITIAL_CONTEXT_FACTORY);
        try (AffinityXADataSource xds = new AffinityXADataSource()) {
            xds.setConfig("name = filter-xa; nodes = A, B, C");
            xds.setNodeXADataSources(stubs);
            xds.setHeartbeatIntervalMillis(0);
            xds.setRegisterMBean(false);
            io.racaffinity.test.MemoryContextFactory.BINDINGS.put(name, xds);
            System.setProperty(javax.naming.Context.INITIAL_CONTEXT_FACTORY,
                    io.racaffinity.test.MemoryContextFactory.class.getName());
            AffinityFilter f = new AffinityFilter();
            Map<String, String> params = Map.of("dataSources", name, "routingToken", "attribute");
            f.init(Stubs.proxy(jakarta.servlet.FilterConfig.class, "FilterConfig", (p, m, a) ->
                    m.getName().equals("getInitParameter") ? params.get((String) a[0]) : null));
            Cluster cluster = xds.getCluster();
            String[] id = {"xa-session"};
            Runnable[] invalidate = new Runnable[1];
            HttpSession session = tomcatLike(id, invalidate);
            Map<String, Object> attributes = new HashMap<>();
            HttpServletRequest request = Stubs.proxy(HttpServletRequest.class, "Request", (p, m, a) -> switch (
                    m.getName()) {
                case "getSession" -> session;
                case "setAttribute" -> attributes.put((String) a[0], a[1]);
                case "getAttribute" -> attributes.get((String) a[0]);
                case "getCookies" -> new Cookie[0];
                case "getContextPath" -> "";
                case "isSecure", "isAsyncSupported" -> false;
                default -> null;
            });
            Object[] seen = new Object[1];
            f.doFilter(request, response(), (rq, rs) -> {
                seen[0] = rq.getAttribute(AffinityFilter.ROUTE_ATTRIBUTE);
                // what an XA branch begun in this request does: the core places it by the request's session
                cluster.txBeginFor("xa-gtrid".getBytes(), null, AffinityDataSource.requestSession());
                cluster.txEnd("xa-gtrid".getBytes());
            });
            assertNotNull(seen[0], "the request was routed by its token on the XA data source's cluster");
            assertNotNull(session.getAttribute(AffinityFilter.DEFAULT_TOKEN_ATTRIBUTE));
            invalidate[0].run();
            assertEquals(false, cluster.endSession("xa-session"), "the session's affinity ended with it");
        } finally {
            io.racaffinity.test.MemoryContextFactory.BINDINGS.remove(name);
            if (factory == null) {
                System.clearProperty(javax.naming.Context.INITIAL_CONTEXT_FACTORY);
            } else {
                System.setProperty(javax.naming.Context.INITIAL_CONTEXT_FACTORY, factory);
            }
        }
    }

    /** A session id whose token's primary is not {@code node}. */
    static String otherNodeSession(Cluster cluster, String node) {
        for (int i = 0;; i++) {
            String id = "other-session-" + i;
            if (!cluster.routeToken(cluster.sessionToken(id)).route().nodeName().equals(node)) {
                return id;
            }
        }
    }

    /**
     * A logout that writes its audit row after {@code session.invalidate()}: the request still routes by the
     * session's id, so that connection made the core's session affinity again after the invalidation had ended
     * it, and nothing ended it any more (it lived on until {@code session.idle_ttl}).
     */
    @Test
    void theAffinityOfASessionInvalidatedDuringItsRequestEndsWithTheRequest() throws Exception {
        try (AffinityDataSource ds = overStubs("name = filter-logout; nodes = A, B, C")) {
            AffinityFilter f = new AffinityFilter();
            f.addDataSource(ds);
            String[] id = {"logging-out"};
            Runnable[] invalidate = new Runnable[1];
            HttpSession session = tomcatLike(id, invalidate);
            FilterChain logout = (rq, rs) -> {
                try {
                    try (Connection c = ds.getConnection()) {
                        assertNotNull(c);
                    }
                    invalidate[0].run(); // session.invalidate()
                    try (Connection c = ds.getConnection()) { // the audit row
                        assertNotNull(c);
                    }
                } catch (java.sql.SQLException e) {
                    throw new jakarta.servlet.ServletException(e);
                }
            };
            f.doFilter(request(session), response(), logout);
            assertEquals(false, ds.endSession("logging-out"), "the invalidated session's affinity ended with its"
                    + " request");
        }
    }

    /**
     * The first two requests of a new session run concurrently (a page and its first AJAX call): both find no end
     * bound and bind one, and the container tells the replaced one it was unbound. That ended the session's
     * affinity under the other request's feet, and the session was placed anew: its two requests ran on two nodes.
     */
    @Test
    void twoConcurrentFirstRequestsOfASessionKeepItsAffinity() throws Exception {
        try (AffinityDataSource ds = overStubs("name = filter-concurrent; nodes = A, B, C; policy = round_robin")) {
            AffinityFilter f = new AffinityFilter();
            f.addDataSource(ds);
            List<String> nodes = new ArrayList<>();
            FilterChain chain = (rq, rs) -> {
                try (Connection c = ds.getConnection()) {
                    nodes.add(c.unwrap(AffinityConnection.class).nodeName());
                } catch (java.sql.SQLException e) {
                    throw new jakarta.servlet.ServletException(e);
                }
            };
            String[] id = {"concurrent-1"};
            Runnable[] invalidate = new Runnable[1];
            HttpSession session = tomcatLike(id, invalidate);
            // The second request runs entirely between the first one's look for an end and its binding of one:
            // the first one's getAttribute serves the second request first.
            boolean[] interleaved = {false};
            HttpSession first = Stubs.proxy(HttpSession.class, "Session", (p, m, a) -> {
                Object r = m.invoke(session, a);
                if (m.getName().equals("getAttribute") && !interleaved[0]) {
                    interleaved[0] = true;
                    f.doFilter(request(session), response(), chain);
                }
                return r;
            });
            f.doFilter(request(first), response(), chain);
            assertEquals(2, nodes.size());
            assertEquals(nodes.get(0), nodes.get(1), "both requests of the session ran on one node: " + nodes);
            invalidate[0].run();
            assertEquals(false, ds.endSession("concurrent-1"), "the affinity still ends with the session");
        }
    }
}
