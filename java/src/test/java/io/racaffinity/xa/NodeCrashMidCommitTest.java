package io.racaffinity.xa;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.test.Narayana;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.XaRows;
import io.racaffinity.testsupport.xa.EmptyXAResource;
import jakarta.transaction.TransactionManager;
import java.io.Serializable;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import javax.sql.XAConnection;
import javax.transaction.xa.XAException;
import javax.transaction.xa.Xid;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * A real node crash between prepare and commit under Narayana: the transaction's node is
 * killed after both its branches are prepared. The TM's commit reaches a dead node
 * ({@code XAER_RMFAIL}: the branches stay tracked, exactly one failure per failed commit), the
 * node restarts, and Narayana's recovery, through the same data source, commits them there:
 * nothing in doubt, every row exactly once, nothing leaked.
 */
@ExtendWith(PgNodes.class)
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class NodeCrashMidCommitTest {

    @BeforeAll
    static void setUp() throws Exception {
        Narayana.init();
        XaRows.create();
        XaRows.rollbackAllPrepared();
    }

    /**
     * The last resource of the transaction: its prepare kills node 3 (so every database branch is
     * prepared and none committed), it votes yes and has nothing to commit. Serializable, so
     * Narayana's log holds it and recovery can replay its (empty) commit.
     */
    static final class KillAtPrepare extends EmptyXAResource implements Serializable {
        private static final long serialVersionUID = 1L;

        @Override
        public int prepare(Xid xid) throws XAException {
            try {
                PgNodes.kill(3);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
            return XA_OK;
        }
    }

    @Test
    void aNodeKilledBetweenPrepareAndCommitIsCompletedByRecoveryOnItsNodeOnceItIsBack() throws Exception {
        TransactionManager tm = Narayana.tm();
        String run = UUID.randomUUID().toString();
        try (AffinityXADataSource ds = NarayanaXaTest.xaDataSource("xa-mid-commit-" + run, true, "")) {
            XAConnection c1 = ds.getXAConnection();
            XAConnection c2 = ds.getXAConnection();
            try {
                tm.begin();
                XaSupport.steerTo(ds, "RAC3", () -> {
                    try {
                        tm.getTransaction().enlistResource(c1.getXAResource());
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                });
                XaSupport.insert(c1, run, 1);
                tm.getTransaction().enlistResource(c2.getXAResource()); // the gtrid's node: RAC3
                XaSupport.insert(c2, run, 2);
                tm.getTransaction().enlistResource(new KillAtPrepare());
                try {
                    tm.commit(); // phase 2 meets a dead node: Narayana keeps the transaction for recovery
                } catch (Exception e) {
                    // a heuristic report is fine: the outcome is decided (commit) and logged
                }
                assertEquals(2, ds.getRouter().trackedBranches(), "the prepared branches stay tracked for the retry");
                assertEquals(2, XaSupport.metrics(ds, "RAC3").failures(), "one failure per failed commit");
            } finally {
                PgNodes.restart(3);
                c1.close();
                c2.close();
            }
            assertEquals(2, XaRows.prepared(3).size(), "in doubt on node 3 until recovery");

            XaSupport.recoveryScans(ds);
            for (int i = 1; i <= PgNodes.COUNT; i++) {
                assertEquals(List.of(), XaRows.prepared(i), "nothing in doubt on node " + i);
            }
            var rows = XaRows.rowsByNode(run);
            assertEquals(2, rows.get(3).getOrDefault(1, 0), "both rows committed on node 3, once: " + rows);
            assertEquals(0, rows.get(1).size() + rows.get(2).size(), "nothing elsewhere: " + rows);
            XaSupport.assertNothingLeaked(ds);
        }
    }
}
