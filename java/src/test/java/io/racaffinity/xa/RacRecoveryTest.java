package io.racaffinity.xa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import io.racaffinity.RecoveryScope;
import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.test.Faults;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.XaRows;
import java.sql.SQLException;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import javax.sql.XAConnection;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The RAC model ({@code recovery.scope = database}): one database (node 1) seen through three
 * Toxiproxy "instances". Any instance lists every in-doubt xid and can complete it, so recovery
 * and completion go on with an instance dead. Rows and {@code pg_prepared_xacts} are checked on
 * the database itself.
 */
@ExtendWith(PgNodes.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class RacRecoveryTest {
    @RegisterExtension
    static final XaSupport.Proxies PROXIES = XaSupport.Proxies.rac();
    @RegisterExtension
    final XaSupport xa = new XaSupport(PROXIES);

    AffinityXADataSource ds(String scope) {
        return xa.ds("name = rac-" + UUID.randomUUID() + "; nodes = INST1, INST2, INST3; recovery.scope = " + scope,
                XaSupport.instances("INST", PROXIES.ports()));
    }

    /** Prepares one branch inserting a row through INST1; returns it. */
    Xid preparedOnInstance1(AffinityXADataSource ds, String run) throws Exception {
        return XaSupport.preparedOn(ds, "INST1", xa.connect(ds), run);
    }

    static long failures(AffinityXADataSource ds, String node) throws SQLException {
        return XaSupport.metrics(ds, node).failures();
    }

    @Test
    void withAnInstanceDeadRecoveryListsEachXidOnceAndCompletesItThroughAnother() throws Exception {
        String run = UUID.randomUUID().toString();
        Xid x = preparedOnInstance1(ds("database"), run);
        Faults.refuse(1); // the instance that prepared it is gone; the database is not

        AffinityXADataSource recovery = ds("database");
        assertEquals(RecoveryScope.DATABASE, recovery.getRouter().recoveryScope());
        XAResource r = xa.connect(recovery).getXAResource();
        Xid[] found = r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN);
        assertEquals(1, XaSupport.times(found, x), "one database: each xid once");
        r.commit(x, false);
        assertEquals(1, XaSupport.rows(1, run), "committed once, on the database");
        assertEquals(List.of(), XaSupport.prepared(1));
        assertEquals(1, failures(recovery, "INST1"), "the dead instance was asked once");
        XaSupport.assertNothingLeaked(recovery);
    }

    @Test
    void aPreparedBranchWhoseInstanceDiedCommitsThroughAnotherOnceItIsKnownDown() throws Exception {
        String run = UUID.randomUUID().toString();
        AffinityXADataSource ds = ds("database");
        XAConnection c = xa.connect(ds);
        Xid x = preparedOnInstance1(ds, run);
        XAResource r = c.getXAResource();
        Faults.refuse(1);
        // the core still has INST1 Up: the commit goes there and is retried later
        XAException e = assertThrows(XAException.class, () -> r.commit(x, false));
        assertEquals(XAException.XAER_RMFAIL, e.errorCode, e.getMessage());
        assertEquals(1, failures(ds, "INST1"));
        // INST1 known down (FAN, heartbeat or ejection): the owner is Down, another instance completes it
        ds.getCluster().setNodeState("INST1", NodeState.DOWN);
        r.commit(x, false);
        XaSupport.assertCompleted(ds, 1, run, 1);
    }

    @Test
    void nodeScopeOverOneDatabaseStillListsEachXidOnceAndCommitsIt() throws Exception {
        String run = UUID.randomUUID().toString();
        Xid x = preparedOnInstance1(ds("node"), run);
        AffinityXADataSource recovery = ds("node");
        XAResource r = xa.connect(recovery).getXAResource();
        Xid[] found = r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN);
        assertEquals(1, XaSupport.times(found, x));
        r.commit(x, false);
        assertEquals(1, XaSupport.rows(1, run));
        assertEquals(List.of(), XaSupport.prepared(1));
        assertTrue(recovery.getCluster().nodeMetrics().stream().mapToLong(NodeMetrics::failures).sum() == 0);
    }
}
