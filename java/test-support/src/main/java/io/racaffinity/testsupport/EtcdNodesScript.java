package io.racaffinity.testsupport;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A real etcd cluster of the test's own (tests/cluster/etcdnodes), on the ports given by
 * {@code RACAFF_JAVA_ETCD_BASE_PORT} (default: the caller's) with its data under
 * {@code /tmp/racaffinity-etcd-java-<port>}, and the few calls of etcd's v3 JSON gateway a
 * test needs to write records. {@link #close()} destroys it.
 */
public final class EtcdNodesScript implements AutoCloseable {
    private static final Pattern ENDPOINTS = Pattern.compile("RACAFF_ETCD_ENDPOINTS=['\"]?([^'\"\\s]+)");
    private static final Pattern REVISION = Pattern.compile("\"revision\":\"?(\\d+)");
    private final Map<String, String> env;
    private final List<String> endpoints;
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    private EtcdNodesScript(int basePort) {
        this.env = Map.of("RACAFF_ETCD_BASE_PORT", Integer.toString(basePort),
                "RACAFF_ETCD_DIR", "/tmp/racaffinity-etcd-java-" + basePort);
        this.endpoints = new ArrayList<>();
    }

    /**
     * Starts {@code members} members (idempotent: etcdnodes reuses a running cluster of its own).
     *
     * @param defaultBasePort member 1's client port unless {@code RACAFF_JAVA_ETCD_BASE_PORT} is set
     */
    public static EtcdNodesScript start(int members, int defaultBasePort) throws Exception {
        String set = System.getenv("RACAFF_JAVA_ETCD_BASE_PORT");
        EtcdNodesScript e = new EtcdNodesScript(set == null || set.isEmpty() ? defaultBasePort : Integer.parseInt(set));
        e.run(900, "start", Integer.toString(members));
        Matcher m = ENDPOINTS.matcher(e.run(60, "env"));
        if (!m.find()) {
            throw new AssertionError("etcdnodes env printed no RACAFF_ETCD_ENDPOINTS");
        }
        e.endpoints.addAll(List.of(m.group(1).split(",")));
        return e;
    }

    /** Runs {@code etcdnodes args...}; returns its standard output; fails unless it exits 0 in time. */
    public String run(int seconds, String... args) throws Exception {
        Path script = Path.of(System.getProperty("racaffinity.repo", "../..")).resolve("tests/cluster/etcdnodes");
        List<String> cmd = new ArrayList<>(List.of(script.toString()));
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT);
        pb.environment().putAll(env);
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!(p.waitFor(seconds, TimeUnit.SECONDS) && p.exitValue() == 0)) {
            p.destroyForcibly();
            throw new AssertionError("etcdnodes " + String.join(" ", args) + " failed:\n" + out);
        }
        return out;
    }

    /** @return the members' {@code host:port} client endpoints */
    public List<String> endpoints() {
        return List.copyOf(endpoints);
    }

    /** @return {@code etcd://<every member>/<prefix>} */
    public String url(String prefix) {
        return "etcd://" + String.join(",", endpoints) + "/" + prefix;
    }

    /** Puts {@code key = value}; returns the revision etcd gave it. */
    public long put(String key, String value) throws Exception {
        return revision(call("/v3/kv/put", "{\"key\":\"" + b64(key) + "\",\"value\":\"" + b64(value) + "\"}"));
    }

    /** Deletes {@code key}; returns the revision of the deletion. */
    public long delete(String key) throws Exception {
        return revision(call("/v3/kv/deleterange", "{\"key\":\"" + b64(key) + "\"}"));
    }

    /**
     * etcd's store revision now: it moves with every write. A subscriber's feed revision is not
     * that: it reaches its own write's revision only when the watch brings the record back.
     */
    public long storeRevision() throws Exception {
        return revision(call("/v3/kv/range", "{\"key\":\"" + b64("racaffinity-revision-probe") + "\"}"));
    }

    /** The JSON answer of the first member that answers {@code POST path}. */
    public String call(String path, String body) throws Exception {
        Exception last = null;
        for (String ep : endpoints) {
            try {
                HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://" + ep + path))
                        .timeout(Duration.ofSeconds(5)).POST(HttpRequest.BodyPublishers.ofString(body)).build(),
                        HttpResponse.BodyHandlers.ofString());
                if (r.statusCode() == 200) {
                    return r.body();
                }
                last = new IllegalStateException(ep + path + ": HTTP " + r.statusCode() + " " + r.body());
            } catch (java.io.IOException e) {
                last = e;
            }
        }
        throw new AssertionError("no etcd member answered " + path, last);
    }

    /** The values under {@code key} as etcd stores them (a range read of the one key), or null. */
    public String get(String key) throws Exception {
        String body = call("/v3/kv/range", "{\"key\":\"" + b64(key) + "\"}");
        Matcher m = Pattern.compile("\"value\":\"([^\"]*)\"").matcher(body);
        return m.find() ? new String(Base64.getDecoder().decode(m.group(1)), StandardCharsets.UTF_8) : null;
    }

    private static long revision(String json) {
        Matcher m = REVISION.matcher(json);
        if (!m.find()) {
            throw new AssertionError("no revision in " + json);
        }
        return Long.parseLong(m.group(1));
    }

    private static String b64(String s) {
        return Base64.getEncoder().encodeToString(s.getBytes(StandardCharsets.UTF_8));
    }

    @Override
    public void close() throws Exception {
        run(120, "destroy");
    }
}
