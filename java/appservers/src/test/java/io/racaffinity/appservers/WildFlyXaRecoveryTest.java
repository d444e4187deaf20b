package io.racaffinity.appservers;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.racaffinity.testsupport.PgNodesScript;
import io.racaffinity.testsupport.PreparedXacts;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * racaffinity in a real WildFly (issue 17): the distribution from Maven Central, unpacked
 * under target/, with racaffinity.jar and pgjdbc installed as modules and two XA data
 * sources over {@code io.racaffinity.jdbc.AffinityXADataSource} configured by the
 * distribution's own {@code jboss-cli.sh} from {@code src/test/resources/wildfly/racaffinity-xa.cli}
 * (the file docs/java-ecosystem.md shows). A war built here ({@code wildflyapp.XaServlet})
 * runs global transactions over both data sources through WildFly's transaction manager
 * (Narayana), and the test checks on the PostgreSQL servers themselves:
 * <ol>
 *   <li>30 transactions commit, each with both branches on one node (the rows carry the
 *       server's own {@code inet_server_port()}), spread over the nodes, each row exactly
 *       once, nothing left in {@code pg_prepared_xacts};
 *   <li>a transaction held between its phases (a third resource enlisted last blocks in its
 *       prepare) has both branches prepared on its node; that node is killed
 *       ({@code pgnodes kill}, SIGKILL), the transaction let go, so its commit meets a dead
 *       node; both data sources log it DOWN (their heartbeat) and 10 new transactions commit
 *       on the other two nodes; the node restarts with both branches still in doubt, is
 *       logged UP, and WildFly's own recovery (a pass asked for through Narayana's
 *       recovery listener) commits them: 0 rows in {@code pg_prepared_xacts} on every
 *       node, the rows present exactly once on that node;
 *   <li>30 more transactions commit afterwards, over all three nodes again;
 *   <li>WildFly itself is killed (SIGKILL) while a transaction is held between its phases
 *       (both branches prepared, no log yet); after a restart its recovery, the data
 *       sources' first user in the new JVM, rolls the orphaned branches back: nothing in
 *       doubt, no row of that transaction, and new transactions commit.
 * </ol>
 *
 * <p>Nodes: tests/appservers/run.sh starts them and exports {@code RACAFF_NODEi_PORT/URL}.
 */
class WildFlyXaRecoveryTest {
    static final String WAR = "racaff-xa.war";
    static final String PASSWORD = "not-used-S3cret";
    static final List<String> TABLES = List.of("wf_orders", "wf_audit");
    static int[] nodePorts = new int[3];
    static String[] nodeUrls = new String[3];
    final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();

    @BeforeAll
    static void nodes() throws SQLException {
        for (int i = 1; i <= 3; i++) {
            String p = System.getenv("RACAFF_NODE" + i + "_PORT");
            String u = System.getenv("RACAFF_NODE" + i + "_URL");
            if (p == null || u == null) {
                fail("RACAFF_NODE" + i + "_PORT/_URL are not set: run tests/appservers/run.sh (make test-appservers)");
            }
            nodePorts[i - 1] = Integer.parseInt(p);
            nodeUrls[i - 1] = u;
        }
        for (String url : nodeUrls) {
            try (Connection c = node(url); Statement st = c.createStatement()) {
                // In-doubt branches a previous, interrupted run left would hold locks on the tables.
                for (String gid : prepared(url)) {
                    st.execute("ROLLBACK PREPARED '" + gid + "'");
                }
                for (String t : TABLES) {
                    st.execute("drop table if exists " + t);
                    st.execute("create table " + t + " (id text primary key, port int not null)");
                }
            }
        }
    }

    static int portOffset() {
        return Integer.parseInt(System.getProperty("racaffinity.wildfly.port-offset", "20000"));
    }

    static Connection node(String url) throws SQLException {
        return DriverManager.getConnection(url, "postgres", PASSWORD);
    }

