package io.racaffinity.xa;

import java.lang.System.Logger.Level;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLNonTransientConnectionException;
import java.sql.SQLNonTransientException;
import java.sql.SQLTransientConnectionException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Executor;
import javax.sql.ConnectionEvent;
import javax.sql.ConnectionEventListener;
import javax.sql.StatementEvent;
import javax.sql.StatementEventListener;
import javax.sql.XAConnection;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;

/**
 * A routing {@link XAConnection}: it is not tied to one node. A TM obtains it
 * (and its {@link #getXAResource() XAResource}) before it knows the transaction,
 * so the node is chosen when {@code start(xid)} arrives: the node that owns the
 * xid's gtrid (core transaction affinity). This connection then keeps one
 * physical XAConnection per node it was bound to, opened lazily, and reuses it
 * for later transactions on that node; a pool that reuses this XAConnection
 * therefore ends up with at most one physical connection per node in it.
 *
 * <p>{@link #getConnection()} returns a handle that delegates every call to the
 * physical connection of the node the connection is bound to <em>at the time of
 * the call</em>: the node of the active branch; outside a global transaction,
 * the node chosen at the handle's first use (the request's web session, else the
 * thread's pin, else load balancing), kept until the handle is closed. So a
 * handle obtained before {@code start(xid)} (JCA order) works on the right node.
 * As with every XAConnection, a new handle closes the previous one.
 *
 * <p>Connection events of the physical connections are re-sent with this
 * connection as source; a physical connection that reported an error is replaced
 * at its next use once it holds no branch.
 */
public final class AffinityXAConnection implements XAConnection {
    private final XaRouter router;
    private final String user;
    private final String password;
    private final AffinityXAResource resource;
    private final List<ConnectionEventListener> listeners = new CopyOnWriteArrayList<>();
    private final List<StatementEventListener> statementListeners = new CopyOnWriteArrayList<>();

    // guarded by this
    private Physical[] byNode = new Physical[0];
    private int bound = -1;
    private XidKey boundXid;
    /** {@code boundXid} was suspended ({@code end(TMSUSPEND)}): the connection may start another branch. */
    private boolean suspended;
    private Handle handle;
    private boolean closed;
    private int timeoutSeconds;
    /** Branches whose PREPARE the database refused, until the TM's rollback (released at close otherwise). */
    private final java.util.Set<XidKey> refused = new java.util.HashSet<>();

    /** One physical XAConnection to one node. */
    final class Physical implements ConnectionEventListener, StatementEventListener {
        final int node;
        final XAConnection xac;
        final XAResource xar;
        Connection logical;
        /** The xid started on it and not yet prepared or completed (pgjdbc: 2PC needs an idle connection). */
        XidKey associated;
        volatile boolean broken;

        Physical(int node, XAConnection xac) throws SQLException {
            this.node = node;
            this.xac = xac;
            this.xar = xac.getXAResource();
            xac.addConnectionEventListener(this);
            xac.addStatementEventListener(this);
        }

        @Override
        public void connectionClosed(ConnectionEvent event) {
            // the physical's logical handle closed: our handle reports its own close
        }

        @Override
        public void connectionErrorOccurred(ConnectionEvent event) {
            SQLException e = event.getSQLException();
            boolean news;
            synchronized (AffinityXAConnection.this) {
                news = !broken;
                broken = true;
            }
            if (news && e != null && router.isNodeFailure(e)) {
                router.reportFailure(node);
            }
            ConnectionEvent ev = new ConnectionEvent(AffinityXAConnection.this, e);
            for (ConnectionEventListener l : listeners) {
                l.connectionErrorOccurred(ev);
            }
        }

        @Override
        public void statementClosed(StatementEvent event) {
            StatementEvent ev = new StatementEvent(AffinityXAConnection.this, event.getStatement());
            for (StatementEventListener l : statementListeners) {
                l.statementClosed(ev);
            }
        }

