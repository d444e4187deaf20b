package io.racaffinity.appservers;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.net.CookieManager;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Redeploying a web application in a real Tomcat (the distribution from Maven Central,
 * run by its own {@code catalina.sh}) leaves nothing of racaffinity behind (issue 17):
 * the application is reloaded 5 times through the manager, then stopped; Tomcat's own
 * leak check ({@code /manager/text/findleaks}) must find no class loader of it, no thread
 * of the library or of its node pools may survive it, and Tomcat must log no thread or
 * leak warning about them. Both ways a Tomcat user installs the jar are run:
 * <ul>
 *   <li>in {@code WEB-INF/lib} with HikariCP and slf4j-api, the resource in the
 *       application's {@code META-INF/context.xml} (pgjdbc in {@code lib/}, as Tomcat
 *       advises for JDBC drivers);
 *   <li>in {@code lib/} with HikariCP, slf4j-api and pgjdbc, the resource in server.xml's
 *       {@code GlobalNamingResources} and a {@code <ResourceLink>} in the application's
 *       {@code META-INF/context.xml}: the data source outlives every deployment, so its
 *       threads, started during a request of the first deployment, must not hold it
 *       (no heartbeat here: the node pools start on the first request's thread).
 * </ul>
 * After each deployment, sessions stay on their node and new sessions spread, checked
 * with the PostgreSQL server's own port ({@code inet_server_port()}).
 *
 * <p>Nodes: tests/appservers/run.sh starts them and exports {@code RACAFF_NODEi_PORT}.
 */
class TomcatRedeployTest {
    static final int RELOADS = 5;
    /** The library's threads, and the node pools' (HikariCP names its threads after the pool). */
    static final Pattern OURS = Pattern.compile("^(racaffinity-|leakcheck-|HikariPool).*");
    static final Pattern LEAK_WARNING = Pattern.compile(
            ".*(failed to stop it|failed to remove it|memory leak|Failed to register in JMX).*");
    static int[] nodePorts = new int[3];

    @BeforeAll
    static void nodes() {
        for (int i = 1; i <= 3; i++) {
            String p = System.getenv("RACAFF_NODE" + i + "_PORT");
            if (p == null) {
                fail("RACAFF_NODE" + i + "_PORT is not set: run tests/appservers/run.sh (make test-appservers)");
            }
            nodePorts[i - 1] = Integer.parseInt(p);
        }
    }

    static int tomcatPort(int offset) {
        return Integer.parseInt(System.getProperty("racaffinity.tomcat.port", "28880")) + offset;
    }

    /** The {@code <Resource>} a Tomcat user writes, with the attributes of AffinityDataSourceFactory. */
    static String resource(String name, long heartbeatMillis) {
        return "<Resource name=\"" + name + "\" auth=\"Container\" type=\"javax.sql.DataSource\""
                + " factory=\"io.racaffinity.jdbc.AffinityDataSourceFactory\" closeMethod=\"close\""
                // The nodes are named by their ports so that the URL template can place them.
                + " config=\"name = leakcheck; nodes = " + nodePorts[0] + ", " + nodePorts[1] + ", " + nodePorts[2]
                + "\" urlTemplate=\"jdbc:postgresql://127.0.0.1:{instance}/postgres\""
                + " dataSourceClassName=\"com.zaxxer.hikari.HikariDataSource\""
                + " dataSourcePropertyList=\"maximumPoolSize=3 | minimumIdle=1\""
                + " user=\"postgres\" password=\"not-used-S3cret\" policy=\"round_robin\""
                + " heartbeatIntervalMillis=\"" + heartbeatMillis + "\" sessionIdleTtl=\"10m\"/>";
    }

    static final String WEB_XML = """
            <?xml version="1.0" encoding="UTF-8"?>
            <web-app xmlns="https://jakarta.ee/xml/ns/jakartaee" version="6.0">
              <filter>
                <filter-name>racaffinity</filter-name>
                <filter-class>io.racaffinity.web.AffinityFilter</filter-class>
                <init-param><param-name>createSession</param-name><param-value>true</param-value></init-param>
                <init-param><param-name>dataSources</param-name><param-value>java:comp/env/jdbc/rac</param-value></init-param>
              </filter>
              <filter-mapping><filter-name>racaffinity</filter-name><url-pattern>/*</url-pattern></filter-mapping>
            </web-app>
            """;

    /** webapps/app: the probe servlet, web.xml, META-INF/context.xml and WEB-INF/lib jars. */
    static void writeApp(TomcatServer tomcat, String contextXml, List<String> webInfLibJars) throws IOException {
        Path app = tomcat.base.resolve("webapps/app");
        Path classes = Path.of(System.getProperty("appserver.classes"));
        Path pkg = Path.of("io/racaffinity/appservers/webapp");
        TomcatServer.copyTree(classes.resolve(pkg), app.resolve("WEB-INF/classes").resolve(pkg));
        Files.writeString(app.resolve("WEB-INF/web.xml"), WEB_XML);
        Files.createDirectories(app.resolve("META-INF"));
        Files.writeString(app.resolve("META-INF/context.xml"), contextXml);
        copyJars(webInfLibJars, app.resolve("WEB-INF/lib"));
    }

    static void copyJars(List<String> jars, Path dir) throws IOException {
        Path from = Path.of(System.getProperty("appserver.jars"));
        Files.createDirectories(dir);
        for (String jar : jars) {
            Files.copy(from.resolve(jar), dir.resolve(jar));
        }
    }

    /**
     * A port another socket holds (a client socket in the ephemeral range held 53880 in one
     * CI run): Tomcat logs the failed connector and runs on without it, so the start must
     * fail at once and name the port, not wait out its 120 s for an answer.
     */
    @Test
    void aTomcatWhosePortIsTakenFailsAtOnceAndSaysWhy() throws Exception {
        try (ServerSocket held = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
                TomcatServer tomcat = TomcatServer.create("tomcat-port-taken", held.getLocalPort(), "")) {
            long t0 = System.nanoTime();
            IllegalStateException e = assertThrows(IllegalStateException.class, tomcat::start);
            long seconds = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - t0);
            assertTrue(e.getMessage().startsWith("Tomcat could not bind 127.0.0.1:" + held.getLocalPort()),
                    e.getMessage());
            assertTrue(seconds < 60, "failed after " + seconds + " s");
        }
    }

    @Test
    void jarInWebInfLib() throws Exception {
        try (TomcatServer tomcat = TomcatServer.create("tomcat-webinf-lib", tomcatPort(0), "")) {
            copyJars(List.of("postgresql.jar"), tomcat.base.resolve("lib"));
            writeApp(tomcat, "<Context>\n  " + resource("jdbc/rac", 1000) + "\n</Context>\n",
                    List.of("racaffinity.jar", "HikariCP.jar", "slf4j-api.jar"));
            redeployAndCheck(tomcat, true);
        }
    }

    @Test
    void jarInServerLibWithAGlobalResource() throws Exception {
        try (TomcatServer tomcat = TomcatServer.create("tomcat-server-lib", tomcatPort(1),
                "    " + resource("jdbc/rac-global", 0))) {
            copyJars(List.of("racaffinity.jar", "HikariCP.jar", "slf4j-api.jar", "postgresql.jar"),
                    tomcat.base.resolve("lib"));
            writeApp(tomcat, "<Context>\n  <ResourceLink name=\"jdbc/rac\" global=\"jdbc/rac-global\""
                    + " type=\"javax.sql.DataSource\"/>\n</Context>\n", List.of());
            redeployAndCheck(tomcat, false);
        }
    }

    /**
     * Starts Tomcat, checks routing, reloads the application {@link #RELOADS} times (routing
     * checked each time), stops it, and then asks Tomcat for leaks and for our threads.
     * {@code libraryDiesWithApp}: the data source belongs to the application (and so must
     * every thread of ours); otherwise it is the server's and keeps a fixed set of threads.
     */
    static void redeployAndCheck(TomcatServer tomcat, boolean libraryDiesWithApp) throws Exception {
        tomcat.start();
        routingHolds(tomcat);
        Set<String> firstThreads = ours(tomcat.threadNames());
        System.out.println(tomcat.base.getFileName() + ": threads of ours after the first deployment: "
                + firstThreads);
        for (int i = 1; i <= RELOADS; i++) {
            String r = tomcat.manager("reload?path=/app");
            assertTrue(r.startsWith("OK"), "reload " + i + ": " + r);
            routingHolds(tomcat);
        }
        List<String> afterReloads = tomcat.threadNames().stream().filter(n -> OURS.matcher(n).matches()).toList();
        // While the reloaded application runs and keeps its connections open, no earlier
        // deployment may stay loaded: a thread it started that the running one keeps alive
        // (pgjdbc's cleaner thread, which lives while any connection is open) would hold it
        // for good. Asked every 3 s for up to 15 s (the old pools' threads wind down).
        List<String> whileRunning = new ArrayList<>();
        String leaksWhileRunning = leaks(tomcat, 6, whileRunning);
        assertEquals("", leaksWhileRunning, "Tomcat's findleaks names an earlier deployment while the application"
                + " runs, after " + RELOADS + " reloads (answers: " + whileRunning + ")");
        String stop = tomcat.manager("stop?path=/app");
        assertTrue(stop.startsWith("OK"), stop);

        // Tomcat's own leak check (it runs a full GC first), asked every 3 s for up to 45 s:
        // a loader held by a live thread or a static stays, call after call. (pgjdbc's
        // cleaner thread, ended 30 s after its last connection, must hold none: the check
        // above, while the application runs, is the one that catches it.)
        List<String> answers = new ArrayList<>();
        String leaks = leaks(tomcat, 16, answers);
        List<String> all = tomcat.threadNames();
        List<String> remaining = all.stream().filter(n -> OURS.matcher(n).matches()).toList();
        long mappedLibraries = Files.readAllLines(Path.of("/proc/" + tomcat.pid() + "/maps")).stream()
                .filter(l -> l.contains("libracaffinity")).map(l -> l.substring(l.lastIndexOf(' ') + 1))
                .distinct().count();
        System.out.println(tomcat.base.getFileName() + ": findleaks answered " + answers
                + "; threads of ours after " + RELOADS + " reloads: " + afterReloads
                + "; after the stop: " + remaining + " (all threads: " + all + "); mapped copies of libracaffinity: " + mappedLibraries);

        assertEquals("", leaks, "Tomcat's findleaks names no application after " + RELOADS
                + " reloads and a stop (answers: " + answers + ")");
        if (libraryDiesWithApp) {
            assertEquals(List.of(), remaining, "no thread of the library or its pools outlives the application");
        } else {
            assertEquals(List.of(), remaining.stream().filter(n -> remaining.indexOf(n) != remaining.lastIndexOf(n))
                    .toList(), "one set of the server's data source's threads, not one per deployment");
            assertTrue(firstThreads.containsAll(ours(remaining)), "no new kind of thread: " + remaining);
        }
        tomcat.close();
        List<String> warnings = tomcat.logLines().stream().filter(l -> LEAK_WARNING.matcher(l).matches())
                .toList();
        assertEquals(List.of(), warnings, "Tomcat logs no leak or thread warning");
    }

    /**
     * Asks Tomcat's findleaks (which runs a full GC first) every 3 s until it names no
     * application or {@code attempts} answers came.
     *
     * @return the applications named in the last answer, joined; empty when none
     */
    static String leaks(TomcatServer tomcat, int attempts, List<String> answers) throws Exception {
        String leaks = null;
        for (int attempt = 0; attempt < attempts && (leaks == null || !leaks.isEmpty()); attempt++) {
            if (attempt > 0) {
                Thread.sleep(3000);
            }
            String answer = tomcat.manager("findleaks?statusLine=true");
            answers.add(answer.strip());
            leaks = answer.lines().filter(l -> !l.startsWith("OK")).collect(Collectors.joining(", "));
        }
        return leaks;
    }

    /** The distinct names of our threads, numbered pool-worker suffixes cut. */
    static Set<String> ours(List<String> names) {
        return names.stream().filter(n -> OURS.matcher(n).matches()).map(n -> n.replaceAll("-\\d+$", ""))
                .collect(Collectors.toCollection(TreeSet::new));
    }

    /** 6 sessions of 4 requests: each stays on one node, and they use at least two nodes. */
    static void routingHolds(TomcatServer tomcat) throws Exception {
        Map<Integer, Set<String>> perSession = new LinkedHashMap<>();
        List<HttpClient> clients = new ArrayList<>();
        for (int s = 0; s < 6; s++) {
            clients.add(HttpClient.newBuilder().cookieHandler(new CookieManager())
                    .connectTimeout(Duration.ofSeconds(10)).build());
        }
        for (int round = 0; round < 4; round++) {
            for (int s = 0; s < clients.size(); s++) {
                HttpResponse<String> r = clients.get(s).send(HttpRequest.newBuilder(tomcat.uri("/app/port"))
                        .timeout(Duration.ofSeconds(30)).build(), HttpResponse.BodyHandlers.ofString());
                assertEquals(200, r.statusCode(), r.body());
                perSession.computeIfAbsent(s, k -> new HashSet<>()).add(r.body());
            }
        }
        Set<String> used = new HashSet<>();
        Set<String> nodes = new HashSet<>();
        for (int p : nodePorts) {
            nodes.add(Integer.toString(p));
        }
        perSession.forEach((s, ports) -> {
            assertEquals(1, ports.size(), "session " + s + " stays on one node: " + ports);
            used.addAll(ports);
        });
        assertTrue(nodes.containsAll(used), "every request ran on a node: " + used + " of " + nodes);
        assertTrue(used.size() >= 2, "sessions spread over nodes: " + perSession);
    }
}
