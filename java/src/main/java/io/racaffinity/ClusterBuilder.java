package io.racaffinity;

import java.time.Duration;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The body of {@link Cluster.Builder}, in its own file so that {@code Cluster.java} holds the
 * cluster only: renders config text from typed settings and passes it to the core, which
 * validates it. Package-private and self-typed so that the public type stays
 * {@code Cluster.Builder} and every setter of a chain returns it.
 *
 * @param <B> the public builder type
 */
abstract class ClusterBuilder<B extends ClusterBuilder<B>> {
    private final Map<String, String> entries = new LinkedHashMap<>();

    ClusterBuilder() {}

    @SuppressWarnings("unchecked")
    private B self() {
        return (B) this;
    }

    /**
     * Sets any config key (see the README's table). Setting a key again replaces it, also under
     * another spelling of the same key ({@code node.a.weight} and {@code node.A.weight}).
     *
     * @param key the key
     * @param value its value
     * @return this builder
     * @throws InvalidConfigException if the key or value contains a line or entry separator
     */
    public B set(String key, String value) {
        Objects.requireNonNull(key, "key");
        Objects.requireNonNull(value, "value");
        String k = key.trim();
        if (k.isEmpty() || k.contains("=") || k.startsWith("#") || k.startsWith("!") || separator(k)) {
            throw new InvalidConfigException("invalid config key `" + key + "`: a key is non-empty, has no"
                    + " `=`, newline or `;`, and does not start with `#` or `!`");
        }
        if (separator(value)) {
            throw new InvalidConfigException(
                    "invalid config key `" + k + "`: the value must not contain a newline or `;`");
        }
        // One key to the core, whatever its spelling (node names match case-insensitively): the
        // core refuses a key given twice, so the earlier spelling goes.
        String same = canonical(k);
        entries.keySet().removeIf(e -> canonical(e).equals(same));
        entries.put(k, value.trim());
        return self();
    }

    /** A key as the core compares keys: {@code node.*} in ASCII upper case, a partition by its number. */
    private static String canonical(String key) {
        if (key.startsWith("node.")) {
            StringBuilder sb = new StringBuilder(key.length());
            for (int i = 0; i < key.length(); i++) {
                char ch = key.charAt(i);
                sb.append(ch >= 'a' && ch <= 'z' ? (char) (ch - 'a' + 'A') : ch);
            }
            return sb.toString();
        }
        String p = "data.partition.";
        if (key.startsWith(p) && key.length() > p.length() && key.length() - p.length() <= 9
                && key.substring(p.length()).chars().allMatch(ch -> ch >= '0' && ch <= '9')) {
            return p + Integer.parseInt(key.substring(p.length()));
        }
        return key;
    }

    private static boolean separator(String s) {
        return s.indexOf('\n') >= 0 || s.indexOf('\r') >= 0 || s.indexOf(';') >= 0;
    }

    /**
     * @param name cluster name: metrics label and JMX name
     * @return this builder
     */
    public B name(String name) {
        return set("name", name);
    }

    /**
     * @param database FAN/RLB events for another database are rejected
     * @return this builder
     */
    public B database(String database) {
        return set("database", database);
    }

    /**
     * @param service FAN/RLB events for another service are rejected
     * @return this builder
     */
    public B service(String service) {
        return set("service", service);
    }

    /**
     * @param names node (instance) names in id order
     * @return this builder
     */
    public B nodes(String... names) {
        return nodes(Arrays.asList(names));
    }

    /**
     * @param names node (instance) names in id order
     * @return this builder
     */
    public B nodes(List<String> names) {
        // String.join renders a null as a node named "null".
        for (String n : Objects.requireNonNull(names, "names")) {
            Objects.requireNonNull(n, "node name");
        }
        return set("nodes", String.join(", ", names));
    }

    /**
     * @param node node name
     * @param address {@code host:port} of its listener
     * @return this builder
     */
    public B address(String node, String address) {
        return set("node." + Objects.requireNonNull(node, "node") + ".address", address);
    }

    /**
     * @param node node name
     * @param weight 1..1000000
     * @return this builder
     */
    public B weight(String node, int weight) {
        return set("node." + Objects.requireNonNull(node, "node") + ".weight", Integer.toString(weight));
    }

