package io.racaffinity;

/**
 * More than 4096 live clusters in the process.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_TOO_MANY_HANDLES} (see the exception table in the README).
 */
public class TooManyClustersException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public TooManyClustersException(String message) {
        super(message);
    }
}
