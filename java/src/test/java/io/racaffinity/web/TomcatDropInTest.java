package io.racaffinity.web;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.jdbc.AffinityDataSourceFactory;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import jakarta.servlet.http.HttpServletRequest;
import java.net.http.HttpClient;
import java.nio.file.Path;
import java.sql.Connection;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import javax.sql.DataSource;
import org.apache.catalina.Context;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.util.descriptor.web.ContextResource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The app-server drop-in: embedded Tomcat declares {@code jdbc/rac} as a Resource built
 * by {@link AffinityDataSourceFactory} from its attributes, and {@link AffinityFilter}
 * pins each request to its HTTP session's node. Real HTTP requests, with cookies, show
 * that every request of a session runs on one node and that sessions spread over nodes.
 */
@ExtendWith(PgNodes.class)
class TomcatDropInTest {
    static Tomcat tomcat;
    static int port;

    /** {@code /port}: the node (PostgreSQL port) the request's connection runs on. */
    public static final class PortServlet extends EmbeddedTomcat.TextServlet {
        private static final long serialVersionUID = 1L;

        @Override
        String answer(HttpServletRequest req, DataSource ds) throws Exception {
            if (req.getRequestURI().endsWith("/logout")) {
                req.getSession().invalidate();
                return "bye";
            } else if (req.getRequestURI().endsWith("/logout-audited")) {
                req.getSession().invalidate();
                try (Connection c = ds.getConnection()) { // the audit row, after the invalidation
                    return "bye from " + Pools.serverPort(c);
                }
            } else if (req.getRequestURI().endsWith("/sessions")) {
                String json = ds.unwrap(AffinityDataSource.class).getCluster().metricsJson();
                return Long.toString(new com.fasterxml.jackson.databind.ObjectMapper().readTree(json)
                        .path("scopes").path("session").path("live").asLong(-1));
            } else if (req.getRequestURI().endsWith("/type")) {
                return ds.getClass().getName();
            } else if (req.getRequestURI().endsWith("/login")) {
                return req.changeSessionId(); // what Tomcat's authenticators and Spring Security do at login
            }
            try (Connection c = ds.getConnection()) {
                return Integer.toString(Pools.serverPort(c));
            }
        }
    }

    @BeforeAll
    static void start() throws Exception {
        Path base = EmbeddedTomcat.baseDir("tomcat-");
        tomcat = EmbeddedTomcat.create(base);
        Context ctx = EmbeddedTomcat.addContext(tomcat, base, "");

        // <Resource name="jdbc/rac" type="javax.sql.DataSource" factory="io.racaffinity.jdbc.AffinityDataSourceFactory" .../>
        ContextResource res = EmbeddedTomcat.affinityResource("name = tomcat-rac; nodes = " + PgNodes.port(1) + ", "
                + PgNodes.port(2) + ", " + PgNodes.port(3), "maximumPoolSize=4 | minimumIdle=0");
        res.setProperty("password", "not-used-S3cret");
        res.setProperty("policy", "round_robin");
        res.setProperty("transactionStrict", "true");
        res.setProperty("sessionIdleTtl", "10m");
        res.setProperty("heartbeatIntervalMillis", "0");
        ctx.getNamingResources().addResource(res);
        EmbeddedTomcat.addAffinityFilter(ctx, "/*", Map.of("createSession", "true"));

        Tomcat.addServlet(ctx, "port", new PortServlet());
        ctx.addServletMappingDecoded("/*", "port");
        tomcat.start();
        port = tomcat.getConnector().getLocalPort();
    }

    @AfterAll
    static void stop() throws Exception {
        EmbeddedTomcat.stop(tomcat);
    }

    static HttpClient session() {
        return EmbeddedTomcat.browser();
    }

    static String get(HttpClient client, String path) throws Exception {
        return EmbeddedTomcat.send(port, client, path).body();
    }

    @Test
    void theFactoryBuildsTheDataSourceFromTheResourceAttributes() throws Exception {
        assertEquals(AffinityDataSource.class.getName(), get(session(), "/type"));
    }

