package io.racaffinity;

/**
 * Bad config text or builder value; the message names the key.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_CONFIG} (see the exception table in the README).
 */
public class InvalidConfigException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public InvalidConfigException(String message) {
        super(message);
    }
}
