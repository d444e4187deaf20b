package io.racaffinity.xa;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.Lease;
import io.racaffinity.NodeState;
import io.racaffinity.Outcome;
import io.racaffinity.RecoveryScope;
import io.racaffinity.Redacted;
import io.racaffinity.Route;
import io.racaffinity.UnknownTransactionException;
import java.lang.System.Logger.Level;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.Predicate;
import java.util.function.Supplier;
import java.util.function.UnaryOperator;
import javax.sql.XAConnection;
import javax.sql.XADataSource;
import javax.transaction.xa.XAException;
import javax.transaction.xa.Xid;

/**
 * The XA engine behind {@code io.racaffinity.jdbc.AffinityXADataSource}: one
 * {@link XADataSource} per node (RAC instance), the core's transaction affinity,
 * and the table of branches this process knows (xid → node).
 *
 * <p>It hands out {@link AffinityXAConnection}s. Each one binds lazily: a TM gets
 * the XAConnection and its XAResource before it calls {@code start(xid)}, so the
 * node is chosen only at {@code start} (by the xid's gtrid), and the connection
 * keeps one physical XAConnection per node it has been bound to. Every 2PC
 * command goes to the node that holds the branch; {@code recover} scans every
 * node and remembers which node returned each xid.
 *
 * <p>Applications normally configure {@code AffinityXADataSource}; this class is
 * public for hosts that build their node XADataSources themselves.
 */
public final class XaRouter {
    static final System.Logger LOG = System.getLogger("io.racaffinity.xa");

    private final Cluster cluster;
    private final XADataSource[] byId;
    private final boolean affinity;
    private final Predicate<SQLException> nodeFailure;
    private final UnaryOperator<String> redact;
    private final Supplier<byte[]> requestSession;
    private final Supplier<String> requestToken;
    private final Supplier<Route> requestRoute;
    /** Independent databases (scan all, complete where found) or instances of one (any instance will do). */
    private final RecoveryScope scope;

    /**
     * The XAConnections open now, for fast connection failover ({@link #nodeFailed}): weak, so one a
     * pool dropped without closing it goes; connections are made rarely (a TM pools them).
     */
    private final Set<AffinityXAConnection> open =
            java.util.Collections.synchronizedSet(java.util.Collections.newSetFromMap(new java.util.WeakHashMap<>()));

    /**
     * Null but in a test: run by {@link #connect} before it registers the connection, to hold open the window
     * between a {@code getXAConnection()}'s closed check and that registration, which nothing outside can widen
     * (XaDataSourceCloseTest).
     */
    volatile Runnable connectHook;

    /**
     * Null but in a test: run by {@code AffinityXAConnection.target} between its unlocked {@code physical()} and
     * its re-lock, to hold open the window in which another call on the same XAConnection replaces that session
     * (XaLostSessionTest).
     */
    volatile Runnable targetHook;

    /** Branches started here (live) or returned by a recovery scan, by exact xid. */
    private final Map<XidKey, Branch> branches = new ConcurrentHashMap<>();

    /** Per node id: the hard Downs seen ({@link #nodeFailed}), so that a connect that spanned one is dropped. */
    private final AtomicLongArray hardDowns;

    private final LongAdder starts = new LongAdder();
    private final LongAdder prepares = new LongAdder();
    private final LongAdder commits = new LongAdder();
    private final LongAdder readOnly = new LongAdder();
    private final LongAdder forgets = new LongAdder();
    private final LongAdder rollbacks = new LongAdder();
    private final LongAdder recovered = new LongAdder();

    static final class Branch {
        final int node;
        final boolean live;
        final Lease lease;
        volatile boolean prepared;
        /**
         * The database answered this branch's PREPARE with an error of the work (a deferred
         * constraint, a trigger): the database rolled the branch back, so a later rollback has
         * nothing left to do on the node and only releases the branch.
         */
        volatile boolean prepareRefused;
        /**
         * The session holding this unprepared branch died: the database rolled it back, unless a PREPARE
         * whose answer was lost with the session had run. Its node's in-doubt list decides: a recovery scan
         * that the node answers without this xid releases it (no TM retries a rollback that could not connect).
         */
        volatile boolean sessionLost;

        Branch(int node, boolean live, Lease lease) {
            this.node = node;
            this.live = live;
            this.lease = lease;
        }
    }

