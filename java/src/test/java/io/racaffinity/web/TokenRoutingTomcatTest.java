package io.racaffinity.web;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.racaffinity.Cluster;
import io.racaffinity.NodeState;
import io.racaffinity.SessionRouting;
import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.testsupport.Await;
import jakarta.servlet.http.HttpServletRequest;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.sql.Connection;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.BooleanSupplier;
import javax.sql.DataSource;
import org.apache.catalina.Context;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.util.descriptor.web.ContextResource;
import org.apache.tomcat.util.descriptor.web.FilterMap;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Seed 001's routing tokens through {@link AffinityFilter} in embedded Tomcat: the
 * token (WebLogic's session id with its primary and backup) lives in a cookie
 * ({@code /c}) or in an HTTP session attribute ({@code /a}); each request runs on the
 * node the core decided, checked by the node's own port ({@code SELECT
 * inet_server_port()}); the seed's walk-through kills the primary, then a second node,
 * then restarts both, with the 3 local nodes on 3 machines.
 */
@ExtendWith(PgNodes.class)
class TokenRoutingTomcatTest {
    static final HttpClient ADMIN = EmbeddedTomcat.browser();
    static Tomcat tomcat;
    static int port;
    static final String COOKIE = "WLROUTE";

    static String nodeName(int i) {
        return Integer.toString(PgNodes.port(i));
    }

    /** Nodes named by their ports (the URL template places them), each on its own machine. */
    static String config(String name, String extra) {
        StringBuilder b = new StringBuilder("name = " + name + "; nodes = " + nodeName(1) + ", " + nodeName(2) + ", "
                + nodeName(3));
        for (int i = 1; i <= 3; i++) {
            b.append("; node.").append(nodeName(i)).append(".machine = m").append(i);
        }
        return b.append(extra).toString();
    }

    /**
     * {@code /port}: "port token" of the request's connection; {@code /state?node=N}: the node's state in the
     * data source's cluster; {@code /down?node=N}, {@code /up?node=N}: admin state changes.
     */
    public static final class TokenServlet extends EmbeddedTomcat.TextServlet {
        private static final long serialVersionUID = 1L;

        @Override
        String answer(HttpServletRequest req, DataSource ds) throws Exception {
            Cluster cluster = ds.unwrap(AffinityDataSource.class).getCluster();
            String uri = req.getRequestURI();
            if (uri.endsWith("/nodb")) {
                return "no database";
            } else if (uri.endsWith("/state")) {
                return cluster.nodeState(req.getParameter("node")).name();
            } else if (uri.endsWith("/down") || uri.endsWith("/up")) {
                return cluster.setNodeState(req.getParameter("node"),
                        uri.endsWith("/down") ? NodeState.DOWN : NodeState.UP).name();
            }
            try (Connection c = ds.getConnection()) {
                return Pools.serverPort(c) + " " + req.getAttribute(AffinityFilter.TOKEN_ATTRIBUTE) + " "
                        + String.valueOf(req.getAttribute(AffinityFilter.ROUTE_ATTRIBUTE)).replace(' ', '_');
            }
        }
    }

    static void addContext(Path base, String path, String store, String extraConfig, String heartbeatMillis)
            throws IOException {
        Context ctx = EmbeddedTomcat.addContext(tomcat, base, path);
        ContextResource res = EmbeddedTomcat.affinityResource(config("tokens" + path.replace('/', '-'), extraConfig),
                "maximumPoolSize=2 | minimumIdle=0 | connectionTimeout=2000");
        res.setProperty("heartbeatIntervalMillis", heartbeatMillis);
        res.setProperty("heartbeatTimeoutSeconds", "1");
        ctx.getNamingResources().addResource(res);
        EmbeddedTomcat.addAffinityFilter(ctx, "/port", Map.of("routingToken", store, "tokenCookie", COOKIE));
        // /nodb: a request through the filter that needs no connection.
        for (FilterMap fm : ctx.findFilterMaps()) {
            fm.addURLPattern("/nodb");
        }
        Tomcat.addServlet(ctx, "token", new TokenServlet());
        ctx.addServletMappingDecoded("/*", "token");
    }

