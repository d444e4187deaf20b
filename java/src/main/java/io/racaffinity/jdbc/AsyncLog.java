package io.racaffinity.jdbc;

import io.racaffinity.LibraryThreads;
import java.lang.System.Logger.Level;
import java.text.MessageFormat;
import java.util.ResourceBundle;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A log whose records are written by a daemon thread of its own, so that the caller never waits
 * on a log handler: one may block (a full pipe, a stalled syslog, a forked test JVM whose parent reads its output
 * slowly), and the pool upkeep and the heartbeat must act on the next node failure meanwhile. One per data source:
 * {@link #logger} gives each of them a {@link System.Logger} over the same thread, so the lines keep the order they
 * were logged in. The message is built on the caller's thread (it names the state of that moment). When the queue is
 * full a record is dropped and counted, and the count is logged before the next record written.
 */
final class AsyncLog implements AutoCloseable {
    static final int CAPACITY = 256;
    /** How long {@link #close()} lets the writer finish the records logged before it. */
    static final long CLOSE_WAIT_MILLIS = 1_000;

    private static final Entry STOP = new Entry(null, Level.OFF, null, null);

    private final System.Logger target;
    private final String owner;
    private final BlockingQueue<Entry> queue = new ArrayBlockingQueue<>(CAPACITY);
    /** Dropped since the writer last reported it. */
    private final AtomicLong dropped = new AtomicLong();
    private final AtomicLong droppedTotal = new AtomicLong();
    private final Thread writer;
    private volatile boolean closed;

    private static final class Entry {
        final System.Logger target;
        final Level level;
        final String message;
        final Throwable thrown;

        Entry(System.Logger target, Level level, String message, Throwable thrown) {
            this.target = target;
            this.level = level;
            this.message = message;
            this.thrown = thrown;
        }
    }

    /**
     * @param target where the line that reports dropped records goes
     * @param owner the log prefix of that line
     * @param threadName the writer thread's name
     */
    AsyncLog(System.Logger target, String owner, String threadName) {
        this.target = target;
        this.owner = owner;
        this.writer = LibraryThreads.newThread(this::write, threadName, AsyncLog.class.getClassLoader());
        writer.start();
    }

    /** Records dropped because the queue was full, since start. */
    long dropped() {
        return droppedTotal.get();
    }

    /** A logger whose records go to {@code other} through this one's queue and thread. */
    System.Logger logger(System.Logger other) {
        return new View(other);
    }

    private void enqueue(System.Logger to, Level level, String msg, Throwable thrown) {
        if (to.isLoggable(level)) {
            offer(new Entry(to, level, msg, thrown));
        }
    }

    private void enqueueFormat(System.Logger to, Level level, String format, Object... params) {
        if (to.isLoggable(level)) {
            offer(new Entry(to, level, params == null || params.length == 0 ? format
                    : MessageFormat.format(format, params), null));
        }
    }

    private final class View implements System.Logger {
        private final System.Logger to;

        View(System.Logger to) {
            this.to = to;
        }

        @Override
        public String getName() {
            return to.getName();
        }

        @Override
        public boolean isLoggable(Level level) {
            return to.isLoggable(level);
        }

        @Override
        public void log(Level level, ResourceBundle bundle, String msg, Throwable thrown) {
            enqueue(to, level, msg, thrown);
        }

        @Override
        public void log(Level level, ResourceBundle bundle, String format, Object... params) {
            enqueueFormat(to, level, format, params);
        }
    }

    private void offer(Entry e) {
        if (closed) {
            return;
        }
        if (!queue.offer(e)) {
            dropped.incrementAndGet();
            droppedTotal.incrementAndGet();
        }
    }

    private void write() {
        while (true) {
            Entry e;
            try {
                e = queue.take();
            } catch (InterruptedException ie) {
                return;
            }
            long n = dropped.getAndSet(0);
            if (n > 0) {
                target.log(Level.WARNING, owner + ": " + n + " log record(s) dropped: the log handler did not keep up");
            }
            if (e == STOP) {
                return;
            }
            try {
                if (e.thrown != null) {
                    e.target.log(e.level, e.message, e.thrown);
                } else {
                    e.target.log(e.level, e.message);
                }
            } catch (RuntimeException failed) {
                // A broken handler loses its own record, not the later ones.
            }
        }
    }

    /**
     * Stops the writer once it wrote the records logged before; later ones are dropped. A writer stuck in a handler
     * past {@link #CLOSE_WAIT_MILLIS} is interrupted (a daemon thread: it ends with the handler's call at the latest).
     */
    @Override
    public void close() {
        closed = true;
        if (!queue.offer(STOP)) {
            writer.interrupt();
        }
        try {
            writer.join(CLOSE_WAIT_MILLIS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (writer.isAlive()) {
            writer.interrupt();
        }
    }
}