    @Test
    void everyRequestOfASessionRunsOnOneNodeAndSessionsSpread() throws Exception {
        Map<Integer, Set<String>> perSession = new LinkedHashMap<>();
        List<HttpClient> clients = new ArrayList<>();
        for (int s = 0; s < 9; s++) {
            clients.add(session());
        }
        for (int round = 0; round < 15; round++) {
            for (int s = 0; s < clients.size(); s++) {
                perSession.computeIfAbsent(s, k -> new HashSet<>()).add(get(clients.get(s), "/port"));
            }
        }
        Set<String> nodes = new HashSet<>();
        perSession.forEach((s, ports) -> {
            assertEquals(1, ports.size(), "session " + s + " stays on one node: " + ports);
            nodes.addAll(ports);
        });
        System.out.println("tomcat: 9 sessions x 15 requests, node per session " + perSession);
        assertTrue(nodes.size() >= 2, "sessions spread over nodes: " + nodes);

        // Without the session cookie (a new client each time) requests are balanced.
        Set<String> anonymous = new HashSet<>();
        for (int i = 0; i < 9; i++) {
            anonymous.add(get(session(), "/port"));
        }
        assertTrue(anonymous.size() >= 2, "new sessions are balanced: " + anonymous);

        // Invalidating the HTTP session ends its affinity in the core.
        HttpClient c = clients.get(0);
        long before = Long.parseLong(get(c, "/sessions"));
        get(c, "/logout");
        long after = Long.parseLong(get(session(), "/sessions"));
        assertEquals(before - 1, after, "logout ended the session's affinity (requests without a connection open none)");

        // A logout that uses the database after the invalidation ends the affinity too.
        c = clients.get(1);
        before = Long.parseLong(get(c, "/sessions"));
        get(c, "/logout-audited");
        after = Long.parseLong(get(session(), "/sessions"));
        assertEquals(before - 1, after, "an audited logout ended the session's affinity");
    }

    @Test
    void aSessionKeepsItsNodeWhenItsIdChangesAtLogin() throws Exception {
        // Session fixation protection changes the id and keeps the session: its node, and the server-side state
        // there (cached plans, temporary tables, the instance's buffer cache), must stay with it.
        long before = Long.parseLong(get(session(), "/sessions"));
        Map<Integer, List<String>> perSession = new LinkedHashMap<>();
        for (int s = 0; s < 6; s++) {
            HttpClient client = session();
            List<String> ports = new ArrayList<>();
            ports.add(get(client, "/port"));
            get(client, "/login");
            ports.add(get(client, "/port"));
            ports.add(get(client, "/port"));
            perSession.put(s, ports);
            get(client, "/logout");
        }
        perSession.forEach((s, ports) -> assertEquals(1, new HashSet<>(ports).size(),
                "session " + s + " kept its node over its login: " + ports));
        assertEquals(before, Long.parseLong(get(session(), "/sessions")), "every logout ended its session's affinity");
    }

    @Test
    void unknownAttributesAndBadConfigFailTheLookupWithAClearMessage() {
        Exception e = org.junit.jupiter.api.Assertions.assertThrows(java.sql.SQLException.class,
                () -> AffinityDataSourceFactory.create(Map.of("config", "nodes = A, B", "urlTemplat", "x"), false));
        assertTrue(e.getMessage().contains("urlTemplat"), e.getMessage());
        e = org.junit.jupiter.api.Assertions.assertThrows(java.sql.SQLException.class,
                () -> AffinityDataSourceFactory.create(Map.of("config", "nodes = A, B", "nodeUrlList",
                        "A=jdbc:postgresql://h/a | B=jdbc:postgresql://h/b", "transactionStrict", "maybe"), false));
        assertTrue(e.getMessage().contains("transaction.strict"), e.getMessage());
        assertInstanceOf(java.sql.SQLException.class, e);
    }
}
