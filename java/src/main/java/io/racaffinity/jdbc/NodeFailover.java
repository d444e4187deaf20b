package io.racaffinity.jdbc;

import io.racaffinity.LibraryThreads;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLTransientConnectionException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReferenceFieldUpdater;
import java.util.function.Consumer;

/**
 * Fast connection failover's bookkeeping, per node of one {@link AffinityDataSource} (Oracle
 * UCP's FCF, docs/continuity.md "Java"): the node pools' connections the application holds,
 * the threads waiting on a node pool, and how many failures each node had. The decisions
 * (is the node Down, was it a planned drain) are the core's; {@link PoolMaintenance} acts on
 * them through {@link #abortBorrowed} and {@link #kickWaiters}.
 *
 * <p>Every borrow goes through here, and a node goes Down rarely, so the borrow pays as little
 * as can be and the Down pays the rest. A borrow claims a <em>slot</em> of its node: a cell
 * that holds the borrowing thread while it waits on the pool, then the connection it got, then
 * nothing once the connection is closed. Only the borrow that claimed a slot writes it (the
 * kicker's hand-off aside, below), so a borrow + close is a compare-and-set to claim, one to
 * swap the thread for the connection and a release store to free, on a cell the thread
 * usually claimed last time as well (its cache line stays with its core): no allocation, no
 * identity hash, no shared counter. A Down walks every slot of the node: threads are sent on,
 * connections aborted. Before, each borrow inserted into and removed from two
 * {@code ConcurrentHashMap} sets (its waiter, its connection): about 70-90 ns of a pinned
 * borrow + close of 230-250, in {@code putVal}/{@code replaceNode} and the identity hashes of
 * objects new at each borrow; the slots cost 3.5-6 ns of a 160 ns pinned borrow + close, 7.5 ns
 * in a loop by themselves (docs/benchmarks.md, NodeFailoverTiming). The two compare-and-sets
 * (4.3 ns) are what is left: one claims the slot against other threads, one keeps a kick and
 * the end of the wait from crossing (a kick's interrupt must never land after the wait is
 * over). Decided against: a failure generation checked at a connection's next use (a call
 * already hung on a blackholed node is ended only by an abort, which needs the connection at
 * hand), a weak registry (a shared map insert per borrow again), and slots owned by threads
 * (one compare-and-set less for a pool of platform threads, but a virtual thread per task
 * claims at every borrow anyway, and live owners' cells lengthen every new thread's probe).
 *
 * <p>A node's slots are segments of {@value #SEGMENT} cells, chained and never freed: a node
 * keeps as many as its peak of concurrent borrows needed. A thread starts probing at a cache
 * line picked by its id, so threads borrowing at once mostly write different lines.
 */
final class NodeFailover {
    /** Cells per segment: 1 KiB with compressed references, 16 cache lines. */
    static final int SEGMENT = 256;
    /** Probe step: odd, so every cell is visited, and past a cache line, so colliding threads part. */
    private static final int STEP = 17;
    /** A kicker took the slot's thread and is interrupting it. */
    private static final Object KICKING = new Object();
    /** The kicker's interrupt has landed; the thread takes its slot back. */
    private static final Object KICKED = new Object();
    private static final AtomicReferenceFieldUpdater<Segment, Segment> NEXT =
            AtomicReferenceFieldUpdater.newUpdater(Segment.class, Segment.class, "next");
    /**
     * A slot's cell: a plain array under a VarHandle rather than an {@code AtomicReferenceArray}, whose
     * every access goes through one more object and checks the array's type at run time (seen in a
     * profile of the pinned borrow).
     */
    private static final VarHandle CELL = MethodHandles.arrayElementVarHandle(Object[].class);

    /**
     * Every node's first segment in one array (node n's cells from n x {@value #SEGMENT}): a borrow's
     * compare-and-set waits on one load (this array), not on three dependent ones (the node's
     * segment, its cell array, then the cell), which cost about 4 ns of a 9 ns borrow + close.
     */
    private final Object[] first;
    /** Per node: its first segment (over {@link #first}), chained to the ones it grew. */
    private final Segment[] slots;
    /** Per node: failures seen (a reported connection failure or a Down); 0 keeps borrows unchecked. */
    private final AtomicLongArray failures;
    /**
     * The failure count each pooled connection was last known good at, by the driver's connection
     * (a pool hands out a new proxy per borrow): weak, so a connection the pool closes goes.
     */
    private final Map<Connection, Long> checkedAt = Collections.synchronizedMap(new WeakHashMap<>());