        @Override
        public void statementErrorOccurred(StatementEvent event) {
            StatementEvent ev = new StatementEvent(AffinityXAConnection.this, event.getStatement(),
                    event.getSQLException());
            for (StatementEventListener l : statementListeners) {
                l.statementErrorOccurred(ev);
            }
        }

        void close() {
            try {
                xac.removeConnectionEventListener(this);
                xac.removeStatementEventListener(this);
                xac.close();
            } catch (SQLException | RuntimeException e) {
                XaRouter.LOG.log(Level.DEBUG, () -> "closing a physical XAConnection to " + router.nodeName(node)
                        + " failed: " + router.redact(String.valueOf(e.getMessage())));
            }
        }
    }

    AffinityXAConnection(XaRouter router, String user, String password) {
        this.router = router;
        this.user = user;
        this.password = password;
        this.resource = new AffinityXAResource(this);
    }

    XaRouter router() {
        return router;
    }

    /** @return the name of the node this connection is bound to now, or null */
    public synchronized String boundNodeName() {
        return bound < 0 ? null : router.nodeName(bound);
    }

    /** @return the number of physical XAConnections this connection holds (at most one per node) */
    public synchronized int physicalConnections() {
        int n = 0;
        for (Physical p : byNode) {
            n += p != null ? 1 : 0;
        }
        return n;
    }

    // ---- physical connections ------------------------------------------------

    /** Every XA call on a closed connection answers the same: XAER_RMFAIL (the TM uses another connection). */
    synchronized void checkOpen() throws XAException {
        if (closed) {
            throw XaErrors.xa(XAException.XAER_RMFAIL, "racaffinity: the XAConnection is closed", null);
        }
    }

    /**
     * An XA call to {@code node} failed with a connection-class error: its physical connection
     * is dead (XA calls fire no connection events), so the next call opens a fresh one. A
     * branch that was active on it died with the session.
     *
     * @return whether this is news (the connection was not known broken): the failure is counted then
     */
    synchronized boolean markBroken(int node) {
        Physical p = node < byNode.length ? byNode[node] : null;
        if (p == null) {
            return true; // the failure was opening one (or a short-lived connection's)
        }
        return markBroken(p);
    }

    private synchronized boolean markBroken(Physical p) {
        boolean news = !p.broken;
        p.broken = true;
        if (p.associated != null) {
            XaRouter.Branch b = router.branch(p.associated);
            if (b != null && !b.prepared) {
                XaRouter.sessionLost(b);
                if (handle != null && handle.used.contains(p) && handle.failure == null) {
                    // Found by another call (a TM's end or rollback on its own thread): the handle's next call
                    // would otherwise go to a fresh session, in autocommit, outside the branch that died.
                    handle.failure = "racaffinity: the session of this connection's branch on node "
                            + router.nodeName(p.node) + " was lost: its work is gone, and none goes on outside it";
                }
            }
            if (p.associated.equals(boundXid)) {
                boundXid = null;
            }
            p.associated = null;
        }
        return news;
    }

    /**
     * Closes the physical connection to {@code node} now if it is broken and holds no branch: the
     * server ends its session, and with it a never-prepared transaction it still had (a blackholed
     * session is otherwise left open until the connection is next used or closed).
     */
    synchronized void discardBroken(int node) {
        Physical p = node < byNode.length ? byNode[node] : null;
        if (p != null && p.broken && p.associated == null) {
            byNode[node] = null;
            p.close();
        }
    }

    /**
     * {@link XaRouter#nodeRenewed}: the session this connection holds on {@code node}, if idle (no branch on it,
     * no open handle that used it), is marked broken, so the next call there opens a new one ({@link #physical})
     * and closes it.
     */
    synchronized void renewIdle(int node) {
        Physical p = node < byNode.length ? byNode[node] : null;
        if (!closed && p != null && p.associated == null && (handle == null || !handle.used.contains(p))) {
            p.broken = true;
        }
    }

