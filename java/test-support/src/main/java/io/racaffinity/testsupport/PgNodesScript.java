package io.racaffinity.testsupport;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * tests/cluster/pgnodes from a module's test, with the module's RACAFF_PG_* environment; the
 * repository root is {@code -Dracaffinity.repo} (default: two levels up, as for java/MODULE).
 */
public final class PgNodesScript {
    private PgNodesScript() {
    }

    /** Runs {@code pgnodes args...} with its output inherited; fails unless it exits 0 within 120 s. */
    public static void run(String... args) throws Exception {
        Path script = Path.of(System.getProperty("racaffinity.repo", "../..")).resolve("tests/cluster/pgnodes");
        List<String> cmd = new ArrayList<>(List.of(script.toString()));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).inheritIO().start();
        if (!(p.waitFor(120, TimeUnit.SECONDS) && p.exitValue() == 0)) {
            throw new AssertionError("pgnodes " + String.join(" ", args));
        }
    }
}
