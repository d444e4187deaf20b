package io.racaffinity.jdbc;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLTransientConnectionException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * Fast connection failover's bookkeeping, per node of one {@link AffinityDataSource} (Oracle
 * UCP's FCF, docs/continuity.md "Java"): the node pools' connections the application holds,
 * the threads waiting on a node pool, and how many failures each node had. The decisions
 * (is the node Down, was it a planned drain) are the core's; {@link PoolMaintenance} acts on
 * them through {@link #abortBorrowed} and {@link #kickWaiters}.
 */
final class NodeFailover {
    private final List<Set<Connection>> borrowed;
    private final List<Set<Waiter>> waiting;
    /** Per node: failures seen (a reported connection failure or a Down); 0 keeps borrows unchecked. */
    private final AtomicLongArray failures;
    /**
     * The failure count each pooled connection was last known good at, by the driver's connection
     * (a pool hands out a new proxy per borrow): weak, so a connection the pool closes goes.
     */
    private final Map<Connection, Long> checkedAt = Collections.synchronizedMap(new WeakHashMap<>());

    NodeFailover(int nodes) {
        List<Set<Connection>> b = new ArrayList<>(nodes);
        List<Set<Waiter>> w = new ArrayList<>(nodes);
        for (int i = 0; i < nodes; i++) {
            b.add(ConcurrentHashMap.newKeySet());
            w.add(ConcurrentHashMap.newKeySet());
        }
        borrowed = List.copyOf(b);
        waiting = List.copyOf(w);
        failures = new AtomicLongArray(nodes);
    }

    /** A thread waiting on a node pool; {@link #kickWaiters} interrupts it at most once. */
    static final class Waiter {
        private final Thread thread = Thread.currentThread();
        private final int node;
        private boolean done;
        private boolean kicked;

        private Waiter(int node) {
            this.node = node;
        }
    }

    /** The calling thread now waits on {@code node}'s pool. */
    Waiter waiting(int node) {
        Waiter w = new Waiter(node);
        if (node < waiting.size()) {
            waiting.get(node).add(w);
        }
        return w;
    }

    /**
     * The wait is over. The interrupt of a kick happens under the waiter's monitor, so once
     * this returns, no interrupt of ours is left pending on the thread.
     *
     * @return whether the node went Down meanwhile (the caller routes again)
     */
    boolean done(Waiter w) {
        if (w.node < waiting.size()) {
            waiting.get(w.node).remove(w);
        }
        synchronized (w) {
            w.done = true;
            if (w.kicked) {
                Thread.interrupted(); // ours, set before the monitor was released
                return true;
            }
            return false;
        }
    }

    /**
     * Sends the threads waiting on {@code node}'s pool on at once: pools give up a wait on an
     * interrupt (HikariCP: "Interrupted during connection acquisition"), and the thread routes
     * again instead of waiting out the pool's connection timeout on a node that will give
     * nothing. A thread the application interrupted already is left alone (its interrupt is
     * the application's).
     *
     * @return the threads sent on
     */
    int kickWaiters(int node) {
        int n = 0;
        for (Waiter w : waiting.get(node)) {
            synchronized (w) {
                if (!w.done && !w.kicked && !w.thread.isInterrupted()) {
                    w.kicked = true;
                    w.thread.interrupt();
                    n++;
                }
            }
        }
        return n;
    }

    /** @return the threads waiting on {@code node}'s pool now */
    int waiters(int node) {
        return node < waiting.size() ? waiting.get(node).size() : 0;
    }

    /** The error a kicked waiter's call gets when it cannot route again (a strict scope, a transaction). */
    static SQLException wentDown(String node, SQLException cause) {
        SQLException e = new NodeWentDown("node " + node + " went Down while this call waited for its pool");
        if (cause != null) {
            e.addSuppressed(cause);
        }
        return e;
    }

    /** SQLState 08001: the connection could not be established (the node went Down). */
    static final class NodeWentDown extends SQLTransientConnectionException {
        private static final long serialVersionUID = 1L;

        NodeWentDown(String message) {
            super(message, "08001");
        }
    }

    void borrowed(int node, Connection physical) {
        if (node < borrowed.size()) {
            borrowed.get(node).add(physical);
        }
    }

    void returned(int node, Connection physical) {
        if (node < borrowed.size()) {
            borrowed.get(node).remove(physical);
        }
    }

    /**
     * Aborts every connection of {@code node} the application holds (a hard Down: crash,
     * heartbeat, ejection, operator): a call on one fails at once instead of waiting on a dead
     * or hung node, and the pool drops it when it is closed.
     *
     * @return the connections aborted
     */
    int abortBorrowed(int node) {
        int n = 0;
        for (Connection c : borrowed.get(node)) {
            borrowed.get(node).remove(c);
            try {
                c.abort(Runnable::run);
                n++;
            } catch (SQLException | RuntimeException e) {
                // closed meanwhile, or a driver without abort: its next call finds out
            }
        }
        return n;
    }

    /** A connection failure on {@code node}: its pooled connections are checked at their next borrow. */
    void failed(int node) {
        if (node < failures.length()) {
            failures.incrementAndGet(node);
        }
    }

    /**
     * Whether a connection of {@code node} must be checked before it is handed out: the node
     * failed since the connection was last known good. Free while the node never failed.
     */
    boolean suspect(int node, Connection physical) {
        long f = node < failures.length() ? failures.get(node) : 0;
        if (f == 0) {
            return false;
        }
        Long seen = checkedAt.get(driverConnection(physical));
        return seen == null || seen < f;
    }

    /** {@code physical} passed its check at the node's current failure count. */
    void good(int node, Connection physical) {
        checkedAt.put(driverConnection(physical), failures.get(node));
    }

    /** The driver's connection under a pool's proxy (the proxy is new at every borrow). */
    private static Connection driverConnection(Connection physical) {
        try {
            if (physical.isWrapperFor(Connection.class)) {
                Connection inner = physical.unwrap(Connection.class);
                if (inner != null) {
                    return inner;
                }
            }
        } catch (SQLException | RuntimeException e) {
            // keyed by the proxy: checked at each borrow, which is only slower
        }
        return physical;
    }
}
