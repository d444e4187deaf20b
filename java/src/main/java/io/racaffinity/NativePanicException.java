package io.racaffinity;

/**
 * A panic was caught at the native library boundary. This is a bug in racaffinity: please report it. The JVM keeps running.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_PANIC} (see the exception table in the README).
 */
public class NativePanicException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public NativePanicException(String message) {
        super(message);
    }
}
