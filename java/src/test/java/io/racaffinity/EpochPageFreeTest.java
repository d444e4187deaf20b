package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * A cluster's routing epoch page (16 KiB the core hands Java as a direct buffer) is freed once
 * the buffer is unreachable, also when its cluster was the last one open: closing the last
 * cluster stops the cleanup thread and drops the actions of freed clusters, but the page's is
 * not one of those.
 */
class EpochPageFreeTest {
    /** In a JVM of its own: a cluster another test class left open would keep the cleanup thread running. */
    @Test
    void thePageOfTheLastClosedClusterIsFreed() throws Exception {
        Path out = Files.createTempFile("epoch-page-child", ".out");
        try {
            Process child = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    "-cp", System.getProperty("java.class.path"), Child.class.getName())
                    .redirectErrorStream(true).redirectOutput(out.toFile()).start();
            assertTrue(child.waitFor(60, TimeUnit.SECONDS), "the child JVM ends");
            String output = Files.readString(out);
            assertEquals(0, child.exitValue(), output);
            assertTrue(output.contains("epoch page checks passed"), output);
        } finally {
            Files.deleteIfExists(out);
        }
    }

    /** The child JVM's checks. */
    public static final class Child {
        public static void main(String[] args) throws Exception {
            long page = openAndClose("epoch-page-a");
            // The next cluster runs the cleanup again: what was left of the first is done by now.
            Cluster b = Cluster.fromConfig("name = epoch-page-b; nodes = A");
            try {
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                while (!freed(page)) {
                    if (System.nanoTime() > deadline) {
                        System.out.println("FAILED: the epoch page of a closed and collected cluster, the last"
                                + " one open when it closed, is still handed out (never freed)");
                        System.exit(1);
                    }
                    System.gc();
                    Thread.sleep(50);
                }
            } finally {
                b.close();
            }
            System.out.println("epoch page checks passed");
            System.exit(0);
        }

        /** Opens, uses and closes the only open cluster; returns its page's hand-out id. */
        private static long openAndClose(String name) {
            Cluster a = Cluster.fromConfig("name = " + name + "; nodes = A, B");
            // Hand-out ids are issued in sequence: the cluster's own is the one before this probe's.
            long probe = Native.epochPage(a.handle());
            Native.epochPageFree(probe);
            long page = probe - 1;
            if (freed(page)) {
                System.out.println("FAILED: the open cluster's page is not handed out");
                System.exit(1);
            }
            a.pick().release(Outcome.OK);
            a.close();
            return page;
        }

        private static boolean freed(long page) {
            try {
                Native.epochBuffer(page);
                return false;
            } catch (ClusterClosedException e) {
                return true;
            }
        }
    }
}
