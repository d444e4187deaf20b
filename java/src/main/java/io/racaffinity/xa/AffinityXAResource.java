package io.racaffinity.xa;

import io.racaffinity.Outcome;
import java.lang.System.Logger.Level;
import javax.sql.XAConnection;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;

/**
 * The XAResource of an {@link AffinityXAConnection}: routes each XA call to the
 * node that holds the branch.
 *
 * <ul>
 *   <li>{@code start(xid, TMNOFLAGS)} places the branch on the node owning the
 *       xid's gtrid (core {@code txBegin}; a new gtrid goes to the thread's pin or
 *       the request's web session if any, else the core's placement) and binds the
 *       connection to that node's physical XAConnection. {@code TMJOIN} joins the
 *       existing branch's node; {@code TMRESUME} resumes on the bound node.
 *   <li>{@code end} goes to the physical connection the branch was started on;
 *       {@code prepare}, {@code commit}, {@code rollback} and {@code forget} to the
 *       node the branch was started on (this binding's record: in a soft-mode span the
 *       branches of one gtrid are on two nodes), never refused for routing reasons; an
 *       xid with no record (recovered) goes where the core's {@code txRoute} says, and
 *       with {@code recovery.scope = database} a prepared branch too (any instance of the
 *       database completes it: the owner when Up, else another). A successful prepare marks the branch
 *       prepared ({@code txPrepared}): it never moves again. Completion (commit,
 *       rollback, forget, an {@code XA_RDONLY} prepare, or a driver answer that the
 *       branch was rolled back or does not exist) releases it ({@code txEnd}).
 *   <li>{@code recover(TMSTARTRSCAN)} scans every node ({@code recovery.scope = node}) or
 *       the first instance that answers ({@code database}), returns each xid once and
 *       records which node returned it ({@code txRecovered}), so its commit or rollback
 *       goes there. A node that does not answer is skipped (its branches are recovered by
 *       a later scan); {@code XAException.XAER_RMFAIL} only if none answers. A command for
 *       an xid found nowhere is {@code XAER_NOTA} only if every node that could hold it answered.
 *   <li>{@code isSameRM} is true only for another resource of the same data source
 *       that is (or would be) on the same node, and only if that node's driver
 *       agrees for the two physical connections; so a TM joins branches at most
 *       within one node (Oracle) and never across nodes (pgjdbc: never, one branch
 *       per connection).
 * </ul>
 *
 * <p>Routing refusals become {@link XAException}s with the codes listed in
 * {@link XaErrors}: notably {@code XAException.XAER_RMFAIL} when a strict transaction scope
 * ({@code transaction.strict}, JMX {@code UseStrictXAAffinity}) refuses to start a branch away
 * from its owner. A failed call counts one node failure only for a connection-class cause
 * (08xxx, refused, reset or timed-out sockets); application errors count nothing.
 */
public final class AffinityXAResource implements XAResource {
    private final AffinityXAConnection conn;
    private final XaRouter router;
    /** A recovery scan is open: a TMSTARTRSCAN without TMENDRSCAN succeeded and no TMENDRSCAN followed yet. */
    private boolean scanning;

    AffinityXAResource(AffinityXAConnection conn) {
        this.conn = conn;
        this.router = conn.router();
    }

    /** @return the connection this resource belongs to */
    public AffinityXAConnection connection() {
        return conn;
    }

    /** @return the node the connection is bound to now (null before the first start or use) */
    public String boundNodeName() {
        return conn.boundNodeName();
    }

    /**
     * Classifies a failed XA call on {@code node} as the JDBC path does: a connection-class
     * cause counts one node failure and marks the physical connection broken, so the next call
     * opens a fresh one; an application error (a constraint, a trigger, 28000 for one user, one
     * terminated session) counts nothing.
     *
     * @return whether the call failed for its connection (node failure or lost session): the
     *     branch entry is then kept for the TM's retry
     */
    boolean failed(int node, XAException e) {
        boolean nodeFailed = router.isNodeFailure(e);
        if (!nodeFailed && !XaRouter.isConnectionLost(e)) {
            return false; // an application error: the connection is fine
        }
        // The connection is dead (a crashed node, or one terminated session): replace it. Count a node failure
        // only for news: a call on a connection already known dead (08003 "connection closed" after its
        // session was terminated, say) did not reach the node.
        if (conn.markBroken(node) && nodeFailed) {
            router.reportFailure(node);
        }
        return true;
    }

