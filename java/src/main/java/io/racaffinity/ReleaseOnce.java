package io.racaffinity;

import java.util.concurrent.atomic.AtomicIntegerFieldUpdater;

/**
 * The exactly-once flag of a {@link Lease} (its cleaner action) and of a {@link Pin}:
 * a field updated through one field updater rather than an {@code AtomicBoolean},
 * so that the flag costs no allocation of its own.
 */
abstract class ReleaseOnce {
    private static final AtomicIntegerFieldUpdater<ReleaseOnce> DONE =
            AtomicIntegerFieldUpdater.newUpdater(ReleaseOnce.class, "done");

    private volatile int done;

    /** @return true for the one call that sets the flag */
    final boolean markDone() {
        return DONE.compareAndSet(this, 0, 1);
    }

    final boolean isDone() {
        return done != 0;
    }
}
