package io.racaffinity.web;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.Route;
import io.racaffinity.TokenChoice;
import io.racaffinity.TokenRoute;
import io.racaffinity.jdbc.AbstractAffinityDataSource;
import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.jdbc.RouteScope;
import io.racaffinity.jdbc.SessionScope;
import jakarta.servlet.AsyncContext;
import jakarta.servlet.AsyncListener;
import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.FilterConfig;
import jakarta.servlet.ServletContext;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.Cookie;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpSession;
import jakarta.servlet.http.HttpSessionBindingEvent;
import jakarta.servlet.http.HttpSessionBindingListener;
import java.io.IOException;
import java.io.Serializable;
import java.lang.System.Logger.Level;
import java.security.SecureRandom;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import javax.naming.InitialContext;
import javax.naming.NamingException;

/**
 * Web-session affinity for every request (UCP's web-session affinity, seed 002):
 * while a request runs, every affinity data source on its thread routes by the
 * request's HTTP session id ({@link AffinityDataSource#withRequestSession}: the
 * core's session routing, the session id as key; the id of the session's first request,
 * kept when {@code changeSessionId} changes it at login), so all requests of one session
 * use one RAC instance; the scope ends when the request ends. A new global
 * transaction started during the request prefers the session's node too. Work an asynchronous
 * servlet starts with {@code AsyncContext.start} runs in the request's scope as well (declare
 * the filter {@code <async-supported>true</async-supported>} then); work handed to the
 * application's own executors does not.
 *
 * <pre>{@code
 * <filter>
 *   <filter-name>racaffinity</filter-name>
 *   <filter-class>io.racaffinity.web.AffinityFilter</filter-class>
 *   <init-param><param-name>createSession</param-name><param-value>true</param-value></init-param>
 *   <init-param><param-name>dataSources</param-name><param-value>java:comp/env/jdbc/rac</param-value></init-param>
 * </filter>
 * <filter-mapping><filter-name>racaffinity</filter-name><url-pattern>/*</url-pattern></filter-mapping>
 * }</pre>
 *
 * <p>Init parameters:
 * <ul>
 *   <li>{@code createSession} (default false): create the HTTP session at the first
 *       request, so that request is already pinned; otherwise requests without a
 *       session are load-balanced.
 *   <li>{@code dataSources} (optional): comma-separated JNDI names of
 *       {@link AffinityDataSource}s or {@code AffinityXADataSource}s whose session affinity ends
 *       when the HTTP session is invalidated or expires (otherwise the core forgets it after
 *       {@code session.idle_ttl}).
 *   <li>{@code routingToken} (default {@code none}): {@code cookie} or {@code attribute} turns on
 *       seed 001's routing tokens (WebLogic's primary and backup carried in the session id,
 *       {@link Cluster#routeToken}): each request is routed by its token, kept in the cookie
 *       {@code tokenCookie} (default {@value #DEFAULT_COOKIE}) or in the HTTP session attribute
 *       {@code tokenAttribute} (default {@value #DEFAULT_TOKEN_ATTRIBUTE}); the token is written
 *       back (Set-Cookie, or the attribute) only when the routing data changed. The cluster is
 *       the first of {@code dataSources} (or {@link #setCluster}). A request without a token
 *       (or with a malformed or foreign one) gets a new one, for its HTTP session id when it has
 *       a session, else for a random id. The request's {@link Route} is the request attribute
 *       {@value #ROUTE_ATTRIBUTE}, its token {@value #TOKEN_ATTRIBUTE}, and every affinity data
 *       source on that cluster connects to that node ({@link AffinityDataSource#withRequestRoute});
 *       a JTA transaction or XA branch the request begins is placed by the same token.
 *   <li>{@code tokenCookie}, {@code tokenAttribute}: see {@code routingToken}.
 * </ul>
 * Strict mode ({@code session.strict}, JMX {@code UseStrictWebSessionAffinity}) makes a
 * connection fail instead of moving the session when its node is down. In token mode, when
 * the core routes the token nowhere (strict refusal, every node down), the request still runs
 * and keeps its token; a connection it asks for is refused with the core's error
 * ({@link AffinityDataSource#withRequestRefusal}).
 */
