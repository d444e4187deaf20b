package io.racaffinity.micrometer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.sun.net.httpserver.HttpServer;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import io.opentelemetry.exporter.otlp.http.metrics.OtlpHttpMetricExporter;
import io.opentelemetry.exporter.prometheus.PrometheusHttpServer;
import io.opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest;
import io.opentelemetry.proto.common.v1.KeyValue;
import io.opentelemetry.proto.metrics.v1.AggregationTemporality;
import io.opentelemetry.proto.metrics.v1.Metric;
import io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import io.opentelemetry.proto.metrics.v1.ScopeMetrics;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.export.PeriodicMetricReader;
import io.racaffinity.jdbc.AffinityDataSource;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

/**
 * One dashboard for both languages (issue 27, Java 8): after the same traffic (connections
 * borrowed and returned on every node pool, one pool timeout), the Prometheus families
 * served by Java (Micrometer's Prometheus registry with {@link AffinityMetrics}, and the
 * OpenTelemetry SDK's Prometheus exporter with {@link AffinityOpenTelemetry}) and by Python
 * ({@code racaffinity.otel} with OpenTelemetry's Prometheus exporter, run as a child
 * process) have the same names, types, units and label keys; and the OTLP export of the
 * Java binder, received by a tiny OTLP/HTTP server of the test's own, follows
 * OpenTelemetry's semantic conventions for {@code db.client.connection.*}.
 */
class MetricNamesTest {
    /**
     * OpenTelemetry semantic conventions (database client metrics): name, instrument, unit.
     * The racaffinity.* ones follow the same rules: counts that only grow are counters,
     * levels are up-down counters.
     */
    static final Map<String, String[]> CONVENTIONS = new TreeMap<>(Map.ofEntries(
            Map.entry("db.client.connection.count", new String[] {"updowncounter", "{connection}"}),
            Map.entry("db.client.connection.idle.min", new String[] {"updowncounter", "{connection}"}),
            Map.entry("db.client.connection.max", new String[] {"updowncounter", "{connection}"}),
            Map.entry("db.client.connection.pending_requests", new String[] {"updowncounter", "{request}"}),
            Map.entry("db.client.connection.timeouts", new String[] {"counter", "{timeout}"}),
            Map.entry("db.client.connection.create_time", new String[] {"histogram", "s"}),
            Map.entry("db.client.connection.wait_time", new String[] {"histogram", "s"}),
            Map.entry("db.client.connection.use_time", new String[] {"histogram", "s"}),
            Map.entry("racaffinity.node.picks", new String[] {"counter", ""}),
            Map.entry("racaffinity.node.affinity_hits", new String[] {"counter", ""}),
            Map.entry("racaffinity.node.repins", new String[] {"counter", ""}),
            Map.entry("racaffinity.node.strict_refusals", new String[] {"counter", ""}),
            Map.entry("racaffinity.node.failures", new String[] {"counter", ""}),
            Map.entry("racaffinity.node.in_flight", new String[] {"updowncounter", ""}),
            Map.entry("racaffinity.node.status", new String[] {"updowncounter", ""}),
            // Deprecated (racaffinity.node.status), served one release more.
            Map.entry("racaffinity.node.state", new String[] {"updowncounter", ""}),
            Map.entry("racaffinity.scope.hits", new String[] {"counter", ""}),
            Map.entry("racaffinity.scope.placements", new String[] {"counter", ""}),
            Map.entry("racaffinity.scope.repins", new String[] {"counter", ""}),
            Map.entry("racaffinity.scope.fallbacks", new String[] {"counter", ""}),
            Map.entry("racaffinity.scope.strict_refusals", new String[] {"counter", ""}),
            Map.entry("racaffinity.scope.live", new String[] {"updowncounter", ""}),
            Map.entry("racaffinity.feed.connected", new String[] {"updowncounter", ""}),
            Map.entry("racaffinity.feed.revision", new String[] {"updowncounter", ""}),
            Map.entry("racaffinity.feed.lag", new String[] {"updowncounter", ""}),
            Map.entry("racaffinity.feed.records.applied", new String[] {"counter", ""}),
            Map.entry("racaffinity.feed.records.refused", new String[] {"counter", ""})));

    /**
     * A topology feed no etcd answers (the constructor does not wait for a refused
     * connection): the feed's meters exist, reading not connected, in both languages. The
     * same in python_prometheus.py.
     */
    static final String FEED = "topology.feed = etcd://127.0.0.1:1/names";

    static final String OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8";

    /** One Prometheus metric family: its type, unit and the label keys of its samples. */
    record Family(String type, String unit, Set<String> labels) {
        @Override
        public String toString() {
            return type + (unit.isEmpty() ? "" : " (" + unit + ")") + " " + labels;
        }
    }

