package io.racaffinity.appservers;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import java.util.zip.ZipEntry;
import java.util.zip.ZipOutputStream;

/**
 * One WildFly of the unpacked distribution ({@code JBOSS_HOME}, left untouched) with its own
 * server base directory under {@code target/} (a copy of the distribution's
 * {@code standalone/}) and its own module root beside {@code JBOSS_HOME/modules}
 * ({@code JBOSS_MODULEPATH}) holding the module {@code io.racaffinity} (racaffinity.jar and
 * pgjdbc). It is configured by the distribution's own {@code jboss-cli.sh}
 * (offline, {@code embed-server}) and run by its own {@code standalone.sh} as a child
 * process, listening on 127.0.0.1 only, every port moved by a port offset.
 */
final class WildFlyServer implements AutoCloseable {
    /** WildFly's standard socket bindings in standalone.xml, before the offset. */
    static final int[] PORTS = {8080, 8443, 8009, 9990, 9993, 4712, 4713};
    static final int HTTP = 8080;
    static final int RECOVERY_LISTENER = 4712;

    final Path home;
    final Path base;
    final Path modules;
    final int portOffset;
    private Process process;
    private Thread reaper;

    private WildFlyServer(Path home, Path base, Path modules, int portOffset) {
        this.home = home;
        this.base = base;
        this.modules = modules;
        this.portOffset = portOffset;
    }

    /**
     * A fresh base directory and module root: the module.xml files of
     * {@code src/test/resources/wildfly/modules} with the jars they name.
     */
    static WildFlyServer create(String name, int portOffset) throws IOException {
        Path home = Path.of(System.getProperty("wildfly.dist", "")).toAbsolutePath();
        if (!Files.isRegularFile(home.resolve("bin/standalone.sh"))) {
            throw new IllegalStateException("no WildFly distribution at " + home + " (-Dwildfly.dist; mvn unpacks it)");
        }
        Path work = Path.of(System.getProperty("appserver.work", "target")).toAbsolutePath();
        Path base = work.resolve(name);
        Path modules = work.resolve(name + "-modules");
        TomcatServer.deleteTree(base);
        TomcatServer.deleteTree(modules);
        TomcatServer.copyTree(home.resolve("standalone"), base);
        Path jars = Path.of(System.getProperty("appserver.jars"));
        TomcatServer.copyTree(resource("wildfly/modules"), modules);
        Files.copy(jars.resolve("racaffinity.jar"), modules.resolve("io/racaffinity/main/racaffinity.jar"));
        Files.copy(jars.resolve("postgresql.jar"), modules.resolve("io/racaffinity/main/postgresql.jar"));
        return new WildFlyServer(home, base, modules, portOffset);
    }

    /** A file of src/test/resources (copied to target/test-classes). */
    static Path resource(String path) {
        return Path.of(System.getProperty("appserver.classes")).resolve(path);
    }

    private ProcessBuilder script(String script, List<String> args, Path out) {
        List<String> cmd = new ArrayList<>(List.of("sh", home.resolve("bin/" + script).toString()));
        cmd.addAll(args);
        ProcessBuilder pb = new ProcessBuilder(cmd).directory(base.toFile()).redirectErrorStream(true)
                .redirectOutput(out.toFile());
        pb.environment().put("JBOSS_HOME", home.toString());
        pb.environment().put("JBOSS_MODULEPATH", home.resolve("modules") + ":" + modules);
        pb.environment().put("JAVA_HOME", System.getProperty("java.home"));
        pb.environment().remove("JAVA_OPTS");
        return pb;
    }

    /** Runs a CLI script with {@code jboss-cli.sh --file}; it must succeed. */
    String cli(Path file) throws Exception {
        Path out = base.resolve("cli-" + file.getFileName() + ".out");
        Process p = script("jboss-cli.sh", List.of("-Djboss.server.base.dir=" + base, "--file=" + file), out).start();
        boolean done = p.waitFor(180, TimeUnit.SECONDS);
        if (!done) {
            p.descendants().forEach(ProcessHandle::destroyForcibly);
            p.destroyForcibly();
        }
        String text = Files.readString(out);
        if (!done || p.exitValue() != 0) {
            throw new IllegalStateException("jboss-cli.sh --file=" + file + (done ? " exited " + p.exitValue()
                    : " did not finish in 180 s") + ":\n" + text);
        }
        return text;
    }

    /**
     * Writes {@code deployments/<name>} as a war: the given classes (directories under
     * target/test-classes, by package path) and nothing else.
     */
    void deployWar(String name, List<String> packageDirs) throws IOException {
        Path classes = Path.of(System.getProperty("appserver.classes"));
        try (OutputStream os = Files.newOutputStream(base.resolve("deployments").resolve(name));
                ZipOutputStream zip = new ZipOutputStream(os)) {
            for (String dir : packageDirs) {
                try (Stream<Path> files = Files.walk(classes.resolve(dir))) {
                    for (Path f : files.filter(Files::isRegularFile).sorted().toList()) {
                        zip.putNextEntry(new ZipEntry("WEB-INF/classes/" + classes.relativize(f).toString()
                                .replace('\\', '/')));
                        Files.copy(f, zip);
                        zip.closeEntry();
                    }
                }
            }
        }
    }

