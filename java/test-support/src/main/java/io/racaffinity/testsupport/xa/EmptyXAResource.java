package io.racaffinity.testsupport.xa;

import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;

/**
 * A resource manager with no data of its own, enlisted by the XA tests to act between the two
 * phases of a transaction (kill a node, hold the transaction); subclasses say what its
 * {@code prepare} does. Not {@link java.io.Serializable}: Narayana writes a serializable
 * resource into its log, so a subclass decides whether recovery sees it.
 */
public abstract class EmptyXAResource implements XAResource {
    @Override
    public void start(Xid xid, int flags) {
    }

    @Override
    public void end(Xid xid, int flags) {
    }

    @Override
    public void commit(Xid xid, boolean onePhase) {
    }

    @Override
    public void rollback(Xid xid) {
    }

    @Override
    public void forget(Xid xid) {
    }

    @Override
    public Xid[] recover(int flag) {
        return new Xid[0];
    }

    @Override
    public boolean isSameRM(XAResource other) {
        return other == this;
    }

    @Override
    public int getTransactionTimeout() {
        return 0;
    }

    @Override
    public boolean setTransactionTimeout(int seconds) {
        return false;
    }
}
