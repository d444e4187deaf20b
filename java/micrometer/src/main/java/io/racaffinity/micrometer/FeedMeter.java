package io.racaffinity.micrometer;

import io.racaffinity.FeedStatus;
import java.util.List;
import java.util.function.ToLongFunction;

/**
 * One meter of the topology feed's health ({@code racaffinity.feed.<suffix>}, tagged
 * {@code racaffinity.cluster}): the same names in {@link AffinityMetrics},
 * {@link AffinityOpenTelemetry} and Python's {@code racaffinity.otel}.
 */
record FeedMeter(String suffix, String description, ToLongFunction<FeedStatus> value) {
    /** Levels: gauges (Micrometer), up-down counters (OpenTelemetry). */
    static final List<FeedMeter> LEVELS = List.of(
            new FeedMeter("connected", "1 while a watch on the topology feed is open and answering, else 0",
                    st -> st.connected() ? 1 : 0),
            new FeedMeter("revision", "The etcd revision up to which every feed record is applied",
                    FeedStatus::revision),
            new FeedMeter("lag", "Feed records written after the applied revision, at the last check",
                    FeedStatus::lag));

    /** Counts that only grow: counters. */
    static final List<FeedMeter> COUNTERS = List.of(
            new FeedMeter("records.applied", "Feed records that changed or confirmed this cluster's view",
                    FeedStatus::applied),
            new FeedMeter("records.refused", "Feed records refused (malformed or unknown node); nothing changed",
                    FeedStatus::refused));

    String name() {
        return "racaffinity.feed." + suffix;
    }
}