    /**
     * {@link #failed} for a short-lived connection (a 2PC command or a scan while this XAConnection's own
     * connection to the node holds another branch): only that connection failed, so the node failure is
     * counted but the own connection, and the active branch on its session, are left alone (a smart shutdown
     * refuses new sessions while open ones run to completion).
     *
     * @return whether the call failed with its connection (else an application error)
     */
    boolean failedTemporary(int node, XAException e) {
        boolean nodeFailed = router.isNodeFailure(e);
        if (!nodeFailed && !XaRouter.isConnectionLost(e)) {
            return false;
        }
        if (nodeFailed) {
            router.reportFailure(node);
        }
        return true;
    }

    @Override
    public void start(Xid xid, int flags) throws XAException {
        conn.checkOpen();
        XidKey k = key(xid);
        XidKey active = conn.activeXid();
        if (active != null && !active.equals(k)) {
            // One association at a time (XA). The driver refuses a second one on the same session, but a branch
            // placed on another node gets a session of its own, and the connection's handle would follow it away
            // from the branch its work belongs to.
            throw XaErrors.xa(XAException.XAER_PROTO, "racaffinity: start of xid " + k + ": this XAConnection is"
                    + " in branch " + active + " (end or suspend it first)", null);
        }
        if ((flags & (TMJOIN | TMRESUME)) != 0) {
            int node = (flags & TMRESUME) != 0 && k.equals(conn.boundXid()) ? conn.boundNode() : router.joinNode(k);
            AffinityXAConnection.Physical p;
            try {
                p = conn.physical(node);
                p.xar.start(xid, flags);
            } catch (XAException e) {
                failed(node, e);
                throw router.redacted(e);
            }
            synchronized (conn) {
                p.associated = k;
                conn.bind(node, k);
            }
            return;
        }
        XaRouter.Branch b = router.begin(k);
        AffinityXAConnection.Physical p;
        try {
            p = conn.physical(b.node);
            p.xar.start(xid, flags);
        } catch (XAException e) {
            // failed() counted the node failure, if it was one: the lease goes back NEUTRAL so it is counted once
            failed(b.node, e);
            router.abandon(k, b, Outcome.NEUTRAL);
            throw router.redacted(e);
        } catch (RuntimeException e) {
            router.abandon(k, b, Outcome.NEUTRAL);
            throw e;
        }
        synchronized (conn) {
            p.associated = k;
            conn.bind(b.node, k);
        }
    }

    @Override
    public void end(Xid xid, int flags) throws XAException {
        conn.checkOpen();
        XidKey k = key(xid);
        XaRouter.Branch lost = router.branch(k);
        if (lost != null && lost.sessionLost && !lost.prepared && conn.associatedWith(k) == null) {
            // Its session ended (an abort at its node's hard Down): the database rolled it back, and a fresh
            // session would only wait on the node to answer that it holds no such branch.
            conn.unbindXid(k);
            throw XaErrors.xa(XAException.XA_RBCOMMFAIL, "racaffinity: end of xid " + k + ": its session on "
                    + router.nodeName(lost.node) + " ended: rolled back", null);
        }
        int node = k.equals(conn.boundXid()) ? conn.boundNode() : router.resolve(k, "end", conn);
        try {
            conn.physical(node).xar.end(xid, flags);
        } catch (XAException e) {
            failed(node, e);
            if (XaErrors.rolledBack(e.errorCode)) {
                conn.unbindXid(k);
            }
            throw router.redacted(e);
        }
        if ((flags & TMSUSPEND) == 0) {
            conn.unbindXid(k);
        } else {
            conn.suspend(k);
        }
    }