public class AffinityFilter implements Filter {
    private static final System.Logger LOG = System.getLogger("io.racaffinity.web");
    static final String ATTRIBUTE = AffinityFilter.class.getName() + ".session";

    /** The default name of the token cookie. */
    public static final String DEFAULT_COOKIE = "RACAFFINITY_ROUTE";
    /** The default HTTP session attribute holding the token ({@code routingToken=attribute}). */
    public static final String DEFAULT_TOKEN_ATTRIBUTE = "io.racaffinity.routingToken";
    /** The request attribute holding the request's {@link Route} in token mode. */
    public static final String ROUTE_ATTRIBUTE = "io.racaffinity.web.route";
    /** The request attribute holding the token the client holds after the request. */
    public static final String TOKEN_ATTRIBUTE = "io.racaffinity.web.token";

    /** Where the routing token lives. */
    public enum TokenStore {
        /** No routing token: session-key affinity only (the default). */
        NONE,
        /** A cookie ({@code tokenCookie}). */
        COOKIE,
        /** An HTTP session attribute ({@code tokenAttribute}). */
        ATTRIBUTE
    }

    private static final SecureRandom RANDOM = new SecureRandom();
    private boolean createSession;
    private final List<AbstractAffinityDataSource<?>> dataSources = new ArrayList<>();
    private TokenStore tokenStore = TokenStore.NONE;
    private String tokenCookie = DEFAULT_COOKIE;
    private String tokenAttribute = DEFAULT_TOKEN_ATTRIBUTE;
    private Cluster cluster;

    @Override
    public void init(FilterConfig config) throws ServletException {
        createSession = Boolean.parseBoolean(config.getInitParameter("createSession"));
        String store = config.getInitParameter("routingToken");
        if (store != null && !store.isBlank()) {
            try {
                tokenStore = TokenStore.valueOf(store.trim().toUpperCase(Locale.ROOT));
            } catch (IllegalArgumentException e) {
                throw new ServletException("AffinityFilter: routingToken must be none, cookie or attribute, not " + store);
            }
        }
        String cookieName = config.getInitParameter("tokenCookie");
        if (cookieName != null && !cookieName.isBlank()) {
            tokenCookie = cookieName.trim();
        }
        String attribute = config.getInitParameter("tokenAttribute");
        if (attribute != null && !attribute.isBlank()) {
            tokenAttribute = attribute.trim();
        }
        String names = config.getInitParameter("dataSources");
        if (names != null && !names.isBlank()) {
            try {
                InitialContext ctx = new InitialContext();
                try {
                    for (String n : names.split(",")) {
                        if (n.isBlank()) {
                            continue;
                        }
                        Object o = ctx.lookup(n.trim());
                        if (!(o instanceof AbstractAffinityDataSource)) {
                            throw new ServletException("AffinityFilter: " + n.trim() + " is a "
                                    + (o == null ? "null" : o.getClass().getName())
                                    + ", not an AffinityDataSource or AffinityXADataSource");
                        }
                        dataSources.add((AbstractAffinityDataSource<?>) o);
                    }
                } finally {
                    ctx.close();
                }
            } catch (NamingException e) {
                throw new ServletException("AffinityFilter: JNDI lookup of dataSources failed: " + e.getMessage(), e);
            }
        }
        if (tokenStore != TokenStore.NONE && cluster == null) {
            if (dataSources.isEmpty()) {
                throw new ServletException("AffinityFilter: routingToken=" + tokenStore.name().toLowerCase(Locale.ROOT)
                        + " needs dataSources (its first data source's cluster routes the tokens)");
            }
            try {
                cluster = dataSources.get(0).getCluster();
            } catch (SQLException e) {
                throw new ServletException("AffinityFilter: the cluster of dataSources failed: " + e.getMessage(), e);
            }
        }
    }

    /**
     * Turns on routing tokens (programmatic setup; see {@code routingToken}).
     *
     * @param store where the token lives
     * @param cluster the cluster that routes the tokens
     */
    public void setRoutingToken(TokenStore store, Cluster cluster) {
        this.tokenStore = java.util.Objects.requireNonNull(store, "store");
        this.cluster = cluster;
    }