    /**
     * @param cluster the routing core
     * @param byId node XADataSources indexed by node id (null where a node has none)
     * @param transactionAffinity true: every branch of a gtrid on the gtrid's node (the point of this
     *     class); false: each {@code start} is load-balanced like a plain pool (for comparisons)
     * @param nodeFailure which SQLExceptions mean the node failed (feeds passive ejection)
     * @param redact removes credentials from messages
     * @param requestSession the calling thread's web-session key, or null (placement preference)
     */
    public XaRouter(Cluster cluster, XADataSource[] byId, boolean transactionAffinity,
            Predicate<SQLException> nodeFailure, UnaryOperator<String> redact, Supplier<byte[]> requestSession) {
        this(cluster, byId, transactionAffinity, nodeFailure, redact, requestSession, null);
    }

    /**
     * As above, with the request's routing-token decision.
     *
     * @param cluster the cluster (owns the affinity state)
     * @param byId node XADataSources indexed by node id (null where a node has none)
     * @param transactionAffinity as above
     * @param nodeFailure which SQLExceptions mean the node failed (feeds passive ejection)
     * @param redact removes credentials from messages
     * @param requestSession the calling thread's web-session key, or null (placement preference)
     * @param requestRoute the calling thread's routing-token decision ({@code Cluster.routeToken}) for this
     *     cluster, or null when there is none; throws the core's refusal of the request
     */
    public XaRouter(Cluster cluster, XADataSource[] byId, boolean transactionAffinity,
            Predicate<SQLException> nodeFailure, UnaryOperator<String> redact, Supplier<byte[]> requestSession,
            Supplier<Route> requestRoute) {
        this(cluster, byId, transactionAffinity, nodeFailure, redact, requestSession, requestRoute, null);
    }

    /**
     * As above, with the request's routing token, by which a new gtrid is placed.
     *
     * @param cluster the cluster (owns the affinity state)
     * @param byId node XADataSources indexed by node id (null where a node has none)
     * @param transactionAffinity as above
     * @param nodeFailure which SQLExceptions mean the node failed (feeds passive ejection)
     * @param redact removes credentials from messages
     * @param requestSession the calling thread's web-session key, or null (placement preference)
     * @param requestRoute as above
     * @param requestToken the calling thread's routing token for this cluster, or null (placement preference
     *     of a new gtrid: {@link Cluster#txBeginFor(byte[], byte[], byte[], String)})
     */
    public XaRouter(Cluster cluster, XADataSource[] byId, boolean transactionAffinity,
            Predicate<SQLException> nodeFailure, UnaryOperator<String> redact, Supplier<byte[]> requestSession,
            Supplier<Route> requestRoute, Supplier<String> requestToken) {
        this.requestRoute = requestRoute == null ? () -> null : requestRoute;
        this.requestToken = requestToken == null ? () -> null : requestToken;
        this.cluster = Objects.requireNonNull(cluster, "cluster");
        this.byId = byId.clone();
        this.hardDowns = new AtomicLongArray(byId.length);
        this.affinity = transactionAffinity;
        this.nodeFailure = nodeFailure == null ? e -> false : nodeFailure;
        this.redact = redact == null ? s -> s : redact;
        this.requestSession = requestSession == null ? () -> null : requestSession;
        this.scope = cluster.recoveryScope();
    }

    /** @return the cluster's {@code recovery.scope} */
    public RecoveryScope recoveryScope() {
        return scope;
    }

    /** @return the routing core */
    public Cluster cluster() {
        return cluster;
    }

    /**
     * The key under which the global transaction of {@code xid} is registered in the core (the
     * {@code gtrid} of {@link Cluster#txRoute} and {@link Cluster#pickFor}): its formatId, 4 bytes
     * big-endian, then its gtrid (a gtrid over 60 bytes: its SHA-256 digest). XA names a global
     * transaction by both, so equal gtrids of two formats are two transactions.
     *
     * @param xid an Xid
     * @return a new array
     */
    public static byte[] transactionKey(Xid xid) {
        byte[] g = xid.getGlobalTransactionId();
        return XidKey.transactionKey(xid.getFormatId(), g == null ? new byte[0] : g.clone());
    }

    /** @return whether branches follow their gtrid (false: plain per-connection load balancing) */
    public boolean isTransactionAffinity() {
        return affinity;
    }

    /**
     * A new routing XAConnection (no physical connection is opened until it is used).
     *
     * @param user user for the node XADataSources, or null for their default
     * @param password password, or null
     * @return the connection
     */
    public AffinityXAConnection connect(String user, String password) {
        Runnable hook = connectHook;
        if (hook != null) {
            hook.run();
        }
        AffinityXAConnection c = new AffinityXAConnection(this, user, password);
        open.add(c);
        return c;
    }

