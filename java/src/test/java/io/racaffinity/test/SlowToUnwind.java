package io.racaffinity.test;

import java.util.concurrent.TimeUnit;

/**
 * A call that waits (a socket read, a pool's borrow, a TM's status call) until it is interrupted, then takes a
 * moment more to return, as a driver closing its socket does: what a library thread is found in when close()
 * comes. The interrupt is consumed, as such code often does, so nothing after it ends the thread sooner.
 */
public final class SlowToUnwind {
    private SlowToUnwind() {}

    /** Waits up to 60 s; interrupted, returns {@code unwindMillis} later, busy meanwhile. */
    public static void untilInterrupted(long unwindMillis) {
        try {
            Thread.sleep(60_000);
        } catch (InterruptedException e) {
            long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(unwindMillis);
            while (System.nanoTime() < end) {
                Thread.onSpinWait();
            }
        }
    }
}
