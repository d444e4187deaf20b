package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.test.PgNodes;
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The packaged jar, alone with pgjdbc on the class path and no
 * -Djava.library.path, runs the README's quick start (examples/QuickStart.java)
 * in a fresh JVM.
 */
@ExtendWith(PgNodes.class)
class QuickStartIT {
    @Test
    void theJarAndAJdbcDriverAreAllAProgramNeeds() throws Exception {
        Path jar = Path.of(System.getProperty("racaffinity.jar"));
        assertTrue(Files.isRegularFile(jar), "the packaged jar exists: " + jar);
        String driver = null;
        for (String e : System.getProperty("java.class.path").split(File.pathSeparator)) {
            if (e.matches(".*/postgresql-[0-9.]+\\.jar")) {
                driver = e;
            }
        }
        assertTrue(driver != null, "pgjdbc on the test class path");
        String java = ProcessHandle.current().info().command().orElse("java");
        Path example = PgNodes.repo().resolve("java/examples/QuickStart.java");
        ProcessBuilder pb = new ProcessBuilder(java, "-cp", jar + File.pathSeparator + driver, example.toString())
                .redirectErrorStream(true);
        pb.environment().remove("LD_LIBRARY_PATH");
        for (int i = 1; i <= 3; i++) {
            pb.environment().put("RACAFF_NODE" + i + "_URL", PgNodes.url(i));
        }
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(), out);
        assertTrue(out.contains("quickstart ok"), out);
        Matcher m = Pattern.compile("pinned to (RAC\\d): port (\\d+)").matcher(out);
        List<String> ports = new java.util.ArrayList<>();
        while (m.find()) {
            int node = Integer.parseInt(m.group(1).substring(3));
            assertEquals(PgNodes.port(node), Integer.parseInt(m.group(2)), out);
            ports.add(m.group(2));
        }
        assertEquals(3, ports.size(), out);
        Matcher tx = Pattern.compile("gtrid-42 lives on (RAC\\d), branch 2 on (RAC\\d)").matcher(out);
        assertTrue(tx.find(), out);
        assertEquals(tx.group(1), tx.group(2));
    }
    /** The README's inline Java quick start, run without the node variables set. */
    @Test
    void theReadmesQuickStartNamesAMissingNodeVariableInsteadOfThrowingANullPointerException() throws Exception {
        Path jar = Path.of(System.getProperty("racaffinity.jar"));
        String driver = null;
        for (String e : System.getProperty("java.class.path").split(File.pathSeparator)) {
            if (e.matches(".*/postgresql-[0-9.]+\\.jar")) {
                driver = e;
            }
        }
        assertTrue(driver != null, "pgjdbc on the test class path");
        String readme = Files.readString(PgNodes.repo().resolve("README.md"), StandardCharsets.UTF_8);
        Matcher sample = Pattern.compile("<!-- sample: java/readme -->\\s*```java\\n(.*?)```", Pattern.DOTALL)
                .matcher(readme);
        assertTrue(sample.find(), "the README's java/readme sample");
        Path dir = Files.createTempDirectory("readme-quickstart");
        Path source = dir.resolve("QuickStart.java");
        Files.writeString(source, sample.group(1), StandardCharsets.UTF_8);
        String java = ProcessHandle.current().info().command().orElse("java");
        ProcessBuilder pb = new ProcessBuilder(java, "-cp", jar + File.pathSeparator + driver, source.toString())
                .redirectErrorStream(true);
        pb.environment().remove("LD_LIBRARY_PATH");
        pb.environment().keySet().removeIf(k -> k.startsWith("RACAFF_NODE"));
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS));
        assertTrue(p.exitValue() != 0, out);
        assertTrue(!out.contains("NullPointerException"), out);
        assertTrue(out.contains("RACAFF_NODE1_URL is not set"), out);
    }
}