    @BeforeAll
    static void start() throws Exception {
        Path base = EmbeddedTomcat.baseDir("tomcat-tokens-");
        tomcat = EmbeddedTomcat.create(base);
        // /c: the cookie; a heartbeat that notices a killed node within two probes (one stale pooled
        // connection after a restart is a single miss, not a flap).
        addContext(base, "/c", "cookie", "; heartbeat.misses = 2", "200");
        // /a: the session attribute, nodes marked down by hand (no heartbeat).
        addContext(base, "/a", "attribute", "", "0");
        // /s: the cookie under strict session affinity, nodes marked down by hand.
        addContext(base, "/s", "cookie", "; session.strict = true", "0");
        tomcat.start();
        port = tomcat.getConnector().getLocalPort();
    }

    @AfterAll
    static void stop() throws Exception {
        EmbeddedTomcat.stop(tomcat);
    }

    static HttpClient browser() {
        return EmbeddedTomcat.browser();
    }

    static HttpResponse<String> send(HttpClient client, String path) throws Exception {
        return EmbeddedTomcat.send(port, client, path);
    }

    /** An operator's request ({@code /down}, {@code /up}, {@code /state}): one client for them all. */
    static HttpResponse<String> admin(String path) throws Exception {
        return send(ADMIN, path);
    }

