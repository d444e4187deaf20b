package io.racaffinity.jta;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.Route;
import io.racaffinity.xa.XaRouter;
import jakarta.transaction.Status;
import jakarta.transaction.Synchronization;
import jakarta.transaction.Transaction;
import jakarta.transaction.TransactionManager;
import jakarta.transaction.TransactionSynchronizationRegistry;
import java.lang.System.Logger.Level;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Objects;
import javax.transaction.xa.Xid;

/**
 * JTA transaction affinity for a (non-XA) data source: inside an active JTA
 * transaction every connection goes to the transaction's node, from any thread
 * the transaction is associated with; the affinity ends in {@code afterCompletion},
 * so the thread's next transaction is placed afresh (seed 000: "disassociate the
 * pool from the thread" at transaction end).
 *
 * <p>The transaction is identified through the {@link TransactionSynchronizationRegistry}:
 * the key is the transaction's Xid (formatId and gtrid, {@link XaRouter#transactionKey}) when it can be
 * had (a {@link Xid} key, or the TM's transaction object's {@code getTxId()}/{@code getXid()}, as Narayana
 * and so WildFly offer), so the transaction routes exactly as its XA branches do through
 * {@code AffinityXADataSource} on the same cluster; otherwise the registry's
 * transaction key (its {@code toString()}, hashed if longer than 64 bytes). A transaction
 * whose TM takes no synchronization (Narayana once it is marked rollback-only) is followed all the
 * same, and ended within {@value #SWEEP_MILLIS} ms of its completion by a daemon thread that runs only
 * while such a transaction is followed. The first
 * connection of a transaction places it (the core's {@code txBeginFor}, as for an XA branch)
 * and registers an interposed synchronization whose {@code afterCompletion} ends it
 * ({@code txEnd}); later connections follow it (routed by the core with the transaction's gtrid,
 * {@link Cluster#pickFor}, or {@code txRoute}). If the node is down, strict transaction affinity
 * ({@code transaction.strict}) refuses the connection rather than split the transaction; soft mode
 * places the new branch elsewhere and counts the span (docs/semantics.md, "transaction").
 *
 * <p>Needs {@code jakarta.transaction-api} at run time (provided by the app server);
 * {@code AffinityDataSource} only loads this class when a registry is configured or found.
 */
public final class TransactionAffinity {
    private static final System.Logger LOG = System.getLogger("io.racaffinity.jta");

    private final Cluster cluster;
    private final TransactionSynchronizationRegistry tsr;
    private final TransactionManager tm;
    /** This instance's key in the registry's per-transaction resources. */
    private final Object resourceKey = new Object();
    /**
     * Transactions followed without a synchronization (the TM refused one: Narayana does once a
     * transaction is marked rollback-only), by registry key: their gtrid stays registered in the
     * core so every connection follows it, and is ended by {@link #sweep()} once the transaction
     * is over.
     */
    private final java.util.Map<Object, Unsynchronized> unsynchronized = new java.util.concurrent.ConcurrentHashMap<>();

    private static final class Unsynchronized {
        final byte[] gtrid;
        final Transaction transaction;

        Unsynchronized(byte[] gtrid, Transaction transaction) {
            this.gtrid = gtrid;
            this.transaction = transaction;
        }
    }

    /** How often unsynchronized transactions are checked for their end while any is followed. */
    static final long SWEEP_MILLIS = 200;

    /**
     * Ends unsynchronized transactions that are over, whether or not the application asks for another
     * connection (an idle one never would). Its one daemon thread lives only while such a transaction is
     * followed: it times out once the map is empty.
     */
    private final java.util.concurrent.ScheduledThreadPoolExecutor sweeper;
    private final java.util.concurrent.atomic.AtomicBoolean sweepScheduled = new java.util.concurrent.atomic.AtomicBoolean();
    /** How long {@link #close()} waits for the sweeper's thread to end. */
    static final long CLOSE_WAIT_MILLIS = 2_000;
    /** The sweeper's threads that may not have ended (one at a time; a new one after each idle timeout). */
    private final java.util.List<Thread> threads = new java.util.ArrayList<>();

