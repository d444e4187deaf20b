package io.racaffinity.web;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import jakarta.servlet.AsyncContext;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.net.http.HttpClient;
import java.nio.file.Path;
import java.sql.Connection;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import javax.naming.InitialContext;
import javax.sql.DataSource;
import org.apache.catalina.Context;
import org.apache.catalina.Wrapper;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.util.descriptor.web.ContextResource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * An asynchronous servlet ({@code startAsync}, then {@link AsyncContext#start}) behind
 * {@link AffinityFilter}: its database work runs on a container thread after the filter has
 * returned, and must still run on the request's session node (round robin would move it).
 */
@ExtendWith(PgNodes.class)
class AsyncServletTomcatTest {
    static Tomcat tomcat;
    static int port;

    /** {@code /async}: the node (PostgreSQL port) of a connection taken in {@code AsyncContext.start}. */
    public static final class AsyncPortServlet extends HttpServlet {
        private static final long serialVersionUID = 1L;

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) {
            AsyncContext ac = req.startAsync();
            ac.start(() -> {
                HttpServletResponse r = (HttpServletResponse) ac.getResponse();
                try {
                    DataSource ds = (DataSource) new InitialContext().lookup(EmbeddedTomcat.DATA_SOURCE);
                    try (Connection c = ds.getConnection()) {
                        r.setContentType("text/plain");
                        r.getWriter().print(Pools.serverPort(c));
                    }
                } catch (Exception e) {
                    try {
                        r.sendError(500, String.valueOf(e));
                    } catch (java.io.IOException ignored) {
                        // the client sees no answer: the test fails on it
                    }
                } finally {
                    ac.complete();
                }
            });
        }
    }

    /** A webapp at {@code path}: the affinity resource, the filter (async-supported) and the async servlet. */
    static void addContext(Path base, String path, Map<String, String> filterParameters) throws Exception {
        Context ctx = EmbeddedTomcat.addContext(tomcat, base, path);
        ContextResource res = EmbeddedTomcat.affinityResource("name = tomcat-async" + path.replace('/', '-')
                + "; nodes = " + PgNodes.port(1) + ", " + PgNodes.port(2) + ", " + PgNodes.port(3),
                "maximumPoolSize=4 | minimumIdle=0");
        res.setProperty("policy", "round_robin");
        res.setProperty("heartbeatIntervalMillis", "0");
        ctx.getNamingResources().addResource(res);
        EmbeddedTomcat.addAffinityFilter(ctx, "/*", filterParameters);
        // <async-supported>true</async-supported>: else the servlet's startAsync is refused
        ctx.findFilterDef("racaffinity").setAsyncSupported("true");
        Wrapper w = Tomcat.addServlet(ctx, "async", new AsyncPortServlet());
        w.setAsyncSupported(true);
        ctx.addServletMappingDecoded("/async", "async");
    }

    @BeforeAll
    static void start() throws Exception {
        Path base = EmbeddedTomcat.baseDir("tomcat-async-");
        tomcat = EmbeddedTomcat.create(base);
        addContext(base, "", Map.of("createSession", "true"));
        addContext(base, "/token", Map.of("routingToken", "cookie"));
        tomcat.start();
        port = tomcat.getConnector().getLocalPort();
    }

    @AfterAll
    static void stop() throws Exception {
        EmbeddedTomcat.stop(tomcat);
    }

    @Test
    void theWorkOfAnAsyncServletRunsOnItsSessionsNode() throws Exception {
        Set<String> nodes = sessionsStayOnOneNode("/async");
        // Round robin places the sessions: not all on one node (else staying on one would prove nothing).
        assertTrue(nodes.size() >= 2, "sessions spread over nodes: " + nodes);
    }

    @Test
    void theWorkOfAnAsyncServletRunsOnItsTokensNode() throws Exception {
        // Tokens of random ids are placed by rendezvous hashing: four may share a node, so no spread is
        // asserted; the work outside the token's scope was round-robined over all three (seen before the fix).
        sessionsStayOnOneNode("/token/async");
    }

    /** Each session's async work stays on one node; returns the nodes used. */
    static Set<String> sessionsStayOnOneNode(String path) throws Exception {
        Map<Integer, Set<String>> perSession = new LinkedHashMap<>();
        List<HttpClient> clients = new ArrayList<>();
        for (int s = 0; s < 4; s++) {
            clients.add(EmbeddedTomcat.browser());
        }
        for (int round = 0; round < 6; round++) {
            for (int s = 0; s < clients.size(); s++) {
                perSession.computeIfAbsent(s, k -> new HashSet<>())
                        .add(EmbeddedTomcat.send(port, clients.get(s), path).body());
            }
        }
        Set<String> nodes = new HashSet<>();
        perSession.forEach((s, ports) -> {
            assertEquals(1, ports.size(), path + ": session " + s + "'s async work stays on one node: " + ports);
            nodes.addAll(ports);
        });
        return nodes;
    }
}