    /** @param name the token cookie's name (default {@value #DEFAULT_COOKIE}) */
    public void setTokenCookie(String name) {
        this.tokenCookie = java.util.Objects.requireNonNull(name, "name");
    }

    /** @param name the token's HTTP session attribute (default {@value #DEFAULT_TOKEN_ATTRIBUTE}) */
    public void setTokenAttribute(String name) {
        this.tokenAttribute = java.util.Objects.requireNonNull(name, "name");
    }

    /**
     * Adds a data source whose session affinity ends with the HTTP session (programmatic setup): an
     * {@code AffinityDataSource} or an {@code AffinityXADataSource} (its branches are placed by the session too).
     *
     * @param ds the data source
     */
    public void addDataSource(AbstractAffinityDataSource<?> ds) {
        dataSources.add(ds);
    }

    /** @param create create the HTTP session at the first request (programmatic setup) */
    public void setCreateSession(boolean create) {
        this.createSession = create;
    }

    @Override
    public void doFilter(ServletRequest request, ServletResponse response, FilterChain chain)
            throws IOException, ServletException {
        if (tokenStore != TokenStore.NONE && request instanceof HttpServletRequest
                && response instanceof HttpServletResponse) {
            routeByToken((HttpServletRequest) request, (HttpServletResponse) response, chain);
            return;
        }
        HttpSession session = request instanceof HttpServletRequest
                ? ((HttpServletRequest) request).getSession(createSession) : null;
        String id = session == null ? null : bind(session);
        if (id == null) {
            chain.doFilter(request, response);
            return;
        }
        Scoped scoped = work -> {
            try (SessionScope scope = AffinityDataSource.withRequestSession(id)) {
                work.run();
            }
        };
        try (SessionScope scope = AffinityDataSource.withRequestSession(id)) {
            chain.doFilter(asyncScoped(request, scoped), response);
        } finally {
            endIfInvalidated(session, id);
        }
    }

    /**
     * A session invalidated during its request (a logout that then writes its audit row): the invalidation ended
     * the affinity, and a connection the request took afterwards, still routed by the id, made it again, with no
     * session left to end it.
     */
    private void endIfInvalidated(HttpSession session, String id) {
        if (dataSources.isEmpty()) {
            return;
        }
        try {
            session.getCreationTime();
        } catch (IllegalStateException invalidated) {
            End.endAll(id, dataSources);
        }
    }

