package io.racaffinity;

/**
 * Nothing can take the work and the panic policy is {@code fail}.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_NO_NODE_AVAILABLE} (see the exception table in the README).
 */
public class NoNodeAvailableException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public NoNodeAvailableException(String message) {
        super(message);
    }
}
