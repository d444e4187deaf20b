package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * A panic inside a JNI call becomes {@link NativePanicException}; the JVM keeps
 * running. Needs the {@code testing} build of the library (it exports
 * {@code testPanic}); the {@code native-panic} Maven profile runs this class in
 * its own JVM with {@code -Dracaffinity.library} pointing at it.
 */
@Tag("native-panic")
class NativePanicTest {
    @Test
    void aPanicBecomesAJavaExceptionNotACrash() {
        boolean testingLibrary;
        try {
            Native.testPanic("probe");
            testingLibrary = true;
        } catch (UnsatisfiedLinkError e) {
            testingLibrary = false;
        } catch (NativePanicException e) {
            testingLibrary = true;
        }
        if (Boolean.getBoolean("racaffinity.requireTestingLibrary")) {
            assertTrue(testingLibrary, "the testing library (with testPanic) must be loaded: "
                    + NativeLoader.source());
        }
        assumeTrue(testingLibrary, "not the testing build of libracaffinity");
        for (int i = 0; i < 3; i++) {
            NativePanicException e = assertThrows(NativePanicException.class, () -> Native.testPanic("boom 42"));
            assertTrue(e.getMessage().contains("boom 42"), e.getMessage());
            assertTrue(e.getMessage().contains("panic caught at the library boundary"), e.getMessage());
            assertTrue(e instanceof AffinityException);
        }
        // The same through a primitive-only export (success path without with_env).
        NativePanicException fast = assertThrows(NativePanicException.class, () -> Native.testPanicFast(7));
        assertTrue(fast.getMessage().contains("fast path panic 7"), fast.getMessage());
        // The library and the JVM are fine afterwards.
        try (Cluster c = Cluster.fromConfig("nodes = A, B")) {
            assertEquals(2, c.nodeNames().size());
            c.pick().release(Outcome.OK);
        }
    }
}