    /** Token mode: reads the token, lets the core route it, writes it back only when it changed. */
    private void routeByToken(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
            throws IOException, ServletException {
        HttpSession session = request.getSession(createSession || tokenStore == TokenStore.ATTRIBUTE);
        String sessionId = session == null ? null : bind(session);
        if (sessionId == null) {
            session = null;
        }
        // Several cookies of the name arrive when another webapp of the host (path "/") or an older deployment
        // keeps one too; the client sends the most specific path, this webapp's, first (RFC 6265, 5.4).
        List<String> held = new ArrayList<>(1);
        if (tokenStore == TokenStore.COOKIE) {
            Cookie[] cookies = request.getCookies();
            if (cookies != null) {
                for (Cookie c : cookies) {
                    if (tokenCookie.equals(c.getName()) && c.getValue() != null && !c.getValue().isEmpty()) {
                        held.add(c.getValue());
                    }
                }
            }
        } else if (session != null) {
            Object value;
            try {
                value = session.getAttribute(tokenAttribute);
            } catch (IllegalStateException e) {
                value = null; // invalidated meanwhile: a new token, as for a request without one
            }
            if (value instanceof String && !((String) value).isEmpty()) {
                held.add((String) value);
            }
        }
        String token = null;
        TokenRoute decided = null;
        boolean write;
        try {
            // The core chooses among them (docs/wls-routing.md): a stale cookie under a longer path, another
            // cluster's or from before a re-configuration, must not move the session.
            Optional<TokenChoice> chosen = held.isEmpty() ? Optional.empty() : cluster.routeTokens(held);
            if (chosen.isPresent()) {
                token = chosen.get().token(); // the one a refusal (strict, every node down) keeps for the request
                decided = chosen.get().route();
            } else if (!held.isEmpty()) {
                LOG.log(Level.DEBUG, () -> "no well-formed routing token among " + held.size() + ": a new one");
            }
            if (decided == null) {
                token = cluster.sessionToken(sessionId != null ? sessionId : newSessionId());
                decided = cluster.routeToken(token);
                write = true;
            } else {
                write = decided.changed();
            }
        } catch (AffinityException e) {
            // No node may serve the session now (strict affinity, every node down): a request
            // that needs no database still runs, and one that asks for a connection is refused
            // by the data source with this error. The token is kept for when a node is back.
            LOG.log(Level.DEBUG, () -> "the routing token has no node now: " + e.getMessage());
            String refused = token;
            Scoped scoped = work -> {
                try (RouteScope scope = AffinityDataSource.withRequestRefusal(cluster, e, refused)) {
                    work.run();
                }
            };
            try (RouteScope scope = AffinityDataSource.withRequestRefusal(cluster, e, token)) {
                chain.doFilter(asyncScoped(request, scoped), response);
            }
            return;
        }
        String kept = decided.token().orElse(token);
        if (write) {
            if (tokenStore == TokenStore.COOKIE) {
                Cookie c = new Cookie(tokenCookie, kept);
                c.setPath(request.getContextPath().isEmpty() ? "/" : request.getContextPath());
                c.setHttpOnly(true);
                c.setSecure(request.isSecure());
                response.addCookie(c);
            } else if (session != null) {
                try {
                    session.setAttribute(tokenAttribute, kept);
                } catch (IllegalStateException e) {
                    // invalidated meanwhile: the client keeps no token, its next request gets a new one
                }
            }
        }
        Route route = decided.route();
        request.setAttribute(ROUTE_ATTRIBUTE, route);
        request.setAttribute(TOKEN_ATTRIBUTE, kept);
        Scoped scoped = work -> {
            try (RouteScope scope = AffinityDataSource.withRequestRoute(cluster, route, kept)) {
                work.run();
            }
        };
        try (RouteScope scope = AffinityDataSource.withRequestRoute(cluster, route, kept)) {
            chain.doFilter(asyncScoped(request, scoped), response);
        }
    }

    /** Runs work in the request's routing scope, on the calling thread. */
    @FunctionalInterface
    private interface Scoped {
        void run(Runnable work);
    }

    /**
     * The request as the servlet sees it: when it may go asynchronous, its {@link AsyncContext#start} work runs in
     * the request's scope too. That work runs on another container thread after this filter has returned, so the
     * thread's scope is gone: without this, an asynchronous servlet's connections were load-balanced.
     */
    private static ServletRequest asyncScoped(ServletRequest request, Scoped scoped) {
        return request instanceof HttpServletRequest && request.isAsyncSupported()
                ? new AsyncScopedRequest((HttpServletRequest) request, scoped) : request;
    }

    private static final class AsyncScopedRequest extends HttpServletRequestWrapper {
        private final Scoped scoped;
        private ScopedAsyncContext async;

        AsyncScopedRequest(HttpServletRequest request, Scoped scoped) {
            super(request);
            this.scoped = scoped;
        }

        private AsyncContext scoped(AsyncContext ac) {
            if (ac == null) {
                return null;
            }
            if (async == null || async.delegate != ac) {
                async = new ScopedAsyncContext(ac, scoped);
            }
            return async;
        }

        @Override
        public AsyncContext startAsync() {
            return scoped(super.startAsync());
        }

        @Override
        public AsyncContext startAsync(ServletRequest request, ServletResponse response) {
            return scoped(super.startAsync(request, response));
        }

        @Override
        public AsyncContext getAsyncContext() {
            return scoped(super.getAsyncContext());
        }
    }

    private static final class ScopedAsyncContext implements AsyncContext {
        final AsyncContext delegate;
        private final Scoped scoped;

        ScopedAsyncContext(AsyncContext delegate, Scoped scoped) {
            this.delegate = delegate;
            this.scoped = scoped;
        }

        @Override
        public void start(Runnable run) {
            delegate.start(() -> scoped.run(run));
        }

        @Override
        public ServletRequest getRequest() {
            return delegate.getRequest();
        }

        @Override
        public ServletResponse getResponse() {
            return delegate.getResponse();
        }

        @Override
        public boolean hasOriginalRequestAndResponse() {
            return delegate.hasOriginalRequestAndResponse();
        }

        @Override
        public void dispatch() {
            delegate.dispatch();
        }

        @Override
        public void dispatch(String path) {
            delegate.dispatch(path);
        }

        @Override
        public void dispatch(ServletContext context, String path) {
            delegate.dispatch(context, path);
        }

        @Override
        public void complete() {
            delegate.complete();
        }

        @Override
        public void addListener(AsyncListener listener) {
            delegate.addListener(listener);
        }

        @Override
        public void addListener(AsyncListener listener, ServletRequest request, ServletResponse response) {
            delegate.addListener(listener, request, response);
        }

        @Override
        public <T extends AsyncListener> T createListener(Class<T> type) throws ServletException {
            return delegate.createListener(type);
        }

        @Override
        public void setTimeout(long timeout) {
            delegate.setTimeout(timeout);
        }

        @Override
        public long getTimeout() {
            return delegate.getTimeout();
        }
    }

    /**
     * The session's routing key, its affinity's end bound to it first (once); null if another request invalidated
     * it since this one got it (its attribute calls throw then): this request then runs as one without a
     * session, rather than fail, or route by a key whose end nothing would report.
     *
     * <p>The key is the id the session had at its first request through the filter, kept in the end's
     * attribute: {@code changeSessionId} (Tomcat's authenticators and Spring Security call it at login, against
     * session fixation) keeps the session and its attributes, so it keeps its node too, and the end bound to
     * that key still ends its affinity. The key is the affinity's only: it is never sent to the client.
     */
    private String bind(HttpSession session) {
        try {
            Object end = session.getAttribute(ATTRIBUTE);
            if (end instanceof End && !((End) end).restored()) {
                return ((End) end).id;
            }
            // None yet; or a restored end (the session persisted at the webapp's stop, read back at its start),
            // which lost its data sources and would end nothing: a live one replaces it, with the same key.
            String key = end instanceof End ? ((End) end).id : session.getId();
            session.setAttribute(ATTRIBUTE, new End(key, dataSources));
            return key;
        } catch (IllegalStateException e) {
            return null;
        }
    }

    private static String newSessionId() {
        byte[] b = new byte[16];
        RANDOM.nextBytes(b);
        return HexFormat.of().formatHex(b);
    }

    @Override
    public void destroy() {
        dataSources.clear();
    }

    /**
     * The session's routing key ({@link #bind}), and the end of its affinity when the HTTP session ends. Its data
     * sources are not carried over a session's persistence or migration: the filter binds a live one, with the
     * same key, at the restored session's next request.
     */
    static final class End implements HttpSessionBindingListener, Serializable {
        private static final long serialVersionUID = 1L;
        private final String id;
        private final transient List<AbstractAffinityDataSource<?>> dataSources;

        End(String id, List<AbstractAffinityDataSource<?>> dataSources) {
            this.id = id;
            this.dataSources = List.copyOf(dataSources);
        }

        /** Deserialized (session persistence or migration): its data sources did not come along. */
        boolean restored() {
            return dataSources == null;
        }

        @Override
        public void valueUnbound(HttpSessionBindingEvent event) {
            if (dataSources != null && !replacedByLiveEndOfSameId(event)) {
                endAll(id, dataSources);
            }
        }

        /**
         * The first requests of a new session may run concurrently: each finds no end and binds one, and the
         * container unbinds the one replaced (the new value is already bound then). That one must not end the
         * affinity the session routes by. An invalidated session's attribute calls throw: it ends.
         */
        private boolean replacedByLiveEndOfSameId(HttpSessionBindingEvent event) {
            Object now;
            try {
                now = event.getSession().getAttribute(ATTRIBUTE);
            } catch (IllegalStateException invalidated) {
                return false;
            }
            return now != this && now instanceof End && ((End) now).id.equals(id) && !((End) now).restored();
        }

        static void endAll(String id, List<AbstractAffinityDataSource<?>> dataSources) {
            for (AbstractAffinityDataSource<?> ds : dataSources) {
                try {
                    ds.endSession(id);
                } catch (SQLException | RuntimeException e) {
                    LOG.log(Level.DEBUG, () -> "ending the session affinity failed: " + e.getMessage());
                }
            }
        }
    }
}
