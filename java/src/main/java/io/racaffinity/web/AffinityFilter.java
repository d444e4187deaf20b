package io.racaffinity.web;

import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.jdbc.SessionScope;
import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.FilterConfig;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpSession;
import jakarta.servlet.http.HttpSessionBindingEvent;
import jakarta.servlet.http.HttpSessionBindingListener;
import java.io.IOException;
import java.io.Serializable;
import java.lang.System.Logger.Level;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import javax.naming.InitialContext;
import javax.naming.NamingException;

/**
 * Web-session affinity for every request (UCP's web-session affinity, seed 002):
 * while a request runs, every affinity data source on its thread routes by the
 * request's HTTP session id ({@link AffinityDataSource#withRequestSession}: the
 * core's session routing, the session id as key), so all requests of one session
 * use one RAC instance; the scope ends when the request ends. A new global
 * transaction started during the request prefers the session's node too.
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
 *       {@link AffinityDataSource}s whose session affinity ends when the HTTP session
 *       is invalidated or expires (otherwise the core forgets it after
 *       {@code session.idle_ttl}).
 * </ul>
 * Strict mode ({@code session.strict}, JMX {@code UseStrictWebSessionAffinity}) makes a
 * connection fail instead of moving the session when its node is down.
 */
public class AffinityFilter implements Filter {
    private static final System.Logger LOG = System.getLogger("io.racaffinity.web");
    static final String ATTRIBUTE = AffinityFilter.class.getName() + ".session";

    private boolean createSession;
    private final List<AffinityDataSource> dataSources = new ArrayList<>();

    @Override
    public void init(FilterConfig config) throws ServletException {
        createSession = Boolean.parseBoolean(config.getInitParameter("createSession"));
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
                        if (!(o instanceof AffinityDataSource)) {
                            throw new ServletException("AffinityFilter: " + n.trim() + " is a "
                                    + (o == null ? "null" : o.getClass().getName()) + ", not an AffinityDataSource");
                        }
                        dataSources.add((AffinityDataSource) o);
                    }
                } finally {
                    ctx.close();
                }
            } catch (NamingException e) {
                throw new ServletException("AffinityFilter: JNDI lookup of dataSources failed: " + e.getMessage(), e);
            }
        }
    }

    /** Sets the data sources whose session affinity ends with the HTTP session (programmatic setup). */
    public void addDataSource(AffinityDataSource ds) {
        dataSources.add(ds);
    }

    /** @param create create the HTTP session at the first request (programmatic setup) */
    public void setCreateSession(boolean create) {
        this.createSession = create;
    }

    @Override
    public void doFilter(ServletRequest request, ServletResponse response, FilterChain chain)
            throws IOException, ServletException {
        HttpSession session = request instanceof HttpServletRequest
                ? ((HttpServletRequest) request).getSession(createSession) : null;
        if (session == null) {
            chain.doFilter(request, response);
            return;
        }
        String id = session.getId();
        if (!dataSources.isEmpty() && session.getAttribute(ATTRIBUTE) == null) {
            try {
                session.setAttribute(ATTRIBUTE, new End(id, dataSources));
            } catch (IllegalStateException e) {
                // invalidated meanwhile
            }
        }
        try (SessionScope scope = AffinityDataSource.withRequestSession(id)) {
            chain.doFilter(request, response);
        }
    }

    @Override
    public void destroy() {
        dataSources.clear();
    }

    /** Ends the session's affinity when the HTTP session ends (not carried over a session migration). */
    static final class End implements HttpSessionBindingListener, Serializable {
        private static final long serialVersionUID = 1L;
        private final String id;
        private final transient List<AffinityDataSource> dataSources;

        End(String id, List<AffinityDataSource> dataSources) {
            this.id = id;
            this.dataSources = List.copyOf(dataSources);
        }

        @Override
        public void valueUnbound(HttpSessionBindingEvent event) {
            if (dataSources == null) {
                return;
            }
            for (AffinityDataSource ds : dataSources) {
                try {
                    ds.endSession(id);
                } catch (SQLException | RuntimeException e) {
                    LOG.log(Level.DEBUG, () -> "ending the session affinity failed: " + e.getMessage());
                }
            }
        }
    }
}
