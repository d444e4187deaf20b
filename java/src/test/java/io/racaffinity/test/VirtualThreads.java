package io.racaffinity.test;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.lang.reflect.Method;

/**
 * Virtual threads for tests compiled for Java 17: made through reflection, and
 * available only on JDK 21+. With {@code -Dracaffinity.requireVirtualThreads=true}
 * (the {@code virtual-threads} profile) an older JDK fails instead of skipping.
 */
public final class VirtualThreads {
    private VirtualThreads() {}

    /** Skips the calling test below JDK 21, or fails it when virtual threads are required. */
    public static void assumeAvailable() {
        int feature = Runtime.version().feature();
        if (Boolean.getBoolean("racaffinity.requireVirtualThreads")) {
            assertTrue(feature >= 21, "virtual-thread tests must run on JDK 21+, this is " + Runtime.version());
        }
        assumeTrue(feature >= 21, "virtual threads need JDK 21+");
    }

    /** Starts {@code r} on a new virtual thread. */
    public static Thread start(Runnable r) {
        try {
            Object builder = Thread.class.getMethod("ofVirtual").invoke(null);
            Method start = Class.forName("java.lang.Thread$Builder").getMethod("start", Runnable.class);
            return (Thread) start.invoke(builder, r);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }
}
