package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.test.BlockingLogHandler;
import io.racaffinity.test.LogCapture;
import io.racaffinity.test.Pools;
import io.racaffinity.test.SlowToUnwind;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/** The upkeep's log: the caller never waits on a handler, and what a full queue drops is counted and reported. */
class AsyncLogTest {
    private static final System.Logger LOG = System.getLogger("io.racaffinity.jdbc.AsyncLogTest");

    @Test
    void aBlockedHandlerNeitherBlocksTheCallerNorLosesTheOrderAndTheDroppedRecordsAreCounted() throws Exception {
        try (LogCapture log = new LogCapture(); BlockingLogHandler stuck = new BlockingLogHandler("async-log: first")) {
            AsyncLog async = new AsyncLog(LOG, "async-log", "racaffinity-log-test");
            try {
                async.logger(LOG).log(System.Logger.Level.INFO, "async-log: first");
                assertTrue(stuck.logging.await(10, TimeUnit.SECONDS), "the writer publishes the first record");
                int extra = 7;
                // Returns although the writer is stuck: the queue takes CAPACITY, the rest is dropped.
                for (int i = 0; i < AsyncLog.CAPACITY + extra; i++) {
                    async.logger(LOG).log(System.Logger.Level.INFO, "async-log: line " + i);
                }
                assertEquals(extra, async.dropped());
                stuck.close();
                assertTrue(Pools.await(Duration.ofSeconds(10), () -> lines(log).size() == AsyncLog.CAPACITY + 2),
                        "the first, the drop count and the queued lines: " + lines(log).size());
                List<String> lines = lines(log);
                assertEquals("async-log: first", lines.get(0));
                assertEquals("async-log: " + extra + " log record(s) dropped: the log handler did not keep up",
                        lines.get(1));
                for (int i = 0; i < AsyncLog.CAPACITY; i++) {
                    assertEquals("async-log: line " + i, lines.get(i + 2));
                }
            } finally {
                stuck.close();
                async.close();
            }
            assertTrue(Pools.await(Duration.ofSeconds(5), () -> !threadNamed("racaffinity-log-test")),
                    "the writer ends at close");
        }
    }

    @Test
    void closeWritesWhatWasLoggedBeforeAndDropsWhatComesAfter() {
        try (LogCapture log = new LogCapture()) {
            AsyncLog async = new AsyncLog(LOG, "async-close", "racaffinity-log-close");
            async.logger(LOG).log(System.Logger.Level.WARNING, "async-close: before");
            async.close();
            async.logger(LOG).log(System.Logger.Level.WARNING, "async-close: after");
            assertEquals(List.of("async-close: before"), log.at(Level.WARNING).stream()
                    .filter(m -> m.startsWith("async-close")).collect(Collectors.toList()));
            assertFalse(threadNamed("racaffinity-log-close"), "the writer ended");
        }
    }

    /**
     * A handler still blocked past CLOSE_WAIT_MILLIS is interrupted, and takes a moment to unwind (a socket handler
     * closing its socket): once close() returns the writer is gone, as the heartbeat's threads are
     * (CloseLeavesNoThreadsTest), for an application server checking an undeployed application's threads.
     */
    @Test
    void aWriterInterruptedAtCloseHasEndedWhenCloseReturns() throws Exception {
        CountDownLatch publishing = new CountDownLatch(1);
        System.Logger blocking = new Capturing() {
            @Override
            public void log(System.Logger.Level level, java.util.ResourceBundle bundle, String msg, Throwable t) {
                stuck();
            }

            @Override
            public void log(System.Logger.Level level, java.util.ResourceBundle bundle, String format,
                    Object... params) {
                stuck();
            }

            private void stuck() {
                publishing.countDown();
                SlowToUnwind.untilInterrupted(300);
            }
        };
        AsyncLog async = new AsyncLog(blocking, "async-interrupted", "racaffinity-log-interrupted");
        try {
            async.logger(blocking).log(System.Logger.Level.INFO, "async-interrupted: stuck");
            assertTrue(publishing.await(10, TimeUnit.SECONDS), "the writer publishes the record");
        } finally {
            async.close();
        }
        assertFalse(threadNamed("racaffinity-log-interrupted"), "the writer is left running after close()");
    }

    /**
     * A record names the code that logged it, not the writer thread's loop: JUL infers a record's source from the
     * stack of the thread that publishes it, and the upkeep's and the heartbeat's lines all read
     * "io.racaffinity.jdbc.AsyncLog write" (the soak's Java client log, 92 lines), where they had named their caller.
     */
    @Test
    void aRecordNamesTheCodeThatLoggedItNotTheWriterThread() throws Exception {
        try (LogCapture log = new LogCapture()) {
            AsyncLog async = new AsyncLog(LOG, "async-source", "racaffinity-log-source");
            try {
                logTwice(async.logger(LOG));
                assertTrue(Pools.await(Duration.ofSeconds(10), () -> log.records().stream()
                        .filter(r -> r.getMessage().startsWith("async-source:")).count() == 2), log.all());
                for (var r : log.records()) {
                    if (r.getMessage().startsWith("async-source:")) {
                        assertEquals(AsyncLogTest.class.getName(), r.getSourceClassName(), r.getMessage());
                        assertEquals("logTwice", r.getSourceMethodName(), r.getMessage());
                    }
                }
                var failed = log.records().stream().filter(r -> r.getMessage().equals("async-source: failed"))
                        .findFirst().orElseThrow();
                assertEquals("boom", failed.getThrown().getMessage(), "the throwable goes with it");
                assertEquals(Level.SEVERE, failed.getLevel());
            } finally {
                async.close();
            }
        }
    }