    void closed(AffinityXAConnection c) {
        open.remove(c);
    }

    /** @return the XAConnections open now */
    AffinityXAConnection[] openConnections() {
        synchronized (open) {
            return open.toArray(new AffinityXAConnection[0]);
        }
    }

    /**
     * Ends every XAConnection still open, as HikariCP's {@code close()} aborts its pool's active connections
     * ({@code AffinityXADataSource.close()}): their sessions are aborted or closed, so the TM's next call on
     * one answers {@code XAER_RMFAIL} (the connection is closed) and a branch works on through no closed data
     * source. A prepared branch stays on its node, in doubt, for the TM's recovery; an unprepared one is
     * rolled back by the database with its session.
     *
     * The branches still tracked then (prepared ones) keep their record and their gtrid's registration in the
     * core, but their leases are released.
     *
     * @return how many were open
     */
    public int closeConnections() {
        AffinityXAConnection[] cs = openConnections();
        for (AffinityXAConnection c : cs) {
            c.abortAndClose();
        }
        releaseTracked();
        return cs.length;
    }

    /**
     * {@link #closeConnections()} within a bound, for a data source's close(): each open XAConnection ends on a
     * library thread of its own ({@code racaffinity-xa-close-<cluster>}), so that a node driver whose abort or
     * close blocks (a dead node; one that ignores the interrupt) holds only that XAConnection's end, not the
     * others' nor the caller past {@code byNanos}. A thread still ending then is left to end with its driver's
     * call, not interrupted: an abort or close under way is the one thing it does (a socket read or write of a
     * platform thread does not heed the interrupt, and a driver that does might give the abort up). The leases
     * of the branches still tracked are released by then, whatever is still ending: the cluster may close next.
     *
     * @param byNanos when the wait ends at the latest, in {@link System#nanoTime()}'s terms
     * @return the threads started, one per XAConnection that was open (ended, or still ending)
     */
    public List<Thread> closeConnections(long byNanos) {
        List<Thread> ending = new ArrayList<>();
        for (AffinityXAConnection c : openConnections()) {
            Thread t = io.racaffinity.LibraryThreads.newThread(() -> {
                try {
                    c.abortAndClose();
                } catch (RuntimeException e) {
                    // the cluster closed meanwhile (its bookkeeping): the sessions are ended all the same
                    LOG.log(Level.DEBUG, () -> "ending an XAConnection at close failed: "
                            + redact(String.valueOf(e.getMessage())));
                }
            }, "racaffinity-xa-close-" + cluster.name(), XaRouter.class.getClassLoader());
            t.start();
            ending.add(t);
        }
        io.racaffinity.LibraryThreads.joinUntil(ending, byNanos);
        releaseTracked();
        return ending;
    }

    /**
     * No work goes on through a closed data source, but a cluster shared with other data sources outlives it: a
     * prepared branch's lease would count in flight on its node for good (balancing, NodeInFlight). The branch
     * stays in doubt there, registered in the core, for the recovery of a data source still open.
     */
    private void releaseTracked() {
        branches.forEach((k, b) -> {
            if (b.live) {
                release(b, Outcome.NEUTRAL);
            }
        });
    }

    /**
     * Fast connection failover at a hard Down of {@code node} (a crash, FAN {@code reason=FAILURE}, the
     * heartbeat, ejection; not a planned drain's end), as {@code AffinityDataSource} aborts the connections
     * in use there: every session the open XAConnections hold on the node is aborted, so that a call hung
     * on a dead or blackholed node ends now, not at the driver's socket timeout. An unprepared branch on
     * such a session died with it (the database rolls it back): the TM's next call on it answers at once
     * ({@code end}: {@code XA_RBCOMMFAIL}; the handle: SQLState 08006). A prepared branch stays on the node
     * (in doubt, for the TM's commit or recovery), tracked as before. The aborts run on library threads; this
     * waits 1 s at most for those of the sessions behind an open handle, whatever a driver whose abort blocks.
     *
     * @param node the node id
     * @return how many XAConnections had a session there
     */
    public int nodeFailed(int node) {
        if (node >= 0 && node < hardDowns.length()) {
            // First: a connect under way to the node publishes no session this walk cannot see.
            hardDowns.incrementAndGet(node);
        }
        int n = 0;
        List<Runnable> inUse = new ArrayList<>();
        List<Runnable> later = new ArrayList<>();
        for (AffinityXAConnection c : openConnections()) {
            n += c.abortNode(node, inUse, later) ? 1 : 0;
        }
        // A session behind an open handle is in use, as a pool's borrowed connection: each is aborted on a thread
        // of its own, so that a driver whose abort blocks holds neither the node's other aborts nor the caller (the
        // upkeep, which acts on the next Down meanwhile). Waited for a while: drivers that abort at once have done
        // so when this returns.
        List<Thread> aborting = new ArrayList<>(inUse.size());
        for (Runnable abort : inUse) {
            Thread t = io.racaffinity.LibraryThreads.newThread(abort, "racaffinity-xa-down-abort-" + cluster.name(),
                    XaRouter.class.getClassLoader());
            t.start();
            aborting.add(t);
        }
        if (!later.isEmpty()) {
            // Sessions with no handle open: one may be busy in an XA call, so not on the caller's thread.
            AbortRelay.start(later, "racaffinity-xa-abort-" + cluster.name(), XaRouter.class.getClassLoader());
        }
        io.racaffinity.LibraryThreads.joinAll(aborting, DOWN_ABORT_WAIT_MILLIS);
        return n;
    }