    /**
     * {@link XaRouter#nodeFailed}: the session this connection holds on {@code node}, if any, is marked broken
     * (an active branch on it died with it), the handle that used it fails its next call, and the session is
     * aborted: through the handle's driver connection by the task added to {@code inUse}; with no handle open by
     * the one added to {@code later}, through a new handle of the physical connection, which a driver may give
     * only once a call running on the session ends. The caller runs them off its own thread: a driver's abort may
     * block (a socket stuck in a write).
     *
     * @return whether this connection had a session there
     */
    boolean abortNode(int node, List<Runnable> inUse, List<Runnable> later) {
        Physical p;
        Connection logical;
        synchronized (this) {
            p = node < byNode.length ? byNode[node] : null;
            if (closed || p == null) {
                return false;
            }
            markBroken(p);
            if (handle != null && handle.used.contains(p)) {
                handle.failure = "racaffinity: node " + router.nodeName(node) + " failed (hard Down): this"
                        + " connection's session there was aborted";
            }
            logical = p.logical;
        }
        if (logical != null) {
            inUse.add(() -> abortQuietly(logical));
        } else {
            later.add(() -> {
                try {
                    abortQuietly(p.xac.getConnection());
                } catch (SQLException | RuntimeException e) {
                    // closed meanwhile: nothing left to end
                }
            });
        }
        return true;
    }

    /**
     * {@link XaRouter#closeConnections}: the sessions behind handles end at once (a call hung on a dead node with
     * them), then the connection closes as by {@link #close()}. A session with no handle open is closed, not
     * aborted: the driver's close of an idle session does not wait on the node. The connection is closed before
     * any driver call: an abort that blocks (a dead node, a driver that ignores the interrupt) leaves no
     * XAConnection or handle the TM can go on using meanwhile.
     */
    void abortAndClose() {
        end(true);
    }

