package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.test.Threads;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The threads the library starts end with what started them and never keep the loader
 * of the code that made them start (issue 17; the end-to-end check is a real Tomcat's
 * findleaks, java/appservers TomcatRedeployTest). Here, in one JVM: a stand-in
 * "application loader" is the context loader of the thread that opens the cluster and
 * asks for the first connection, as a request thread's is in a servlet container.
 */
@ExtendWith(PgNodes.class)
class LibraryThreadsTest {
    /** Runs {@code body} on a new thread whose context loader is a fresh (application-like) loader. */
    static ClassLoader onAppThread(ThrowingRunnable body) throws Exception {
        ClassLoader app = new URLClassLoader(new URL[0], LibraryThreadsTest.class.getClassLoader());
        AtomicReference<Exception> failure = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                body.run();
            } catch (Exception e) {
                failure.set(e);
            }
        }, "app-request");
        t.setContextClassLoader(app);
        t.start();
        t.join();
        if (failure.get() != null) {
            throw failure.get();
        }
        return app;
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }

    /**
     * In a JVM of its own: any cluster another test class left open (or unclosed and not yet
     * collected) would keep the thread running.
     */
    @Test
    void theCleanerThreadEndsWithTheLastOpenCluster() throws Exception {
        Path out = Files.createTempFile("cleaner-child", ".out");
        try {
            Process child = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    "-cp", System.getProperty("java.class.path"), CleanerChild.class.getName())
                    .redirectErrorStream(true).redirectOutput(out.toFile()).start();
            assertTrue(child.waitFor(60, TimeUnit.SECONDS), "the child JVM ends");
            String output = Files.readString(out);
            assertEquals(0, child.exitValue(), output);
            assertTrue(output.contains("cleaner checks passed"), output);
        } finally {
            Files.deleteIfExists(out);
        }
    }

    /** The child JVM's checks. */
    public static final class CleanerChild {
        public static void main(String[] args) throws Exception {
            check(Threads.named("racaffinity-cleaner").isEmpty(), "no cleaner thread before any cluster");
            AtomicReference<Cluster> a = new AtomicReference<>();
            ClassLoader app = onAppThread(() -> a.set(Cluster.fromConfig("name = reaper-a; nodes = A, B")));
            List<Thread> cleaner = Threads.named("racaffinity-cleaner");
            check(cleaner.size() == 1, "one cleaner thread while a cluster is open: " + cleaner);
            check(cleaner.get(0).getContextClassLoader() != app, "the cleaner keeps the opener's loader");
            check(cleaner.get(0).isDaemon(), "a daemon thread");

            Cluster b = Cluster.fromConfig("name = reaper-b; nodes = A, B");
            a.get().close();
            check(Threads.named("racaffinity-cleaner").size() == 1, "still running while reaper-b is open");
            b.close();
            check(Threads.named("racaffinity-cleaner").isEmpty() && !cleaner.get(0).isAlive(),
                    "ended by the last close, before close returns");

            // A cluster dropped without close is still freed when collected, and the thread ends after it.
            Cluster.fromConfig("name = reaper-dropped; nodes = A");
            check(Threads.named("racaffinity-cleaner").size() == 1, "started again");
            check(Pools.await(Duration.ofSeconds(20), () -> {
                System.gc();
                return Threads.named("racaffinity-cleaner").isEmpty();
            }), "the dropped cluster is freed, and the thread ends with it");
            System.out.println("cleaner checks passed");
            System.exit(0);
        }

        static void check(boolean ok, String what) {
            if (!ok) {
                System.out.println("FAILED: " + what);
                System.exit(1);
            }
        }
    }

    @Test
    void nodePoolThreadsStartedByARequestDoNotKeepItsLoader() throws Exception {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = loaders; nodes = MYDB1, MYDB2");
        ds.setNodeUrlList("MYDB1=" + PgNodes.url(1) + " | MYDB2=" + PgNodes.url(2));
        ds.setDataSourceClassName("com.zaxxer.hikari.HikariDataSource");
        ds.setDataSourcePropertyList("maximumPoolSize=2 | minimumIdle=1");
        ds.setUser("postgres");
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        try {
            ClassLoader app = onAppThread(() -> {
                for (int i = 0; i < 4; i++) {
                    try (Connection c = ds.getConnection()) {
                        Pools.serverPort(c);
                    }
                }
            });
            assertFalse(Threads.named("racaffinity-log-loaders").isEmpty(), "the upkeep's log writer runs");
            List<Thread> pool = Threads.named("racaffinity-pool-loaders-");
            assertFalse(pool.isEmpty(), "HikariCP's threads come from the library's factory");
            List<Thread> all = Threads.named("racaffinity-");
            for (Thread t : all) {
                assertNotSame(app, t.getContextClassLoader(), t.getName() + " keeps the request's loader");
                assertTrue(t.isDaemon(), t.getName());
            }
        } finally {
            ds.close();
        }
        assertTrue(Pools.await(Duration.ofSeconds(10), () -> Threads.named("racaffinity-pool-loaders-").isEmpty()
                && Threads.named("racaffinity-pools-loaders").isEmpty()
                && Threads.named("racaffinity-log-loaders").isEmpty()),
                "the pools' threads and the upkeep's log writer end with the data source: "
                + Threads.named("racaffinity-pool") + Threads.named("racaffinity-log-loaders"));
    }
}
