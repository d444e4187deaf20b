package io.racaffinity;

/**
 * A strict scope's node is unavailable (UCP's strict mode: {@code useStrictXAAffinity}, {@code useStrictWebSessionAffinity}). The message names the scope, node and state.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_STRICT_AFFINITY} (see the exception table in the README).
 */
public class StrictAffinityException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public StrictAffinityException(String message) {
        super(message);
    }
}
