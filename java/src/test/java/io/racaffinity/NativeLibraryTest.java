package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Constructor;
import java.util.List;
import org.junit.jupiter.api.Test;

class NativeLibraryTest {
    @Test
    void loadsTheLibraryBundledInTheJarWithoutJavaLibraryPath() {
        // The jar's version is Maven's ${project.version}, the library's Cargo's:
        // tools/version.py keeps the two sources equal, the loader refuses a mismatch.
        assertTrue(NativeLoader.jarVersion().matches("\\d+\\.\\d+\\.\\d+"), NativeLoader.jarVersion());
        assertEquals(NativeLoader.jarVersion(), Cluster.libraryVersion());
        assertEquals("jar:/io/racaffinity/native/linux-x86_64/libracaffinity.so", NativeLoader.source());
        assertTrue(System.getProperty("java.library.path", "").indexOf("target/release") < 0);
    }

    @Test
    void platformNamesFollowOsAndArch() {
        assertEquals("linux-x86_64", NativeLoader.platform("Linux", "amd64"));
        assertEquals("linux-x86_64", NativeLoader.platform("Linux", "x86_64"));
        assertEquals("linux-aarch64", NativeLoader.platform("Linux", "aarch64"));
        assertEquals("macos-aarch64", NativeLoader.platform("Mac OS X", "aarch64"));
        assertEquals("windows-x86_64", NativeLoader.platform("Windows 11", "amd64"));
        assertEquals("freebsd-x86_64", NativeLoader.platform("FreeBSD", "amd64"));
        assertEquals("/io/racaffinity/native/linux-x86_64/libracaffinity.so", NativeLoader.resource("linux-x86_64"));
    }

    @Test
    void onlyLinuxX8664IsBundled() {
        assertTrue(NativeLoader.class.getResource(NativeLoader.resource("linux-x86_64")) != null);
        assertTrue(NativeLoader.class.getResource(NativeLoader.resource("macos-aarch64")) == null);
    }

    @Test
    void anUnsupportedPlatformGetsAnErrorNamingIt() {
        UnsatisfiedLinkError e = NativeLoader.failure("macos-aarch64", "Mac OS X", "aarch64", false,
                List.of("the jar has no library for macos-aarch64 (it bundles linux-x86_64)"));
        String m = e.getMessage();
        assertTrue(m.contains("platform macos-aarch64"), m);
        assertTrue(m.contains("os.name=Mac OS X, os.arch=aarch64"), m);
        assertTrue(m.contains("not supported by this jar, which bundles libracaffinity for linux-x86_64 only"), m);
        assertTrue(m.contains("java.library.path"), m);
    }

    @Test
    void theNativeExceptionTableNamesAClassForEveryResultCodeAndEachExtendsAffinityException() throws Exception {
        String[] classes = Native.exceptionClasses();
        assertEquals(19, classes.length, "one entry per racaffinity_result code");
        String[] expected = {
            "io.racaffinity.AffinityException", // OK: never thrown
            "io.racaffinity.InvalidArgumentException", // NULL_ARGUMENT
            "io.racaffinity.ClusterClosedException", // INVALID_HANDLE
            "io.racaffinity.InvalidArgumentException", // INVALID_UTF8
            "io.racaffinity.InvalidArgumentException", // INVALID_ARGUMENT
            "io.racaffinity.InvalidArgumentException", // BUFFER_TOO_SMALL
            "io.racaffinity.NativePanicException", // PANIC
            "io.racaffinity.InvalidConfigException", // CONFIG
            "io.racaffinity.UnknownNodeException", // UNKNOWN_NODE
            "io.racaffinity.DuplicateNodeException", // DUPLICATE_NODE
            "io.racaffinity.NoNodeAvailableException", // NO_NODE_AVAILABLE
            "io.racaffinity.StrictAffinityException", // STRICT_AFFINITY
            "io.racaffinity.PreparedNodeUnavailableException", // PREPARED_NODE_UNAVAILABLE
            "io.racaffinity.UnknownTransactionException", // UNKNOWN_TRANSACTION
            "io.racaffinity.EventParseException", // EVENT_PARSE
            "io.racaffinity.ForeignEventException", // FOREIGN_EVENT
            "io.racaffinity.TooManyClustersException", // TOO_MANY_HANDLES
            "io.racaffinity.InvalidLeaseException", // INVALID_LEASE
            "io.racaffinity.FeedUnavailableException", // FEED_UNAVAILABLE
        };
        for (int code = 0; code < classes.length; code++) {
            assertEquals(expected[code], classes[code], "code " + code);
            Class<?> c = Class.forName(classes[code]);
            assertTrue(AffinityException.class.isAssignableFrom(c), c + " extends AffinityException");
            Constructor<?> ctor = c.getConstructor(String.class);
            assertEquals("m", ((Throwable) ctor.newInstance("m")).getMessage());
        }
    }

    @Test
    void noopRoundTripsThroughJni() {
        assertEquals(42L, Native.noop(0, 42L));
    }
}
