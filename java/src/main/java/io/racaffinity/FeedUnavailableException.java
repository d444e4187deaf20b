package io.racaffinity;

/**
 * An operator call (mark down, drain, weight, membership) could not be written to the topology
 * feed ({@code topology.feed}); nothing changed, in this JVM or in any other process of the fleet.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_FEED_UNAVAILABLE}.
 */
public class FeedUnavailableException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the etcd members tried
     */
    public FeedUnavailableException(String message) {
        super(message);
    }
}
