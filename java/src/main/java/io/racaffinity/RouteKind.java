package io.racaffinity;

/** How a node was chosen. Values and order mirror the C ABI's {@code racaffinity_route_kind}. */
public enum RouteKind {
    /** The load-balancing policy chose. */
    BALANCED,
    /** An existing affinity was honoured. */
    AFFINITY,
    /** A new affinity was created. */
    PLACED,
    /** The affinity moved off an unavailable node. */
    REPINNED,
    /** Data affinity fell back to load balancing for this call. */
    FALLBACK,
    /** The panic policy chose among unavailable nodes. */
    PANIC;

    private static final RouteKind[] VALUES = values();

    /** How many kinds there are. */
    static final int COUNT = VALUES.length;

    static RouteKind of(int code) {
        return VALUES[code];
    }
}
