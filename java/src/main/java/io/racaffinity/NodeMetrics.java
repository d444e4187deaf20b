package io.racaffinity;

/**
 * One node's state and counters, from one metrics snapshot.
 *
 * @param node node id
 * @param name node name
 * @param state current state
 * @param downCause why it is down or draining ({@code none} when up; else {@code admin}, {@code event},
 *     {@code heartbeat}, {@code ejected} or {@code drained}: a planned drain's deadline passed)
 * @param weight static weight
 * @param rlbPercent RLB percent from the last advisory, -1 if none
 * @param picks routing decisions that returned this node
 * @param affinityHits of those, existing affinities honoured
 * @param repins affinities moved here from an unavailable node
 * @param strictRefusals strict refusals naming this node
 * @param inFlight leases in flight
 * @param successes leases released OK
 * @param failures node-level failures reported
 * @param stateChanges state transitions
 * @param probeMisses missed heartbeats
 * @param txSpans global transactions that had branches here and then one placed on another node (soft
 *     transaction affinity: each was committed on two nodes)
 */
public record NodeMetrics(
        int node,
        String name,
        NodeState state,
        String downCause,
        int weight,
        int rlbPercent,
        long picks,
        long affinityHits,
        long repins,
        long strictRefusals,
        long inFlight,
        long successes,
        long failures,
        long stateChanges,
        long probeMisses,
        long txSpans) {}