    /**
     * A {@link System.Logger} that is not the JDK's own (an application's back end, a test's capture) gets its
     * records itself, with their level, message, parameters and throwable: the JUL path above is for the JDK's
     * loggers only, and a record sent there instead would reach JUL's handlers and never its logger.
     */
    @Test
    void aLoggerThatIsNotTheJdksOwnGetsItsRecordsItself() throws Exception {
        Capturing capture = new Capturing();
        try (LogCapture jul = new LogCapture()) {
            AsyncLog async = new AsyncLog(capture, "async-own", "racaffinity-log-own");
            try {
                System.Logger logger = async.logger(capture);
                logger.log(System.Logger.Level.INFO, "async-own: {0} here", "logged");
                logger.log(System.Logger.Level.ERROR, "async-own: failed", new IllegalStateException("boom"));
                logger.log(System.Logger.Level.DEBUG, "async-own: below the logger's level");
                assertTrue(Pools.await(Duration.ofSeconds(10), () -> capture.records.size() == 2),
                        "the logger's own records: " + capture.records + "; JUL got " + jul.all());
                assertEquals(List.of("INFO async-own: logged here null", "ERROR async-own: failed boom"),
                        List.copyOf(capture.records));
                assertFalse(jul.records().stream().anyMatch(r -> r.getMessage().startsWith("async-own")),
                        "none went to JUL: " + jul.all());
            } finally {
                async.close();
            }
        }
    }

    /**
     * A handler that stalls (the queue fills, records are dropped), then fails once (a broken pipe it
     * then reopens): the record it failed is lost, the writer goes on. Its first call after the stall
     * is the drop count's line.
     */
    @Test
    void aHandlerThatFailsOnTheDropCountLosesThatLineOnly() throws Exception {
        StallsThenFailsOnce target = new StallsThenFailsOnce();
        AsyncLog async = new AsyncLog(target, "async-fail", "racaffinity-log-fail");
        try {
            System.Logger logger = async.logger(target);
            logger.log(System.Logger.Level.INFO, "async-fail: first");
            assertTrue(target.stalled.await(10, TimeUnit.SECONDS), "the writer publishes the first record");
            for (int i = 0; i < AsyncLog.CAPACITY + 3; i++) {
                logger.log(System.Logger.Level.INFO, "async-fail: line " + i);
            }
            assertEquals(3, async.dropped());
            target.release.countDown();
            assertTrue(Pools.await(Duration.ofSeconds(10), () -> target.records.size() == 1 + AsyncLog.CAPACITY),
                    "the first and the queued lines: " + target.records.size() + " written, the failed one "
                            + target.failed);
            assertEquals("async-fail: line " + (AsyncLog.CAPACITY - 1),
                    List.copyOf(target.records).get(AsyncLog.CAPACITY));
        } finally {
            target.release.countDown();
            async.close();
        }
    }

    private static final class StallsThenFailsOnce implements System.Logger {
        final java.util.Queue<String> records = new java.util.concurrent.ConcurrentLinkedQueue<>();
        final java.util.concurrent.CountDownLatch stalled = new java.util.concurrent.CountDownLatch(1);
        final java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
        volatile String failed;
        private int calls;

        @Override
        public String getName() {
            return "io.racaffinity.jdbc.AsyncLogTest.StallsThenFailsOnce";
        }

        @Override
        public boolean isLoggable(System.Logger.Level level) {
            return true;
        }

        @Override
        public void log(System.Logger.Level level, java.util.ResourceBundle bundle, String msg, Throwable thrown) {
            handle(msg);
        }

        @Override
        public void log(System.Logger.Level level, java.util.ResourceBundle bundle, String format,
                Object... params) {
            handle(format);
        }

        private void handle(String msg) {
            int call = ++calls; // the writer's thread only
            if (call == 1) {
                stalled.countDown();
                try {
                    release.await(30, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            } else if (call == 2) {
                failed = msg;
                throw new IllegalStateException("the handler's stream broke");
            }
            records.add(msg);
        }
    }

    /** Keeps "LEVEL message throwable-message" of what it is given, at INFO and above. */
    private static class Capturing implements System.Logger {
        final java.util.Queue<String> records = new java.util.concurrent.ConcurrentLinkedQueue<>();

        @Override
        public String getName() {
            return "io.racaffinity.jdbc.AsyncLogTest.Capturing";
        }

        @Override
        public boolean isLoggable(System.Logger.Level level) {
            return level.getSeverity() >= System.Logger.Level.INFO.getSeverity();
        }

        @Override
        public void log(System.Logger.Level level, java.util.ResourceBundle bundle, String msg, Throwable thrown) {
            records.add(level + " " + msg + " " + (thrown == null ? null : thrown.getMessage()));
        }

        @Override
        public void log(System.Logger.Level level, java.util.ResourceBundle bundle, String format,
                Object... params) {
            records.add(level + " " + (params == null || params.length == 0 ? format
                    : java.text.MessageFormat.format(format, params)) + " null");
        }
    }

    private static void logTwice(System.Logger logger) {
        logger.log(System.Logger.Level.INFO, "async-source: {0} here", "logged");
        logger.log(System.Logger.Level.ERROR, "async-source: failed", new IllegalStateException("boom"));
    }

    private static List<String> lines(LogCapture log) {
        return log.records().stream().map(r -> r.getMessage()).filter(m -> m.startsWith("async-log"))
                .collect(Collectors.toList());
    }

    private static boolean threadNamed(String name) {
        return Thread.getAllStackTraces().keySet().stream().anyMatch(t -> t.getName().equals(name) && t.isAlive());
    }
}
