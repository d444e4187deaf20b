package io.racaffinity.micrometer;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.sdk.common.CompletableResultCode;
import io.opentelemetry.sdk.metrics.InstrumentType;
import io.opentelemetry.sdk.metrics.data.AggregationTemporality;
import io.opentelemetry.sdk.metrics.data.LongPointData;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.metrics.export.CollectionRegistration;
import io.opentelemetry.sdk.metrics.export.MetricReader;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Collects when asked, as opentelemetry-sdk-testing's InMemoryMetricReader does, and reads what
 * {@link AffinityMetricsTest} and {@link ReplayMetersTest} look at.
 */
final class CollectingReader implements MetricReader {
    private volatile CollectionRegistration registration;

    @Override
    public void register(CollectionRegistration r) {
        registration = r;
    }

    @Override
    public AggregationTemporality getAggregationTemporality(InstrumentType type) {
        return AggregationTemporality.CUMULATIVE;
    }

    @Override
    public CompletableResultCode forceFlush() {
        return CompletableResultCode.ofSuccess();
    }

    @Override
    public CompletableResultCode shutdown() {
        return CompletableResultCode.ofSuccess();
    }

    /** The long points of one instrument, as text. */
    List<String> points(String name) {
        return registration.collectAllMetrics().stream().filter(d -> d.getName().equals(name))
                .flatMap(d -> d.getLongSumData().getPoints().stream())
                .map(p -> p.getAttributes() + "=" + p.getValue()).toList();
    }

    /** Every racaffinity.replay.* counter: name (with its refusal, if any) → value. */
    Map<String, Double> replay() {
        Map<String, Double> m = new TreeMap<>();
        AttributeKey<String> refusal = AttributeKey.stringKey(ReplayMeter.REFUSAL);
        for (MetricData d : registration.collectAllMetrics()) {
            if (d.getName().startsWith("racaffinity.replay.")) {
                assertTrue(d.getLongSumData().isMonotonic(), d.getName() + " is a counter");
                for (LongPointData p : d.getLongSumData().getPoints()) {
                    String r = p.getAttributes().get(refusal);
                    m.put(d.getName() + (r == null ? "" : "{" + r + "}"), (double) p.getValue());
                }
            }
        }
        return m;
    }
}