    /** The gids of the node's prepared transactions (pgjdbc's: formatId_gtrid_bqual, base64). */
    static List<String> prepared(String url) throws SQLException {
        try (Connection c = node(url)) {
            return PreparedXacts.gids(c);
        }
    }

    /** Per node index, the gids in pg_prepared_xacts. */
    static Map<Integer, List<String>> preparedEverywhere() throws SQLException {
        Map<Integer, List<String>> all = new HashMap<>();
        for (int i = 0; i < 3; i++) {
            all.put(i, prepared(nodeUrls[i]));
        }
        return all;
    }

    /** id -> the ports of the servers holding it in table (one entry per copy), over every node. */
    static Map<String, List<Integer>> rows(String table) throws SQLException {
        Map<String, List<Integer>> rows = new HashMap<>();
        for (int i = 0; i < 3; i++) {
            try (Connection c = node(nodeUrls[i]); Statement st = c.createStatement();
                    ResultSet rs = st.executeQuery("select id, port from " + table)) {
                while (rs.next()) {
                    assertEquals(nodePorts[i], rs.getInt(2), "row " + rs.getString(1) + " of " + table
                            + " says it was written on another server than the one holding it");
                    rows.computeIfAbsent(rs.getString(1), k -> new ArrayList<>()).add(nodePorts[i]);
                }
            }
        }
        return rows;
    }

