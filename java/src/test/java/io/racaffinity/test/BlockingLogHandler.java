package io.racaffinity.test;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

/**
 * A log handler that blocks, as a full pipe or a stalled syslog does: the thread that publishes the first record
 * holding a given text waits in the handler until {@link #close()} (at most 60 s). Installed on the library's
 * logger ({@code io.racaffinity}) at construction.
 */
public final class BlockingLogHandler extends Handler implements AutoCloseable {
    private final Logger jul = Logger.getLogger("io.racaffinity");
    private final String text;
    /** Counted down when a thread is held in the handler. */
    public final CountDownLatch logging = new CountDownLatch(1);
    private final CountDownLatch release = new CountDownLatch(1);

    public BlockingLogHandler(String text) {
        this.text = text;
        jul.addHandler(this);
    }

    @Override
    public void publish(LogRecord r) {
        if (r.getMessage() != null && r.getMessage().contains(text) && logging.getCount() > 0) {
            logging.countDown();
            try {
                release.await(60, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    @Override
    public void flush() {}

    /** Lets the held thread go and removes the handler. */
    @Override
    public void close() {
        release.countDown();
        jul.removeHandler(this);
    }
}
