package io.racaffinity.jdbc;

import io.racaffinity.Cluster;
import io.racaffinity.ClusterClosedException;
import io.racaffinity.LibraryThreads;
import io.racaffinity.NodeState;
import java.lang.System.Logger.Level;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executor;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.IntConsumer;
import java.util.function.IntFunction;
import javax.sql.DataSource;

/**
 * The data source's pool upkeep, one daemon thread per data source: it follows
 * the node states the core reports (no decision of its own) and
 * <ul>
 *   <li>drains the pool of a Draining node: idle connections close at once and
 *       busy ones are retired when returned (HikariCP {@code softEvictConnections},
 *       with {@code minimumIdle} at 0 until the node is Up again), so the
 *       instance holds no pooled connection when its drain timeout ends;</li>
 *   <li>fails a Down node's pool over at once (fast connection failover,
 *       {@link NodeFailover}): idle connections close, threads waiting on the pool
 *       route again, and on a hard Down (not a planned drain's end) the connections
 *       in use are aborted; the pool refills at once when the node is Up again;</li>
 *   <li>renews the pool of a node that went Down (or Draining) and Up again between two rounds
 *       ({@link StateChanges}: only the core's state change count moved): its idle connections may be
 *       sessions a restart ended, young enough for the pool to hand out unchecked; they close at once
 *       and the pool refills, connections in use finish (the cause is not known by then, as at a
 *       drain) and are checked at their next borrow;</li>
 *   <li>reloads the partition map from the {@link PartitionMapLoader} after each
 *       node state change (an HA event) and on its period.</li>
 * </ul>
 * {@link #poke()} runs a round at once: after {@code AffinityDataSource.applyEvent}, a
 * heartbeat that changed a state and a connection failure (which may eject the node); other
 * changes (an operator's, the fleet feed's) are seen at the next tick.
 */