    /**
     * A node that went Down (or Draining) and Up again between two watch rounds, which both saw it Up (only the
     * core's state change count moved): a restart may have ended the sessions the open XAConnections hold there.
     * Each idle one (no branch on it, no open handle that used it) is dropped, so the TM's next branch there opens
     * a new session; those in use finish, as at a drain (whether the Down was a failure is not known by then).
     *
     * @param node the node id
     */
    public void nodeRenewed(int node) {
        for (AffinityXAConnection c : openConnections()) {
            c.renewIdle(node);
        }
    }

    /** How long {@link #nodeFailed} waits for the aborts of the node's sessions in use, all together. */
    static final long DOWN_ABORT_WAIT_MILLIS = 1_000;

    /** @return how many hard Downs of {@code node} {@link #nodeFailed} has seen (0 for an unknown node) */
    long hardDowns(int node) {
        return node >= 0 && node < hardDowns.length() ? hardDowns.get(node) : 0;
    }

    /** @return live branches and recovered xids this process tracks */
    public int trackedBranches() {
        return branches.size();
    }

    /**
     * @return counters: starts (new branches), prepares, commits, readOnly (prepares answered
     *     {@code XA_RDONLY}: nothing to commit), rollbacks, forgets, recovered (xids returned by scans)
     */
    public Map<String, Long> statistics() {
        return Map.of("starts", starts.sum(), "prepares", prepares.sum(), "commits", commits.sum(), "readOnly",
                readOnly.sum(), "rollbacks", rollbacks.sum(), "forgets", forgets.sum(), "recovered",
                recovered.sum());
    }

    // ---- node access ---------------------------------------------------------

    int[] nodeIds() {
        return cluster.nodeIds();
    }

    String nodeName(int node) {
        try {
            return cluster.nodeName(node);
        } catch (AffinityException e) {
            return "#" + node;
        }
    }

    XAConnection open(int node, String user, String password) throws XAException {
        XADataSource ds = node >= 0 && node < byId.length ? byId[node] : null;
        if (ds == null) {
            throw XaErrors.xa(XAException.XAER_RMERR, "racaffinity: node " + nodeName(node)
                    + " has no XADataSource (added at runtime?)", null);
        }
        try {
            XAConnection c = user == null ? ds.getXAConnection() : ds.getXAConnection(user, password);
            if (c == null) {
                throw new SQLException("node " + nodeName(node) + "'s XADataSource returned no connection", "08001");
            }
            return c;
        } catch (SQLException e) {
            // Not counted here: the XA call this open serves counts one failure for the whole operation.
            UnaryOperator<String> r = password == null || password.isEmpty() ? redact
                    : s -> redact.apply(s).replace(password, "****");
            throw Redacted.xa(XaErrors.xa(XAException.XAER_RMFAIL, "racaffinity: cannot connect to node "
                    + nodeName(node) + ": " + r.apply(String.valueOf(e.getMessage())), e), r);
        }
    }

    boolean isNodeFailure(SQLException e) {
        return nodeFailure.test(e);
    }