    /**
     * Starts the server and waits until deployment {@code war} is deployed (again, after a
     * {@link #crash()}).
     */
    void start(String war, List<String> systemProperties) throws Exception {
        Path deployments = base.resolve("deployments");
        for (String marker : List.of(".deployed", ".failed", ".isdeploying", ".pending")) {
            Files.deleteIfExists(deployments.resolve(war + marker));
        }
        Path serverLog = base.resolve("log/server.log");
        int logFrom = Files.exists(serverLog) ? Files.readString(serverLog).length() : 0;
        for (int port : PORTS) {
            try (ServerSocket s = new ServerSocket()) {
                s.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port + portOffset));
            } catch (IOException e) {
                throw new IllegalStateException("port " + (port + portOffset) + " (WildFly's " + port + " + offset "
                        + portOffset + ") is in use; set RACAFF_WILDFLY_PORT_OFFSET", e);
            }
        }
        List<String> args = new ArrayList<>(List.of(
                "-Djboss.server.base.dir=" + base,
                "-Djboss.socket.binding.port-offset=" + portOffset,
                "-b", "127.0.0.1", "-bmanagement", "127.0.0.1",
                "-Djboss.bind.address.private=127.0.0.1"));
        args.addAll(systemProperties);
        ProcessBuilder pb = script("standalone.sh", args, base.resolve("console.out"));
        // standalone.sh then runs the JVM in the background and passes SIGTERM on to it.
        pb.environment().put("LAUNCH_JBOSS_IN_BACKGROUND", "true");
        pb.environment().put("JBOSS_PIDFILE", base.resolve("wildfly.pid").toString());
        process = pb.start();
        // If this JVM dies before close() (a timeout, a kill), take the server with it.
        Process started = process;
        reaper = new Thread(() -> kill(started, 0), "wildfly-reaper");
        Runtime.getRuntime().addShutdownHook(reaper);

        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(180);
        while (!Files.exists(deployments.resolve(war + ".deployed"))) {
            if (Files.exists(deployments.resolve(war + ".failed"))) {
                throw new IllegalStateException(war + " failed to deploy: "
                        + Files.readString(deployments.resolve(war + ".failed")) + "\n" + serverLog());
            }
            if (!process.isAlive()) {
                throw new IllegalStateException("WildFly exited with " + process.exitValue() + ":\n" + console());
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("WildFly did not deploy " + war + " within 180 s:\n" + console());
            }
            Thread.sleep(250);
        }
        String log = serverLog().substring(logFrom);
        if (log.contains("started (with errors)")) {
            throw new IllegalStateException("WildFly started with errors:\n" + log);
        }
    }

    /**
     * One recovery pass of Narayana's recovery manager, through its recovery listener
     * ({@code RecoveryDriver}'s protocol): {@code SCAN} returns after the pass is done.
     */
    void recoveryScan() throws IOException {
        try (Socket s = new Socket(InetAddress.getLoopbackAddress(), RECOVERY_LISTENER + portOffset)) {
            s.setSoTimeout(120_000);
            PrintWriter out = new PrintWriter(s.getOutputStream(), true, StandardCharsets.US_ASCII);
            BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.US_ASCII));
            out.println("SCAN");
            String reply = in.readLine();
            if (!"DONE".equals(reply)) {
                throw new IOException("recovery listener answered " + reply);
            }
        }
    }

    /** SIGKILL of the server's JVM (and its script): a crash, with no shutdown of any kind. */
    void crash() throws InterruptedException {
        List<ProcessHandle> all = alive();
        kill(process, 0);
        for (ProcessHandle h : all) {
            h.onExit().join();
        }
        Runtime.getRuntime().removeShutdownHook(reaper);
        reaper = null;
    }

    URI uri(String path) {
        return URI.create("http://127.0.0.1:" + (HTTP + portOffset) + path);
    }

    String console() {
        return read(base.resolve("console.out"));
    }

    String serverLog() {
        return read(base.resolve("log/server.log"));
    }

    private static String read(Path p) {
        try {
            return Files.readString(p);
        } catch (IOException e) {
            return "(" + p + ": " + e + ")";
        }
    }

    /** The server's processes (the script and the JVM under it) that are still alive. */
    List<ProcessHandle> alive() {
        if (process == null) {
            return List.of();
        }
        List<ProcessHandle> all = new ArrayList<>(process.descendants().toList());
        all.add(process.toHandle());
        return all.stream().filter(ProcessHandle::isAlive).toList();
    }

    /** SIGTERM (WildFly's shutdown hook stops it cleanly), then SIGKILL after graceSeconds. */
    private static void kill(Process p, int graceSeconds) {
        List<ProcessHandle> all = new ArrayList<>(p.descendants().toList());
        all.add(p.toHandle());
        if (graceSeconds > 0) {
            all.forEach(ProcessHandle::destroy);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(graceSeconds);
            while (all.stream().anyMatch(ProcessHandle::isAlive) && System.nanoTime() < deadline) {
                try {
                    Thread.sleep(100);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
        }
        all.forEach(ProcessHandle::destroyForcibly);
    }

    @Override
    public void close() {
        if (process != null) {
            kill(process, 60);
            try {
                process.waitFor(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            if (reaper != null) {
                try {
                    Runtime.getRuntime().removeShutdownHook(reaper);
                } catch (IllegalStateException e) {
                    // the JVM is shutting down: the hook runs anyway
                }
            }
        }
    }
}