final class PoolMaintenance implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.racaffinity.jdbc.AffinityDataSource");
    static final String SOURCE = "loader";
    /** How long a hard Down's round waits for the aborts of the node's connections in use, all together. */
    static final long DOWN_ABORT_WAIT_MILLIS = 1_000;

    private final String owner;
    private final Cluster cluster;
    private final DataSource[] byId;
    private final NodeFailover failover;
    private final IntFunction<String> lastFailure;
    /** What else a hard Down ends (AffinityXADataSource: the sessions its XAConnections hold there), or null. */
    private final IntConsumer hardDown;
    /** What else a missed Down and Up renews (AffinityXADataSource: its XAConnections' idle sessions), or null. */
    private final IntConsumer renewed;
    /** False where the heartbeat logs the state changes it causes itself (AffinityXADataSource). */
    private final boolean logTransitions;
    private final long tickMillis;
    private final PartitionMapLoader loader;
    /** The loader's exceptions are the application's (a driver's message may hold its URL). */
    private final Redactor redactor;
    private final long reloadMillis;
    private final Thread thread;
    /** Every line the upkeep logs goes through the data source's log thread: the upkeep never waits on a handler. */
    private final System.Logger log;
    private final NodeState[] last;
    /** Per node, this round: Up at the last round and at this one (a missed Down and Up renews its pool). */
    private final boolean[] upThrough;
    private final StateChanges stateChanges;
    /** Whether a node's Down ended a planned drain, until it fails or comes back. */
    private final boolean[] planned;
    private final int[] savedMinIdle;
    private final AtomicLong loads = new AtomicLong();
    /** Rounds done (tests wait for one that started after a change). */
    private final AtomicLong rounds = new AtomicLong();
    private final AtomicLong failures = new AtomicLong();
    private volatile String lastError;
    private long nextReload;
    private final Object loadLock = new Object();
    private boolean poked;
    private boolean closed;
    /** The upkeep thread is in (or waits for) the application's loader. */
    private boolean upkeepLoading;

    /**
     * @param owner the data source's log prefix
     * @param lastFailure the last connection failure the data source saw on a node, or null
     * @param log the data source's log thread (its owner closes it)
     */
    PoolMaintenance(String owner, Cluster cluster, DataSource[] byId, NodeFailover failover,
            IntFunction<String> lastFailure, long tickMillis, PartitionMapLoader loader, long reloadMillis,
            Redactor redactor, AsyncLog log) {
        this(owner, cluster, byId, failover, lastFailure, tickMillis, loader, reloadMillis, redactor, log, null,
                null, true);
    }

    /**
     * @param hardDown called at each hard Down of a node, after its pool's connections in use were aborted
     * @param renewed called for a node that went Down (or Draining) and Up again between two rounds, or null
     * @param logTransitions whether the rounds log node state changes
     */
    PoolMaintenance(String owner, Cluster cluster, DataSource[] byId, NodeFailover failover,
            IntFunction<String> lastFailure, long tickMillis, PartitionMapLoader loader, long reloadMillis,
            Redactor redactor, AsyncLog log, IntConsumer hardDown, IntConsumer renewed, boolean logTransitions) {
        this.owner = owner;
        this.hardDown = hardDown;
        this.renewed = renewed;
        this.logTransitions = logTransitions;
        this.failover = failover;
        this.redactor = redactor;
        this.cluster = cluster;
        this.byId = byId.clone();
        this.lastFailure = lastFailure;
        this.tickMillis = tickMillis;
        this.loader = loader;
        this.reloadMillis = reloadMillis;
        this.last = new NodeState[byId.length];
        this.planned = new boolean[byId.length];
        this.savedMinIdle = new int[byId.length];
        Arrays.fill(savedMinIdle, -1);
        Arrays.fill(last, NodeState.UP);
        this.upThrough = new boolean[byId.length];
        this.stateChanges = new StateChanges(cluster);
        this.log = log.logger(LOG);
        if (loader != null) {
            reload("start");
        }
        this.thread = LibraryThreads.newThread(this::loop, "racaffinity-pools-" + cluster.name(),
                PoolMaintenance.class.getClassLoader());
        thread.start();
    }

    long rounds() {
        return rounds.get();
    }

    long loads() {
        return loads.get();
    }

    long failures() {
        return failures.get();
    }

    String lastError() {
        return lastError;
    }

    /** Runs a round now (and waits for none). */
    synchronized void poke() {
        poked = true;
        notifyAll();
    }

    /** How long {@link #close()} waits for the upkeep thread it interrupted in the application's loader. */
    static final long LOADER_CLOSE_WAIT_MILLIS = 1_000;

    /**
     * Stops the upkeep and waits for its thread, as HikariCP's close awaits its housekeeping, so that an
     * application server checking an undeployed application's threads right after finds none. A thread in the
     * application's loader is interrupted and waited for {@link #LOADER_CLOSE_WAIT_MILLIS} at most: an
     * interrupted load unwinds, but a loader may hang for good on the network; the thread applies nothing once
     * closed and ends when the loader returns.
     */
    @Override
    public void close() {
        boolean inLoader = stop();
        LibraryThreads.joinAll(List.of(thread), inLoader ? LOADER_CLOSE_WAIT_MILLIS : 5_000);
    }

    /**
     * {@link #close()}'s first step, for an owner that stops all its parts before it waits for their threads.
     *
     * @return whether the thread was in the application's loader (and was interrupted)
     */
    boolean stop() {
        synchronized (this) {
            closed = true;
            notifyAll();
            if (upkeepLoading) {
                // Under the lock, so the thread is still in reload(): past the loader it only finds closed and returns.
                thread.interrupt();
            }
            return upkeepLoading;
        }
    }

    /** The upkeep's thread, to wait for once stopped. */
    Thread thread() {
        return thread;
    }

    private void loop() {
        nextReload = reloadMillis > 0 ? System.nanoTime() / 1_000_000 + reloadMillis : Long.MAX_VALUE;
        while (true) {
            synchronized (this) {
                if (!poked && !closed) {
                    try {
                        wait(tickMillis);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                if (closed) {
                    return;
                }
                poked = false;
            }
            try {
                round();
                rounds.incrementAndGet();
            } catch (ClusterClosedException e) {
                return;
            } catch (RuntimeException e) {
                // Anything else is one bad round: drains and reloads must go on.
                log.log(Level.WARNING, owner + ": pool upkeep failed: " + e);
            }
        }
    }

    private void round() {
        boolean changed = false;
        // Logged once the round has acted, after the lines its acts log (a hard Down's abort count).
        List<Runnable> transitions = null;
        for (int i = 0; i < byId.length; i++) {
            if (byId[i] == null) {
                continue;
            }
            NodeState now = cluster.nodeState(i);
            upThrough[i] = now == NodeState.UP && last[i] == NodeState.UP;
            if (now != last[i]) {
                changed = true;
            }
            if (now != last[i] && logTransitions) {
                int node = i;
                NodeState from = last[i];
                String failure = lastFailure.apply(i);
                if (transitions == null) {
                    transitions = new ArrayList<>();
                }
                transitions.add(() -> NodeStates.logTransition(log, owner, cluster, node, from, now, failure));
            }
            if (now == NodeState.DRAINING) {
                drain(i);
            } else if (now == NodeState.DOWN && last[i] != NodeState.DOWN && cluster.nodeDownIsPlanned(i)) {
                planned[i] = true;
                // A planned drain's end (the core's answer: these rounds may never have seen the
                // node Draining): connections in use finish their request and close when returned
                // (their request boundary); only waiters, pinned work that can no longer get a
                // connection here, route again. A failure during the drain is down(i) below.
                if (savedMinIdle[i] < 0) {
                    savedMinIdle[i] = Math.max(0, Hikari.setMinimumIdle(byId[i], 0));
                }
                failover.kickWaiters(i);
                Hikari.softEvict(byId[i]);
            } else if (now == NodeState.DOWN
                    && (last[i] != NodeState.DOWN || planned[i] && !cluster.nodeDownIsPlanned(i))) {
                // A hard Down, or a failure after a drain's end (a FAN failure, the operator's Down):
                // the connections still finishing there would hang on a dead node.
                planned[i] = false;
                down(i);
            } else if (now == NodeState.DOWN) {
                // Threads that came to wait on a Down node's pool since (a transaction's branch
                // or a strict pin routed there before the Down) get their error now, and a
                // connection the pool was opening at the Down is closed once it lands.
                failover.kickWaiters(i);
                if (Hikari.idle(byId[i]) > 0) {
                    Hikari.softEvict(byId[i]);
                }
            } else if (now == NodeState.UP && savedMinIdle[i] >= 0) {
                Hikari.setMinimumIdle(byId[i], savedMinIdle[i]);
                // Back at once, not at the pool's housekeeping tick (HikariCP: 30 s).
                Hikari.refill(byId[i], savedMinIdle[i]);
                savedMinIdle[i] = -1;
            }
            if (now != NodeState.DOWN) {
                planned[i] = false;
            }
            last[i] = now;
        }
        // After the states: a change since is seen by the next round's states, not taken for a missed one.
        for (int node : stateChanges.moved()) {
            if (node < byId.length && byId[node] != null && upThrough[node]) {
                changed = true;
                renew(node);
            }
        }
        if (transitions != null) {
            transitions.forEach(Runnable::run);
        }
        long nowMs = System.nanoTime() / 1_000_000;
        if (loader != null && (changed || nowMs >= nextReload)) {
            reload(changed ? "HA event" : "period");
            nextReload = reloadMillis > 0 ? nowMs + reloadMillis : Long.MAX_VALUE;
        }
    }

    /**
     * A hard Down (crash, heartbeat, ejection, operator, FAN {@code reason=FAILURE}): as a drain,
     * and the connections in use are aborted (their next call fails at once rather than hang on a
     * dead node) and the threads waiting on the pool route again at once.
     */
    private void down(int node) {
        DataSource ds = byId[node];
        failover.failed(node);
        // No refill first, so that the eviction below is not undone by the pool's own upkeep.
        if (savedMinIdle[node] < 0) {
            savedMinIdle[node] = Math.max(0, Hikari.setMinimumIdle(ds, 0));
        }
        failover.kickWaiters(node);
        List<Thread> aborting = failover.abortBorrowed(node, "racaffinity-down-abort-" + cluster.name(), c -> {});
        // Long enough for drivers that abort at once to have done so when the round goes on; a stuck
        // one ends on its own thread, and the upkeep acts on the next Down meanwhile.
        LibraryThreads.joinAll(aborting, DOWN_ABORT_WAIT_MILLIS);
        int aborted = aborting.size();
        if (hardDown != null) {
            hardDown.accept(node);
        }
        Hikari.softEvict(ds);
        if (aborted > 0) {
            log.log(Level.DEBUG, () -> owner + ": node " + cluster.nodeName(node) + " Down: " + aborted
                    + " connection(s) in use aborted");
        }
    }

    /**
     * A node Up at this round and the last that went Down (or Draining) and Up again in between:
     * a restart may have ended its idle connections' sessions, and HikariCP hands out a connection
     * used within its alive-check bypass (500 ms) unchecked. They close now and the pool refills
     * (HikariCP fills after each close); connections in use finish, as at a drain (whether the Down
     * was a failure is not known by then), and any connection of the node is checked at its next
     * borrow.
     */
    private void renew(int node) {
        failover.failed(node);
        if (renewed != null) {
            renewed.accept(node);
        }
        if (Hikari.softEvict(byId[node])) {
            String name = cluster.nodeName(node);
            log.log(Level.INFO, () -> owner + ": node " + name
                    + " went Down or Draining and Up again since the last round: its pool is renewed");
        }
    }

    /** Idle connections close now, busy ones when returned; no refill while draining. */
    private void drain(int node) {
        DataSource ds = byId[node];
        if (savedMinIdle[node] < 0) {
            savedMinIdle[node] = Math.max(0, Hikari.setMinimumIdle(ds, 0));
        }
        // Work pinned to the node goes on during the drain and may need a new
        // connection: evicting while it waits would close that connection
        // before the handoff, round after round, and starve it.
        if (Hikari.threadsAwaiting(ds) == 0) {
            Hikari.softEvict(ds);
        }
    }

    /**
     * Loads and applies the map; a failure keeps the last good one. Loads run one
     * at a time, each applied before the next starts, so an older map never
     * replaces a newer one.
     *
     * @return whether the load succeeded and was applied (false once closed)
     */
    boolean reload(String why) {
        boolean upkeep = Thread.currentThread() == thread;
        synchronized (this) {
            if (closed) {
                return false;
            }
            if (upkeep) {
                upkeepLoading = true;
            }
        }
        try {
            synchronized (loadLock) {
                return loadAndApply(why);
            }
        } finally {
            if (upkeep) {
                synchronized (this) {
                    upkeepLoading = false;
                }
            }
        }
    }

    private boolean loadAndApply(String why) {
        Map<Integer, String> map = null;
        Throwable failure = null;
        // The application's code runs outside this monitor: poke() (FAN events)
        // and close() take it and must not wait for a loader stuck on the network.
        try {
            map = loader.load();
            if (map == null) {
                failure = new IllegalStateException("the loader returned no map");
            }
        } catch (Exception | LinkageError | AssertionError e) {
            // A class the application's loader cannot load, or its assertion, fails this load only:
            // thrown on, it would end the upkeep thread, and with it drains and Down aborts.
            failure = e;
        }
        synchronized (this) {
            if (closed) {
                return false;
            }
            if (failure == null) {
                try {
                    long epoch = cluster.replacePartitionMap(map, SOURCE);
                    loads.incrementAndGet();
                    lastError = null;
                    int size = map.size();
                    log.log(Level.DEBUG, () -> owner + ": partition map epoch " + epoch
                            + " loaded (" + why + ", " + size + " entries)");
                    return true;
                } catch (RuntimeException e) {
                    failure = e;
                }
            }
            // The error first, here and in the core's metrics (JSON, Prometheus, JMX):
            // whoever sees the count go up finds its error in both.
            lastError = errorText(redactor.redact(describe(failure)));
            cluster.partitionMapLoadFailed(SOURCE, lastError);
            failures.incrementAndGet();
            log.log(Level.WARNING, owner + ": partition map load failed (" + why
                    + "), keeping the last good map: " + lastError,
                    io.racaffinity.Redacted.throwable(failure, redactor::redact));
            return false;
        }
    }

    static final int MAX_ERROR_CHARS = 512;

    /**
     * A failure with its causes, each with its SQLState: the loader's own exception often only wraps the
     * one that says what went wrong (a missing table: 42P01).
     */
    static String describe(Throwable failure) {
        StringBuilder sb = new StringBuilder();
        java.util.Set<Throwable> seen = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        for (Throwable t = failure; t != null && seen.add(t) && sb.length() < MAX_ERROR_CHARS; t = t.getCause()) {
            sb.append(sb.length() == 0 ? "" : "; caused by ").append(t.getClass().getName());
            if (t instanceof java.sql.SQLException && ((java.sql.SQLException) t).getSQLState() != null) {
                sb.append(" (SQLState ").append(((java.sql.SQLException) t).getSQLState()).append(')');
            }
            sb.append(": ").append(t.getMessage());
        }
        return sb.toString();
    }

    /**
     * The loader's message as text the core takes: any exception message may hold
     * a lone surrogate or be huge, and the core refuses both, which would turn a
     * failed load into a failed upkeep round.
     */
    static String errorText(String message) {
        StringBuilder sb = new StringBuilder(Math.min(message.length(), MAX_ERROR_CHARS));
        for (int i = 0, n = message.length(); i < n && sb.length() < MAX_ERROR_CHARS; i++) {
            char ch = message.charAt(i);
            if (Character.isHighSurrogate(ch) && i + 1 < n && Character.isLowSurrogate(message.charAt(i + 1))) {
                if (sb.length() + 2 > MAX_ERROR_CHARS) {
                    break;
                }
                sb.append(ch).append(message.charAt(++i));
            } else {
                sb.append(Character.isSurrogate(ch) ? '\uFFFD' : ch);
            }
        }
        return sb.toString();
    }

    /** HikariCP's runtime pool controls, by reflection (the jar depends on no pool). */
    static final class Hikari {
        private Hikari() {}

        private static Object bean(DataSource ds, String getter, String iface) {
            try {
                Object mx = ds.getClass().getMethod(getter).invoke(ds);
                if (mx == null) {
                    return null;
                }
                Class<?> type = Class.forName(iface, false, ds.getClass().getClassLoader());
                return type.isInstance(mx) ? mx : null;
            } catch (ReflectiveOperationException | LinkageError e) {
                return null;
            }
        }

        private static Object call(DataSource ds, String getter, String iface, String method, Class<?>[] types,
                Object... args) {
            Object mx = bean(ds, getter, iface);
            if (mx == null) {
                return null;
            }
            try {
                Class<?> type = Class.forName(iface, false, ds.getClass().getClassLoader());
                Method m = type.getMethod(method, types);
                return m.invoke(mx, args);
            } catch (ReflectiveOperationException | LinkageError e) {
                return null;
            }
        }

        /** {@code softEvictConnections()}: whether the pool had it. */
        static boolean softEvict(DataSource ds) {
            Object mx = bean(ds, "getHikariPoolMXBean", "com.zaxxer.hikari.HikariPoolMXBean");
            if (mx == null) {
                return false;
            }
            call(ds, "getHikariPoolMXBean", "com.zaxxer.hikari.HikariPoolMXBean", "softEvictConnections",
                    new Class<?>[0]);
            return true;
        }

        /**
         * Drops one connection from the pool ({@code HikariDataSource.evictConnection}; it is
         * closed now if idle, else when returned); without it, aborts and closes the connection.
         */
        static void evict(DataSource ds, java.sql.Connection c) {
            if (evictHikari(ds, c)) {
                return;
            }
            try {
                c.abort(Runnable::run);
            } catch (java.sql.SQLException | RuntimeException e) {
                // gone already
            }
            closeQuietly(c);
        }

        /**
         * Drops a connection the application aborted through {@code executor}: HikariCP only marks an
         * entry in use, at once; another pool gets its handle back by {@code close()}, which may wait
         * on the node (a rollback on return), so it runs through the executor as JDBC has abort's work
         * run, and the abort returns promptly.
         */
        static void evictAborted(DataSource ds, java.sql.Connection c, Executor executor) {
            if (!evictHikari(ds, c)) {
                executor.execute(() -> closeQuietly(c));
            }
        }

        /** {@code HikariDataSource.evictConnection}: whether the pool had it. */
        static boolean evictHikari(DataSource ds, java.sql.Connection c) {
            try {
                ds.getClass().getMethod("evictConnection", java.sql.Connection.class).invoke(ds, c);
                return true;
            } catch (ReflectiveOperationException | LinkageError | RuntimeException e) {
                return false;
            }
        }

        private static void closeQuietly(java.sql.Connection c) {
            try {
                c.close();
            } catch (java.sql.SQLException | RuntimeException e) {
                // gone already
            }
        }

        /**
         * Asks the pool to open up to {@code n} connections now, on its own thread ({@code
         * HikariPool.addBagItem}, never beyond {@code minimumIdle}); a pool without it refills at
         * its own pace.
         */
        static void refill(DataSource ds, int n) {
            Object mx = bean(ds, "getHikariPoolMXBean", "com.zaxxer.hikari.HikariPoolMXBean");
            if (mx == null) {
                return;
            }
            try {
                // Each task opens one connection while the pool is below minimumIdle; the argument,
                // "threads waiting", is compared with the tasks queued, so count up.
                Method add = mx.getClass().getMethod("addBagItem", int.class);
                for (int i = 1; i <= n; i++) {
                    add.invoke(mx, i);
                }
            } catch (ReflectiveOperationException | LinkageError | RuntimeException e) {
                // another HikariCP: its housekeeper refills
            }
        }

        /** {@code getIdleConnections()}, 0 if not a Hikari pool. */
        static int idle(DataSource ds) {
            Object n = call(ds, "getHikariPoolMXBean", "com.zaxxer.hikari.HikariPoolMXBean", "getIdleConnections",
                    new Class<?>[0]);
            return n instanceof Integer ? (Integer) n : 0;
        }

        /** {@code getThreadsAwaitingConnection()}, 0 if not a Hikari pool. */
        static int threadsAwaiting(DataSource ds) {
            Object n = call(ds, "getHikariPoolMXBean", "com.zaxxer.hikari.HikariPoolMXBean",
                    "getThreadsAwaitingConnection", new Class<?>[0]);
            return n instanceof Integer ? (Integer) n : 0;
        }

        /** Sets {@code minimumIdle} at runtime; returns the old value, or -1 if not a Hikari pool. */
        static int setMinimumIdle(DataSource ds, int minIdle) {
            String iface = "com.zaxxer.hikari.HikariConfigMXBean";
            Object old = call(ds, "getHikariConfigMXBean", iface, "getMinimumIdle", new Class<?>[0]);
            if (!(old instanceof Integer)) {
                return -1;
            }
            call(ds, "getHikariConfigMXBean", iface, "setMinimumIdle", new Class<?>[] {int.class}, minIdle);
            return (Integer) old;
        }
    }
}
