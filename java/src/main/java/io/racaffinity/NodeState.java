package io.racaffinity;

/** Node state. Values and order mirror the C ABI's {@code racaffinity_node_state}. */
public enum NodeState {
    /** Takes new work and new affinities. */
    UP,
    /** Planned maintenance: no new affinities; existing ones run to completion. */
    DRAINING,
    /** Takes no picks; affinities to it break (soft scopes re-pin, strict scopes refuse). */
    DOWN;

    private static final NodeState[] VALUES = values();

    static NodeState of(int code) {
        return VALUES[code];
    }
}
