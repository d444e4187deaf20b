package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** An {@link AffinityContext}'s pin is released by its close and, whatever came before, once it is unreachable. */
class AffinityContextReleaseTest {
    private static long key(AffinityContext ctx) {
        String s = ctx.toString(); // AffinityContext[SCOPE, key=N]
        return Long.parseLong(s.substring(s.indexOf("key=") + 4, s.length() - 1));
    }

    /** Pins a context, closes it, pins it again and drops it; returns its key. */
    private static long pinCloseRepinAndDrop(Cluster c) {
        AffinityContext ctx = c.newAffinityContext(Scope.SESSION);
        ctx.pin();
        ctx.close();
        assertTrue(ctx.pinnedNode().isEmpty(), "close released the pin");
        // Pinned again after the close (a callback context reused, a pool's context kept past a close):
        ctx.pin();
        assertTrue(ctx.pinnedNode().isPresent());
        return key(ctx);
    }

    @Test
    void aContextPinnedAgainAfterItsCloseIsReleasedOnceUnreachable() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = ctx-release; nodes = A, B")) {
            long key = pinCloseRepinAndDrop(c);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (Native.contextPinnedNode(c.handle(), key) >= 0 && System.nanoTime() < deadline) {
                System.gc();
                Thread.sleep(50);
            }
            assertEquals(-1, Native.contextPinnedNode(c.handle(), key),
                    "the pin of a context dropped after it was pinned again past its close is never released");
        }
    }

    @Test
    void aDroppedContextIsReleased() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = ctx-release-2; nodes = A, B")) {
            AffinityContext ctx = c.newAffinityContext(Scope.TRANSACTION);
            ctx.pin();
            long key = key(ctx);
            ctx = null;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (Native.contextPinnedNode(c.handle(), key) >= 0 && System.nanoTime() < deadline) {
                System.gc();
                Thread.sleep(50);
            }
            assertEquals(-1, Native.contextPinnedNode(c.handle(), key));
        }
    }
}
