package io.racaffinity;

/**
 * Malformed or unsupported FAN/RLB event text. Nothing changed.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_EVENT_PARSE} (see the exception table in the README).
 */
public class EventParseException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public EventParseException(String message) {
        super(message);
    }
}