    /** A run of slots: slot {@code base + k} is {@code cells[offset + k]}. */
    private static final class Segment {
        final Object[] cells;
        final int offset;
        final int base;
        volatile Segment next;

        Segment(Object[] cells, int offset, int base) {
            this.cells = cells;
            this.offset = offset;
            this.base = base;
        }
    }

    NodeFailover(int nodes) {
        first = new Object[nodes * SEGMENT];
        slots = new Segment[nodes];
        for (int i = 0; i < nodes; i++) {
            slots[i] = new Segment(first, i * SEGMENT, 0);
        }
        failures = new AtomicLongArray(nodes);
    }

    /**
     * The calling thread now waits on {@code node}'s pool: it claims a slot of the node, which
     * holds the thread until {@link #done}.
     *
     * @return the slot, for {@link #done}, {@link #waitAgain} and {@link #returned}; -1 for a
     *     node this bookkeeping does not know (added at runtime)
     */
    int waiting(int node) {
        if (node >= slots.length) {
            return -1;
        }
        Thread me = Thread.currentThread();
        // Fibonacci hashing of the id, its top 4 bits: one of the segment's 16 cache lines.
        int start = (int) ((me.getId() * 0x9E3779B97F4A7C15L) >>> 60) << 4;
        // The thread's own first cell is free unless another thread borrows on this line now:
        // one compare-and-set, no loop, small enough to inline into the borrow.
        if (CELL.compareAndSet(first, node * SEGMENT + start, (Object) null, (Object) me)) {
            return start;
        }
        return probe(node, me, start);
    }

    /** {@link #waiting}'s search past a taken first cell: along the segments, adding one at the end. */
    private int probe(int node, Thread me, int start) {
        for (Segment s = slots[node];; s = following(s)) {
            Object[] cells = s.cells;
            for (int k = 0, i = start; k < SEGMENT; k++, i = (i + STEP) & (SEGMENT - 1)) {
                // A plain read: only a hint that spares a compare-and-set on a taken cell.
                if (cells[s.offset + i] == null
                        && CELL.compareAndSet(cells, s.offset + i, (Object) null, (Object) me)) {
                    return s.base + i;
                }
            }
        }
    }

    private static Segment following(Segment s) {
        Segment n = s.next;
        if (n == null) {
            NEXT.compareAndSet(s, null, new Segment(new Object[SEGMENT], 0, s.base + SEGMENT));
            n = s.next;
        }
        return n;
    }

    /** The array that holds {@code slot} of {@code node}: {@link #first} but for a grown node's later slots. */
    private Object[] cells(int node, int slot) {
        return slot < SEGMENT ? first : later(node, slot).cells;
    }

    /** The index of {@code slot} of {@code node} in {@link #cells}. */
    private int index(int node, int slot) {
        return slot < SEGMENT ? node * SEGMENT + slot : slot % SEGMENT;
    }

    private Segment later(int node, int slot) {
        Segment s = slots[node];
        while (slot >= s.base + SEGMENT) {
            s = s.next;
        }
        return s;
    }

    /**
     * The wait is over: the slot holds {@code got} from now on (the connection borrowed, or null:
     * the slot is free). A kick's interrupt lands before the kicker lets go of the slot, so once
     * this returns, no interrupt of ours is left pending on the thread.
     *
     * @return whether the node went Down meanwhile (the slot is free then, and the caller routes
     *     again instead of using {@code got})
     */
    boolean done(int node, int slot, Connection got) {
        if (slot < 0) {
            return false;
        }
        Object[] cells = cells(node, slot);
        int i = index(node, slot);
        if (CELL.compareAndSet(cells, i, (Object) Thread.currentThread(), (Object) got)) {
            return false;
        }
        // Kicked: the kicker is between its compare-and-set and its interrupt's end.
        for (int spins = 0; CELL.getVolatile(cells, i) != KICKED; spins++) {
            if (spins < 64) {
                Thread.onSpinWait();
            } else {
                Thread.yield();
            }
        }
        Thread.interrupted(); // ours
        CELL.setVolatile(cells, i, (Object) null);
        return true;
    }

