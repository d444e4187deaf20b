package io.racaffinity;

/**
 * An argument is out of range or malformed: an empty or oversized gtrid (&gt; 64 bytes) or key (&gt; 1024 bytes), a bad node name, weight, partition or connect-string value.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_INVALID_ARGUMENT} (see the exception table in the README).
 */
public class InvalidArgumentException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public InvalidArgumentException(String message) {
        super(message);
    }
}
