package io.racaffinity.testsupport;

import java.time.Duration;
import java.util.function.BooleanSupplier;

/** Polling for a condition instead of a fixed sleep. */
public final class Await {
    private Await() {
    }

    /** Polls {@code condition} every {@code poll} until it holds or {@code timeout} passes. */
    public static boolean until(Duration timeout, Duration poll, BooleanSupplier condition)
            throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (System.nanoTime() < deadline) {
            if (condition.getAsBoolean()) {
                return true;
            }
            Thread.sleep(poll.toMillis());
        }
        return condition.getAsBoolean();
    }
}