    /**
     * Whether a failed XA call means its node failed, classified as on the JDBC path: a
     * connection-class cause ({@code nodeFailureSqlStates}, a {@link java.sql.SQLRecoverableException},
     * or a refused / reset / timed-out socket) anywhere in the cause chain. The XA code alone says
     * nothing: pgjdbc reports every failed PREPARE as {@code XAER_RMFAIL}, a deferred trigger's
     * P0001 included, and an {@code XAER_RMFAIL} of our own (no node answered a routing question)
     * is no failed node operation.
     */
    boolean isNodeFailure(Throwable e) {
        Throwable t = e;
        for (int depth = 0; t != null && depth < 16; depth++) {
            if (t instanceof SQLException) {
                return nodeFailure.test((SQLException) t);
            }
            if (t instanceof java.io.IOException) {
                return true;
            }
            t = t.getCause() == t ? null : t.getCause();
        }
        return false;
    }

    /**
     * Whether a failed XA call's physical connection is dead, whatever the node's health: any
     * connection-class state (08xxx, 57Pxx: one terminated session too), a lost connection
     * (SQLRecoverableException) or a socket error anywhere in the chain. Such a connection is
     * replaced; whether the node failed is {@link #isNodeFailure(Throwable)}'s question.
     */
    static boolean isConnectionLost(Throwable e) {
        Throwable t = e;
        for (int depth = 0; t != null && depth < 16; depth++) {
            if (t instanceof java.io.IOException || t instanceof java.sql.SQLRecoverableException) {
                return true;
            }
            if (t instanceof SQLException) {
                for (SQLException s = (SQLException) t; s != null; s = s.getNextException() == s ? null
                        : s.getNextException()) {
                    String st = s.getSQLState();
                    if (st != null && (st.startsWith("08") || st.startsWith("57P"))) {
                        return true;
                    }
                    if (s.getNextException() == null) {
                        break;
                    }
                }
            }
            t = t.getCause() == t ? null : t.getCause();
        }
        return false;
    }

    /**
     * Whether a failed 2PC command's node answered that it holds no such prepared transaction
     * (PostgreSQL's 42704, undefined_object: "prepared transaction with identifier ... does not
     * exist") anywhere in the chain.
     */
    static boolean isUnknownGid(Throwable e) {
        Throwable t = e;
        for (int depth = 0; t != null && depth < 16; depth++) {
            if (t instanceof SQLException && "42704".equals(((SQLException) t).getSQLState())) {
                return true;
            }
            t = t.getCause() == t ? null : t.getCause();
        }
        return false;
    }

    void reportFailure(int node) {
        try {
            cluster.reportOutcome(node, false);
        } catch (AffinityException e) {
            // closed
        }
    }

    String redact(String s) {
        return redact.apply(s);
    }

    /** {@code e}, or a copy whose messages and causes are redacted (a driver writes its URL into them). */
    XAException redacted(XAException e) {
        return Redacted.xa(e, redact);
    }

    // ---- placement -------------------------------------------------------------

    /**
     * Node of work outside any global transaction: the request's routing-token decision,
     * else the core's precedence for the request's session and the thread's pin (else load
     * balancing).
     */
    int localNode() throws XAException {
        try {
            // The request's routing token was decided (or refused) by the core: a connection elsewhere, or
            // one given despite the refusal, would break the session affinity it carries.
            Route decided = requestRoute.get();
            if (decided != null) {
                return decided.node();
            }
            return cluster.routeFor(null, null, requestSession.get()).node();
        } catch (AffinityException e) {
            throw XaErrors.routing(e, "local work", null);
        }
    }

    /** Registers a new branch (TMNOFLAGS start) and returns it. */
    Branch begin(XidKey k) throws XAException {
        Lease lease;
        try {
            Route r;
            if (affinity) {
                // The core places a new gtrid by the request's routing token, else its session, else the
                // thread's pin: the request's session work and its transaction share a node.
                r = cluster.txBeginFor(k.tx, null, requestSession.get(), requestToken.get());
            } else {
                r = cluster.route();
            }
            lease = cluster.lease(r);
        } catch (AffinityException e) {
            throw XaErrors.routing(e, "start", k);
        }
        Branch b = new Branch(lease.node(), true, lease);
        if (affinity) {
            warnIfSpanned(k, b.node);
        }
        Branch old = branches.putIfAbsent(k, b);
        if (old != null) {
            undo(k, b, Outcome.NEUTRAL);
            if (!old.live) {
                throw XaErrors.xa(XAException.XAER_DUPID, "racaffinity: xid " + k + " is in doubt on node "
                        + nodeName(old.node) + " (returned by recovery)", null);
            }
            throw XaErrors.xa(XAException.XAER_DUPID, "racaffinity: xid " + k + " is already started (on node "
                    + nodeName(old.node) + ")", null);
        }
        starts.increment();
        return b;
    }