    static int port(int i) {
        return AffinityMetricsTest.port(i);
    }

    static AffinityDataSource dataSource(String name) {
        AffinityDataSource ds = new AffinityDataSource();
        String nodes = port(1) + ", " + port(2) + ", " + port(3);
        ds.setConfig("name = " + name + "; nodes = " + nodes + "; policy = round_robin; " + FEED);
        ds.setUrlTemplate("jdbc:postgresql://127.0.0.1:{instance}/postgres");
        ds.setDataSourceClassName("com.zaxxer.hikari.HikariDataSource");
        ds.setDataSourcePropertyList("maximumPoolSize=2 | minimumIdle=1 | connectionTimeout=250");
        ds.setUser("postgres");
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        return ds;
    }

    /**
     * What the Python script does too: 6 round-robin connections, then two held on one pool
     * (its second connection is created: {@code create_time}) and a third that times out.
     */
    static void traffic(AffinityDataSource ds) throws SQLException {
        for (int i = 0; i < 6; i++) {
            try (Connection c = ds.getConnection()) {
                c.createStatement().execute("select 1");
            }
        }
        DataSource pool = ds.getNodeDataSource(Integer.toString(port(1)));
        try (Connection held = pool.getConnection(); Connection held2 = pool.getConnection()) {
            assertThrows(SQLException.class, pool::getConnection, "a pool of 2 with both connections held");
        }
    }

    /** Families named {@code db_client_*} or {@code racaffinity_*} of an OpenMetrics text. */
    static Map<String, Family> families(String text) {
        Map<String, String> types = new TreeMap<>();
        Map<String, String> units = new TreeMap<>();
        Map<String, Set<String>> labels = new TreeMap<>();
        Pattern meta = Pattern.compile("# (TYPE|UNIT) (\\S+) (\\S+)");
        Pattern sample = Pattern.compile("([a-zA-Z_:][a-zA-Z0-9_:]*)(\\{(.*)\\})? .*");
        Pattern label = Pattern.compile("([a-zA-Z_][a-zA-Z0-9_]*)=\"(?:[^\"\\\\]|\\\\.)*\"");
        for (String line : text.split("\n")) {
            Matcher m = meta.matcher(line);
            if (m.matches()) {
                (m.group(1).equals("TYPE") ? types : units).put(m.group(2), m.group(3));
                continue;
            }
            m = sample.matcher(line);
            if (line.startsWith("#") || !m.matches()) {
                continue;
            }
            String family = null;
            for (String f : types.keySet()) {
                if ((m.group(1).equals(f) || m.group(1).startsWith(f + "_"))
                        && (family == null || f.length() > family.length())) {
                    family = f;
                }
            }
            if (family == null) {
                continue;
            }
            Set<String> keys = labels.computeIfAbsent(family, k -> new TreeSet<>());
            if (m.group(3) != null) {
                Matcher l = label.matcher(m.group(3));
                while (l.find()) {
                    String k = l.group(1);
                    // The OpenTelemetry exporters' scope labels and a histogram's bucket bound.
                    if (!k.startsWith("otel_scope_") && !k.equals("le")) {
                        keys.add(k);
                    }
                }
            }
        }
        Map<String, Family> out = new TreeMap<>();
        types.forEach((name, type) -> {
            if (name.startsWith("db_client_") || name.startsWith("racaffinity_")) {
                out.put(name, new Family(type, units.getOrDefault(name, ""), labels.getOrDefault(name, Set.of())));
            }
        });
        return out;
    }

    static String micrometerPrometheus() throws Exception {
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        try (AffinityDataSource ds = dataSource("names")) {
            new AffinityMetrics(ds).bindTo(registry);
            traffic(ds);
            return registry.scrape(OPENMETRICS);
        } finally {
            registry.close();
        }
    }

