package io.racaffinity;

import io.racaffinity.Continuity.Refusal;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.concurrent.atomic.LongAdder;

/**
 * How request replay ended its recoveries on one cluster (docs/continuity.md, "Java",
 * "Counts"), summed over every data source of the cluster
 * ({@code io.racaffinity.jdbc.AffinityDataSource} with {@code replay=true}), as the cluster's
 * MXBean ({@code Replays}, {@code ReplayCommittedAlready}, {@code ReplayRefusals},
 * {@code ReplayOutcomeChecks}, {@code ReplayOutcomesForced}) and the Micrometer binder
 * ({@code racaffinity.replay.*}) show them.
 *
 * <p>A recovery begins when a request's connection fails with an error the core calls
 * recoverable, and ends in exactly one of: {@link #replayed()} (a replay carried the request
 * on), {@link #committedAlready()} (the COMMIT in flight had committed: the request succeeded,
 * nothing replayed) or a refusal ({@link #refused(Refusal)}: the application got the original
 * error, whose {@code ReplayRefusedException} has that refusal). A failure of the replay itself
 * is part of the same recovery, counted once by the end the application sees. The application's
 * own errors (a constraint, a syntax error: the {@code NOT_RECOVERABLE} cause on the first error)
 * begin no recovery and are not counted.
 *
 * <p>Counted by the replay walk that does the I/O, not the core: {@link Cluster#replayStep} is a
 * decision without side effects. The data source's walk reports each end with the {@code count}
 * methods; a host that runs its own walk over {@link Cluster#replayStep} may report its ends the
 * same way, and the cluster's MXBean and meters show them. Kept per cluster, in this package
 * beside {@link Cluster} (the MXBean's package reads them, the data source's writes them), so
 * that data sources sharing one cluster (and its one MXBean) count together; a cluster's counts
 * live as long as it is reachable.
 */
public final class ReplayCounts {
    /** Clusters are compared by identity (Cluster does not override equals). */
    private static final Map<Cluster, ReplayCounts> BY_CLUSTER = new WeakHashMap<>();

    private final LongAdder replayed = new LongAdder();
    private final LongAdder committed = new LongAdder();
    private final LongAdder checks = new LongAdder();
    private final LongAdder forced = new LongAdder();
    private final LongAdder[] refused = new LongAdder[Refusal.values().length];

    private ReplayCounts() {
        for (int i = 0; i < refused.length; i++) {
            refused[i] = new LongAdder();
        }
    }

    /**
     * The counts of a cluster (all zero until a data source of it replays).
     *
     * @param cluster the cluster
     * @return its counts
     */
    public static ReplayCounts of(Cluster cluster) {
        synchronized (BY_CLUSTER) {
            return BY_CLUSTER.computeIfAbsent(cluster, c -> new ReplayCounts());
        }
    }

    /** @return recoveries a replay ended: the request went on, on another node, and the application saw no error */
    public long replayed() {
        return replayed.sum();
    }

    /** @return recoveries that found the COMMIT in flight committed: the request succeeded, nothing was replayed */
    public long committedAlready() {
        return committed.sum();
    }

    /**
     * @param refusal why
     * @return recoveries that ended in the original error with this refusal
     */
    public long refused(Refusal refusal) {
        return refused[refusal.ordinal()].sum();
    }

    /** @return recoveries that ended in the original error, whatever the refusal */
    public long refusedTotal() {
        long n = 0;
        for (LongAdder a : refused) {
            n += a.sum();
        }
        return n;
    }

    /**
     * @return refusal name in lower case ({@code outcome_unknown}, ...) → recoveries that ended with
     *     it, every refusal listed (0 included), {@code none} left out
     */
    public Map<String, Long> refusals() {
        Map<String, Long> m = new LinkedHashMap<>();
        for (Refusal r : Refusal.values()) {
            if (r != Refusal.NONE) {
                m.put(r.name().toLowerCase(Locale.ROOT), refused(r));
            }
        }
        return Collections.unmodifiableMap(m);
    }

    /**
     * @return outcome checks run: {@code pg_xact_status} of a COMMIT in flight asked of a node,
     *     whatever it answered (a node that gave no connection within the deadline included)
     */
    public long outcomeChecks() {
        return checks.sum();
    }

    /** @return outcomes forced: the old transaction's backend ended ({@code pg_terminate_backend}) before a check */
    public long outcomesForced() {
        return forced.sum();
    }

    /** A recovery a replay ended: the request went on elsewhere and the application saw no error. */
    public void countReplayed() {
        replayed.increment();
    }

    /** A recovery that found the COMMIT in flight committed: nothing replayed. */
    public void countCommittedAlready() {
        committed.increment();
    }

    /**
     * A recovery that ended in the original error with {@code refusal}.
     *
     * @param refusal why
     */
    public void countRefused(Refusal refusal) {
        refused[refusal.ordinal()].increment();
    }

    /**
     * An outcome check run, or with {@code force} an outcome forced (the old transaction's
     * backend ended before a check).
     *
     * @param force which of the two
     */
    public void countCheck(boolean force) {
        (force ? forced : checks).increment();
    }

    @Override
    public String toString() {
        return "ReplayCounts[replayed=" + replayed() + ", committedAlready=" + committedAlready() + ", refused="
                + refusals() + ", outcomeChecks=" + outcomeChecks() + ", outcomesForced=" + outcomesForced() + "]";
    }
}
