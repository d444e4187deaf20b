package io.racaffinity;

/**
 * Base class of every racaffinity error.
 *
 * <p>Unchecked on purpose. Most kinds are configuration or programming errors
 * (bad config, bad argument, unknown node, use after close) that a call site
 * cannot repair, and the rest are availability conditions (strict affinity,
 * no node available) that belong to the request's outer error handling, not
 * to every {@code pick()}. Unchecked exceptions keep the routing API usable in
 * lambdas, streams and JMX operations. The JDBC layer
 * ({@link io.racaffinity.jdbc.AffinityDataSource}) wraps them into
 * {@link java.sql.SQLException}s, with the original as the cause, because JDBC
 * callers expect checked {@code SQLException}s.
 *
 * <p>The native library maps every core error kind to exactly one subclass
 * through one table (see the README's exception table).
 */
public class AffinityException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what went wrong
     */
    public AffinityException(String message) {
        super(message);
    }

    /**
     * Creates the exception with a cause.
     *
     * @param message what went wrong
     * @param cause the underlying failure
     */
    public AffinityException(String message, Throwable cause) {
        super(message, cause);
    }
}
