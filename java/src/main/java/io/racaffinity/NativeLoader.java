package io.racaffinity;

import java.io.IOException;
import java.io.InputStream;
import java.net.URL;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Properties;

/**
 * Loads {@code libracaffinity} so that a program needs nothing but the jar on
 * its class path (no {@code -Djava.library.path}):
 *
 * <ol>
 *   <li>{@code -Dracaffinity.library=/path/to/libracaffinity.so}, when set (development);
 *   <li>the library bundled in the jar for this platform,
 *       {@code /io/racaffinity/native/<os>-<arch>/libracaffinity.so}, extracted to a
 *       temporary file (in {@code -Dracaffinity.tmpdir}, default {@code java.io.tmpdir})
 *       and {@link System#load}ed; the file is deleted right after loading;
 *   <li>{@code System.loadLibrary("racaffinity")} from {@code java.library.path}.
 * </ol>
 *
 * <p>If all fail, an {@link UnsatisfiedLinkError} names the platform and what was
 * tried. The jar bundles {@code linux-x86_64} only.
 */
final class NativeLoader {
    /** System property: an explicit path of the native library. */
    static final String LIBRARY_PROPERTY = "racaffinity.library";
    /** System property: where the bundled library is extracted. */
    static final String TMPDIR_PROPERTY = "racaffinity.tmpdir";
    /** The platforms the jar bundles a library for. */
    static final List<String> BUNDLED = List.of("linux-x86_64");

    private static boolean loaded;
    private static String source;
    private static UnsatisfiedLinkError failure;

    private NativeLoader() {}

    /** Loads the library once per class loader; later calls rethrow the first failure. */
    static synchronized void load() {
        if (loaded) {
            return;
        }
        if (failure != null) {
            UnsatisfiedLinkError again = new UnsatisfiedLinkError(failure.getMessage());
            again.initCause(failure);
            throw again;
        }
        try {
            source = doLoad(System.getProperty("os.name", ""), System.getProperty("os.arch", ""));
            loaded = true;
        } catch (UnsatisfiedLinkError e) {
            failure = e;
            throw e;
        }
    }

    /** Where the library was loaded from (for diagnostics), or null before loading. */
    static synchronized String source() {
        return source;
    }

    /** {@code <os>-<arch>} as used in the resource path, e.g. {@code linux-x86_64}. */
    static String platform(String osName, String osArch) {
        String os = osName.toLowerCase(Locale.ROOT);
        if (os.startsWith("linux")) {
            os = "linux";
        } else if (os.startsWith("mac") || os.startsWith("darwin")) {
            os = "macos";
        } else if (os.startsWith("windows")) {
            os = "windows";
        } else {
            os = os.replaceAll("[^a-z0-9]+", "");
        }
        String arch = osArch.toLowerCase(Locale.ROOT);
        switch (arch) {
            case "amd64":
            case "x86_64":
            case "x64":
                arch = "x86_64";
                break;
            case "aarch64":
            case "arm64":
                arch = "aarch64";
                break;
            default:
                arch = arch.replaceAll("[^a-z0-9_]+", "");
        }
        return os + "-" + arch;
    }

    /** The resource path of the bundled library for a platform. */
    static String resource(String platform) {
        String file = platform.startsWith("windows")
                ? "racaffinity.dll"
                : platform.startsWith("macos") ? "libracaffinity.dylib" : "libracaffinity.so";
        return "/io/racaffinity/native/" + platform + "/" + file;
    }

    private static String doLoad(String osName, String osArch) {
        String explicit = System.getProperty(LIBRARY_PROPERTY);
        if (explicit != null && !explicit.isBlank()) {
            String path = Path.of(explicit).toAbsolutePath().toString();
            try {
                System.load(path);
                return path;
            } catch (UnsatisfiedLinkError e) {
                throw new UnsatisfiedLinkError("racaffinity: cannot load the native library named by -D"
                        + LIBRARY_PROPERTY + "=" + explicit + ": " + e.getMessage());
            }
        }
        String platform = platform(osName, osArch);
        String resource = resource(platform);
        List<String> tried = new ArrayList<>();
        URL url = NativeLoader.class.getResource(resource);
        if (url != null) {
            try {
                Path tmp = extract(url);
                try {
                    System.load(tmp.toString());
                } finally {
                    // The mapping stays valid after the file is gone (POSIX);
                    // where it cannot be deleted now, delete it at exit.
                    try {
                        Files.deleteIfExists(tmp);
                    } catch (IOException e) {
                        tmp.toFile().deleteOnExit();
                    }
                }
                return "jar:" + resource;
            } catch (IOException e) {
                tried.add("extracting " + resource + " failed: " + e);
            } catch (UnsatisfiedLinkError e) {
                tried.add("loading the bundled " + resource + " failed: " + e.getMessage());
            }
        } else {
            tried.add("the jar has no library for " + platform + " (it bundles " + String.join(", ", BUNDLED) + ")");
        }
        try {
            System.loadLibrary("racaffinity");
            return "java.library.path";
        } catch (UnsatisfiedLinkError e) {
            tried.add("System.loadLibrary(\"racaffinity\") from java.library.path failed: " + e.getMessage());
        }
        throw failure(platform, osName, osArch, url != null, tried);
    }

    /** The error for a platform the library could not be loaded on. */
    static UnsatisfiedLinkError failure(
            String platform, String osName, String osArch, boolean bundled, List<String> tried) {
        StringBuilder m = new StringBuilder("racaffinity: cannot load the native library libracaffinity on platform ")
                .append(platform)
                .append(" (os.name=")
                .append(osName)
                .append(", os.arch=")
                .append(osArch)
                .append(")");
        if (!bundled) {
            m.append(": platform ")
                    .append(platform)
                    .append(" is not supported by this jar, which bundles libracaffinity for ")
                    .append(String.join(", ", BUNDLED))
                    .append(" only. Build the library for it (cargo build --release -p racaffinity-ffi) and put it"
                            + " on java.library.path, or set -D")
                    .append(LIBRARY_PROPERTY)
                    .append("=/path/to/the/library");
        }
        m.append(". Tried: ").append(String.join("; ", tried));
        return new UnsatisfiedLinkError(m.toString());
    }

    private static Path extract(URL url) throws IOException {
        String dir = System.getProperty(TMPDIR_PROPERTY);
        Path tmp = dir == null || dir.isBlank()
                ? Files.createTempFile("libracaffinity-", ".so")
                : Files.createTempFile(Path.of(dir), "libracaffinity-", ".so");
        try (InputStream in = url.openStream()) {
            Files.copy(in, tmp, StandardCopyOption.REPLACE_EXISTING);
        } catch (IOException e) {
            Files.deleteIfExists(tmp);
            throw e;
        }
        return tmp;
    }

    /** The jar's version (from {@code version.properties}, filtered by Maven). */
    static String jarVersion() {
        try (InputStream in = NativeLoader.class.getResourceAsStream("version.properties")) {
            if (in == null) {
                return null;
            }
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version");
        } catch (IOException e) {
            return null;
        }
    }

    /** Refuses a library of another version than the jar: the JNI signatures could differ. */
    static void checkVersion(String nativeVersion) {
        String jar = jarVersion();
        if (jar != null && !jar.equals(nativeVersion)) {
            throw new UnsatisfiedLinkError("racaffinity: the native library (" + source()
                    + ") is version " + nativeVersion + " but the jar is version " + jar
                    + "; use the library built from the same sources as the jar");
        }
    }
}