    /** Waits for {@code threads} to end: the caller's own bound (a close's) is what limits the wait. */
    private static void joinUninterruptibly(List<Thread> threads) {
        boolean interrupted = false;
        for (Thread t : threads) {
            while (t.isAlive()) {
                try {
                    t.join();
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    private void abortQuietly(Connection c) {
        try {
            c.abort(Runnable::run);
        } catch (SQLException | RuntimeException e) {
            XaRouter.LOG.log(Level.DEBUG, () -> "aborting a physical connection failed: "
                    + router.redact(String.valueOf(e.getMessage())));
        }
    }

    /** The physical connection to {@code node} if one is open (never opens one), else null. */
    synchronized Physical existing(int node) {
        Physical p = node < byNode.length ? byNode[node] : null;
        return p == null || p.broken ? null : p;
    }

    synchronized void refused(XidKey k) {
        refused.add(k);
    }

    synchronized void released(XidKey k) {
        refused.remove(k);
    }

    /**
     * The physical connection to {@code node}, opened if needed. The connect runs outside this connection's lock:
     * a hard Down's abort ({@link #abortNode}), {@link #close()} and this connection's other calls take the lock,
     * and a connect to a node that does not answer keeps it until the login timeout. A session opened meanwhile by
     * another call is used and ours closed; ours is closed too if this connection was closed, or the node had a
     * hard Down, while it connected (that Down's abort could not see it).
     */
    Physical physical(int node) throws XAException {
        Physical stale = null;
        long downs;
        synchronized (this) {
            checkOpen();
            Physical p = node < byNode.length ? byNode[node] : null;
            if (p != null && p.broken && p.associated == null) {
                byNode[node] = null;
                stale = p;
            } else if (p != null) {
                return p;
            }
            downs = router.hardDowns(node);
        }
        if (stale != null) {
            stale.close();
        }
        Physical fresh = open(node);
        Physical other = null;
        XAException lost = null;
        synchronized (this) {
            Physical p = node < byNode.length ? byNode[node] : null;
            if (closed) {
                lost = XaErrors.xa(XAException.XAER_RMFAIL, "racaffinity: the XAConnection is closed", null);
            } else if (router.hardDowns(node) != downs) {
                lost = XaErrors.xa(XAException.XAER_RMFAIL, "racaffinity: node " + router.nodeName(node)
                        + " failed (hard Down) while this XAConnection connected to it", null);
            } else if (p != null && !(p.broken && p.associated == null)) {
                other = p;
            } else {
                if (node >= byNode.length) {
                    Physical[] a = new Physical[Math.max(node + 1, byNode.length * 2)];
                    System.arraycopy(byNode, 0, a, 0, byNode.length);
                    byNode = a;
                }
                stale = p;
                byNode[node] = fresh;
                if (timeoutSeconds > 0) {
                    try {
                        router.timeoutApplies(fresh.xar.setTransactionTimeout(timeoutSeconds));
                    } catch (XAException e) {
                        // best effort, as the TM's own call
                    }
                }
            }
        }
        if (stale != null) {
            stale.close();
        }
        if (lost != null || other != null) {
            fresh.close();
            if (lost != null) {
                throw lost;
            }
            return other;
        }
        return fresh;
    }

    /** A new physical connection to {@code node} (not yet this connection's). */
    private Physical open(int node) throws XAException {
        XAConnection xac = router.open(node, user, password);
        try {
            return new Physical(node, xac);
        } catch (SQLException e) {
            try {
                xac.close();
            } catch (SQLException ignored) {
                // nothing more to do
            }
            throw router.redacted(XaErrors.xa(XAException.XAER_RMFAIL, "racaffinity: node " + router.nodeName(node)
                    + ": getXAResource failed: " + router.redact(String.valueOf(e.getMessage())), e));
        }
    }

    /**
     * The physical connection for a 2PC command on {@code node}: this connection's own
     * unless it is busy with another branch (pgjdbc runs COMMIT PREPARED only on an idle
     * connection); then null, and the caller uses a short-lived one.
     */
    Physical physicalFor2pc(int node, XidKey xid) throws XAException {
        synchronized (this) {
            if (closed) {
                return null;
            }
            Physical p = node < byNode.length ? byNode[node] : null;
            if (p != null && p.associated != null && !p.associated.equals(xid)) {
                return null;
            }
        }
        // Unlocked: physical() may connect.
        return physical(node);
    }

    /** The physical connection holding {@code xid}'s association, or null. */
    synchronized Physical associatedWith(XidKey xid) {
        for (Physical p : byNode) {
            if (p != null && xid.equals(p.associated)) {
                return p;
            }
        }
        return null;
    }

    /** Opens a short-lived physical XAConnection to {@code node} (closed by the caller). */
    XAConnection openTemporary(int node) throws XAException {
        return router.open(node, user, password);
    }

    /** One node's in-doubt list; a connection-class failure counts once and replaces the physical connection. */
    Xid[] recoverOn(int node) throws XAException {
        for (int attempt = 0;; attempt++) {
            Physical p = null;
            try {
                p = physicalFor2pc(node, null);
                if (p != null) {
                    return nonNull(p.xar.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN));
                }
            } catch (XAException e) {
                // Marked broken while the scan ran on it (the application aborted a handle on that session):
                // the session, not the node, ended the call, so the node is asked once more on a fresh one.
                boolean endedHere = p != null && p.broken;
                resource.failed(node, e);
                if (endedHere && attempt == 0) {
                    continue;
                }
                throw router.redacted(e);
            }
            break;
        }
        // the own connection is closed or holds a branch: a short-lived one's failure is not the own one's
        try {
            XAConnection t = openTemporary(node);
            try {
                return nonNull(t.getXAResource().recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN));
            } catch (SQLException e) {
                throw XaErrors.xa(XAException.XAER_RMFAIL, "racaffinity: recover on " + router.nodeName(node) + ": "
                        + router.redact(String.valueOf(e.getMessage())), e);
            } finally {
                closeQuietly(t);
            }
        } catch (XAException e) {
            resource.failedTemporary(node, e);
            throw router.redacted(e);
        }
    }

    private static Xid[] nonNull(Xid[] x) {
        return x == null ? new Xid[0] : x;
    }

    static void closeQuietly(XAConnection c) {
        try {
            c.close();
        } catch (SQLException | RuntimeException e) {
            // nothing to do
        }
    }

    synchronized void bind(int node, XidKey xid) {
        bound = node;
        boundXid = xid;
        suspended = false;
    }

    synchronized void suspend(XidKey xid) {
        if (xid.equals(boundXid)) {
            suspended = true;
        }
    }

    /** @return the branch this connection is actively associated with (started, not ended or suspended), or null */
    synchronized XidKey activeXid() {
        return suspended ? null : boundXid;
    }

    synchronized void unbindXid(XidKey xid) {
        if (xid.equals(boundXid)) {
            boundXid = null;
        }
    }

    synchronized XidKey boundXid() {
        return boundXid;
    }

    synchronized int boundNode() {
        return bound;
    }

    /** @return whether the node drivers apply it (see {@link AffinityXAResource#setTransactionTimeout}) */
    synchronized boolean setTimeout(int seconds) {
        timeoutSeconds = seconds;
        Boolean applies = null;
        for (Physical p : byNode) {
            if (p != null && !p.broken) {
                try {
                    boolean a = p.xar.setTransactionTimeout(seconds);
                    router.timeoutApplies(a);
                    applies = applies == null ? a : applies && a;
                } catch (XAException e) {
                    applies = false;
                }
            }
        }
        return applies != null ? applies : router.timeoutApplies();
    }

    synchronized int timeout() {
        return timeoutSeconds;
    }

    // ---- logical handles -----------------------------------------------------

    /** How many times a handle's call looks up its session when other calls keep replacing it meanwhile. */
    static final int TARGET_ATTEMPTS = 3;

    /** Refuses a call of {@code h} on a closed XAConnection, a replaced handle, or a session a hard Down aborted. */
    private void checkUsable(Handle h) throws SQLException {
        assert Thread.holdsLock(this);
        if (closed) {
            throw new SQLNonTransientConnectionException("the XAConnection is closed", "08003");
        }
        if (h != handle) {
            throw new SQLNonTransientConnectionException("connection handle is closed", "08003");
        }
        if (h.failure != null) {
            // Never a fresh session: the work would go on outside the branch that died.
            throw new SQLNonTransientConnectionException(h.failure, "08006");
        }
    }

    /** The physical logical connection a handle's call goes to now. */
    Connection target(Handle h) throws SQLException {
        int node;
        synchronized (this) {
            checkUsable(h);
            node = bound;
        }
        if (node < 0) {
            try {
                node = router.localNode();
            } catch (XAException e) {
                throw new SQLException(e.getMessage(), "08001", e);
            }
            synchronized (this) {
                if (bound < 0) {
                    bound = node;
                } else {
                    node = bound;
                }
            }
        }
        for (int attempt = 1;; attempt++) {
            Physical p;
            try {
                // Unlocked: it may connect.
                p = physical(node);
            } catch (XAException e) {
                throw new SQLException(e.getMessage(), "08001", e);
            }
            Runnable hook = router.targetHook;
            if (hook != null) {
                hook.run();
            }
            synchronized (this) {
                // Again after the unlocked connect: a close or a hard Down may have come meanwhile.
                checkUsable(h);
                // Another call may have found p dead meanwhile (an XA call's connection-class failure) and
                // replaced and closed it: its logical connection would fail although a fresh session is in place.
                // A broken session that still holds a branch is handed out: it is never replaced under that
                // branch's work, and the call fails on it.
                Physical current = node < byNode.length ? byNode[node] : null;
                if (current == p && !(p.broken && p.associated == null)) {
                    if (p.logical == null || p.logical.isClosed()) {
                        p.logical = p.xac.getConnection();
                    }
                    if (!h.used.contains(p)) {
                        h.used.add(p);
                    }
                    return p.logical;
                }
                if (attempt >= TARGET_ATTEMPTS) {
                    throw new SQLTransientConnectionException("racaffinity: node " + router.nodeName(node)
                            + ": the session was found dead and replaced by other calls " + attempt
                            + " times while this call looked it up", "08001");
                }
            }
        }
    }

    @Override
    public Connection getConnection() throws SQLException {
        Handle h;
        synchronized (this) {
            if (closed) {
                throw new SQLNonTransientConnectionException("the XAConnection is closed", "08003");
            }
            if (handle != null) {
                closeHandle(handle, false);
            }
            h = new Handle();
            handle = h;
            if (boundXid == null) {
                // Outside a branch a handle routes by its own request. The node of a branch ended since the last
                // handle closed (JCA closes it inside the transaction, the TM completes it later) is no binding.
                bound = -1;
            }
        }
        return (Connection) Proxy.newProxyInstance(AffinityXAConnection.class.getClassLoader(),
                new Class<?>[] {Connection.class}, h);
    }

    private void closeHandle(Handle h, boolean notify) {
        closeHandle(h, notify, true);
    }

    /** {@code closeLogicals} false: the caller ends the handle's sessions itself, outside the lock. */
    private void closeHandle(Handle h, boolean notify, boolean closeLogicals) {
        List<Physical> used;
        synchronized (this) {
            if (h.closed) {
                return;
            }
            h.closed = true;
            if (handle == h) {
                handle = null;
            }
            used = new ArrayList<>(h.used);
            for (Physical p : used) {
                if (p.logical != null) {
                    if (closeLogicals) {
                        try {
                            p.logical.close();
                        } catch (SQLException e) {
                            // the physical reports its own errors
                        }
                    }
                    p.logical = null;
                }
            }
            if (boundXid == null) {
                bound = -1; // outside a branch, the next handle routes afresh
            }
        }
        if (notify) {
            ConnectionEvent ev = new ConnectionEvent(this);
            for (ConnectionEventListener l : listeners) {
                l.connectionClosed(ev);
            }
        }
    }

    /**
     * {@code Connection.abort} of handle {@code h}: a no-op once it is closed (java.sql.Connection). Else the
     * sessions it used end at once and it is closed. Those sessions are marked broken first, as dead ones
     * (an active branch on one died with it): the node is fine, so the next call on this XAConnection (a
     * recovery scan, a start) opens a fresh session rather than fail on the aborted one and blame the node.
     */
    private void abortHandle(Handle h, Executor executor) throws SQLException {
        if (executor == null) {
            throw new SQLNonTransientException("Connection.abort: the executor is null", "HY009");
        }
        List<Physical> used;
        synchronized (this) {
            if (h.closed || closed) {
                return;
            }
            used = new ArrayList<>(h.used);
            for (Physical p : used) {
                markBroken(p);
            }
        }
        SQLException failed = null;
        for (Physical p : used) {
            Connection logical = p.logical;
            if (logical == null) {
                continue;
            }
            try {
                logical.abort(executor);
            } catch (SQLException e) {
                if (failed == null) {
                    failed = e;
                } else {
                    failed.addSuppressed(e);
                }
            }
        }
        closeHandle(h, true);
        if (failed != null) {
            throw failed;
        }
    }

    /** A logical connection handle. */
    final class Handle implements InvocationHandler {
        final List<Physical> used = new ArrayList<>(2);
        boolean closed;
        /** Why every call of this handle fails from now on (its session died with a branch), or null. */
        String failure;

        @Override
        public Object invoke(Object proxy, Method m, Object[] args) throws Throwable {
            String name = m.getName();
            int argc = args == null ? 0 : args.length;
            if (m.getDeclaringClass() == Object.class) {
                switch (name) {
                    case "equals":
                        return proxy == args[0];
                    case "hashCode":
                        return System.identityHashCode(proxy);
                    default:
                        return "AffinityXAConnection.Handle[" + boundNodeName() + "]";
                }
            }
            if (argc == 0) {
                switch (name) {
                    case "close":
                        closeHandle(this, true);
                        return null;
                    case "isClosed":
                        synchronized (AffinityXAConnection.this) {
                            return closed || AffinityXAConnection.this.closed;
                        }
                    default:
                        break;
                }
            }
            if (argc == 1 && name.equals("abort")) {
                abortHandle(this, (Executor) args[0]);
                return null;
            }
            if (argc == 1 && (name.equals("unwrap") || name.equals("isWrapperFor"))
                    && ((Class<?>) args[0]).isInstance(proxy)) {
                return name.equals("unwrap") ? proxy : Boolean.TRUE;
            }
            if (argc == 1 && name.equals("isValid")) {
                synchronized (AffinityXAConnection.this) {
                    if (closed || AffinityXAConnection.this.closed) {
                        return Boolean.FALSE;
                    }
                }
            }
            Connection target = target(this);
            try {
                return m.invoke(target, args);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        }
    }

    // ---- XAConnection ----------------------------------------------------------

    @Override
    public XAResource getXAResource() throws SQLException {
        synchronized (this) {
            if (closed) {
                throw new SQLNonTransientConnectionException("the XAConnection is closed", "08003");
            }
        }
        return resource;
    }

    /**
     * Closes every physical connection. Prepared branches stay on their nodes (in doubt, for
     * the TM's commit or recovery). A branch that was active and unprepared on a closed session
     * is rolled back by the database, and one whose PREPARE the database refused is gone: both
     * are released here, so nothing stays tracked after the TM lost interest.
     */
    @Override
    public void close() throws SQLException {
        end(false);
    }

    /** {@link #close()}; {@code abort}: the sessions behind the handle are aborted first ({@link #abortAndClose}). */
    private void end(boolean abort) {
        Physical[] ps;
        List<XidKey> gone = new ArrayList<>();
        List<Connection> logicals = new ArrayList<>();
        synchronized (this) {
            if (closed) {
                return;
            }
            if (abort) {
                for (Physical p : byNode) {
                    if (p != null && p.logical != null) {
                        logicals.add(p.logical);
                    }
                }
            }
            if (handle != null) {
                closeHandle(handle, false, !abort);
            }
            closed = true;
            ps = byNode;
            byNode = new Physical[0];
            bound = -1;
            boundXid = null;
            for (Physical p : ps) {
                if (p != null && p.associated != null) {
                    gone.add(p.associated);
                }
            }
            gone.addAll(refused);
            refused.clear();
        }
        // A handle that worked on two nodes (outside a branch, then in one) has a session on each: a driver whose
        // abort blocks on one node must not leave the other's session, an unprepared branch holding its locks on a
        // node that is fine, open meanwhile. So each further session is aborted on a thread of its own.
        List<Thread> aborting = new ArrayList<>();
        for (int i = 1; i < logicals.size(); i++) {
            Connection c = logicals.get(i);
            Thread t = io.racaffinity.LibraryThreads.newThread(() -> abortQuietly(c), "racaffinity-xa-close-"
                    + router.cluster().name(), AffinityXAConnection.class.getClassLoader());
            t.start();
            aborting.add(t);
        }
        if (!logicals.isEmpty()) {
            abortQuietly(logicals.get(0));
        }
        joinUninterruptibly(aborting);
        for (Connection c : logicals) {
            try {
                c.close();
            } catch (SQLException | RuntimeException e) {
                // aborted: the physical's close below reports its own errors
            }
        }
        for (Physical p : ps) {
            if (p != null) {
                p.close();
            }
        }
        for (XidKey k : gone) {
            router.closedUnprepared(k);
        }
        router.closed(this);
    }

    @Override
    public void addConnectionEventListener(ConnectionEventListener listener) {
        if (listener != null) {
            listeners.add(listener);
        }
    }

    @Override
    public void removeConnectionEventListener(ConnectionEventListener listener) {
        listeners.remove(listener);
    }

    @Override
    public void addStatementEventListener(StatementEventListener listener) {
        if (listener != null) {
            statementListeners.add(listener);
        }
    }

    @Override
    public void removeStatementEventListener(StatementEventListener listener) {
        statementListeners.remove(listener);
    }

    @Override
    public String toString() {
        return "AffinityXAConnection[" + router.cluster().name() + ", bound=" + boundNodeName() + ", physical="
                + physicalConnections() + "]";
    }
}