    String get(WildFlyServer wf, String path) throws Exception {
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(wf.uri(path)).timeout(Duration.ofSeconds(150)).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), path + ": " + r.body());
        return r.body();
    }

    /** Runs transactions id prefix-1..prefix-n; each must commit with both branches on one node. */
    Map<String, Integer> transactions(WildFlyServer wf, String prefix, int n) throws Exception {
        Map<String, Integer> nodeOf = new HashMap<>();
        for (int i = 1; i <= n; i++) {
            String id = prefix + "-" + i;
            String[] answer = get(wf, "/racaff-xa/xa/tx?id=" + id).split(" ", 4);
            assertEquals("committed", answer[0], id + ": " + String.join(" ", answer));
            assertEquals(answer[1], answer[2], id + ": both branches of a transaction on one node");
            nodeOf.put(id, Integer.parseInt(answer[1]));
        }
        Map<Integer, Integer> perPort = new java.util.TreeMap<>();
        nodeOf.values().forEach(p -> perPort.merge(p, 1, Integer::sum));
        System.out.println("wildfly: " + prefix + "-1.." + n + " committed, transactions per node port: " + perPort);
        return nodeOf;
    }

    /** Every transaction's two rows exist exactly once, on the node the servlet reported. */
    static void rowsExactlyOnce(Map<String, Integer> nodeOf) throws SQLException {
        for (String t : TABLES) {
            Map<String, List<Integer>> rows = rows(t);
            for (Map.Entry<String, Integer> e : nodeOf.entrySet()) {
                assertEquals(List.of(e.getValue()), rows.get(e.getKey()), t + " row " + e.getKey());
            }
            assertEquals(new TreeSet<>(nodeOf.keySet()), new TreeSet<>(rows.keySet()), t + ": no other rows");
        }
    }

    /**
     * Waits (up to 60 s) until server.log, after offset {@code from}, says for both data
     * sources' clusters that {@code node} is now {@code state} (racaffinity's own log line,
     * through WildFly's logging); returns the log's length then.
     */
    static int awaitStateLogged(WildFlyServer wf, int from, String node, String state) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (true) {
            String log = wf.serverLog();
            String tail = log.substring(Math.min(from, log.length()));
            boolean all = true;
            for (String cluster : List.of("orders", "audit")) {
                all &= tail.lines().anyMatch(l -> l.contains(" " + cluster + ": node " + node + " ")
                        && (l.contains("is now " + state) || l.contains("-> " + state)));
            }
            if (all) {
                return log.length();
            }
            if (System.nanoTime() > deadline) {
                fail("server.log does not say within 60 s that " + node + " is " + state + " for both data sources:\n"
                        + tail);
            }
            Thread.sleep(200);
        }
    }

    @Test
    void xaOverTwoDataSourcesAndRecoveryAfterANodeDiesBetweenPrepareAndCommit() throws Exception {
        long started = System.nanoTime();
        WildFlyServer wf = WildFlyServer.create("wildfly-xa", portOffset());
        try {
            Path script = WildFlyServer.resource("wildfly/racaffinity-xa.cli");
            Path doc = Path.of(System.getProperty("racaffinity.repo", "../..")).resolve("docs/java-ecosystem.md");
            assertTrue(Files.readString(doc).contains(Files.readString(script).strip()),
                    "docs/java-ecosystem.md shows " + script.getFileName() + " as the test runs it, verbatim");
            String cli = wf.cli(script);
            assertTrue(cli.contains("The batch executed successfully"), cli);
            wf.deployWar(WAR, List.of("io/racaffinity/appservers/wildflyapp", "io/racaffinity/testsupport/xa"));
            // Recovery passes run when the test asks (the listener); between the two phases
            // of a pass Narayana waits recoveryBackoffPeriod (10 s by default): 1 s here.
            wf.start(WAR, List.of("-DRecoveryEnvironmentBean.recoveryBackoffPeriod=1"));
            System.out.printf("wildfly: configured and started in %.1f s%n", (System.nanoTime() - started) / 1e9);

            // 1. Plain XA transactions.
            Map<String, Integer> committed = new HashMap<>(transactions(wf, "tx", 30));
            assertTrue(new TreeSet<>(committed.values()).size() >= 2, "transactions spread over nodes: " + committed);
            rowsExactlyOnce(committed);
            preparedEverywhere().forEach((i, gids) -> assertEquals(List.of(), gids, "node" + (i + 1) + " in doubt"));

            // 2. A transaction held between prepare and commit, its node killed.
            CompletableFuture<HttpResponse<String>> held = http.sendAsync(
                    HttpRequest.newBuilder(wf.uri("/racaff-xa/xa/tx?id=held-1&hold=1"))
                            .timeout(Duration.ofSeconds(240)).build(), HttpResponse.BodyHandlers.ofString());
            String gtrid = get(wf, "/racaff-xa/xa/held");
            assertFalse(gtrid.equals("none"), "the transaction reaches the holding resource's prepare");
            Map<Integer, List<String>> inDoubt = preparedEverywhere();
            List<Integer> holding = inDoubt.entrySet().stream().filter(e -> !e.getValue().isEmpty())
                    .map(Map.Entry::getKey).toList();
            assertEquals(1, holding.size(), "one node holds the prepared branches: " + inDoubt);
            int victim = holding.get(0);
            List<String> branches = inDoubt.get(victim);
            assertEquals(2, branches.size(), "both data sources' branches prepared on node" + (victim + 1)
                    + " before the commit: " + branches);
            for (String gid : branches) {
                assertEquals(gtrid, gid.split("_")[1], "a branch of the held transaction: " + gid);
            }
            System.out.println("wildfly: held transaction " + gtrid + " prepared on node" + (victim + 1) + ": " + branches);

            PgNodesScript.run("kill", Integer.toString(victim + 1));
            assertEquals("released", get(wf, "/racaff-xa/xa/release"));
            HttpResponse<String> outcome = held.get(180, TimeUnit.SECONDS);
            System.out.println("wildfly: the held transaction's commit with node" + (victim + 1) + " dead answered: "
                    + outcome.body());
            assertEquals(200, outcome.statusCode(), outcome.body());

            // While the node is down (each data source's heartbeat says so in server.log),
            // new transactions go to the other two; its in-doubt branches wait for it.
            String victimName = "node" + (victim + 1);
            int logMark = wf.serverLog().length();
            int downAt = awaitStateLogged(wf, logMark, victimName, "DOWN");
            Map<String, Integer> whileDown = transactions(wf, "down", 10);
            assertFalse(whileDown.containsValue(nodePorts[victim]), "no new transaction on the dead node: " + whileDown);
            committed.putAll(whileDown);

            PgNodesScript.run("restart", Integer.toString(victim + 1));
            assertEquals(branches, prepared(nodeUrls[victim]),
                    "the branches are still in doubt after the crash: the commit never reached them");
            awaitStateLogged(wf, downAt, victimName, "UP");

            // 3. WildFly's recovery: passes until nothing is in doubt anywhere.
            long recoveryStart = System.nanoTime();
            int passes = 0;
            Map<Integer, List<String>> left = preparedEverywhere();
            while (left.values().stream().anyMatch(l -> !l.isEmpty()) && passes < 10) {
                wf.recoveryScan();
                passes++;
                left = preparedEverywhere();
            }
            System.out.printf("wildfly: recovery left %s after %d pass(es), %.1f s%n", left, passes,
                    (System.nanoTime() - recoveryStart) / 1e9);
            left.forEach((i, gids) -> assertEquals(List.of(), gids, "pg_prepared_xacts of node" + (i + 1)));
            committed.put("held-1", nodePorts[victim]);
            rowsExactlyOnce(committed);

            // 4. Business as usual on every node, the restarted one included.
            Map<String, Integer> after = transactions(wf, "after", 30);
            assertEquals(3, new TreeSet<>(after.values()).size(), "all three nodes take transactions again: " + after);
            committed.putAll(after);
            rowsExactlyOnce(committed);
            preparedEverywhere().forEach((i, gids) -> assertEquals(List.of(), gids, "node" + (i + 1) + " in doubt"));

            // 5. WildFly itself crashes (SIGKILL) between the phases of a transaction: both
            // branches prepared, Narayana's log not yet written. After a restart its recovery
            // (the data sources' first use in the new JVM is on the recovery thread) finds the
            // branches with recover(), sees no log for them and rolls them back (presumed abort).
            http.sendAsync(HttpRequest.newBuilder(wf.uri("/racaff-xa/xa/tx?id=crash-1&hold=1"))
                    .timeout(Duration.ofSeconds(240)).build(), HttpResponse.BodyHandlers.discarding());
            String crashGtrid = get(wf, "/racaff-xa/xa/held");
            Map<Integer, List<String>> orphans = preparedEverywhere();
            List<String> orphanBranches = orphans.values().stream().flatMap(List::stream).toList();
            assertEquals(2, orphanBranches.size(), "both branches prepared before the crash: " + orphans);
            orphanBranches.forEach(gid -> assertEquals(crashGtrid, gid.split("_")[1], gid));
            wf.crash();
            wf.start(WAR, List.of("-DRecoveryEnvironmentBean.recoveryBackoffPeriod=1"));
            assertEquals(orphans, preparedEverywhere(), "the orphaned branches survive the crash, in doubt");
            long orphanStart = System.nanoTime();
            int orphanPasses = 0;
            // Narayana rolls back an orphan only after it has seen it for orphanSafetyInterval
            // (20 s by default), so passes are asked for until then.
            while (preparedEverywhere().values().stream().anyMatch(l -> !l.isEmpty())
                    && System.nanoTime() - orphanStart < TimeUnit.SECONDS.toNanos(120)) {
                wf.recoveryScan();
                orphanPasses++;
                Thread.sleep(1000);
            }
            System.out.printf("wildfly: after the crash, recovery rolled back the orphans in %d pass(es), %.1f s%n",
                    orphanPasses, (System.nanoTime() - orphanStart) / 1e9);
            preparedEverywhere().forEach((i, gids) -> assertEquals(List.of(), gids,
                    "pg_prepared_xacts of node" + (i + 1) + " after WildFly's crash and recovery"));
            rowsExactlyOnce(committed); // and no row of crash-1
            committed.putAll(transactions(wf, "restarted", 10));
            rowsExactlyOnce(committed);

            String log = wf.serverLog();
            assertFalse(log.contains(PASSWORD), "the data sources' password is not in server.log");
        } finally {
            wf.close();
            System.out.printf("wildfly: the whole test took %.1f s%n", (System.nanoTime() - started) / 1e9);
        }
        assertEquals(List.of(), wf.alive(), "no process of the server outlives the test");
    }
}
