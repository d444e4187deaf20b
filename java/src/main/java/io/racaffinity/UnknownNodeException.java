package io.racaffinity;

/**
 * A node name, id, instance or host the cluster does not have.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_UNKNOWN_NODE} (see the exception table in the README).
 */
public class UnknownNodeException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public UnknownNodeException(String message) {
        super(message);
    }
}
