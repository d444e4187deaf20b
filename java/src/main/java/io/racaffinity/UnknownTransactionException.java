package io.racaffinity;

/**
 * A gtrid the transaction registry does not hold.
 *
 * <p>Thrown for result code {@code RACAFFINITY_RESULT_UNKNOWN_TRANSACTION} (see the exception table in the README).
 */
public class UnknownTransactionException extends AffinityException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong, naming the key, scope, node or gtrid involved
     */
    public UnknownTransactionException(String message) {
        super(message);
    }
}
