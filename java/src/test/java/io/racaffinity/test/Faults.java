package io.racaffinity.test;

import java.io.IOException;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The Toxiproxy fault tool of the node harness ({@code tests/cluster/faults}): proxies
 * ("instances") in front of the pgnodes nodes, and faults set on them. Every call has a
 * timeout. Ports follow {@code RACAFF_PG_BASE_PORT}, so a suite on its own nodes gets its own
 * proxies.
 */
public final class Faults {
    private static final Pattern PORT = Pattern.compile("RACAFF_PROXY(\\d+)_PORT=(\\d+)");

    private Faults() {}

    /** Runs {@code tests/cluster/faults args...}; returns stdout; fails on a non-zero exit. */
    public static String run(int timeoutSeconds, String... args) throws IOException, InterruptedException {
        return PgNodes.runTool("faults", "no fault tool at %s", timeoutSeconds, args);
    }

    /**
     * Starts {@code n} RAC-style instances: proxies all in front of node 1 (one database).
     *
     * @return instance number (1-based) → proxy port
     */
    public static Map<Integer, Integer> startRac(int n) throws IOException, InterruptedException {
        return start("start", Integer.toString(n), "--rac");
    }

    /**
     * Starts {@code n} instances, instance I in front of node I (independent databases).
     *
     * @return instance number (1-based) → proxy port
     */
    public static Map<Integer, Integer> startNodes(int n) throws IOException, InterruptedException {
        return start("start", Integer.toString(n));
    }

    private static Map<Integer, Integer> start(String... args) throws IOException, InterruptedException {
        run(180, args);
        Map<Integer, Integer> ports = new HashMap<>();
        Matcher m = PORT.matcher(run(30, "env"));
        while (m.find()) {
            ports.put(Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)));
        }
        return ports;
    }

    /** Instance {@code i} stops answering: connections stay open, no byte passes (calls hang until their timeout). */
    public static void blackhole(int i) throws IOException, InterruptedException {
        run(60, "blackhole", Integer.toString(i));
    }

    /** Instance {@code i} stops listening: new connections are refused, open ones closed. */
    public static void refuse(int i) throws IOException, InterruptedException {
        run(60, "refuse", Integer.toString(i));
    }

    public static void healAll() throws IOException, InterruptedException {
        run(60, "heal-all");
    }

    public static void stop() throws IOException, InterruptedException {
        run(60, "stop");
    }
}
