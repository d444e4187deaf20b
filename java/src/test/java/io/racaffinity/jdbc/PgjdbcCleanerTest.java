package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import org.junit.jupiter.api.Test;
import org.postgresql.util.LazyCleaner;

/**
 * The registration that keeps pgjdbc's cleaner thread started cleanly (the leak itself is
 * TomcatRedeployTest's): one watched object while held, none after close, nothing without
 * pgjdbc. The thread's inherited context is a JDK internal this test cannot read.
 */
class PgjdbcCleanerTest {
    @Test
    void holdsOneRegistrationUntilClosed() {
        assumeTrue(Runtime.version().feature() < 24, "nothing to do from Java 24 on");
        int before = LazyCleaner.getInstance().getWatchedCount();
        PgjdbcCleaner held = PgjdbcCleaner.hold(null, PgjdbcCleanerTest.class.getClassLoader());
        assertNotNull(held, "pgjdbc is on the test class path");
        assertEquals(before + 1, LazyCleaner.getInstance().getWatchedCount());
        assertTrue(LazyCleaner.getInstance().isThreadRunning(), "the cleaner thread runs while it is held");
        held.close();
        assertEquals(before, LazyCleaner.getInstance().getWatchedCount());
        held.close(); // idempotent
        assertEquals(before, LazyCleaner.getInstance().getWatchedCount());
    }

    @Test
    void withoutPgjdbcThereIsNothingToHold() {
        ClassLoader bootOnly = new ClassLoader(null) {};
        assertNull(PgjdbcCleaner.hold(bootOnly));
    }
}
