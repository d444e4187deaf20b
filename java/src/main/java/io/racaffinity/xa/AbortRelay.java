package io.racaffinity.xa;

import io.racaffinity.LibraryThreads;
import java.util.List;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;

/**
 * The aborts of a failed node's sessions with no handle open ({@link XaRouter#nodeFailed}): one after another on
 * one thread while each returns at once, since a TM's pool holds many idle XAConnections with a session on every
 * node, and a thread for each at every Down would be as many threads. An abort that has not returned within
 * {@link #GRACE_MILLIS} (a socket stuck in a write; a driver that gives the session's handle only once a call
 * running on it ends) is left to its thread, never interrupted, and the aborts still waiting go on on a new one:
 * a stuck abort holds one thread, not the node's other sessions.
 */
final class AbortRelay {
    /** How long an abort may take before the next ones move to a thread of their own. */
    static final long GRACE_MILLIS = 100;

    private final Queue<Runnable> waiting;
    private final String name;
    private final ClassLoader loader;

    private AbortRelay(List<Runnable> aborts, String name, ClassLoader loader) {
        this.waiting = new ConcurrentLinkedQueue<>(aborts);
        this.name = name;
        this.loader = loader;
    }

    /**
     * Starts the aborts on threads named {@code name}: one that runs them and one that watches it, until each
     * has begun.
     */
    static void start(List<Runnable> aborts, String name, ClassLoader loader) {
        AbortRelay relay = new AbortRelay(aborts, name, loader);
        LibraryThreads.newThread(relay::watch, name, loader).start();
    }

    /** Runs aborts until none is waiting. */
    private final class Runner implements Runnable {
        /** When the abort under way began ({@link System#nanoTime()}), or null between two. */
        volatile Long busySince;
        Thread thread;

        @Override
        public void run() {
            for (Runnable abort; (abort = waiting.poll()) != null;) {
                busySince = System.nanoTime();
                try {
                    abort.run();
                } catch (RuntimeException e) {
                    // the session's end is the driver's: the others are aborted all the same
                } finally {
                    busySince = null;
                }
            }
        }
    }

    private Runner runner() {
        Runner r = new Runner();
        r.thread = LibraryThreads.newThread(r, name, loader);
        r.thread.start();
        return r;
    }

    private void watch() {
        long grace = TimeUnit.MILLISECONDS.toNanos(GRACE_MILLIS);
        Runner current = runner();
        while (!waiting.isEmpty()) {
            try {
                Thread.sleep(Math.max(1, GRACE_MILLIS / 4));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return; // the runner goes on with what is left
            }
            Long since = current.busySince;
            // A runner that died (an Error out of a driver) leaves the rest to a new one as a stuck one does.
            boolean held = since != null && System.nanoTime() - since >= grace || !current.thread.isAlive();
            if (held && !waiting.isEmpty()) {
                current = runner();
            }
        }
    }
}
