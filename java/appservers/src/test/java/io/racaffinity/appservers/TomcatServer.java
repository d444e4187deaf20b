package io.racaffinity.appservers;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * One Tomcat of the unpacked distribution ({@code CATALINA_HOME}, left untouched) with
 * its own {@code CATALINA_BASE} under {@code target/}: conf copied from the distribution
 * with the test's ports, a manager user (role {@code manager-script}) and optional
 * global resources; started with the distribution's own {@code bin/catalina.sh run}
 * as a child process, so it runs exactly as a Tomcat user's would.
 */
final class TomcatServer implements AutoCloseable {
    static final String MANAGER_USER = "racaff-manager";
    static final String MANAGER_PASSWORD = "racaff-manager-pw";
    private static final Pattern THREAD = Pattern.compile("^\"([^\"]+)\"", Pattern.MULTILINE);

    final Path home;
    final Path base;
    final int port;
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
    private Process process;

    private TomcatServer(Path home, Path base, int port) {
        this.home = home;
        this.base = base;
        this.port = port;
    }

    /**
     * A fresh base directory. {@code globalResources} goes into server.xml's
     * {@code <GlobalNamingResources>}.
     */
    static TomcatServer create(String name, int port, String globalResources) throws IOException {
        Path home = Path.of(System.getProperty("tomcat.dist", "")).toAbsolutePath();
        if (!Files.isRegularFile(home.resolve("bin/catalina.sh"))) {
            throw new IllegalStateException("no Tomcat distribution at " + home + " (-Dtomcat.dist; mvn unpacks it)");
        }
        Path base = Path.of(System.getProperty("appserver.work", "target")).toAbsolutePath().resolve(name);
        deleteTree(base);
        for (String d : List.of("lib", "logs", "temp", "work", "webapps")) {
            Files.createDirectories(base.resolve(d));
        }
        copyTree(home.resolve("conf"), base.resolve("conf"));
        copyTree(home.resolve("webapps/manager"), base.resolve("webapps/manager"));

        Path serverXml = base.resolve("conf/server.xml");
        String server = Files.readString(serverXml);
        // No shutdown port (the process is stopped by signal), the test's HTTP port.
        server = server.replace("<Server port=\"8005\"", "<Server port=\"-1\"")
                .replace("<Connector port=\"8080\"", "<Connector port=\"" + port + "\" address=\"127.0.0.1\"");
        server = server.replace("</GlobalNamingResources>", globalResources + "\n  </GlobalNamingResources>");
        Files.writeString(serverXml, server);

        Path users = base.resolve("conf/tomcat-users.xml");
        Files.writeString(users, Files.readString(users).replace("</tomcat-users>",
                "  <role rolename=\"manager-script\"/>\n  <user username=\"" + MANAGER_USER + "\" password=\""
                        + MANAGER_PASSWORD + "\" roles=\"manager-script\"/>\n</tomcat-users>"));
        return new TomcatServer(home, base, port);
    }