    /**
     * Soft transaction affinity (UCP's): when the gtrid's node cannot take this branch, the core
     * re-places the gtrid and the transaction spans two nodes. That is allowed in soft mode but
     * never silent: each branch keeps its own node for its 2PC, and the TM sees two resource
     * managers ({@code isSameRM}); strict mode ({@code transaction.strict}) refuses instead.
     */
    private void warnIfSpanned(XidKey k, int node) {
        for (Map.Entry<XidKey, Branch> e : branches.entrySet()) {
            Branch o = e.getValue();
            if (o.node != node && e.getKey().sameGtrid(k)) {
                LOG.log(Level.WARNING, () -> "gtrid " + XidKey.hex(k.gtrid) + " spans two nodes: branch "
                        + XidKey.hex(k.bqual) + " started on " + nodeName(node) + ", branch " + XidKey.hex(e.getKey()
                        .bqual) + " is on " + nodeName(o.node) + " (soft transaction affinity re-placed it; each"
                        + " branch commits on its own node; transaction.strict = true refuses instead)");
                return;
            }
        }
    }

    /** Undoes {@link #begin} after the physical start failed. */
    void abandon(XidKey k, Branch b, Outcome outcome) {
        if (branches.remove(k, b)) {
            undo(k, b, outcome);
        }
    }

    private void undo(XidKey k, Branch b, Outcome outcome) {
        if (affinity) {
            try {
                cluster.txEnd(k.tx);
            } catch (AffinityException e) {
                // gone already
            }
        }
        release(b, outcome);
    }

    private static void release(Branch b, Outcome outcome) {
        if (b.lease != null) {
            try {
                b.lease.tryRelease(outcome);
            } catch (AffinityException e) {
                // closed
            }
        }
    }

    /** The node of an existing branch for TMJOIN. */
    int joinNode(XidKey k) throws XAException {
        Branch b = branches.get(k);
        if (b != null) {
            return b.node;
        }
        if (!affinity) {
            throw XaErrors.xa(XAException.XAER_NOTA, "racaffinity: cannot join xid " + k
                    + ": no branch of it was started through this data source", null);
        }
        try {
            return cluster.txRoute(k.tx).node();
        } catch (AffinityException e) {
            throw XaErrors.routing(e, "join", k);
        }
    }

    /**
     * The node a 2PC command (or end) for {@code k} goes to: the node the branch was
     * started on or recovered from (this binding's own record: in soft mode the branches of
     * one gtrid may be on two nodes); in database scope the core's choice of instance
     * ({@code txRoute}); else a scan of every node's in-doubt list. Never refused for routing
     * reasons: a Down node still gets the command, and only an unreachable one answers
     * {@code XAER_RMFAIL} (retry later).
     */
    int resolve(XidKey k, String op, AffinityXAConnection via) throws XAException {
        Branch b = branches.get(k);
        if (b != null && !(scope == RecoveryScope.DATABASE && affinity && (!b.live || b.prepared))) {
            return b.node;
        }
        // recovery.scope = database: a prepared (or recovered) branch can be completed through any instance of
        // the database, and the core's txRoute picks one: the owner when Up, else another Up instance.
        // In node scope the gtrid's owner says nothing about an exact xid never seen here: a soft span (or a
        // TM that split the gtrid) leaves its branches on several nodes, and a partial scan may have registered
        // the gtrid with the node of another branch. Only the node's in-doubt list tells, so scan.
        if (affinity && scope == RecoveryScope.DATABASE) {
            try {
                return cluster.txRoute(k.tx).node();
            } catch (UnknownTransactionException e) {
                // not registered: scan
            } catch (AffinityException e) {
                throw XaErrors.routing(e, op, k);
            }
        }
        if (b != null) {
            return b.node;
        }
        int found = locate(k, via);
        if (found < 0) {
            throw XaErrors.xa(XAException.XAER_NOTA, "racaffinity: " + op + " of xid " + k
                    + ": no node holds this branch (not started here, not in the in-doubt list of any node, and"
                    + " every node answered)", null);
        }
        return found;
    }

    /** A closed XAConnection's session held this branch unprepared (or its PREPARE was refused): release it. */
    void closedUnprepared(XidKey k) {
        Branch b = branches.get(k);
        if (b != null && b.live && !b.prepared) {
            completed(k, Outcome.NEUTRAL, Completion.ROLLBACK);
        }
    }

    /** What node drivers answered to setTransactionTimeout (null: not asked yet). */
    private volatile Boolean timeoutApplies;

    void timeoutApplies(boolean applies) {
        timeoutApplies = applies;
    }

