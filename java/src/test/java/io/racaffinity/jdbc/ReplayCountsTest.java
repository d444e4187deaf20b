package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.AffinityDataSourceTest.keyOn;
import static io.racaffinity.jdbc.ReplayConnection.refusalOf;
import static io.racaffinity.jdbc.ReplayFixture.backendPid;
import static io.racaffinity.jdbc.ReplayFixture.commitThenKill;
import static io.racaffinity.jdbc.ReplayFixture.count;
import static io.racaffinity.jdbc.ReplayFixture.insert;
import static io.racaffinity.jdbc.ReplayFixture.rowsOf;
import static io.racaffinity.jdbc.ReplayFixture.terminate;
import static io.racaffinity.jdbc.ReplayFixture.throughProxy;
import static io.racaffinity.jdbc.ReplayFixture.total;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Continuity.Refusal;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.testsupport.FaultProxy;
import io.racaffinity.testsupport.FaultProxy.Hold;
import java.lang.management.ManagementFactory;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.LinkedHashMap;
import java.util.Map;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import javax.management.openmbean.CompositeData;
import javax.management.openmbean.TabularData;
import org.junit.jupiter.api.Test;

/**
 * Request replay's counts (docs/continuity.md, "Java", "Counts") as an operator reads them, the
 * cluster MXBean's attributes through the platform MBean server, after real recoveries on the
 * local nodes: each recovery is counted once, by how it ended (replayed, committed already, or
 * refused with its refusal), an outcome check only when a node was asked, and the application's
 * own errors not at all.
 */
class ReplayCountsTest extends ReplayNodes {
    private static final MBeanServer MBS = ManagementFactory.getPlatformMBeanServer();
    ReplayCountsTest() {
        super("counts-%");
    }