    /** The connection in {@code slot} failed its check and was dropped: the thread waits on the pool again. */
    void waitAgain(int node, int slot) {
        if (slot >= 0) {
            CELL.setVolatile(cells(node, slot), index(node, slot), (Object) Thread.currentThread());
        }
    }

    /** The application gave back (closed or aborted) the connection in {@code slot}: the slot is free. */
    void returned(int node, int slot) {
        if (slot >= 0) {
            // Only this slot's borrower writes it, and nothing it does next depends on the store:
            // a release store, no fence. A Down that reads the old value aborts a closed connection,
            // which does nothing.
            CELL.setRelease(cells(node, slot), index(node, slot), (Object) null);
        }
    }

    /**
     * Sends the threads waiting on {@code node}'s pool on at once: pools give up a wait on an
     * interrupt (HikariCP: "Interrupted during connection acquisition"), and the thread routes
     * again instead of waiting out the pool's connection timeout on a node that will give
     * nothing. A thread the application interrupted already is left alone (its interrupt is
     * the application's). An application interrupt that lands after this walk read the thread
     * uninterrupted, up to the waiter's {@link #done}, is taken for the kick and cleared with it:
     * a thread has one interrupt bit, so the two cannot be told apart (a Thread whose
     * {@code isInterrupted()} lets one land right after the walk's check shows it; no ordering of
     * the check, the compare-and-set and the interrupt closes it).
     *
     * @return the threads sent on
     */
    int kickWaiters(int node) {
        int n = 0;
        for (Segment s = node < slots.length ? slots[node] : null; s != null; s = s.next) {
            Object[] cells = s.cells;
            for (int i = s.offset; i < s.offset + SEGMENT; i++) {
                Object v = CELL.getVolatile(cells, i);
                if (v instanceof Thread && !((Thread) v).isInterrupted() && CELL.compareAndSet(cells, i, v, KICKING)) {
                    try {
                        ((Thread) v).interrupt();
                    } finally {
                        CELL.setVolatile(cells, i, KICKED);
                    }
                    n++;
                }
            }
        }
        return n;
    }

    /** @return the threads waiting on {@code node}'s pool now */
    int waiters(int node) {
        int n = 0;
        for (Segment s = node < slots.length ? slots[node] : null; s != null; s = s.next) {
            for (int i = s.offset; i < s.offset + SEGMENT; i++) {
                if (CELL.getVolatile(s.cells, i) instanceof Thread) {
                    n++;
                }
            }
        }
        return n;
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

    /**
     * Starts the abort of every connection of {@code node} the application holds (a hard Down:
     * crash, heartbeat, ejection, operator; a data source's close): a call on one fails at once
     * instead of waiting on a dead or hung node, and the pool drops it when it is closed. Each
     * abort runs on a library thread of its own, named {@code name}, which then hands the
     * connection to {@code then}: a driver whose abort blocks (a socket stuck in a write, which
     * the close behind the abort waits for) holds that one connection's thread only, not the
     * aborts of the node's other connections nor the caller (they ran one after another on the
     * caller's thread, so N stuck aborts took N times one, and the upkeep stopped acting on later
     * Downs). A node goes Down rarely and the threads end with their driver's call; the caller
     * waits for them as long as it can afford. A connection borrowed as this walk passes its slot
     * may be missed, as the walk of a concurrent set missed it before: the pool evicts it at the
     * Down (it closes when returned), and its next call on the dead node fails on its own.
     *
     * @return the threads started, one per connection held
     */
    List<Thread> abortBorrowed(int node, String name, Consumer<Connection> then) {
        List<Connection> held = new ArrayList<>();
        for (Segment s = node < slots.length ? slots[node] : null; s != null; s = s.next) {
            for (int i = s.offset; i < s.offset + SEGMENT; i++) {
                if (CELL.getVolatile(s.cells, i) instanceof Connection c) {
                    held.add(c);
                }
            }
        }
        List<Thread> aborting = new ArrayList<>(held.size());
        for (Connection c : held) {
            Thread t = LibraryThreads.newThread(() -> {
                try {
                    c.abort(Runnable::run);
                    then.accept(c);
                } catch (SQLException | RuntimeException e) {
                    // closed meanwhile, or a driver without abort: its next call finds out
                }
            }, name, NodeFailover.class.getClassLoader());
            t.start();
            aborting.add(t);
        }
        return aborting;
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
