package io.racaffinity;

/**
 * An event for another database or service than the cluster's. Nothing changed.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_FOREIGN_EVENT} (see the exception table in the README).
 */
public class ForeignEventException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public ForeignEventException(String message) {
        super(message);
    }
}
