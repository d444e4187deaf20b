package io.racaffinity.micrometer;

import io.racaffinity.Continuity.Refusal;
import io.racaffinity.ReplayCounts;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.function.ToLongFunction;

/**
 * One counter of request replay ({@code racaffinity.replay.<suffix>}, tagged
 * {@code racaffinity.cluster}; {@link ReplayCounts}): the same names in {@link AffinityMetrics}
 * and {@link AffinityOpenTelemetry}. Java's own: Python's pools count no replays yet.
 */
record ReplayMeter(String suffix, String description, ToLongFunction<ReplayCounts> value) {
    /** The refusal of {@link #REFUSED}'s series: {@code not_replayable}, {@code outcome_unknown}, ... */
    static final String REFUSAL = "racaffinity.replay.refusal";

    static final List<ReplayMeter> COUNTERS = List.of(
            new ReplayMeter("replayed", "Recoveries a replay ended: the request went on, on another node",
                    ReplayCounts::replayed),
            new ReplayMeter("committed_already",
                    "Recoveries that found the COMMIT in flight committed: the request succeeded, not replayed",
                    ReplayCounts::committedAlready),
            new ReplayMeter("outcome_checks", "Outcome checks run (pg_xact_status of a COMMIT in flight asked of a node)",
                    ReplayCounts::outcomeChecks),
            new ReplayMeter("outcomes_forced", "Old transactions' backends ended through a node before a check",
                    ReplayCounts::outcomesForced));

    /** Recoveries that ended in the original error, one series per refusal. */
    static final ReplayMeter REFUSED = new ReplayMeter("refused",
            "Recoveries that ended in the original error, by refusal", ReplayCounts::refusedTotal);

    /** Every refusal a recovery can end with ({@code NONE} is none). */
    static final List<Refusal> REFUSALS = Arrays.stream(Refusal.values()).filter(r -> r != Refusal.NONE).toList();

    static String refusalName(Refusal r) {
        return r.name().toLowerCase(Locale.ROOT);
    }

    String name() {
        return "racaffinity.replay." + suffix;
    }
}