    /** GET {@code path}, whatever the status. */
    static HttpResponse<String> sendAny(HttpClient client, String path) throws Exception {
        return client.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
                .timeout(Duration.ofSeconds(30)).build(), HttpResponse.BodyHandlers.ofString());
    }

    /** One request on {@code /c/port}: port, token and whether the response set the token cookie. */
    record Seen(int port, String token, boolean setCookie) {}

    static Seen request(HttpClient client, String ctx) throws Exception {
        HttpResponse<String> r = send(client, ctx + "/port");
        String[] parts = r.body().split(" ");
        boolean set = r.headers().allValues("set-cookie").stream().anyMatch(v -> v.startsWith(COOKIE + "="));
        return new Seen(Integer.parseInt(parts[0]), parts[1], set);
    }

    /** sid, primary id, backup id of a token. */
    static String[] parse(String token) {
        int bang = token.lastIndexOf('!');
        String[] routing = token.substring(bang + 1).split("\\.");
        assertEquals("ra1", routing[0], token);
        return new String[] {token.substring(0, bang), routing[1], routing[2]};
    }

    /** Token node id → node name, learned from a separate cluster with the same names (ids come from names). */
    static Map<String, String> tokenIds() {
        Map<String, String> ids = new HashMap<>();
        try (Cluster c = Cluster.fromConfig(config("learn", ""))) {
            for (int i = 0; ids.size() < 3 && i < 1000; i++) {
                SessionRouting r = c.sessionRouting(("learn-" + i).getBytes());
                ids.put(parse(c.sessionToken("learn-" + i))[1], r.primaryName());
            }
        }
        assertEquals(3, ids.size(), "every node's token id: " + ids);
        return ids;
    }

    static int index(String name) {
        for (int i = 1; i <= 3; i++) {
            if (nodeName(i).equals(name)) {
                return i;
            }
        }
        throw new IllegalArgumentException(name);
    }

    static void await(BooleanSupplier cond, Duration timeout, String what) throws InterruptedException {
        if (!Await.until(timeout, Duration.ofMillis(50), cond)) {
            fail(what + ": not within " + timeout);
        }
    }

    static void awaitState(String ctx, String node, NodeState state) throws InterruptedException {
        await(() -> {
            try {
                return admin(ctx + "/state?node=" + node).body().equals(state.name());
            } catch (Exception e) {
                return false;
            }
        }, Duration.ofSeconds(30), "node " + node + " " + state);
    }

    /** Kills node {@code name} (noted in {@code killed} for the restart) and waits until {@code /c} sees it DOWN. */
    static void killAndAwaitDown(String name, List<Integer> killed) throws Exception {
        PgNodes.kill(index(name));
        killed.add(index(name));
        awaitState("/c", name, NodeState.DOWN);
    }

    static String machine(String nodeName) {
        return "m" + index(nodeName);
    }

    @Test
    void theSeedWalkThroughKillThePrimaryThenASecondThenRestartBoth() throws Exception {
        Map<String, String> ids = tokenIds();
        HttpClient browser = browser();
        List<Integer> killed = new ArrayList<>();
        try {
            Seen s0 = request(browser, "/c");
            String[] t0 = parse(s0.token());
            String primary = ids.get(t0[1]);
            String backup = ids.get(t0[2]);
            assertTrue(s0.setCookie(), "a new session gets its token");
            assertEquals(PgNodes.port(index(primary)), s0.port(), "runs on the primary");
            assertNotEquals(machine(primary), machine(backup), "backup on another machine");
            for (int i = 0; i < 3; i++) { // reloads: same session id and routing data, no Set-Cookie
                assertEquals(new Seen(s0.port(), s0.token(), false), request(browser, "/c"));
            }

            // 1. bring down the primary
            killAndAwaitDown(primary, killed);
            Seen s1 = request(browser, "/c");
            String[] t1 = parse(s1.token());
            assertTrue(s1.setCookie(), "the rewritten token is sent");
            assertEquals(t0[0], t1[0], "same session id");
            assertEquals(t0[2], t1[1], "routing data moved forward: the backup is primary");
            assertEquals(PgNodes.port(index(backup)), s1.port(), "runs on the promoted backup");
            String third = ids.get(t1[2]);
            assertTrue(third != null && !third.equals(primary) && !third.equals(backup), "a new backup: " + s1);
            assertNotEquals(machine(backup), machine(third), "new backup on another machine");
            assertEquals(new Seen(s1.port(), s1.token(), false), request(browser, "/c"));

            // 2. bring down a second: the last one is primary, backup "none"
            killAndAwaitDown(backup, killed);
            Seen s2 = request(browser, "/c");
            String[] t2 = parse(s2.token());
            assertTrue(s2.setCookie());
            assertEquals(List.of(t0[0], t1[2], "none"), List.of(t2), "last one primary, no backup");
            assertEquals(PgNodes.port(index(third)), s2.port());
            assertEquals(new Seen(s2.port(), s2.token(), false), request(browser, "/c"));

            // 3. restart both: a new backup appears
            for (String n : List.of(primary, backup)) {
                PgNodes.restart(index(n));
                killed.remove(Integer.valueOf(index(n)));
                awaitState("/c", n, NodeState.UP);
            }
            Seen s3 = request(browser, "/c");
            String[] t3 = parse(s3.token());
            assertTrue(s3.setCookie());
            assertEquals(t0[0], t3[0]);
            assertEquals(t1[2], t3[1], "the primary stays");
            assertNotEquals("none", t3[2], "a new backup appears");
            assertNotEquals(machine(third), machine(ids.get(t3[2])), "on another machine");
            assertEquals(PgNodes.port(index(third)), s3.port());
            assertEquals(new Seen(s3.port(), s3.token(), false), request(browser, "/c"));
            System.out.println("tomcat walk-through: " + s0.token() + " -> " + s1.token() + " -> " + s2.token()
                    + " -> " + s3.token());
        } finally {
            for (int i : killed) {
                PgNodes.restart(i);
            }
        }
    }

    @Test
    void theTokenCanLiveInASessionAttributeAndIsRewrittenOnlyOnChange() throws Exception {
        Map<String, String> ids = tokenIds();
        HttpClient browser = browser();
        Seen s0 = request(browser, "/a");
        String[] t0 = parse(s0.token());
        assertEquals(PgNodes.port(index(ids.get(t0[1]))), s0.port());
        assertTrue(s0.token().startsWith(t0[0]) && !t0[0].isEmpty());
        for (int i = 0; i < 3; i++) {
            Seen again = request(browser, "/a");
            assertEquals(s0.port(), again.port());
            assertEquals(s0.token(), again.token());
            assertTrue(!again.setCookie(), "attribute mode sends no token cookie");
        }
        String primary = ids.get(t0[1]);
        assertEquals("UP", admin("/a/down?node=" + primary).body());
        try {
            Seen s1 = request(browser, "/a");
            String[] t1 = parse(s1.token());
            assertEquals(t0[0], t1[0]);
            assertEquals(t0[2], t1[1], "the backup is promoted");
            assertEquals(PgNodes.port(index(ids.get(t0[2]))), s1.port());
            assertEquals(s1.token(), request(browser, "/a").token(), "the attribute holds the rewritten token");
        } finally {
            admin("/a/up?node=" + primary);
        }
        // A new browser (no session) gets its own token.
        assertNotEquals(t0[0], parse(request(browser(), "/a").token())[0]);
    }

    /**
     * A browser sends a stale cookie under a longer path first (RFC 6265, 5.4): another cluster's token, well-formed
     * but naming none of these nodes, must neither move the session nor rewrite its cookie.
     */
    @Test
    void aStaleTokenOfAnotherClusterSentFirstDoesNotMoveTheSession() throws Exception {
        Seen s0 = request(browser(), "/c");
        String stale;
        try (Cluster other = Cluster.fromConfig("name = elsewhere; nodes = X1, X2, X3")) {
            stale = other.sessionToken("stale-session");
        }
        HttpClient plain = HttpClient.newHttpClient();
        for (int i = 0; i < 3; i++) {
            HttpResponse<String> r = plain.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/c/port"))
                    .header("Cookie", COOKIE + "=" + stale + "; " + COOKIE + "=" + s0.token())
                    .timeout(Duration.ofSeconds(30)).build(), HttpResponse.BodyHandlers.ofString());
            String[] parts = r.body().split(" ");
            assertEquals(s0.token(), parts[1], "the current token routes, not the stale " + stale);
            assertEquals(s0.port(), Integer.parseInt(parts[0]), "on the session's node");
            assertEquals(List.of(), r.headers().allValues("set-cookie"), "the cookie is not rewritten");
        }
    }

    @Test
    void withEveryNodeDownARequestThatNeedsNoDatabaseStillRuns() throws Exception {
        HttpClient browser = browser();
        for (int i = 1; i <= 3; i++) {
            assertEquals("UP", admin("/a/down?node=" + nodeName(i)).body());
        }
        try {
            HttpResponse<String> r = send(browser, "/a/nodb");
            assertEquals(200, r.statusCode(), r.body());
            assertEquals("no database", r.body());
            // One that needs a connection is refused by the data source, not by the filter.
            HttpResponse<String> p = sendAny(browser, "/a/port");
            assertEquals(500, p.statusCode());
            assertTrue(p.body().contains("racaffinity: no node available"), p.body());
        } finally {
            for (int i = 1; i <= 3; i++) {
                admin("/a/up?node=" + nodeName(i));
            }
        }
        assertEquals(200, send(browser, "/a/port").statusCode(), "the filter routes again once a node is up");
    }

    @Test
    void aStrictTokenWhosePrimaryIsDownRefusesConnectionsNotTheRequest() throws Exception {
        Map<String, String> ids = tokenIds();
        HttpClient browser = browser();
        Seen s0 = request(browser, "/s");
        String primary = ids.get(parse(s0.token())[1]);
        assertEquals("UP", admin("/s/down?node=" + primary).body());
        try {
            HttpResponse<String> r = send(browser, "/s/nodb");
            assertEquals(200, r.statusCode(), r.body());
            // No connection on another node: strict affinity refuses it.
            HttpResponse<String> p = sendAny(browser, "/s/port");
            assertEquals(500, p.statusCode(), p.body());
            assertTrue(p.body().contains("racaffinity: "), p.body());
        } finally {
            admin("/s/up?node=" + primary);
        }
        assertEquals(s0.port(), request(browser, "/s").port(), "back on its primary");
    }
}
