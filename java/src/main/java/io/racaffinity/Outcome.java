package io.racaffinity;

/** How a leased unit of work ended. Mirrors the C ABI's {@code racaffinity_outcome}. */
public enum Outcome {
    /** Completed: counts as a success for the node. */
    OK,
    /** Failed with a node-level error: feeds passive ejection. */
    FAILED,
    /** Ended without a verdict on the node. */
    NEUTRAL
}
