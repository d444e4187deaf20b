package io.racaffinity;

/**
 * A prepared transaction's node is down. Prepared branches never move, even in soft mode: retry when the node is back.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_PREPARED_NODE_UNAVAILABLE} (see the exception table in the README).
 */
public class PreparedNodeUnavailableException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public PreparedNodeUnavailableException(String message) {
        super(message);
    }
}
