package io.racaffinity;

import java.util.Optional;

/**
 * The health of a cluster's topology feed ({@code topology.feed}), from one snapshot: the
 * {@code feed} object of {@link Cluster#metricsJson()} as a value (docs/operations.md,
 * "Topology feed").
 *
 * @param url the {@code topology.feed} URL
 * @param connected a watch is open and answering
 * @param revision every record up to this etcd revision is applied
 * @param leaderRevision etcd's revision at the subscriber's last answer
 * @param lag records (keys) under the prefix written after {@code revision}, at the last check (a key
 *     written several times counts once)
 * @param applied records that changed or confirmed this cluster's view
 * @param stale records older than what the cluster had (no change)
 * @param refused records refused (malformed, unknown node): nothing changed
 * @param reconnects watches re-opened after a failure
 * @param fullReads whole-prefix reads (the first, and one after each compaction)
 * @param lastError the last failure to reach etcd, if the feed is not connected
 * @param lastRefused why the last refused record was refused
 */
public record FeedStatus(
        String url,
        boolean connected,
        long revision,
        long leaderRevision,
        long lag,
        long applied,
        long stale,
        long refused,
        long reconnects,
        long fullReads,
        Optional<String> lastError,
        Optional<String> lastRefused) {

    /** {@code Native.feedStatus}' array: {url, lastError, lastRefused, long[] counters}; null without a feed. */
    static FeedStatus of(Object[] raw) {
        if (raw == null) {
            return null;
        }
        long[] c = (long[]) raw[3];
        return new FeedStatus((String) raw[0], c[0] != 0, c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8],
                Optional.ofNullable((String) raw[1]), Optional.ofNullable((String) raw[2]));
    }
}