    static String openTelemetryPrometheus() throws Exception {
        int port;
        try (java.net.ServerSocket free = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            port = free.getLocalPort();
        }
        PrometheusHttpServer server = PrometheusHttpServer.builder().setHost("127.0.0.1").setPort(port).build();
        try (SdkMeterProvider provider = SdkMeterProvider.builder().registerMetricReader(server).build();
                AffinityDataSource ds = dataSource("names")) {
            AffinityOpenTelemetry metrics = AffinityOpenTelemetry.install(ds, provider);
            traffic(ds);
            HttpResponse<String> r = HttpClient.newHttpClient().send(
                    HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/metrics"))
                            .header("Accept", OPENMETRICS).timeout(Duration.ofSeconds(10)).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals(200, r.statusCode(), r.body());
            metrics.close();
            return r.body();
        }
    }

    /** The Python exporter's output: src/test/resources/python_prometheus.py in the test virtualenv. */
    static String pythonPrometheus() throws Exception {
        Path repo = Path.of(System.getProperty("racaffinity.repo", "../..")).toAbsolutePath().normalize();
        String venv = System.getenv().getOrDefault("RACAFF_PY_VENV", repo.resolve("target/pyenv").toString());
        Path python = Path.of(venv, "bin", "python");
        if (!Files.isExecutable(python)) {
            fail(python + " is missing: java/run_module_tests.sh java/micrometer creates it"
                    + " (pip install './python[test]' into RACAFF_PY_VENV)");
        }
        Path script = Files.createTempFile("python_prometheus", ".py");
        try (InputStream in = MetricNamesTest.class.getResourceAsStream("/python_prometheus.py")) {
            Files.write(script, in.readAllBytes());
        }
        Process p = new ProcessBuilder(python.toString(), script.toString(), Integer.toString(port(1)),
                Integer.toString(port(2)), Integer.toString(port(3))).redirectError(ProcessBuilder.Redirect.INHERIT)
                .start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS), "python timed out");
        assertEquals(0, p.exitValue(), "python_prometheus.py failed:\n" + out);
        Files.delete(script);
        return out;
    }

    /** The {@code le} bounds of a histogram family's buckets. */
    static Set<Double> bucketBounds(String text, String family) {
        Set<Double> out = new TreeSet<>();
        Matcher m = Pattern.compile("(?m)^" + family + "_bucket\\{.*?le=\"([^\"]+)\"").matcher(text);
        while (m.find()) {
            out.add(m.group(1).equals("+Inf") ? Double.POSITIVE_INFINITY : Double.parseDouble(m.group(1)));
        }
        return out;
    }

    static String show(Map<String, Family> f) {
        return f.entrySet().stream().map(e -> "  " + e.getKey() + ": " + e.getValue())
                .collect(Collectors.joining("\n"));
    }

    static void sameFamilies(String what, Map<String, Family> python, Map<String, Family> java) {
        List<String> diffs = new ArrayList<>();
        Set<String> names = new TreeSet<>(python.keySet());
        names.addAll(java.keySet());
        for (String n : names) {
            if (!java.containsKey(n)) {
                diffs.add(n + ": only Python (" + python.get(n) + ")");
            } else if (!python.containsKey(n)) {
                diffs.add(n + ": only " + what + " (" + java.get(n) + ")");
            } else if (!python.get(n).equals(java.get(n))) {
                diffs.add(n + ": Python " + python.get(n) + ", " + what + " " + java.get(n));
            }
        }
        assertEquals(List.of(), diffs, what + " and Python serve different Prometheus families.\n" + what + ":\n"
                + show(java) + "\nPython:\n" + show(python));
    }

    /**
     * Python's pools have no creation hook: {@code create_time} is Java's only. Micrometer's
     * Prometheus registry adds a {@code _max} gauge to every timer, which OpenTelemetry has not.
     */
    static Map<String, Family> comparable(Map<String, Family> java) {
        Map<String, Family> out = new TreeMap<>(java);
        out.keySet().removeIf(n -> n.startsWith("db_client_connection_create_time_seconds")
                || n.matches("db_client_connection_\\w+_time_seconds_max"));
        return out;
    }

    /**
     * Micrometer's Prometheus registry writes no {@code # UNIT} line: its unit is the name's
     * suffix only (as in the Prometheus text format, which has no unit line). Compared
     * without the metadata; the suffixes are checked against Python's units.
     */
    static Map<String, Family> withoutUnitLines(Map<String, Family> families) {
        Map<String, Family> out = new TreeMap<>();
        families.forEach((n, f) -> out.put(n, new Family(f.type(), "", f.labels())));
        return out;
    }

    @Test
    void javaAndPythonServeTheSamePrometheusFamilies() throws Exception {
        String pythonText = pythonPrometheus();
        String micrometerText = micrometerPrometheus();
        String otelText = openTelemetryPrometheus();
        Map<String, Family> python = families(pythonText);
        assertTrue(python.containsKey("db_client_connection_count"), show(python));
        assertTrue(python.containsKey("racaffinity_feed_connected"), show(python));
        for (String text : List.of(pythonText, micrometerText, otelText)) {
            assertTrue(Pattern.compile("(?m)^racaffinity_feed_connected\\{[^}]*racaffinity_cluster=\"names\"[^}]*\\} 0(\\.0)?$")
                    .matcher(text).find(), "an unreachable feed reads not connected:\n" + text);
        }
        Map<String, Family> micrometer = families(micrometerText);
        Map<String, Family> otel = families(otelText);
        System.out.println("Python:\n" + show(python) + "\nMicrometer:\n" + show(micrometer) + "\nOpenTelemetry Java:\n"
                + show(otel));
        python.forEach((n, f) -> assertTrue(f.unit().isEmpty() || n.endsWith("_" + f.unit()), n + " " + f));
        sameFamilies("Micrometer", withoutUnitLines(python), withoutUnitLines(comparable(micrometer)));
        sameFamilies("Java OpenTelemetry", python, comparable(otel));
        // Histograms of both languages aggregate in one query only with the same bucket bounds.
        Set<Double> bounds = bucketBounds(pythonText, "db_client_connection_wait_time_seconds");
        assertEquals(10, bounds.size(), "Python's bounds: " + bounds);
        assertEquals(bounds, bucketBounds(micrometerText, "db_client_connection_wait_time_seconds"), "Micrometer");
        assertEquals(bounds, bucketBounds(otelText, "db_client_connection_wait_time_seconds"), "Java OpenTelemetry");
        assertTrue(micrometer.containsKey("db_client_connection_create_time_seconds"), show(micrometer));
        assertTrue(otel.containsKey("db_client_connection_create_time_seconds"), show(otel));
    }

    @Test
    void otlpExportFollowsTheSemanticConventions() throws Exception {
        List<ExportMetricsServiceRequest> received = new CopyOnWriteArrayList<>();
        HttpServer receiver = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        receiver.createContext("/v1/metrics", exchange -> {
            try (InputStream in = exchange.getRequestBody()) {
                received.add(ExportMetricsServiceRequest.parseFrom(in.readAllBytes()));
            } catch (IOException e) {
                exchange.sendResponseHeaders(400, -1);
                return;
            }
            exchange.getResponseHeaders().add("Content-Type", "application/x-protobuf");
            exchange.sendResponseHeaders(200, -1);
            exchange.close();
        });
        receiver.start();
        try {
            OtlpHttpMetricExporter exporter = OtlpHttpMetricExporter.builder()
                    .setEndpoint("http://127.0.0.1:" + receiver.getAddress().getPort() + "/v1/metrics").build();
            try (SdkMeterProvider provider = SdkMeterProvider.builder()
                            .registerMetricReader(PeriodicMetricReader.builder(exporter)
                                    .setInterval(Duration.ofHours(1)).build())
                            .build();
                    AffinityDataSource ds = dataSource("otlp")) {
                AffinityOpenTelemetry metrics = AffinityOpenTelemetry.install(ds, provider);
                traffic(ds);
                assertTrue(provider.forceFlush().join(10, TimeUnit.SECONDS).isSuccess(), "OTLP export failed");
                metrics.close();
            }
        } finally {
            receiver.stop(0);
        }
        Map<String, Metric> metrics = new TreeMap<>();
        for (ExportMetricsServiceRequest r : received) {
            for (ResourceMetrics rm : r.getResourceMetricsList()) {
                for (ScopeMetrics sm : rm.getScopeMetricsList()) {
                    for (Metric m : sm.getMetricsList()) {
                        metrics.put(m.getName(), m);
                    }
                }
            }
        }
        List<String> wrong = new ArrayList<>();
        CONVENTIONS.forEach((name, conv) -> {
            Metric m = metrics.get(name);
            if (m == null) {
                wrong.add(name + ": not exported");
                return;
            }
            String kind = switch (m.getDataCase()) {
                case SUM -> m.getSum().getIsMonotonic() ? "counter" : "updowncounter";
                case HISTOGRAM -> "histogram";
                case GAUGE -> "gauge";
                default -> m.getDataCase().toString();
            };
            if (!kind.equals(conv[0]) || !m.getUnit().equals(conv[1])) {
                wrong.add(name + ": " + kind + " in `" + m.getUnit() + "`, not " + conv[0] + " in `" + conv[1] + "`");
            }
            if (m.getDataCase() == Metric.DataCase.SUM
                    && m.getSum().getAggregationTemporality() != AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE) {
                wrong.add(name + ": " + m.getSum().getAggregationTemporality());
            }
        });
        assertEquals(List.of(), wrong, "exported: " + metrics.keySet());
        // Attributes: db.client.connection.pool.name on every pool metric, state on count.
        Set<String> stateValues = new TreeSet<>();
        for (NumberDataPoint p : metrics.get("db.client.connection.count").getSum().getDataPointsList()) {
            Map<String, String> a = p.getAttributesList().stream()
                    .collect(Collectors.toMap(KeyValue::getKey, kv -> kv.getValue().getStringValue()));
            assertTrue(a.get("db.client.connection.pool.name").startsWith("otlp-"), a.toString());
            stateValues.add(a.get("db.client.connection.state"));
        }
        assertEquals(Set.of("idle", "used"), stateValues);
        assertEquals(1, metrics.get("db.client.connection.timeouts").getSum().getDataPointsList().stream()
                .mapToLong(p -> p.getAsInt()).sum(), "one pool timeout");
    }
}