    /** What the MXBean shows: the three ends of a recovery (refusals only where not 0) and the checks. */
    private static Map<String, Object> counts(ObjectName on) throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("replayed", MBS.getAttribute(on, "Replays"));
        m.put("committed already", MBS.getAttribute(on, "ReplayCommittedAlready"));
        TabularData refusals = (TabularData) MBS.getAttribute(on, "ReplayRefusals");
        assertEquals(6, refusals.size(), "every refusal listed: " + refusals);
        for (Object row : refusals.values()) {
            CompositeData d = (CompositeData) row;
            if ((Long) d.get("value") != 0) {
                m.put("refused " + d.get("key"), d.get("value"));
            }
        }
        m.put("outcome checks", MBS.getAttribute(on, "ReplayOutcomeChecks"));
        m.put("outcomes forced", MBS.getAttribute(on, "ReplayOutcomesForced"));
        return m;
    }

    private static Map<String, Object> expected(long replayed, long committedAlready, long checks,
            Object... refusals) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("replayed", replayed);
        m.put("committed already", committedAlready);
        for (int i = 0; i < refusals.length; i += 2) {
            m.put("refused " + refusals[i], (long) (int) refusals[i + 1]);
        }
        m.put("outcome checks", checks);
        m.put("outcomes forced", 0L);
        return m;
    }

    /**
     * Reads the backend's pid, then begins a transaction: read in auto-commit mode, the pid is no
     * part of what a replay runs again (elsewhere, another pid would make it differ).
     */
    private static int pidThenBegin(Connection c) throws SQLException {
        int pid = backendPid(c);
        c.setAutoCommit(false);
        return pid;
    }

    @Test
    void eachRecoveryIsCountedOnceByHowItEnded() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = throughProxy(proxy, c -> c.setConnectionTimeout(1000));
            AffinityDataSource ds = ReplayFixture.dataSource(pools, "replay-counts", true);
            ds.setRegisterMBean(true);
            ds.init();
            ObjectName on = ds.getObjectName();
            assertNotNull(on, "the cluster's MXBean is registered");
            assertEquals(expected(0, 0, 0), counts(on), "nothing before a failure");

            // The application's own error begins no recovery.
            try (Connection admin = DriverManager.getConnection(PgNodes.url(2), "postgres", "")) {
                insert(admin, "counts-dup");
            }
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB2")).build()) {
                c.setAutoCommit(false);
                SQLException dup = assertThrows(SQLException.class, () -> insert(c, "counts-dup"));
                assertEquals(Refusal.NOT_RECOVERABLE, refusalOf(dup), String.valueOf(dup));
                c.rollback();
            }
            assertEquals(expected(0, 0, 0), counts(on), "a duplicate key is no recovery");

            // Replayed: the backend is ended mid-transaction, the request goes on on another node.
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB2")).build()) {
                int pid = pidThenBegin(c);
                insert(c, "counts-r1");
                assertEquals(1, count(c, "counts-r1%"), "read by the application, compared on the replay");
                terminate("MYDB2", pid);
                insert(c, "counts-r1b");
                c.commit();
            }
            assertEquals(1, total(rowsOf("counts-r1")), "replayed once: " + rowsOf("counts-r1"));
            assertEquals(0, rowsOf("counts-r1").get("MYDB2"));
            assertEquals(expected(1, 0, 0), counts(on), "one replay");

            // Committed already: the COMMIT's reply is lost, node 1 is asked and says committed.
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                c.setAutoCommit(false);
                insert(c, "counts-c1");
                Hold lost = proxy.loseNextCommitReply();
                c.commit();
                assertTrue(lost.acted(), "the reply was lost");
            }
            assertEquals(1, total(rowsOf("counts-c1")));
            assertEquals(expected(1, 1, 1), counts(on), "found committed by one check, not replayed");

            // Refused, results_differ: the replay elsewhere reads 0 rows where the application read 1.
            try (Connection admin = DriverManager.getConnection(PgNodes.url(3), "postgres", "")) {
                insert(admin, "counts-only-on-3");
            }
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB3")).build()) {
                int pid = pidThenBegin(c);
                assertEquals(1, count(c, "counts-only-on-3"));
                terminate("MYDB3", pid);
                SQLException e = assertThrows(SQLException.class, () -> insert(c, "counts-d1"));
                assertEquals(Refusal.RESULTS_DIFFER, refusalOf(e), String.valueOf(e));
            }
            assertEquals(expected(1, 1, 1, "results_differ", 1), counts(on));

            // Refused, not_replayable: the request read the driver's metadata.
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB3")).build()) {
                int pid = pidThenBegin(c);
                c.getMetaData();
                insert(c, "counts-n1");
                terminate("MYDB3", pid);
                SQLException e = assertThrows(SQLException.class, () -> insert(c, "counts-n1b"));
                assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(e), String.valueOf(e));
            }
            assertEquals(expected(1, 1, 1, "not_replayable", 1, "results_differ", 1), counts(on));

            // Refused, outcome_unknown with no check: a statement in auto-commit mode is its own
            // commit, with no xid any node could be asked about.
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB3")).build()) {
                terminate("MYDB3", backendPid(c));
                SQLException e = assertThrows(SQLException.class, () -> insert(c, "counts-a1"));
                assertEquals(Refusal.OUTCOME_UNKNOWN, refusalOf(e), String.valueOf(e));
            }
            assertEquals(expected(1, 1, 1, "not_replayable", 1, "outcome_unknown", 1, "results_differ", 1),
                    counts(on), "no node asked");

            // Refused, outcome_unknown after a check: the COMMIT ran, then its node was killed.
            Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
            try {
                c.setAutoCommit(false);
                insert(c, "counts-k1");
                SQLException e = commitThenKill(c, proxy, 1).error();
                assertEquals(Refusal.OUTCOME_UNKNOWN, e == null ? null : refusalOf(e), String.valueOf(e));
            } finally {
                c.close();
                PgNodes.restart(1);
            }
            assertEquals(1, rowsOf("counts-k1").get("MYDB1"), "committed once, never replayed blind");
            assertEquals(expected(1, 1, 2, "not_replayable", 1, "outcome_unknown", 2, "results_differ", 1),
                    counts(on), "node 1 asked, and gone");
        }
    }
}
