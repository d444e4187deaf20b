package io.racaffinity.xa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.test.Narayana;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.XaRows;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Crash recovery: a separate JVM ({@link CrashChild}) prepares global transactions on
 * every node through Narayana and AffinityXADataSource and is killed with SIGKILL between
 * prepare and commit. A new Narayana recovery manager in this JVM, with an
 * AffinityXADataSource as its recovery resource, completes everything: afterwards no node
 * has a prepared transaction, every logged transaction's rows are there exactly once (on
 * one node) and no row of an unlogged one exists.
 */
@ExtendWith(PgNodes.class)
class CrashRecoveryTest {
    @BeforeAll
    static void setUp() throws Exception {
        Narayana.init();
        XaRows.create();
        XaRows.rollbackAllPrepared();
    }

    record Tx(String role, int tx, int node) {}

    @Test
    void aKilledTransactionManagerIsRecoveredOnEveryNode() throws Exception {
        Path store = Narayana.init();
        String run = UUID.randomUUID().toString();
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-Dorg.jboss.logging.provider=" + System.getProperty("org.jboss.logging.provider", "jdk"),
                "-cp", System.getProperty("java.class.path"), CrashChild.class.getName(), store.toString(), run));
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            cmd.add(PgNodes.url(i));
        }
        Path err = Files.createTempFile(store.getParent(), "crash-child-", ".log");
        Process child = new ProcessBuilder(cmd).redirectError(err.toFile()).start();
        List<Tx> txs = new ArrayList<>();
        List<String> lines = new ArrayList<>();
        boolean ready = false;
        long t0 = System.nanoTime();
        try (BufferedReader r = new BufferedReader(new InputStreamReader(child.getInputStream(),
                StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                lines.add(line);
                if (line.equals("READY")) {
                    ready = true;
                    break;
                }
                String[] f = line.split(" ");
                if (f[0].equals("TX")) {
                    txs.add(new Tx(f[1], Integer.parseInt(f[2]), Integer.parseInt(f[3].substring(3))));
                }
            }
            assertTrue(ready, "child output: " + lines + "\nstderr: " + Files.readString(err));
            // The crash: SIGKILL while every transaction is between prepare and commit.
            child.destroyForcibly();
            assertTrue(child.waitFor(30, TimeUnit.SECONDS));
        } finally {
            child.destroyForcibly();
        }
        long killedAt = System.nanoTime();

        // In doubt now, on every node: LOGGED ones with all 3 branches prepared, ORPHANs with 2.
        Map<Integer, Integer> expected = new HashMap<>();
        for (Tx t : txs) {
            expected.merge(t.node, t.role.equals("LOGGED") ? 3 : 2, Integer::sum);
        }
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            List<String> gids = XaRows.prepared(i);
            assertEquals(expected.getOrDefault(i, 0), gids.size(), "prepared on node " + i + ": " + gids);
            assertTrue(gids.size() >= 2 * 3 + 2, "node " + i + " holds logged and orphan branches: " + gids);
        }

        AffinityXADataSource ds = NarayanaXaTest.xaDataSource("xa-recovery", true, "");
        XaSupport.recoveryScans(ds);
        long recovered = System.nanoTime();
        Map<String, Long> stats = ds.getRouter().statistics();
        System.out.printf("crash recovery: %d transactions held by the killed JVM (%s), in doubt per node %s;"
                + " recovery in %d ms: %s%n", txs.size(), txs, expected,
                TimeUnit.NANOSECONDS.toMillis(recovered - killedAt), stats);

        for (int i = 1; i <= PgNodes.COUNT; i++) {
            assertEquals(List.of(), XaRows.prepared(i), "node " + i + " has nothing in doubt after recovery");
        }
        var rows = XaRows.rowsByNode(run);
        Map<Integer, Set<Integer>> where = XaRows.nodesByTx(rows);
        int logged = 0;
        for (Tx t : txs) {
            if (t.role.equals("LOGGED")) {
                logged++;
                assertEquals(Set.of(t.node), where.get(t.tx), "logged tx " + t.tx + " committed on its node only");
                assertEquals(3, rows.get(t.node).get(t.tx), "tx " + t.tx + ": every row exactly once");
            } else {
                assertFalse(where.containsKey(t.tx), "orphan tx " + t.tx + " rolled back: no row");
            }
        }
        int total = rows.values().stream().flatMap(m -> m.values().stream()).mapToInt(Integer::intValue).sum();
        assertEquals(3 * logged, total, "no lost or duplicated row");
        assertEquals(0, ds.getRouter().trackedBranches(), "no branch left in the table");
        assertEquals(0, NarayanaXaTest.liveTransactions(ds), "no gtrid left in the core");
        ds.close();
        System.out.printf("crash test total %d ms%n", TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
    }
}