    private TransactionAffinity(Cluster cluster, TransactionSynchronizationRegistry tsr, TransactionManager tm) {
        this.cluster = cluster;
        this.tsr = tsr;
        this.tm = tm;
        java.util.concurrent.ThreadFactory f = io.racaffinity.LibraryThreads.factory(
                "racaffinity-jta-sweep-" + cluster.name(), TransactionAffinity.class.getClassLoader());
        this.sweeper = new java.util.concurrent.ScheduledThreadPoolExecutor(1, r -> {
            Thread t = f.newThread(r);
            synchronized (threads) {
                // Not isAlive(): a thread made but not yet started is not alive either.
                threads.removeIf(old -> old.getState() == Thread.State.TERMINATED);
                threads.add(t);
            }
            return t;
        });
        sweeper.setKeepAliveTime(1, java.util.concurrent.TimeUnit.SECONDS);
        sweeper.allowCoreThreadTimeOut(true);
        sweeper.setRemoveOnCancelPolicy(true);
    }

    /**
     * Stops the sweeper, waits at most {@link #CLOSE_WAIT_MILLIS} for its thread to end, and ends every
     * transaction still followed without a synchronization. The wait is for a sweep under way, in a TM's
     * {@code getStatus()} that unwinds after the interrupt: the library's own wait for its threads runs only when
     * the last cluster closes, so without it an application server checking an undeployed application's threads
     * while another application's cluster is open finds the sweeper alive. A TM call that ignores the interrupt
     * past that ends on its own; the sweep then finds nothing left to end.
     */
    public void close() {
        close(System.nanoTime() + java.util.concurrent.TimeUnit.MILLISECONDS.toNanos(CLOSE_WAIT_MILLIS));
    }

    /**
     * {@link #close()} with its wait for the sweeper's thread ending at {@code deadlineNanos} rather than after
     * {@link #CLOSE_WAIT_MILLIS}: for an owner (a data source) that stops all its parts and waits for them under one
     * deadline, so that parts stuck at once do not each add their own wait.
     *
     * @param deadlineNanos when the wait ends at the latest, in {@link System#nanoTime()}'s terms
     */
    public void close(long deadlineNanos) {
        sweeper.shutdownNow();
        // The threads, not the executor's termination, which a worker signals before it has ended.
        java.util.List<Thread> started;
        synchronized (threads) {
            started = new java.util.ArrayList<>(threads);
        }
        io.racaffinity.LibraryThreads.joinUntil(started, deadlineNanos);
        unsynchronized.forEach((key, u) -> {
            if (unsynchronized.remove(key, u)) {
                end(cluster, u.gtrid);
            }
        });
    }

