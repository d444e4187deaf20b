package io.racaffinity;

/**
 * The cluster was closed (its native handle is stale or freed): use after close.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_INVALID_HANDLE} (see the exception table in the README).
 */
public class ClusterClosedException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public ClusterClosedException(String message) {
        super(message);
    }
}
