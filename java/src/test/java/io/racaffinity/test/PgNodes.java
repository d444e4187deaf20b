package io.racaffinity.test;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * JUnit extension: makes sure 3 local PostgreSQL nodes run
 * ({@code tests/cluster/pgnodes start 3}, idempotent) before a test class, and
 * stops them at the end of the test run if this JVM started them. Ports come
 * from {@code pgnodes env}.
 */
public final class PgNodes implements BeforeAllCallback {
    public static final int COUNT = 3;
    private static final Pattern PORT = Pattern.compile("RACAFF_NODE(\\d+)_PORT=(\\d+)");
    private static int[] ports;

    @Override
    public void beforeAll(ExtensionContext context) throws Exception {
        start(context);
    }

    private static synchronized void start(ExtensionContext context) throws Exception {
        if (ports != null) {
            return;
        }
        boolean allUp = run(30, "status").lines().filter(l -> l.matches("node[1-3] up .*")).count() == COUNT;
        if (!allUp) {
            run(180, "start", Integer.toString(COUNT));
            // Stop them again when the whole test plan is done (JUnit closes
            // AutoCloseable values of the root store).
            context.getRoot().getStore(ExtensionContext.Namespace.GLOBAL)
                    .put(PgNodes.class.getName() + ".stop", (AutoCloseable) () -> run(120, "stop"));
        }
        int[] p = new int[COUNT + 1];
        Matcher m = PORT.matcher(run(30, "env"));
        while (m.find()) {
            int i = Integer.parseInt(m.group(1));
            if (i <= COUNT) {
                p[i] = Integer.parseInt(m.group(2));
            }
        }
        for (int i = 1; i <= COUNT; i++) {
            if (p[i] == 0) {
                throw new IllegalStateException("pgnodes env printed no port for node " + i);
            }
        }
        ports = p;
    }

    public static Path repo() {
        return Path.of(System.getProperty("racaffinity.repo", "..")).toAbsolutePath().normalize();
    }

    /** Runs {@code tests/cluster/pgnodes args...}; returns stdout; fails on a non-zero exit. */
    public static String run(int timeoutSeconds, String... args) throws IOException, InterruptedException {
        return runTool("pgnodes", "no node harness at %s (set -Dracaffinity.repo)", timeoutSeconds, args);
    }

    /**
     * Runs the harness script {@code tests/cluster/<tool> args...} with stderr folded into stdout,
     * so that a failure's message shows what the script said.
     *
     * @param missing message format (the script's path for {@code %s}) when the script is absent
     * @return stdout
     * @throws IllegalStateException on a non-zero exit or after {@code timeoutSeconds}
     */
    static String runTool(String tool, String missing, int timeoutSeconds, String... args)
            throws IOException, InterruptedException {
        Path script = repo().resolve("tests/cluster").resolve(tool);
        if (!Files.isExecutable(script)) {
            throw new IllegalStateException(String.format(missing, script));
        }
        List<String> cmd = new ArrayList<>();
        cmd.add(script.toString());
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        byte[] out;
        try (var in = p.getInputStream()) {
            out = in.readAllBytes();
        }
        if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new IllegalStateException(tool + " " + String.join(" ", args) + " timed out");
        }
        String text = new String(out, StandardCharsets.UTF_8);
        if (p.exitValue() != 0) {
            throw new IllegalStateException(tool + " " + String.join(" ", args) + " failed (" + p.exitValue() + "):\n"
                    + text);
        }
        return text;
    }

    /** @return the port of node i (1-based) */
    public static int port(int i) {
        if (ports == null) {
            throw new IllegalStateException("PgNodes not started: annotate the test with @ExtendWith(PgNodes.class)");
        }
        return ports[i];
    }

    /** @return the JDBC URL of node i (1-based) */
    public static String url(int i) {
        return "jdbc:postgresql://127.0.0.1:" + port(i) + "/postgres";
    }

    /** SIGKILL node i's postmaster (a real crash). */
    public static void kill(int i) throws IOException, InterruptedException {
        run(60, "kill", Integer.toString(i));
    }

    /** Starts node i again and waits until it accepts connections. */
    public static void restart(int i) throws IOException, InterruptedException {
        run(120, "restart", Integer.toString(i));
    }
}