    @Override
    public int prepare(Xid xid) throws XAException {
        conn.checkOpen();
        XidKey k = key(xid);
        int node;
        try {
            node = router.resolve(k, "prepare", conn);
        } catch (XAException e) {
            if (XaErrors.rolledBack(e.errorCode)) {
                abandon(k, xid);
            }
            throw router.redacted(e);
        }
        AffinityXAConnection.Physical p;
        int r;
        try {
            p = conn.physical(node);
        } catch (XAException e) {
            failed(node, e);
            throw router.redacted(e);
        }
        try {
            r = p.xar.prepare(xid);
        } catch (XAException e) {
            boolean lost = failed(node, e);
            clear(p, k);
            if (XaErrors.rolledBack(e.errorCode) || e.errorCode == XAException.XAER_NOTA) {
                router.completed(k, Outcome.NEUTRAL, XaRouter.Completion.ROLLBACK);
            } else if (lost) {
                // The session died around the PREPARE (on whichever connection the TM prepared it): prepared or
                // not, only the node's in-doubt list can tell; a rollback or a recovery scan settles it.
                XaRouter.Branch b = router.branch(k);
                if (b != null && !b.prepared) {
                    XaRouter.sessionLost(b);
                }
            } else {
                // The database answered the PREPARE with an error of the work (pgjdbc calls even a trigger's
                // P0001 XAER_RMFAIL): the database rolled the branch back. The TM's rollback releases it.
                XaRouter.Branch b = router.branch(k);
                if (b != null) {
                    b.prepareRefused = true;
                    conn.refused(k);
                }
            }
            throw router.redacted(e);
        }
        clear(p, k);
        if (r == XA_RDONLY) {
            router.completed(k, Outcome.OK, XaRouter.Completion.READ_ONLY);
        } else {
            router.prepared(k);
        }
        return r;
    }

    private void clear(AffinityXAConnection.Physical p, XidKey k) {
        synchronized (conn) {
            if (k.equals(p.associated)) {
                p.associated = null;
            }
        }
        conn.unbindXid(k);
    }

    @Override
    public void commit(Xid xid, boolean onePhase) throws XAException {
        XidKey k = key(xid);
        complete(k, onePhase ? "one-phase commit" : "commit", xid, onePhase);
    }

    @Override
    public void rollback(Xid xid) throws XAException {
        complete(key(xid), "rollback", xid, false);
    }

    @Override
    public void forget(Xid xid) throws XAException {
        complete(key(xid), "forget", xid, false);
    }

    /**
     * Routing answered XA_RB* (the branch's node is gone): the TM now treats the branch as
     * rolled back and will not call rollback, so roll back what this connection holds (best
     * effort: the node may be unreachable, where the database rolls it back itself) and release it.
     */
    private void abandon(XidKey k, Xid xid) {
        AffinityXAConnection.Physical p = conn.associatedWith(k);
        if (p != null) {
            try {
                p.xar.rollback(xid);
            } catch (XAException | RuntimeException e) {
                // unreachable: the node's own recovery rolls back an unprepared branch
            }
            clear(p, k);
        }
        conn.unbindXid(k);
        router.completed(k, Outcome.NEUTRAL, XaRouter.Completion.ROLLBACK);
    }

    private static XaRouter.Completion completion(String op) {
        switch (op) {
            case "rollback":
                return XaRouter.Completion.ROLLBACK;
            case "forget":
                return XaRouter.Completion.FORGET;
            default:
                return XaRouter.Completion.COMMIT;
        }
    }

