package io.racaffinity;

/**
 * Adding a node whose name exists.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_DUPLICATE_NODE} (see the exception table in the README).
 */
public class DuplicateNodeException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public DuplicateNodeException(String message) {
        super(message);
    }
}
