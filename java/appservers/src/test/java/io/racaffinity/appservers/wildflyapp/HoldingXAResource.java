package io.racaffinity.appservers.wildflyapp;

import io.racaffinity.testsupport.xa.EmptyXAResource;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import javax.transaction.xa.XAException;
import javax.transaction.xa.Xid;

/**
 * A third resource manager that holds a transaction between its two phases: enlisted after
 * the two data sources' branches, Narayana prepares it after theirs (it orders a
 * transaction's XA records by their creation), so while its {@code prepare} waits, both
 * branches are prepared on their node and nothing is committed yet. The test checks that
 * in {@code pg_prepared_xacts}, kills the node and then {@link #release()}s it; it votes
 * read-only, so it takes no part in the commit phase and leaves nothing to recover.
 */
public final class HoldingXAResource extends EmptyXAResource {
    /** How long a held prepare waits for the test before it votes rollback. */
    static final long HOLD_SECONDS = 120;

    private final CountDownLatch entered = new CountDownLatch(1);
    private final CountDownLatch released = new CountDownLatch(1);
    private volatile Xid held;

    /** @return the xid of the held prepare, or null while none is held */
    public Xid held() {
        return held;
    }

    /** Waits until the transaction manager calls prepare. */
    public boolean awaitPrepare(long seconds) throws InterruptedException {
        return entered.await(seconds, TimeUnit.SECONDS);
    }

    public void release() {
        released.countDown();
    }

    @Override
    public int prepare(Xid xid) throws XAException {
        held = xid;
        entered.countDown();
        try {
            if (!released.await(HOLD_SECONDS, TimeUnit.SECONDS)) {
                throw new XAException(XAException.XA_RBTIMEOUT);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new XAException(XAException.XA_RBOTHER);
        }
        return XA_RDONLY;
    }
}
