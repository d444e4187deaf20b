package io.racaffinity;

/**
 * A lease was released twice.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_INVALID_LEASE} (see the exception table in the README).
 */
public class InvalidLeaseException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public InvalidLeaseException(String message) {
        super(message);
    }
}
