package io.racaffinity;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * The exactly-once flag of a {@link Lease} (its cleaner action) and of a {@link Pin}:
 * a field updated through one {@link VarHandle} rather than an {@code AtomicBoolean},
 * so that the flag costs no allocation of its own.
 */
abstract class ReleaseOnce {
    private static final VarHandle DONE;

    static {
        try {
            DONE = MethodHandles.lookup().findVarHandle(ReleaseOnce.class, "done", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    @SuppressWarnings("unused") // through DONE
    private volatile int done;

    /** @return true for the one call that sets the flag */
    final boolean markDone() {
        return DONE.compareAndSet(this, 0, 1);
    }

    final boolean isDone() {
        return done != 0;
    }
}
