package io.racaffinity;

import java.lang.ref.Cleaner;
import java.lang.ref.PhantomReference;
import java.lang.ref.Reference;
import java.lang.ref.ReferenceQueue;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The library's cleanup thread. Like a {@link Cleaner} it runs an action once its
 * object is phantom reachable (a cluster never closed, a lease or thread context
 * dropped), but it runs only while a cluster is open: it starts with the first and
 * ends with the last one's close. A {@code Cleaner}'s thread cannot be stopped, so a
 * static one kept the class loader of a web application that had the jar in
 * {@code WEB-INF/lib} after every redeploy (issue 17). Actions still registered when the
 * last cluster is freed belong to freed clusters (a lease, a thread's context), where
 * they have nothing left to release: they are dropped. An epoch page's free is not one of
 * them ({@link #registerLasting}): the page outlives its cluster, so it is kept, and run
 * by the thread of the next cluster opened.
 */
final class Reaper {
    static final String THREAD_NAME = "racaffinity-cleaner";
    // Long enough for threads already told to stop; a thread that is not stopping (a data
    // source still open on a cluster it was given and that was closed first) costs this once.
    private static final long EXIT_WAIT_MILLIS = 1000;

    private final ReferenceQueue<Object> queue = new ReferenceQueue<>();
    // Holds each registration until it runs or is cleaned: a PhantomReference that is
    // itself unreachable is never enqueued.
    private final Set<Ref> live = ConcurrentHashMap.newKeySet();
    private int openClusters; // guarded by this
    private Thread thread; // guarded by this

    /** Runs {@code action} once, when {@code referent} is phantom reachable or the result is cleaned. */
    Cleaner.Cleanable register(Object referent, Runnable action) {
        return register(referent, action, false);
    }

    /**
     * {@link #register} for an action that still frees something once every cluster is freed
     * (an epoch page, which outlives its cluster): not dropped with the last cluster.
     */
    Cleaner.Cleanable registerLasting(Object referent, Runnable action) {
        return register(referent, action, true);
    }

    private Cleaner.Cleanable register(Object referent, Runnable action, boolean lasting) {
        Ref ref = new Ref(referent, queue, action, lasting);
        live.add(ref);
        return ref;
    }

    /** {@link #register} for a cluster, whose {@code free} ends the thread when it was the last one. */
    Cleaner.Cleanable registerCluster(Object cluster, Runnable free) {
        clusterOpened();
        return register(cluster, () -> {
            try {
                free.run();
            } finally {
                clusterFreed();
            }
        });
    }

    private synchronized void clusterOpened() {
        if (openClusters++ == 0) {
            thread = LibraryThreads.newThread(this::run, THREAD_NAME, Reaper.class.getClassLoader());
            thread.start();
        }
    }

    private void clusterFreed() {
        synchronized (this) {
            if (--openClusters != 0) {
                return;
            }
            // Kept: a lasting action's referent may become unreachable only now; the next
            // cluster's thread finds it in the queue.
            live.removeIf(r -> !r.lasting);
            thread.interrupt();
            thread = null;
        }
        // Outside the lock: the thread may be running an action that frees a cluster.
        LibraryThreads.awaitExit(EXIT_WAIT_MILLIS);
    }

    private synchronized Thread current() {
        return thread;
    }

    private void run() {
        Thread self = Thread.currentThread();
        while (current() == self) {
            try {
                Reference<?> ref = queue.remove();
                ((Ref) ref).clean();
            } catch (InterruptedException e) {
                // stopped (the loop's test says), or an action's stray interrupt
            } catch (RuntimeException | LinkageError e) {
                // an action's failure must not stop the others (as in a Cleaner)
            }
        }
    }

    private final class Ref extends PhantomReference<Object> implements Cleaner.Cleanable {
        private final Runnable action;
        private final boolean lasting;

        Ref(Object referent, ReferenceQueue<Object> queue, Runnable action, boolean lasting) {
            super(referent, queue);
            this.action = action;
            this.lasting = lasting;
        }

        @Override
        public void clean() {
            if (live.remove(this)) {
                clear();
                action.run();
            }
        }
    }
}