    /**
     * @param policy {@code least_outstanding} (default), {@code random}, {@code round_robin} or {@code weighted}
     * @return this builder
     */
    public B policy(String policy) {
        return set("policy", policy);
    }

    /**
     * @param panic {@code try_all} (default) or {@code fail}
     * @return this builder
     */
    public B panic(String panic) {
        return set("panic", panic);
    }

    /**
     * @param scope the scope
     * @param strict refuse instead of moving work
     * @return this builder
     */
    public B strict(Scope scope, boolean strict) {
        return set(scope.configName() + ".strict", Boolean.toString(strict));
    }

    /**
     * @param autoPin every pick on an unpinned thread pins it ({@code thread.auto_pin})
     * @return this builder
     */
    public B autoPin(boolean autoPin) {
        return set("thread.auto_pin", Boolean.toString(autoPin));
    }

    /**
     * @param scope {@code TRANSACTION}, {@code SESSION} or {@code DATA}
     * @param placement {@code rendezvous} or {@code balanced}
     * @return this builder
     */
    public B placement(Scope scope, String placement) {
        return set(scope.configName() + ".placement", placement);
    }

    /**
     * @param mode {@code registry} (default) or {@code stateless}
     * @return this builder
     */
    public B sessionMode(String mode) {
        return set("session.mode", mode);
    }

    /**
     * @param ttl a session unused this long is forgotten
     * @return this builder
     */
    public B sessionIdleTtl(Duration ttl) {
        return setDuration("session.idle_ttl", ttl);
    }

    /**
     * @param partitions data partitions, 1..1048576
     * @return this builder
     */
    public B partitions(int partitions) {
        return set("data.partitions", Integer.toString(partitions));
    }

    /**
     * @param partition a partition
     * @param node the node owning it
     * @return this builder
     */
    public B partition(int partition, String node) {
        return set("data.partition." + partition, node);
    }

    /**
     * @param failures consecutive failures before ejection (0: off)
     * @return this builder
     */
    public B ejectAfterFailures(int failures) {
        return set("health.eject_after_failures", Integer.toString(failures));
    }

    /**
     * @param backoff first ejection length
     * @return this builder
     */
    public B ejectBackoff(Duration backoff) {
        return setDuration("health.eject_backoff", backoff);
    }

    /**
     * @param max back-off cap
     * @return this builder
     */
    public B ejectBackoffMax(Duration max) {
        return setDuration("health.eject_backoff_max", max);
    }

    /**
     * @param interval how often hosts probe each node
     * @return this builder
     */
    public B heartbeatInterval(Duration interval) {
        return setDuration("heartbeat.interval", interval);
    }

    /**
     * @param misses consecutive misses before Down
     * @return this builder
     */
    public B heartbeatMisses(int misses) {
        return set("heartbeat.misses", Integer.toString(misses));
    }

    /**
     * A duration key, in milliseconds, the finest unit the core reads: a finer duration is the key's error, as is
     * one too long for a {@code long} of them, since {@code toMillis()} would cut it silently (1.5 ms to 1 ms,
     * 0.5 ms to a 0 the caller never gave).
     */
    private B setDuration(String key, Duration d) {
        Objects.requireNonNull(d, key);
        if (d.getNano() % 1_000_000 != 0) {
            throw new InvalidConfigException("invalid config key `" + key + "`: duration " + d
                    + " is not a whole number of milliseconds (the finest unit of a duration)");
        }
        long ms;
        try {
            ms = d.toMillis();
        } catch (ArithmeticException e) {
            throw new InvalidConfigException("invalid config key `" + key + "`: duration " + d + " is too large");
        }
        return set(key, ms + "ms");
    }

    /** @return the rendered config text */
    public String toConfig() {
        StringBuilder sb = new StringBuilder();
        entries.forEach((k, v) -> sb.append(k).append(" = ").append(v).append('\n'));
        return sb.toString();
    }

    /**
     * @return the cluster
     * @throws InvalidConfigException if the core refuses the config (the message names the key)
     */
    public Cluster build() {
        return Cluster.fromConfig(toConfig());
    }

    @Override
    public String toString() {
        return "Cluster.Builder[" + toConfig().replace('\n', ';') + "]";
    }
}
