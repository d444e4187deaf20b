package io.racaffinity.xa;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.Lease;
import io.racaffinity.Outcome;
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

    /** Branches started here (live) or returned by a recovery scan, by exact xid. */
    private final Map<XidKey, Branch> branches = new ConcurrentHashMap<>();

    private final LongAdder starts = new LongAdder();
    private final LongAdder prepares = new LongAdder();
    private final LongAdder commits = new LongAdder();
    private final LongAdder rollbacks = new LongAdder();
    private final LongAdder recovered = new LongAdder();

    static final class Branch {
        final int node;
        final boolean live;
        final Lease lease;
        volatile boolean prepared;

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
        this.cluster = Objects.requireNonNull(cluster, "cluster");
        this.byId = byId.clone();
        this.affinity = transactionAffinity;
        this.nodeFailure = nodeFailure == null ? e -> false : nodeFailure;
        this.redact = redact == null ? s -> s : redact;
        this.requestSession = requestSession == null ? () -> null : requestSession;
    }

    /** @return the routing core */
    public Cluster cluster() {
        return cluster;
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
        return new AffinityXAConnection(this, user, password);
    }

    /** @return live branches and recovered xids this process tracks */
    public int trackedBranches() {
        return branches.size();
    }

    /**
     * @return counters: starts (new branches), prepares, commits, rollbacks, recovered (xids returned by scans)
     */
    public Map<String, Long> statistics() {
        return Map.of("starts", starts.sum(), "prepares", prepares.sum(), "commits", commits.sum(), "rollbacks",
                rollbacks.sum(), "recovered", recovered.sum());
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
            boolean failed = nodeFailure.test(e);
            if (failed) {
                reportFailure(node);
            }
            throw XaErrors.xa(XAException.XAER_RMFAIL, "racaffinity: cannot connect to node " + nodeName(node)
                    + ": " + redact.apply(String.valueOf(e.getMessage())), e);
        }
    }

    boolean isNodeFailure(SQLException e) {
        return nodeFailure.test(e);
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

    // ---- placement -------------------------------------------------------------

    /**
     * Node of work outside any global transaction: the core's precedence for the
     * request's session and the thread's pin (else load balancing).
     */
    int localNode() throws XAException {
        try {
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
                // The core places a new gtrid by the request's session, else the thread's pin.
                r = cluster.txBeginFor(k.gtrid, null, requestSession.get());
            } else {
                r = cluster.route();
            }
            lease = cluster.lease(r);
        } catch (AffinityException e) {
            throw XaErrors.routing(e, "start", k);
        }
        Branch b = new Branch(lease.node(), true, lease);
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

    /** Undoes {@link #begin} after the physical start failed. */
    void abandon(XidKey k, Branch b, Outcome outcome) {
        if (branches.remove(k, b)) {
            undo(k, b, outcome);
        }
    }

    private void undo(XidKey k, Branch b, Outcome outcome) {
        if (affinity) {
            try {
                cluster.txEnd(k.gtrid);
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
            return cluster.txRoute(k.gtrid).node();
        } catch (AffinityException e) {
            throw XaErrors.routing(e, "join", k);
        }
    }

    /**
     * The node a 2PC command (or end) for {@code k} goes to: the node the branch
     * was started on or recovered from; else the gtrid's owner in the core; else
     * a scan of every node's in-doubt list. The core is consulted for every
     * affinity command, so a Down owner refuses (PreparedNodeUnavailable: retry later).
     */
    int resolve(XidKey k, String op, AffinityXAConnection via) throws XAException {
        Branch b = branches.get(k);
        Route r = null;
        if (affinity) {
            try {
                r = cluster.txRoute(k.gtrid);
            } catch (UnknownTransactionException e) {
                r = null;
            } catch (AffinityException e) {
                throw XaErrors.routing(e, op, k);
            }
        }
        if (b != null) {
            if (r != null && r.node() != b.node) {
                int owner = r.node();
                LOG.log(Level.DEBUG, () -> "xid " + k + ": branch on " + nodeName(b.node) + ", gtrid now owned by "
                        + nodeName(owner) + " (re-placed after a failure): " + op + " goes to the branch");
            }
            return b.node;
        }
        if (r != null) {
            return r.node();
        }
        int found = locate(k, via);
        if (found < 0) {
            throw XaErrors.xa(XAException.XAER_NOTA, "racaffinity: " + op + " of xid " + k
                    + ": no node holds this branch (not started here, not in any node's in-doubt list)", null);
        }
        return found;
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
                cluster.txPrepared(k.gtrid);
            } catch (AffinityException e) {
                // not registered (recovered elsewhere) or closed: nothing to mark
            }
        }
    }

    /** The branch is complete (committed, rolled back, forgotten or read-only): release it. */
    void completed(XidKey k, Outcome outcome, boolean committed) {
        if (committed) {
            commits.increment();
        } else {
            rollbacks.increment();
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
                    cluster.txComplete(k.gtrid);
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
                    LOG.log(Level.WARNING, () -> "recovery: xid " + k + " returned by " + nodeName(node)
                            + " is tracked on " + nodeName(b.node));
                    continue;
                }
                if (affinity) {
                    try {
                        cluster.txRecovered(k.gtrid, node);
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
    synchronized void scanned(Set<Integer> answered, Set<XidKey> returned) {
        List<XidKey> gone = new ArrayList<>();
        branches.forEach((k, b) -> {
            if (!b.live && answered.contains(b.node) && !returned.contains(k)) {
                gone.add(k);
            }
        });
        for (XidKey k : gone) {
            completedQuietly(k);
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
            cluster.txComplete(k.gtrid);
        } catch (AffinityException e) {
            // gone
        }
    }

    /** Scans every node for one xid (a 2PC command for an xid this process never saw). */
    private int locate(XidKey k, AffinityXAConnection via) throws XAException {
        for (int node : nodeIds()) {
            Xid[] xids;
            try {
                xids = via.recoverOn(node);
            } catch (XAException e) {
                continue;
            }
            recovered(node, xids);
            for (Xid x : xids) {
                if (k.equals(XidKey.of(x))) {
                    return node;
                }
            }
        }
        return -1;
    }

    /** Full scan for {@code recover(TMSTARTRSCAN)}: every node, merged. */
    Xid[] scanAll(AffinityXAConnection via) throws XAException {
        List<Xid> all = new ArrayList<>();
        Set<Integer> answered = new HashSet<>();
        Set<XidKey> returned = new HashSet<>();
        XAException last = null;
        int[] ids = nodeIds();
        for (int node : ids) {
            if (node >= byId.length || byId[node] == null) {
                continue;
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
                all.add(x);
                returned.add(XidKey.of(x));
            }
        }
        if (answered.isEmpty() && last != null) {
            throw XaErrors.xa(XAException.XAER_RMFAIL, "racaffinity: recover: no node answered", last);
        }
        scanned(answered, returned);
        return all.toArray(new Xid[0]);
    }

    @Override
    public String toString() {
        return "XaRouter[" + cluster.name() + (affinity ? ", transaction affinity" : ", plain balancing")
                + ", tracked=" + branches.size() + "]";
    }
}