    boolean timeoutApplies() {
        Boolean a = timeoutApplies;
        return a != null && a;
    }

    /** The branch record of {@code k}, or null. */
    Branch branch(XidKey k) {
        return branches.get(k);
    }

    /**
     * The session of unprepared branch {@code b} died: no work runs on it any more, so its lease is
     * released now (an in-flight count kept until the fate is known would bias least-outstanding
     * balancing away from the node); the entry stays until a rollback or a recovery scan settles it.
     */
    static void sessionLost(Branch b) {
        b.sessionLost = true;
        release(b, Outcome.NEUTRAL);
    }

    /** Marks a branch prepared: from now on it never moves. */
    void prepared(XidKey k) {
        prepares.increment();
        Branch b = branches.get(k);
        if (b != null) {
            b.prepared = true;
        }
        if (affinity) {
            try {
                cluster.txPrepared(k.tx);
            } catch (AffinityException e) {
                // not registered (recovered elsewhere) or closed: nothing to mark
            }
        }
    }

    /** How a branch ended, for the statistics. */
    enum Completion { COMMIT, READ_ONLY, ROLLBACK, FORGET, NONE }

    /** The branch is complete (committed, rolled back, forgotten or read-only): release it. */
    void completed(XidKey k, Outcome outcome, Completion how) {
        switch (how) {
            case COMMIT:
                commits.increment();
                break;
            case READ_ONLY:
                readOnly.increment();
                break;
            case ROLLBACK:
                rollbacks.increment();
                break;
            case FORGET:
                forgets.increment();
                break;
            default:
                break;
        }
        Branch b = branches.remove(k);
        if (b == null) {
            return;
        }
        if (b.live) {
            undo(k, b, outcome);
            return;
        }
        if (affinity) {
            synchronized (this) {
                for (XidKey o : branches.keySet()) {
                    if (o.sameGtrid(k)) {
                        return; // another branch of the gtrid is still tracked
                    }
                }
                try {
                    cluster.txComplete(k.tx);
                } catch (AffinityException e) {
                    // already gone
                }
            }
        }
    }

    /** Records what one node returned from a recovery scan. */
    void recovered(int node, Xid[] xids) {
        if (xids == null) {
            return;
        }
        for (Xid x : xids) {
            XidKey k = XidKey.of(x);
            recovered.increment();
            synchronized (this) {
                Branch b = branches.get(k);
                if (b == null) {
                    branches.put(k, new Branch(node, false, null));
                } else if (b.node != node) {
                    if (scope == RecoveryScope.NODE) {
                        LOG.log(Level.WARNING, () -> "recovery: xid " + k + " returned by " + nodeName(node)
                                + " is tracked on " + nodeName(b.node));
                    }
                    continue; // database scope: another instance of the same database lists the same branch
                }
                if (affinity) {
                    try {
                        cluster.txRecovered(k.tx, node);
                    } catch (AffinityException e) {
                        // A second node returning the gtrid: a split transaction (made without affinity). Each
                        // exact xid is still completed on the node that returned it.
                        LOG.log(Level.WARNING, () -> "recovery: " + e.getMessage());
                    }
                }
            }
        }
    }

    /** After a full scan: forget recovered xids that nodes which answered no longer return. */
    synchronized void scanned(Set<Integer> answered, Set<XidKey> returned, Set<XidKey> preparedBefore) {
        List<XidKey> gone = new ArrayList<>();
        boolean anyInstanceSeesAll = scope == RecoveryScope.DATABASE && !answered.isEmpty();
        branches.forEach((k, b) -> {
            if (preparedBefore.contains(k) && (!b.live || b.prepared || b.sessionLost)
                    && (anyInstanceSeesAll || answered.contains(b.node)) && !returned.contains(k)) {
                gone.add(k);
            }
        });
        for (XidKey k : gone) {
            Branch b = branches.get(k);
            if (b != null && b.live) {
                // a prepared branch of this process that its node no longer holds: completed elsewhere or
                // its commit's reply was lost; the TM cannot find it to retry, so nothing else would release it
                LOG.log(Level.DEBUG, () -> "recovery: xid " + k + " is no longer in doubt on " + nodeName(b.node)
                        + ": released");
                if (branches.remove(k, b)) {
                    undo(k, b, Outcome.NEUTRAL);
                }
            } else {
                completedQuietly(k);
            }
        }
    }

    private void completedQuietly(XidKey k) {
        Branch b = branches.remove(k);
        if (b == null || !affinity) {
            return;
        }
        for (XidKey o : branches.keySet()) {
            if (o.sameGtrid(k)) {
                return;
            }
        }
        try {
            cluster.txComplete(k.tx);
        } catch (AffinityException e) {
            // gone
        }
    }