    private void complete(XidKey k, String op, Xid xid, boolean onePhase) throws XAException {
        conn.checkOpen();
        int node;
        try {
            node = router.resolve(k, op, conn);
        } catch (XAException e) {
            if (onePhase && XaErrors.rolledBack(e.errorCode)) {
                abandon(k, xid);
            }
            throw router.redacted(e);
        }
        XaRouter.Branch b = router.branch(k);
        AffinityXAConnection.Physical p;
        XAConnection temp = null;
        XAResource target;
        boolean shortLived = false;
        try {
            p = conn.physicalFor2pc(node, k);
            if (p != null) {
                target = p.xar;
            } else {
                shortLived = true;
                temp = conn.openTemporary(node);
                try {
                    target = temp.getXAResource();
                } catch (java.sql.SQLException e) {
                    throw router.redacted(XaErrors.xa(XAException.XAER_RMFAIL, "racaffinity: " + op + " on "
                            + router.nodeName(node) + ": " + router.redact(String.valueOf(e.getMessage())), e));
                }
            }
        } catch (XAException e) {
            if (temp != null) {
                AffinityXAConnection.closeQuietly(temp);
            }
            // unreachable: the entry is kept for the retry
            if (shortLived) {
                failedTemporary(node, e);
            } else {
                failed(node, e);
            }
            throw router.redacted(e);
        }
        try {
            switch (op) {
                case "rollback":
                    target.rollback(xid);
                    break;
                case "forget":
                    target.forget(xid);
                    break;
                default:
                    target.commit(xid, onePhase);
                    break;
            }
        } catch (XAException e) {
            boolean nodeFailed = p != null ? failed(node, e) : failedTemporary(node, e);
            int c = e.errorCode;
            if (nodeFailed) {
                if (op.equals("rollback") && b != null && b.live && !b.prepared) {
                    // Never prepared, and its session is gone (a crash, a reset, a blackholed connection this
                    // binding now closes): the database rolls an unprepared transaction back when its session
                    // ends, and nothing can prepare it any more. Rolled back: released, not kept for a retry
                    // no TM makes (Narayana gives up on a failed rollback of an unprepared branch).
                    if (p != null) {
                        clear(p, k);
                    }
                    conn.discardBroken(node);
                    conn.released(k);
                    router.completed(k, Outcome.NEUTRAL, XaRouter.Completion.ROLLBACK);
                    return;
                }
                if (c != XAException.XAER_RMFAIL) {
                    // pgjdbc answers XAER_RMERR when the session was terminated (57P01, as after a crash): the
                    // branch is still where it was, so the TM must retry (a TM gives up on XAER_RMERR)
                    throw router.redacted(XaErrors.xa(XAException.XAER_RMFAIL, "racaffinity: " + op + " of xid " + k
                            + " on " + router.nodeName(node) + ": the connection was lost ("
                            + router.redact(String.valueOf(e.getMessage())) + "); retry", e));
                }
                throw router.redacted(e); // XAER_RMFAIL: the entry is kept for the retry, released after it
            }
            if (p != null) {
                clear(p, k);
            }
            if (op.equals("rollback") && b != null && (b.prepareRefused || b.sessionLost) && !b.prepared) {
                // The node answered, and the branch is not there: its PREPARE failed (the database rolled it
                // back) or its session died before it was prepared. Rolled back: done.
                conn.released(k);
                router.completed(k, Outcome.NEUTRAL, XaRouter.Completion.ROLLBACK);
                return;
            }
            if (c == XAException.XAER_RMERR && XaRouter.isUnknownGid(e)) {
                // pgjdbc's answer on the connection that prepared the xid, when the node no longer holds it
                // (another resolver completed it): XAER_RMERR, where any other connection answers XAER_NOTA for
                // the same 42704. The node answered, so it is NOTA; a TM gives up on RMERR and keeps nothing.
                router.completed(k, Outcome.NEUTRAL, XaRouter.Completion.NONE);
                throw router.redacted(XaErrors.xa(XAException.XAER_NOTA, "racaffinity: " + op + " of xid " + k
                        + ": node " + router.nodeName(node) + " holds no such branch (completed by another resolver?)",
                        e));
            }
            if (XaErrors.rolledBack(c)) {
                router.completed(k, Outcome.NEUTRAL, XaRouter.Completion.ROLLBACK);
            } else if (c == XAException.XAER_NOTA) {
                // the node that holds it answered that it does not (any more): nothing is left to route
                router.completed(k, Outcome.NEUTRAL, XaRouter.Completion.NONE);
            } else if (XaErrors.heuristic(c)) {
                XaRouter.LOG.log(Level.WARNING, () -> "xid " + k + ": heuristic outcome " + XaErrors.name(c)
                        + " on " + router.nodeName(node) + " (" + op + "); the TM must forget it");
            }
            throw router.redacted(e);
        } finally {
            if (temp != null) {
                AffinityXAConnection.closeQuietly(temp);
            }
        }
        if (p != null) {
            clear(p, k);
        }
        conn.released(k);
        router.completed(k, Outcome.OK, completion(op));
    }

