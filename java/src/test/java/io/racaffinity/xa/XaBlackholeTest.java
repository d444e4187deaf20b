package io.racaffinity.xa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.test.Faults;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.XaRows;
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
import org.postgresql.xa.PGXADataSource;

/**
 * Independent nodes behind Toxiproxy, one of them blackholed (the socket stays open, nothing
 * answers): every XA call on it ends at the driver's timeout with {@code XAER_RMFAIL} (one
 * failure counted), never hangs and never answers {@code XAER_NOTA}; after heal the same
 * XAConnection reaches the node through a fresh physical connection.
 */
@ExtendWith(PgNodes.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class XaBlackholeTest {
    static final int SOCKET_TIMEOUT = 2;
    @RegisterExtension
    static final XaSupport.Proxies PROXIES = XaSupport.Proxies.nodes();
    @RegisterExtension
    final XaSupport xa = new XaSupport(PROXIES);

    AffinityXADataSource ds() {
        Map<String, PGXADataSource> m = XaSupport.instances("RAC", PROXIES.ports());
        for (PGXADataSource pg : m.values()) {
            pg.setSocketTimeout(SOCKET_TIMEOUT);
            pg.setLoginTimeout(SOCKET_TIMEOUT);
        }
        return xa.ds("name = blackhole-" + UUID.randomUUID() + "; nodes = RAC1, RAC2, RAC3", m);
    }

    Xid preparedOn2(AffinityXADataSource ds, XAConnection c, String run) throws Exception {
        return XaSupport.preparedOn(ds, "RAC2", c, run);
    }

    @Test
    void aCommitToABlackholedNodeIsRetryLaterAndTheSameConnectionCommitsAfterHeal() throws Exception {
        AffinityXADataSource ds = ds();
        XAConnection c = xa.connect(ds);
        String run = UUID.randomUUID().toString();
        Xid x = preparedOn2(ds, c, run);
        XAResource r = c.getXAResource();
        Faults.blackhole(2);
        long t0 = System.nanoTime();
        XAException e = assertThrows(XAException.class, () -> r.commit(x, false));
        long waited = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - t0);
        assertEquals(XAException.XAER_RMFAIL, e.errorCode, e.getMessage());
        assertTrue(waited < 4 * SOCKET_TIMEOUT + 5, "bounded by the driver's timeout: " + waited + " s");
        assertEquals(1, XaSupport.metrics(ds, "RAC2").failures(), "one failed commit, one failure");
        assertEquals(1, ds.getRouter().trackedBranches(), "kept for the retry");
        assertEquals(1, XaSupport.prepared(2).size());
        Faults.healAll();
        r.commit(x, false);
        XaSupport.assertCompleted(ds, 2, run, 1);
    }

    @Test
    void withANodeBlackholedRecoveryReturnsTheOthersAndAnXidFoundNowhereIsRetryLater() throws Exception {
        String run = UUID.randomUUID().toString();
        AffinityXADataSource first = ds();
        Xid x = preparedOn2(first, xa.connect(first), run);
        Faults.blackhole(2);
        AffinityXADataSource recovery = ds();
        XAResource r = xa.connect(recovery).getXAResource();
        Xid[] found = r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN); // returns: node 2 times out
        assertFalse(XaSupport.contains(found, x));
        XAException e = assertThrows(XAException.class, () -> r.commit(x, false));
        assertEquals(XAException.XAER_RMFAIL, e.errorCode, "node 2 did not answer: " + e.getMessage());
        Faults.healAll();
        assertTrue(XaSupport.contains(r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN), x));
        r.commit(x, false);
        XaSupport.assertCompleted(recovery, 2, run, 1);
    }
}