    /**
     * Scans every node for one xid (a 2PC command for an xid this process never saw). If it
     * is not found while some node did not answer, the answer is {@code XAER_RMFAIL}, never
     * {@code XAER_NOTA}: a TM reads NOTA as "nothing left to do" and may drop its log, leaving
     * a prepared branch on the silent node in doubt forever (ORA-1591).
     */
    private int locate(XidKey k, AffinityXAConnection via) throws XAException {
        XAException silent = null;
        int silentNode = -1;
        for (int node : scanOrder()) {
            Xid[] xids;
            try {
                xids = via.recoverOn(node);
            } catch (XAException e) {
                silent = e;
                silentNode = node;
                continue;
            }
            recovered(node, xids);
            for (Xid x : xids) {
                if (k.equals(XidKey.of(x))) {
                    return node;
                }
            }
            if (scope == RecoveryScope.DATABASE) {
                return -1; // an instance answered: it lists every in-doubt branch of the database
            }
        }
        if (silent != null) {
            throw XaErrors.xa(XAException.XAER_RMFAIL, "racaffinity: xid " + k + " is in no in-doubt list of the"
                    + " nodes that answered, and node " + nodeName(silentNode) + " did not answer: retry later",
                    silent);
        }
        return -1;
    }

    /**
     * The nodes a scan asks, in order: every node with an XADataSource; Up nodes first, so in
     * database scope the one answering instance is usually found at the first try.
     */
    private List<Integer> scanOrder() throws XAException {
        int[] ids;
        try {
            ids = nodeIds();
        } catch (AffinityException e) {
            // the data source is closed (a TM's recovery helper may keep its resource): XAER_RMFAIL, as every
            // other call answers then; an unchecked exception would escape the TM's recovery loop
            throw XaErrors.routing(e, "recovery scan", null);
        }
        List<Integer> up = new ArrayList<>();
        List<Integer> rest = new ArrayList<>();
        for (int node : ids) {
            if (node >= byId.length || byId[node] == null) {
                continue;
            }
            NodeState st;
            try {
                st = cluster.nodeState(node);
            } catch (AffinityException e) {
                st = NodeState.DOWN;
            }
            (st == NodeState.DOWN ? rest : up).add(node);
        }
        up.addAll(rest);
        return up;
    }

    /**
     * Full scan for {@code recover(TMSTARTRSCAN)}: node scope, every node, merged; database
     * scope, the first instance that answers.
     */
    Xid[] scanAll(AffinityXAConnection via) throws XAException {
        // Branches prepared (or maybe prepared: their session died around the PREPARE) before any node is
        // asked: one that a node which answered does not list was completed (its commit's reply was lost, say)
        // or never prepared, so it is released, live or recovered.
        Set<XidKey> preparedBefore = new HashSet<>();
        branches.forEach((k, b) -> {
            if (b.prepared || !b.live || b.sessionLost) {
                preparedBefore.add(k);
            }
        });
        List<Xid> all = new ArrayList<>();
        Set<Integer> answered = new HashSet<>();
        Set<XidKey> returned = new HashSet<>();
        XAException last = null;
        for (int node : scanOrder()) {
            if (!answered.isEmpty() && scope == RecoveryScope.DATABASE) {
                break; // one instance of the database answered: that is every in-doubt branch
            }
            Xid[] xids;
            try {
                xids = via.recoverOn(node);
            } catch (XAException e) {
                last = e;
                int n = node;
                LOG.log(Level.WARNING, () -> "recovery: node " + nodeName(n) + " did not answer (its in-doubt"
                        + " branches are recovered by a later scan): " + redact(String.valueOf(e.getMessage())));
                continue;
            }
            answered.add(node);
            recovered(node, xids);
            for (Xid x : xids) {
                if (returned.add(XidKey.of(x))) {
                    all.add(x); // each xid once per scan, however many nodes (instances) list it
                }
            }
        }
        if (answered.isEmpty() && last != null) {
            throw XaErrors.xa(XAException.XAER_RMFAIL, "racaffinity: recover: no node answered", last);
        }
        scanned(answered, returned, preparedBefore);
        return all.toArray(new Xid[0]);
    }

    @Override
    public String toString() {
        return "XaRouter[" + cluster.name() + (affinity ? ", transaction affinity" : ", plain balancing")
                + ", tracked=" + branches.size() + "]";
    }
}
