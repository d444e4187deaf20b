package io.racaffinity.xa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.test.Narayana;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.XaRows;
import jakarta.transaction.Transaction;
import jakarta.transaction.TransactionManager;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import javax.sql.XAConnection;
import javax.sql.XADataSource;
import javax.transaction.xa.XAResource;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * 500 global transactions through a real TM (Narayana) over 3 PostgreSQL nodes: each
 * transaction has 3 branches, each enlisted on its own worker thread (tm.resume(tx)
 * there) through its own XAConnection and getConnection(), then 2PC. With transaction
 * affinity every branch of a transaction lands on one node and nothing of it on any
 * other; the same run with plain per-connection balancing splits transactions, which
 * proves the check can fail.
 */
@ExtendWith(PgNodes.class)
class NarayanaXaTest {
    static final int TRANSACTIONS = Integer.getInteger("racaffinity.xa.transactions", 500);
    static final int BRANCHES = 3;
    static final int IN_FLIGHT = 6;
    static final int POOL = IN_FLIGHT * BRANCHES;

    @BeforeAll
    static void setUp() throws Exception {
        Narayana.init();
        XaRows.create();
        XaRows.rollbackAllPrepared();
    }

    static Map<String, XADataSource> nodes() {
        Map<String, XADataSource> m = new LinkedHashMap<>();
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            m.put("RAC" + i, XaRows.xaDataSource(i));
        }
        return m;
    }

    static AffinityXADataSource xaDataSource(String name, boolean affinity, String extra) {
        AffinityXADataSource ds = new AffinityXADataSource();
        ds.setConfig("name = " + name + "; nodes = RAC1, RAC2, RAC3" + extra);
        ds.setNodeXADataSources(nodes());
        ds.setTransactionAffinity(affinity);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        return ds;
    }

    record Result(String run, long millis, int splits, int rows, Map<Integer, Integer> txPerNode) {}

    /** Runs the transactions; XAConnections come from a small pool and go back after completion (as in JCA). */
    static Result run(AffinityXADataSource ds, int transactions) throws Exception {
        TransactionManager tm = Narayana.tm();
        String run = UUID.randomUUID().toString();
        BlockingQueue<XAConnection> pool = new ArrayBlockingQueue<>(POOL);
        for (int i = 0; i < POOL; i++) {
            pool.add(ds.getXAConnection());
        }
        ExecutorService drivers = Executors.newFixedThreadPool(IN_FLIGHT);
        ExecutorService branches = Executors.newFixedThreadPool(POOL);
        long t0 = System.nanoTime();
        try {
            List<Future<?>> done = new ArrayList<>();
            for (int t = 0; t < transactions; t++) {
                final int tx = t;
                done.add(drivers.submit(() -> {
                    tm.begin();
                    Transaction txn = tm.getTransaction();
                    tm.suspend();
                    List<XAConnection> used = new ArrayList<>();
                    List<Future<?>> parts = new ArrayList<>();
                    for (int b = 0; b < BRANCHES; b++) {
                        final int branch = b;
                        XAConnection xc = pool.take();
                        used.add(xc);
                        parts.add(branches.submit(() -> {
                            tm.resume(txn);
                            try {
                                XAResource xr = xc.getXAResource();
                                assertTrue(txn.enlistResource(xr));
                                try (Connection c = xc.getConnection(); PreparedStatement ps = c.prepareStatement(
                                        XaRows.INSERT)) {
                                    ps.setString(1, run);
                                    ps.setInt(2, tx);
                                    ps.setInt(3, branch);
                                    ps.executeUpdate();
                                }
                                assertTrue(txn.delistResource(xr, XAResource.TMSUCCESS));
                            } finally {
                                tm.suspend();
                            }
                            return null;
                        }));
                    }
                    try {
                        for (Future<?> f : parts) {
                            f.get(60, TimeUnit.SECONDS);
                        }
                        tm.resume(txn);
                        tm.commit();
                    } finally {
                        pool.addAll(used);
                    }
                    return null;
                }));
            }
            for (Future<?> f : done) {
                f.get(120, TimeUnit.SECONDS);
            }
        } finally {
            drivers.shutdownNow();
            branches.shutdownNow();
            for (XAConnection xc : pool) {
                xc.close();
            }
        }
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        var rows = XaRows.rowsByNode(run);
        Map<Integer, Set<Integer>> where = XaRows.nodesByTx(rows);
        int splits = (int) where.values().stream().filter(s -> s.size() > 1).count();
        int total = rows.values().stream().flatMap(m -> m.values().stream()).mapToInt(Integer::intValue).sum();
        Map<Integer, Integer> perNode = new LinkedHashMap<>();
        rows.forEach((node, m) -> perNode.put(node, m.size()));
        assertEquals(transactions, where.size(), "every transaction committed somewhere");
        return new Result(run, ms, splits, total, perNode);
    }

    @Test
    void everyBranchOfAGlobalTransactionLandsOnOneNodeAndCommitsThere() throws Exception {
        try (AffinityXADataSource ds = xaDataSource("xa-affinity", true, "")) {
            Result r = run(ds, TRANSACTIONS);
            System.out.printf("narayana xa, affinity: %d transactions x %d branches in %d ms: %d split, rows %d,"
                    + " transactions per node %s, %s%n", TRANSACTIONS, BRANCHES, r.millis, r.splits, r.rows,
                    r.txPerNode, ds.getRouter().statistics());
            assertEquals(0, r.splits, "split transactions with affinity");
            assertEquals(TRANSACTIONS * BRANCHES, r.rows, "every branch's row, exactly once");
            var rows = XaRows.rowsByNode(r.run);
            rows.forEach((node, m) -> m.forEach((tx, n) -> assertEquals(BRANCHES, n,
                    "tx " + tx + " has all its rows on node " + node + " and none elsewhere")));
            assertTrue(r.txPerNode.values().stream().filter(n -> n > 0).count() >= 2, "spread: " + r.txPerNode);
            Map<String, Long> st = ds.getRouter().statistics();
            assertEquals(TRANSACTIONS * BRANCHES, st.get("prepares"), "two-phase commit: every branch prepared");
            assertEquals(TRANSACTIONS * BRANCHES, st.get("commits"));
            assertEquals(0, ds.getRouter().trackedBranches(), "no branch left in the table");
            assertEquals(0, liveTransactions(ds), "no gtrid left in the core");
            for (int i = 1; i <= PgNodes.COUNT; i++) {
                assertEquals(List.of(), XaRows.prepared(i), "nothing in doubt on node " + i);
            }
        }
    }

    @Test
    void withoutAffinityTheSameTransactionsSplit() throws Exception {
        try (AffinityXADataSource ds = xaDataSource("xa-plain", false, "; policy = round_robin")) {
            Result r = run(ds, TRANSACTIONS);
            System.out.printf("narayana xa, plain balancing: %d transactions in %d ms: %d split (%.0f%%), rows %d%n",
                    TRANSACTIONS, r.millis, r.splits, 100.0 * r.splits / TRANSACTIONS, r.rows);
            assertTrue(r.splits > 0, "plain per-connection balancing must split transactions");
            assertEquals(TRANSACTIONS * BRANCHES, r.rows, "2PC still reached every branch's node");
            for (int i = 1; i <= PgNodes.COUNT; i++) {
                assertEquals(List.of(), XaRows.prepared(i), "nothing in doubt on node " + i);
            }
        }
    }

    static long liveTransactions(AffinityXADataSource ds) throws Exception {
        String json = ds.getCluster().metricsJson();
        var node = new com.fasterxml.jackson.databind.ObjectMapper().readTree(json);
        return node.path("scopes").path("transaction").path("live").asLong(-1);
    }
}
