package io.racaffinity.jdbc;

import io.racaffinity.LibraryThreads;
import java.lang.System.Logger.Level;
import java.text.MessageFormat;
import java.util.List;
import java.util.ResourceBundle;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
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

    private static final Entry STOP = new Entry(null, Level.OFF, null, null, null);
    /**
     * Whether {@link System.Logger}s go to java.util.logging (the JDK's own finder, no other installed). JUL infers a
     * record's source class and method from the stack of the thread that publishes it, which here is the writer's
     * loop: where JUL is the back end, the writer publishes through it with the caller's frame, taken at the call.
     */
    private static final boolean TO_JUL = toJul();

    private final System.Logger target;
    private final String owner;
    private final BlockingQueue<Entry> queue = new ArrayBlockingQueue<>(CAPACITY);
    /** Dropped since the writer last reported it. */
    private final AtomicLong dropped = new AtomicLong();
    private final AtomicLong droppedTotal = new AtomicLong();
    private final Thread writer;
    private volatile boolean closed;
    /**
     * Set when the writer is interrupted at close: it writes no further record. A handler that blocks on every
     * record (a full pipe) would otherwise hold it once per record still queued, one interrupt each.
     */
    private volatile boolean abandoned;

    private static final class Entry {
        final System.Logger target;
        final Level level;
        final String message;
        final Throwable thrown;
        /** The code that logged the record; null where its logger is not the JDK's own over JUL. */
        final StackWalker.StackFrame caller;

        Entry(System.Logger target, Level level, String message, Throwable thrown, StackWalker.StackFrame caller) {
            this.target = target;
            this.level = level;
            this.message = message;
            this.thrown = thrown;
            this.caller = caller;
        }
    }

    private static boolean toJul() {
        try {
            return System.LoggerFinder.getLoggerFinder().getClass().getName()
                    .equals("sun.util.logging.internal.LoggingProviderImpl");
        } catch (RuntimeException | LinkageError e) {
            return false;
        }
    }

    /**
     * Whether {@code logger} is the JDK's own, over JUL: the records of any other (an application's back end, a
     * test's capture) are its own to publish, and JUL would never hand them to it.
     */
    private static boolean overJul(System.Logger logger) {
        if (!TO_JUL) {
            return false;
        }
        String module = logger.getClass().getModule().getName();
        return module != null && (module.equals("java.logging") || module.equals("java.base"));
    }

    /** The first frame outside this class and System.Logger's default methods: who logged. */
    private static StackWalker.StackFrame caller() {
        String self = AsyncLog.class.getName();
        return StackWalker.getInstance().walk(frames -> frames.filter(f -> {
            String c = f.getClassName();
            return !c.equals(self) && !c.startsWith(self + "$") && !c.equals("java.lang.System$Logger");
        }).findFirst().orElse(null));
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

    private final class View implements System.Logger {
        private final System.Logger to;
        private final boolean jul;

        View(System.Logger to) {
            this.to = to;
            this.jul = overJul(to);
        }

        private void enqueue(Level level, String msg, Throwable thrown) {
            if (to.isLoggable(level)) {
                offer(new Entry(to, level, msg, thrown, jul ? caller() : null));
            }
        }

        private void enqueueFormat(Level level, String format, Object... params) {
            if (to.isLoggable(level)) {
                offer(new Entry(to, level, params == null || params.length == 0 ? format
                        : MessageFormat.format(format, params), null, jul ? caller() : null));
            }
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
            enqueue(level, msg, thrown);
        }

        @Override
        public void log(Level level, ResourceBundle bundle, String format, Object... params) {
            enqueueFormat(level, format, params);
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
            if (abandoned) {
                return;
            }
            long n = dropped.getAndSet(0);
            if (n > 0) {
                try {
                    target.log(Level.WARNING, owner + ": " + n
                            + " log record(s) dropped: the log handler did not keep up");
                } catch (RuntimeException failed) {
                    // As below: a handler that fails here must not end the writer.
                }
            }
            if (e == STOP) {
                return;
            }
            try {
                if (e.caller != null) {
                    Jul.log(e);
                } else if (e.thrown != null) {
                    e.target.log(e.level, e.message, e.thrown);
                } else {
                    e.target.log(e.level, e.message);
                }
            } catch (RuntimeException failed) {
                // A broken handler loses its own record, not the later ones.
            }
        }
    }

    /** Publishes through java.util.logging with the caller's frame, as the JDK's System.Logger would on its thread. */
    private static final class Jul {
        static void log(Entry e) {
            java.util.logging.Logger.getLogger(e.target.getName()).logp(level(e.level), e.caller.getClassName(),
                    e.caller.getMethodName(), e.message, e.thrown);
        }

        /** The JDK's own mapping (LoggingProviderImpl). */
        static java.util.logging.Level level(Level level) {
            return switch (level) {
                case ALL -> java.util.logging.Level.ALL;
                case TRACE -> java.util.logging.Level.FINER;
                case DEBUG -> java.util.logging.Level.FINE;
                case INFO -> java.util.logging.Level.INFO;
                case WARNING -> java.util.logging.Level.WARNING;
                case ERROR -> java.util.logging.Level.SEVERE;
                case OFF -> java.util.logging.Level.OFF;
            };
        }
    }

    /**
     * Stops the writer once it wrote the records logged before; later ones are dropped. A writer stuck in a handler
     * past {@link #CLOSE_WAIT_MILLIS} is interrupted (it writes no further record), and waited for as long again:
     * a handler unwinds after the interrupt (closes its socket), and an application server checking an undeployed
     * application's threads right after close would find the writer otherwise. One that ignores the interrupt past
     * that ends with the handler's call (a daemon thread).
     */
    @Override
    public void close() {
        stop();
        long now = System.nanoTime();
        long wait = TimeUnit.MILLISECONDS.toNanos(CLOSE_WAIT_MILLIS);
        awaitStop(now + wait, now + 2 * wait);
    }

    /** {@link #close()}'s first step: later records are dropped, the writer stops after those logged before. */
    void stop() {
        closed = true;
        if (!queue.offer(STOP)) {
            writer.interrupt();
        }
    }

    /**
     * Waits for the writer {@link #stop()} stopped: it is interrupted if still in a handler at {@code interruptAt},
     * and waited for until {@code deadline} ({@link System#nanoTime()}'s terms both).
     */
    void awaitStop(long interruptAt, long deadline) {
        List<Thread> writers = List.of(writer);
        LibraryThreads.joinUntil(writers, interruptAt);
        if (writer.isAlive()) {
            abandoned = true;
            writer.interrupt();
            LibraryThreads.joinUntil(writers, deadline);
        }
    }
}
