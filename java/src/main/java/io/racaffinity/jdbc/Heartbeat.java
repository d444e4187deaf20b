package io.racaffinity.jdbc;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.ClusterClosedException;
import io.racaffinity.LibraryThreads;
import java.lang.System.Logger.Level;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import javax.sql.DataSource;

/**
 * Active health checking (seed 001): every interval, each node is probed with
 * {@link Connection#isValid(int)} on a connection from its own pool, and the
 * result is reported to the core ({@link Cluster#reportProbe}), which counts
 * misses ({@code heartbeat.misses} in a row mark the node Down) and lifts a
 * heartbeat Down on the next success. No application traffic is needed.
 *
 * <p>A probe that is still running when the node's next tick comes (say the
 * pool waits for a connection to a dead host) counts as a miss for that tick,
 * so misses accrue at the configured rate however long the pool blocks. Except
 * a node's first probe, for up to the probe timeout: it opens the pool's first
 * connection, which on a cold, busy JVM can take longer than misses × interval,
 * and counting it marked healthy nodes Down at start-up.
 *
 * <p>It follows the cluster's node set: a node removed at run time is not probed from the next tick on.
 */
final class Heartbeat implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.racaffinity.jdbc.Heartbeat");

    private final String owner;
    /**
     * The data source's log thread: a probe or the timer that waits in a blocking log handler would stop the
     * heartbeat, and with it the detection of the next dead node.
     */
    private final System.Logger log;
    private final boolean logChanges;
    private final Cluster cluster;
    private final DataSource[] nodes;
    private final AtomicBoolean[] inFlight;
    /** When each node's running probe started (System.nanoTime). */
    private final long[] startedNanos;
    /** Whether a probe of each node has ended (answered or failed): then a slow probe is a miss at once. */
    private final boolean[] answered;
    private final int timeoutSeconds;
    private final Redactor redactor;
    private final ScheduledExecutorService timer;
    private final ExecutorService probes;
    /** Told of each state change a probe caused (pool upkeep acts on a Down at once). */
    private final Runnable changed;
    /**
     * Set by {@link #close()}, whose interrupt ends a probe waiting on its pool with an error that says
     * nothing of the node: a cluster the application gave the data source outlives this heartbeat.
     */
    private volatile boolean closed;
    /** How long {@link #close()} waits for the heartbeat's threads to end. */
    static final long CLOSE_WAIT_MILLIS = 2_000;
    /** The threads the two executors started and that have not ended (a probe thread idle for 60 s ends). */
    private final List<Thread> threads = new ArrayList<>();

    /**
     * @param owner the data source's log prefix ({@code AffinityDataSource orcl})
     * @param logChanges whether the state changes its probes cause are logged here (false where
     *     the data source logs every change already, with the core's cause)
     * @param log the data source's log thread (its owner closes it)
     */
    Heartbeat(String owner, Cluster cluster, DataSource[] nodes, long intervalMillis, int timeoutSeconds,
            Redactor redactor, boolean logChanges, Runnable changed, AsyncLog log) {
        this.owner = owner;
        this.log = log.logger(LOG);
        this.changed = changed;
        this.logChanges = logChanges;
        this.cluster = cluster;
        this.nodes = nodes.clone();
        this.inFlight = new AtomicBoolean[nodes.length];
        this.startedNanos = new long[nodes.length];
        this.answered = new boolean[nodes.length];
        for (int i = 0; i < inFlight.length; i++) {
            inFlight[i] = new AtomicBoolean();
        }
        this.timeoutSeconds = timeoutSeconds;
        this.redactor = redactor;
        String name = cluster.name();
        this.timer = Executors.newSingleThreadScheduledExecutor(daemon("racaffinity-heartbeat-" + name));
        this.probes = Executors.newCachedThreadPool(daemon("racaffinity-probe-" + name));
        timer.scheduleAtFixedRate(this::tick, intervalMillis, intervalMillis, TimeUnit.MILLISECONDS);
    }

    private ThreadFactory daemon(String prefix) {
        ThreadFactory f = LibraryThreads.factory(prefix, Heartbeat.class.getClassLoader());
        return r -> {
            Thread t = f.newThread(r);
            synchronized (threads) {
                // Not isAlive(): a thread made but not yet started is not alive either.
                threads.removeIf(old -> old.getState() == Thread.State.TERMINATED);
                threads.add(t);
            }
            return t;
        };
    }

    private void tick() {
        // The cluster's nodes now: one removed at run time (feed, removeNode) is probed no more, since the core
        // ignores its probes and each would open a connection to a node the fleet took out. A node added at run
        // time has a new id, and no pool here to probe it with.
        boolean[] live = new boolean[nodes.length];
        try {
            for (int id : cluster.nodeIds()) {
                if (id < live.length) {
                    live[id] = true;
                }
            }
        } catch (AffinityException e) {
            return; // the cluster is closed
        }
        for (int id = 0; id < nodes.length; id++) {
            if (nodes[id] == null || !live[id]) {
                continue;
            }
            final int node = id;
            if (!inFlight[node].compareAndSet(false, true)) {
                // Only the timer thread reads these, and the probe that sets answered ends with a volatile write.
                boolean firstProbe = !answered[node]
                        && System.nanoTime() - startedNanos[node] < TimeUnit.SECONDS.toNanos(timeoutSeconds);
                if (!firstProbe) {
                    report(node, false, "the previous probe is still running");
                }
                continue;
            }
            startedNanos[node] = System.nanoTime();
            try {
                probes.execute(() -> probe(node));
            } catch (RejectedExecutionException e) {
                inFlight[node].set(false); // closing
            }
        }
    }

    private void probe(int node) {
        boolean ok = false;
        String why = null;
        try (Connection c = nodes[node].getConnection()) {
            ok = c.isValid(timeoutSeconds);
            if (!ok) {
                why = "isValid(" + timeoutSeconds + ") returned false";
            }
        } catch (SQLException e) {
            why = e.getClass().getSimpleName() + " (SQLState " + e.getSQLState() + "): "
                    + redactor.redact(e.getMessage());
            if (SqlErrors.isAuthenticationFailure(e)) {
                // The node answered; the login is one user's (an XA heartbeat probes with the last credentials
                // the application passed). Counting it would mark every node Down for one user's mistake.
                String answer = why;
                log.log(Level.DEBUG, () -> owner + ": heartbeat of node " + nodeName(node) + ": the login was"
                        + " refused, the node answered: " + answer);
                ok = true;
                why = null;
            }
        } catch (RuntimeException e) {
            why = redactor.redact(String.valueOf(e));
        } finally {
            answered[node] = true;
            inFlight[node].set(false);
        }
        report(node, ok, why);
    }

    private void report(int node, boolean ok, String why) {
        if (closed) {
            return;
        }
        try {
            boolean changed = cluster.reportProbe(node, ok);
            if (!ok) {
                log.log(Level.DEBUG, () -> owner + ": heartbeat of node " + cluster.nodeName(node) + " missed: "
                        + why);
            }
            if (changed) {
                this.changed.run();
            }
            if (changed && logChanges) {
                NodeStates.logChange(log, owner, cluster, node, ok ? "heartbeat probe succeeded"
                        : "heartbeat: " + why);
            }
        } catch (ClusterClosedException e) {
            // closing
        } catch (AffinityException e) {
            log.log(Level.WARNING, () -> owner + ": heartbeat report failed: " + redactor.redact(e.getMessage()));
        }
    }

    private String nodeName(int node) {
        try {
            return cluster.nodeName(node);
        } catch (AffinityException e) {
            return "#" + node;
        }
    }

    /**
     * Stops the ticks and interrupts the probes, then waits at most {@link #CLOSE_WAIT_MILLIS} for them to end:
     * an interrupted connect still unwinds (a driver closes its socket), and the library's own wait for its
     * threads only runs when the last cluster closes, so without this an application server that checks an
     * undeployed application's threads while another one's cluster is open finds the probe alive. A probe stuck
     * in a driver that ignores the interrupt past that ends with its connect (every report after close is
     * dropped).
     */
    @Override
    public void close() {
        stop();
        LibraryThreads.joinAll(threads(), CLOSE_WAIT_MILLIS);
    }

    /** {@link #close()}'s first step, for an owner that stops all its parts before it waits for their threads. */
    void stop() {
        closed = true;
        timer.shutdownNow();
        probes.shutdownNow();
    }

    /** The threads to wait for once stopped (not the executors' termination, which a worker signals before it ends). */
    List<Thread> threads() {
        synchronized (threads) {
            return new ArrayList<>(threads);
        }
    }
}
