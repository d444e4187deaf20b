package io.racaffinity;

/** Affinity scope, each with its own strict switch. Mirrors the C ABI's {@code racaffinity_scope}. */
public enum Scope {
    /** Thread pins: in Java, per {@link Thread} (platform or virtual) through a {@code ThreadLocal} context key. */
    THREAD,
    /** XA transactions by gtrid; strict is UCP's {@code useStrictXAAffinity}. */
    TRANSACTION,
    /** Web sessions; strict is UCP's {@code useStrictWebSessionAffinity}. */
    SESSION,
    /** Data (sharding key) affinity. */
    DATA;

    /** The config key prefix: {@code thread}, {@code transaction}, {@code session} or {@code data}. */
    String configName() {
        return name().toLowerCase(java.util.Locale.ROOT);
    }
}