    void start() throws Exception {
        ProcessBuilder pb = new ProcessBuilder("sh", home.resolve("bin/catalina.sh").toString(), "run")
                .redirectErrorStream(true)
                .redirectOutput(base.resolve("logs/console.out").toFile());
        pb.environment().put("CATALINA_HOME", home.toString());
        pb.environment().put("CATALINA_BASE", base.toString());
        pb.environment().put("CATALINA_PID", base.resolve("tomcat.pid").toString());
        pb.environment().put("JAVA_HOME", System.getProperty("racaffinity.tomcat.java.home", System.getProperty("java.home")));
        pb.environment().remove("JRE_HOME");
        // pgjdbc's cleaner thread keeps its default 30 s idle time: the library must start
        // it so that it holds no application's loader (it used to run with
        // -Dpgjdbc.config.cleanup.thread.ttl=1000, which hid that leak).
        // racaffinity.tomcat.opts: JVM options for an experiment (e.g. a HikariCP system property).
        pb.environment().put("CATALINA_OPTS", ("-Xmx256m " + System.getProperty("racaffinity.tomcat.opts", "")).strip());
        process = pb.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (true) {
            if (!process.isAlive()) {
                throw new IllegalStateException("Tomcat exited with " + process.exitValue() + ":\n" + console());
            }
            if (console().contains("java.net.BindException")) {
                // Tomcat logs a connector it could not bind and runs on without it.
                throw new IllegalStateException("Tomcat could not bind 127.0.0.1:" + port
                        + " (another process holds it; RACAFF_TOMCAT_PORT moves it):\n" + console());
            }
            try {
                // A short wait per probe: whatever holds the port may accept and never answer.
                if (manager("list", Duration.ofSeconds(5)).startsWith("OK")) {
                    return;
                }
            } catch (IOException e) {
                // not listening yet
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("Tomcat did not answer within 120 s:\n" + console());
            }
            Thread.sleep(250);
        }
    }

    String console() {
        try {
            return Files.readString(base.resolve("logs/console.out"));
        } catch (IOException e) {
            return "(no console output: " + e + ")";
        }
    }

    /** Tomcat's log lines, console and catalina.*.log. */
    List<String> logLines() throws IOException {
        List<String> lines = new ArrayList<>(console().lines().toList());
        try (Stream<Path> logs = Files.list(base.resolve("logs"))) {
            for (Path p : logs.filter(p -> p.getFileName().toString().startsWith("catalina.")).toList()) {
                lines.addAll(Files.readAllLines(p, StandardCharsets.UTF_8));
            }
        }
        return lines;
    }

    /** {@code /manager/text/<command>} as the manager user; returns the body. */
    String manager(String command) throws IOException, InterruptedException {
        return manager(command, Duration.ofSeconds(120));
    }

    private String manager(String command, Duration timeout) throws IOException, InterruptedException {
        String auth = Base64.getEncoder()
                .encodeToString((MANAGER_USER + ":" + MANAGER_PASSWORD).getBytes(StandardCharsets.UTF_8));
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(uri("/manager/text/" + command))
                .header("Authorization", "Basic " + auth).timeout(timeout).build(),
                HttpResponse.BodyHandlers.ofString());
        if (r.statusCode() != 200) {
            throw new IOException("manager " + command + ": HTTP " + r.statusCode() + " " + r.body());
        }
        return r.body();
    }

    /** The names of the JVM's live threads, from the manager's thread dump. */
    List<String> threadNames() throws IOException, InterruptedException {
        List<String> names = new ArrayList<>();
        Matcher m = THREAD.matcher(manager("threaddump"));
        while (m.find()) {
            names.add(m.group(1));
        }
        return names;
    }

    URI uri(String path) {
        return URI.create("http://127.0.0.1:" + port + path);
    }

    long pid() {
        return process.pid();
    }

    @Override
    public void close() throws Exception {
        if (process != null && process.isAlive()) {
            process.destroy(); // SIGTERM: Tomcat's shutdown hook stops it cleanly
            if (!process.waitFor(60, TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor(30, TimeUnit.SECONDS);
            }
        }
    }

    static void copyTree(Path from, Path to) throws IOException {
        try (Stream<Path> all = Files.walk(from)) {
            for (Path p : all.toList()) {
                Path target = to.resolve(from.relativize(p).toString());
                if (Files.isDirectory(p)) {
                    Files.createDirectories(target);
                } else {
                    Files.copy(p, target, StandardCopyOption.REPLACE_EXISTING);
                }
            }
        }
    }

    static void deleteTree(Path dir) throws IOException {
        if (!Files.exists(dir)) {
            return;
        }
        try (Stream<Path> all = Files.walk(dir)) {
            all.sorted((a, b) -> b.getNameCount() - a.getNameCount()).forEach(p -> {
                try {
                    Files.delete(p);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
        }
    }
}