    private void scheduleSweep() {
        if (!sweepScheduled.compareAndSet(false, true)) {
            return;
        }
        try {
            sweeper.schedule(() -> {
                sweepScheduled.set(false);
                sweep();
                if (!unsynchronized.isEmpty()) {
                    scheduleSweep();
                }
            }, SWEEP_MILLIS, java.util.concurrent.TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            sweepScheduled.set(false); // closed
        }
    }

    /**
     * @param cluster the cluster
     * @param registry a {@code jakarta.transaction.TransactionSynchronizationRegistry}
     * @param transactionManager a {@code jakarta.transaction.TransactionManager}: it gives the transaction's Xid,
     *     and the transaction whose end a rollback-only transaction (one the TM takes no synchronization for) is
     *     watched by. Required: without it such a transaction could not be followed, and each of its connections
     *     would be placed afresh (its branches split over nodes)
     * @return the affinity
     * @throws IllegalArgumentException if {@code registry} is not a TransactionSynchronizationRegistry, or
     *     {@code transactionManager} is not a TransactionManager (null included)
     */
    public static TransactionAffinity of(Cluster cluster, Object registry, Object transactionManager) {
        Objects.requireNonNull(cluster, "cluster");
        if (!(registry instanceof TransactionSynchronizationRegistry)) {
            throw new IllegalArgumentException("not a jakarta.transaction.TransactionSynchronizationRegistry: "
                    + (registry == null ? "null" : registry.getClass().getName()));
        }
        if (!(transactionManager instanceof TransactionManager)) {
            // Without it a transaction the TM takes no synchronization for has no end to watch: following it would
            // hold its gtrid in the core forever, not following it splits it over nodes (docs/java-datasource.md).
            throw new IllegalArgumentException("not a jakarta.transaction.TransactionManager: "
                    + (transactionManager == null ? "null" : transactionManager.getClass().getName())
                    + " (JTA routing needs one to follow a rollback-only transaction to its end)");
        }
        return new TransactionAffinity(cluster, (TransactionSynchronizationRegistry) registry,
                (TransactionManager) transactionManager);
    }

    /**
     * The route of the calling thread's JTA transaction, placing it on first use.
     *
     * @return the route, or null outside an active transaction
     * @throws AffinityException if the core refuses (the transaction's node is unavailable)
     */
    public Route route() {
        Joined j = join();
        if (j == null) {
            return null;
        }
        return j.placed != null ? j.placed : cluster.txRoute(j.gtrid);
    }

    /**
     * The calling thread's JTA transaction, for one connection: on first use it is
     * placed (the core's {@code txBeginFor}, the thread's pin among its inputs; {@link #joinFor(byte[], byte[])}
     * adds the connection's key and session) and {@link Joined#placed()}
     * is its route; later, {@link Joined#gtrid()} is the gtrid to route by (the
     * transaction of {@link Cluster#pickFor}), and {@code placed()} is null.
     *
     * @return the transaction, or null outside an active transaction
     * @throws AffinityException if the core refuses to place it
     */
    public Joined join() {
        return joinFor(null, null);
    }

    /**
     * {@link #join()} for a connection that carries other affinities: the core places a new transaction
     * by them (the data key's owner, else the session's node, else the thread's pin; docs/semantics.md),
     * as it places an XA branch begun from the same request. They do not move a transaction placed before.
     *
     * @param dataKey the connection's data (sharding) key, or null
     * @param session the connection's web-session key (its data source's session scope, else the request's), or null
     * @return the transaction, or null outside an active transaction
     * @throws AffinityException if the core refuses to place it
     */
    public Joined joinFor(byte[] dataKey, byte[] session) {
        return joinFor(dataKey, session, null);
    }

    /**
     * {@link #joinFor(byte[], byte[])} for a request that carries a session routing token: a new
     * transaction goes to the data key's owner, else to the node the token routes the request to, else by
     * the session and the thread's pin ({@link Cluster#txBeginFor(byte[], byte[], byte[], String)}).
     *
     * @param dataKey the connection's data (sharding) key, or null
     * @param session the connection's web-session key, or null
     * @param token the request's routing token, or null
     * @return the transaction, or null outside an active transaction
     * @throws AffinityException if the core refuses to place it
     */
    public Joined joinFor(byte[] dataKey, byte[] session, String token) {
        sweep();
        Object key = tsr.getTransactionKey();
        if (key == null) {
            return null;
        }
        int status = tsr.getTransactionStatus();
        if (status != Status.STATUS_ACTIVE && status != Status.STATUS_MARKED_ROLLBACK
                && status != Status.STATUS_PREPARING) {
            return null; // completing: connections of afterCompletion work are not the transaction's
        }
        Object entry = tsr.getResource(resourceKey);
        if (entry instanceof byte[]) {
            return new Joined((byte[]) entry, null);
        }
        Unsynchronized u = unsynchronized.get(key);
        if (u != null) {
            return new Joined(u.gtrid, null);
        }
        byte[] gtrid = gtrid(key);
        // The core places a new gtrid (key, session and the thread's pin among its inputs), as for an XA branch:
        // in strict mode with a settle time a session or pin is this process's own state and never places one, so
        // another process's branch of the same transaction lands on the same node; a pinned node that is down is
        // not required.
        Route r = cluster.txBeginFor(gtrid, dataKey, session, token);
        try {
            tsr.registerInterposedSynchronization(new End(cluster, gtrid));
        } catch (IllegalStateException e) {
            // The TM takes no synchronization (a rollback-only transaction, or one being prepared). Still
            // follow it: without that every connection would place the transaction afresh (a split).
            Transaction t = currentTransaction();
            if (t == null) {
                end(cluster, gtrid); // nothing to watch its end with: route this connection, hold nothing
                return new Joined(gtrid, r);
            }
            // Another thread of this transaction may have got here first: its record's one end must not be
            // the only one for two txBegin references, so this thread's reference ends now (the gtrid stays
            // registered by the first).
            Unsynchronized first = unsynchronized.putIfAbsent(key, new Unsynchronized(gtrid, t));
            if (first != null) {
                end(cluster, gtrid);
                return new Joined(first.gtrid, r);
            }
            scheduleSweep();
            return new Joined(gtrid, r);
        }
        tsr.putResource(resourceKey, gtrid);
        return new Joined(gtrid, r);
    }

    private Transaction currentTransaction() {
        if (tm == null) {
            return null;
        }
        try {
            return tm.getTransaction();
        } catch (Exception e) {
            return null;
        }
    }

    /** Ends the affinity of unsynchronized transactions that are over (on every use, and by the sweeper). */
    private void sweep() {
        if (unsynchronized.isEmpty()) {
            return;
        }
        unsynchronized.forEach((key, u) -> {
            int status;
            try {
                status = u.transaction.getStatus();
            } catch (Exception e) {
                status = Status.STATUS_UNKNOWN;
            }
            if (status == Status.STATUS_COMMITTED || status == Status.STATUS_ROLLEDBACK
                    || status == Status.STATUS_NO_TRANSACTION || status == Status.STATUS_UNKNOWN) {
                if (unsynchronized.remove(key, u)) {
                    end(cluster, u.gtrid);
                }
            }
        });
    }

    /** A JTA transaction as {@link #join()} found it. */
    public static final class Joined {
        private final byte[] gtrid;
        private final Route placed;

        Joined(byte[] gtrid, Route placed) {
            this.gtrid = gtrid;
            this.placed = placed;
        }

        /** @return the transaction's gtrid (not a copy: do not modify it) */
        public byte[] gtrid() {
            return gtrid;
        }

        /** @return the route this {@code join()} placed the transaction on, or null if it was placed before */
        public Route placed() {
            return placed;
        }
    }

    /** The core's key of the transaction's Xid if it can be had, else its registry key as bytes (at most 64). */
    byte[] gtrid(Object key) {
        if (key instanceof Xid) {
            return XaRouter.transactionKey((Xid) key);
        }
        if (tm != null) {
            try {
                Transaction t = tm.getTransaction();
                Xid x = t == null ? null : xidOf(t);
                if (x != null && x.getGlobalTransactionId() != null && x.getGlobalTransactionId().length > 0) {
                    return XaRouter.transactionKey(x);
                }
            } catch (Exception e) {
                LOG.log(Level.DEBUG, () -> "cannot read the transaction's Xid: " + e);
            }
        }
        byte[] b = String.valueOf(key).getBytes(StandardCharsets.UTF_8);
        if (b.length >= 1 && b.length <= 64) {
            return b;
        }
        try {
            return MessageDigest.getInstance("SHA-256").digest(b);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static Xid xidOf(Transaction t) throws ReflectiveOperationException {
        for (String name : new String[] {"getTxId", "getXid"}) {
            try {
                Method m = t.getClass().getMethod(name);
                if (Xid.class.isAssignableFrom(m.getReturnType())) {
                    return (Xid) m.invoke(t);
                }
            } catch (NoSuchMethodException e) {
                // try the next
            }
        }
        return null;
    }

    private static void end(Cluster cluster, byte[] gtrid) {
        try {
            cluster.txEnd(gtrid);
        } catch (AffinityException e) {
            // closed or already gone
        }
    }

    /** Ends the transaction's affinity at completion. */
    private static final class End implements Synchronization {
        private final Cluster cluster;
        private final byte[] gtrid;

        End(Cluster cluster, byte[] gtrid) {
            this.cluster = cluster;
            this.gtrid = gtrid;
        }

        @Override
        public void beforeCompletion() {}

        @Override
        public void afterCompletion(int status) {
            end(cluster, gtrid);
        }
    }

    @Override
    public String toString() {
        return "TransactionAffinity[" + cluster.name() + ", " + tsr.getClass().getName() + "]";
    }
}
