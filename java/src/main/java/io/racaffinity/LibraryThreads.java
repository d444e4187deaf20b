package io.racaffinity;

import java.security.AccessController;
import java.security.PrivilegedAction;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Threads that never hold on to the class loader of whoever made the library start
 * them. A thread inherits its creator's context class loader and, before Java 24,
 * the protection domains of the classes on its creator's stack (which name their
 * class loaders); a pool thread started lazily during a web request would thus keep
 * that web application's class loader for as long as the pool lives, long after the
 * application is redeployed (issue 17). These threads get the given loader as context
 * loader and are created in a privileged block, so only the library's own frames
 * count. Daemon threads: none of them may keep the JVM alive.
 *
 * <p>The node pools get {@link #factory} too (HikariCP: {@code setThreadFactory}), and
 * an application can pass it to pools of its own.
 */
public final class LibraryThreads {
    private static final Set<Thread> STARTED = Collections.synchronizedSet(Collections.newSetFromMap(new WeakHashMap<>()));

    private LibraryThreads() {}

    /**
     * @param prefix thread names are {@code prefix-1}, {@code prefix-2}, ...
     * @param contextLoader the threads' context class loader (null: the system loader's lookup)
     * @return a factory of daemon threads
     */
    public static ThreadFactory factory(String prefix, ClassLoader contextLoader) {
        AtomicInteger n = new AtomicInteger();
        return r -> newThread(r, prefix + "-" + n.incrementAndGet(), contextLoader);
    }

    /**
     * @param task what the thread runs
     * @param name its name
     * @param contextLoader its context class loader
     * @return a new daemon thread, not started
     */
    @SuppressWarnings("removal") // AccessController: still what cuts the inherited context before Java 24
    public static Thread newThread(Runnable task, String name, ClassLoader contextLoader) {
        Thread t = AccessController.doPrivileged((PrivilegedAction<Thread>) () -> new Thread(task, name));
        t.setDaemon(true);
        t.setContextClassLoader(contextLoader);
        STARTED.add(t);
        return t;
    }

    /**
     * Waits, at most {@code millis} in all, for the library's threads to end. When the last
     * cluster is freed the threads of its pools and upkeep are already told to stop but may
     * still be winding down; Tomcat checks for live threads right after a web application's
     * resources are closed and would warn about each ("appears to have started a thread ...
     * but has failed to stop it").
     */
    static void awaitExit(long millis) {
        List<Thread> live;
        synchronized (STARTED) {
            live = new ArrayList<>(STARTED);
        }
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        Long closing = CLOSING_BY.get();
        joinUntil(live, closing != null && closing - deadline < 0 ? closing : deadline);
    }

    /** The deadline of the close under way on this thread ({@link #closingBy}), if any. */
    private static final ThreadLocal<Long> CLOSING_BY = new ThreadLocal<>();

    /**
     * Runs {@code close} (a cluster's, typically) within a close whose owner waits for all its parts under one
     * deadline: the library's own wait for its threads when the last cluster closes ends by then too, rather
     * than adding its own bound after the owner's (a data source whose parts were stuck took that much longer).
     *
     * @param deadlineNanos the owner's deadline, in {@link System#nanoTime()}'s terms
     * @param close what to run
     */
    public static void closingBy(long deadlineNanos, Runnable close) {
        Long outer = CLOSING_BY.get();
        CLOSING_BY.set(deadlineNanos);
        try {
            close.run();
        } finally {
            if (outer == null) {
                CLOSING_BY.remove();
            } else {
                CLOSING_BY.set(outer);
            }
        }
    }

    /**
     * Joins {@code threads} within {@code millis} in all (the calling thread skipped): the
     * bounded wait every close of the library makes for the threads it started. An interrupt
     * ends the wait and is kept.
     *
     * @param threads the threads to wait for
     * @param millis the whole wait's bound
     */
    public static void joinAll(List<Thread> threads, long millis) {
        joinUntil(threads, System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis));
    }

    /**
     * {@link #joinAll} up to a deadline shared with other waits: the close of a data source stops all its parts
     * first, then waits for all their threads by one deadline.
     *
     * @param threads the threads to wait for
     * @param deadlineNanos when the wait ends at the latest, in {@link System#nanoTime()}'s terms
     */
    public static void joinUntil(List<Thread> threads, long deadlineNanos) {
        for (Thread t : threads) {
            long left = TimeUnit.NANOSECONDS.toMillis(deadlineNanos - System.nanoTime());
            if (t == Thread.currentThread() || left <= 0) {
                continue;
            }
            try {
                t.join(left);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }
}