    @Override
    public Xid[] recover(int flag) throws XAException {
        conn.checkOpen();
        if ((flag & ~(TMSTARTRSCAN | TMENDRSCAN)) != 0) {
            throw XaErrors.xa(XAException.XAER_INVAL, "racaffinity: recover: invalid flags " + flag, null);
        }
        if ((flag & TMSTARTRSCAN) != 0) {
            // One call scans every node completely; TMNOFLAGS continuations have nothing more. A start
            // that fails opens no scan (and ends any earlier one), so a continuation is XAER_PROTO, not an
            // empty list a TM would read as "nothing in doubt".
            scanning = false;
            Xid[] found = router.scanAll(conn);
            scanning = (flag & TMENDRSCAN) == 0;
            return found;
        }
        if (!scanning && flag == TMNOFLAGS) {
            throw XaErrors.xa(XAException.XAER_PROTO, "racaffinity: recover(TMNOFLAGS) without TMSTARTRSCAN", null);
        }
        if ((flag & TMENDRSCAN) != 0) {
            scanning = false;
        }
        return new Xid[0];
    }

    /**
     * True only for another resource of the same data source bound to the same node, and only
     * if that node's driver agrees for the two physical connections already open (pgjdbc:
     * never; ojdbc: same instance). Resources on two nodes (a soft-mode span) are two resource
     * managers, so the TM runs a two-RM commit. An unbound resource is never the same RM, and
     * the question opens no connection.
     */
    @Override
    public boolean isSameRM(XAResource other) throws XAException {
        if (other == this) {
            return true;
        }
        if (!(other instanceof AffinityXAResource)) {
            return false;
        }
        AffinityXAResource o = (AffinityXAResource) other;
        if (o.router != router || !router.isTransactionAffinity()) {
            return false;
        }
        int theirs = o.conn.boundNode();
        int mine = conn.boundNode();
        if (theirs < 0 || mine != theirs || o.conn.boundXid() == null) {
            return false;
        }
        AffinityXAConnection.Physical a = conn.existing(mine);
        AffinityXAConnection.Physical b = o.conn.existing(theirs);
        if (a == null || b == null) {
            return false;
        }
        try {
            return a.xar.isSameRM(b.xar);
        } catch (XAException e) {
            return false;
        }
    }

    @Override
    public int getTransactionTimeout() {
        return conn.timeout();
    }

    /**
     * Applies the timeout to every node connection of this resource, now and when opened.
     *
     * @return what the node driver answered ({@code false} for pgjdbc, which has no transaction
     *     timeout); before any node connection exists, the last answer a node driver of this data
     *     source gave, else false
     */
    @Override
    public boolean setTransactionTimeout(int seconds) throws XAException {
        conn.checkOpen();
        if (seconds < 0) {
            throw XaErrors.xa(XAException.XAER_INVAL, "racaffinity: negative transaction timeout", null);
        }
        return conn.setTimeout(seconds);
    }

    private static XidKey key(Xid xid) throws XAException {
        if (xid == null) {
            throw XaErrors.xa(XAException.XAER_INVAL, "racaffinity: null xid", null);
        }
        return XidKey.of(xid);
    }

    @Override
    public String toString() {
        return "AffinityXAResource[" + conn + "]";
    }
}
