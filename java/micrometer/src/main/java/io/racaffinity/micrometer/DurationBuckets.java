package io.racaffinity.micrometer;

import java.util.List;

/**
 * The histogram bucket bounds of the {@code db.client.connection.*_time} durations, in
 * seconds, in both binders and in Python's {@code racaffinity.otel}: Prometheus
 * histograms from different processes aggregate only when their bounds agree, and
 * OpenTelemetry's default bounds (0, 5, 10, 25, ... 10000) suit milliseconds, not seconds.
 * Kept apart from both binders so that either loads without the other's library.
 */
final class DurationBuckets {
    static final List<Double> SECONDS = List.of(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0);

    private DurationBuckets() {}
}
