package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.AffinityDataSourceTest.keyOn;
import static io.racaffinity.jdbc.ReplayConnection.refusalOf;
import static io.racaffinity.jdbc.ReplayFixture.CHECK_SECONDS;
import static io.racaffinity.jdbc.ReplayFixture.commitThenKill;
import static io.racaffinity.jdbc.ReplayFixture.insert;
import static io.racaffinity.jdbc.ReplayFixture.rowsOf;
import static io.racaffinity.jdbc.ReplayFixture.throughProxy;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Continuity.Refusal;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.test.Stubs;
import io.racaffinity.testsupport.FaultProxy;
import java.lang.reflect.InvocationTargetException;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.Map;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

/**
 * The outcome check of a replay (docs/continuity.md, "Java") asks the failed node itself on
 * independent databases ({@code recovery.scope = node}); when that node stays down, the request
 * gives up with {@code OUTCOME_UNKNOWN} at the check's deadline ({@code heartbeatTimeoutSeconds}),
 * not after the node pool's {@code connectionTimeout}. Through a HikariCP pool (its bounded
 * borrow) and through a pool that is not HikariCP's (a borrow on a thread of its own, given up at
 * the deadline).
 */
class OutcomeCheckDeadlineTest extends ReplayNodes {
    /** The node pools' wait for a connection: far beyond the check's deadline. */
    static final long CONNECTION_TIMEOUT_MS = 20_000;
    OutcomeCheckDeadlineTest() {
        super("deadline-%");
    }

    /** The pool, seen as a DataSource that is not HikariCP's (as an app server's pool would be). */
    private static DataSource notHikari(DataSource pool) {
        return Stubs.proxy(DataSource.class, "NotHikari[" + pool + "]", (p, m, args) -> {
            try {
                return m.invoke(pool, args);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        });
    }

    @Test
    void throughHikariCPTheCheckOfANodeThatStaysDownEndsAtItsDeadline() throws Exception {
        aCommitWhoseNodeStaysDownGivesUpAtTheCheckDeadline(false);
    }

    @Test
    void throughAnotherPoolTheCheckOfANodeThatStaysDownEndsAtItsDeadline() throws Exception {
        aCommitWhoseNodeStaysDownGivesUpAtTheCheckDeadline(true);
    }

    private void aCommitWhoseNodeStaysDownGivesUpAtTheCheckDeadline(boolean wrapped) throws Exception {
        String id = "deadline-" + (wrapped ? "wrapped" : "hikari");
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = throughProxy(proxy, c -> c.setConnectionTimeout(CONNECTION_TIMEOUT_MS));
            Map<String, DataSource> nodes = pools.asMap();
            if (wrapped) {
                nodes.put("MYDB1", notHikari(nodes.get("MYDB1")));
            }
            // recovery.scope = node: node 1 must answer
            AffinityDataSource ds = ReplayFixture.dataSource(pools, nodes, "replay-deadline", true);
            Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
            try {
                c.setAutoCommit(false);
                insert(c, id);
                // committed, and node 1 stays down for the rest of the request
                ReplayFixture.CommitKilled k = commitThenKill(c, proxy, 1);
                SQLException e = k.error();
                assertEquals(Refusal.OUTCOME_UNKNOWN, e == null ? null : refusalOf(e), String.valueOf(e));
                // A bound on behaviour, not a measure: the check's 2 s deadline against a 20 s pool wait.
                assertTrue(k.millisAfterKill() < CONNECTION_TIMEOUT_MS / 2, "gave up after " + k.millisAfterKill()
                        + " ms; the check's deadline is " + CHECK_SECONDS + " s, the pool's connectionTimeout "
                        + CONNECTION_TIMEOUT_MS + " ms");
            } finally {
                c.close();
                PgNodes.restart(1);
            }
            assertEquals(1, rowsOf(id).get("MYDB1"), "committed once, never replayed blind");
        }
    }
}
