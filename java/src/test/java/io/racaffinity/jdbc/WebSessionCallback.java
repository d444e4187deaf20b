package io.racaffinity.jdbc;

import java.sql.Connection;
import java.sql.SQLException;

/**
 * UCP's connection affinity callback as an application writes it (web-session policy), keeping its
 * context as an HTTP session attribute would: once {@link #invalidated}, storing one throws as an
 * invalidated session's {@code setAttribute} does. Shared by {@link SoftFailoverTest} and
 * {@link CallbackFailureTest}.
 */
final class WebSessionCallback implements ConnectionAffinityCallback {
    volatile Object context;
    volatile boolean invalidated;
    /** Declines every context (answers false, stores nothing), as a callback that cannot keep one would. */
    volatile boolean declines;
    /** The node of the first connection through the callback ({@link #registeredOn}). */
    String placedOn;

    /**
     * Registers a new callback on {@code ds} and takes one connection through it, which places its
     * context.
     *
     * @return the callback; {@link #placedOn} names the node
     */
    static WebSessionCallback registeredOn(AffinityDataSource ds) throws SQLException {
        WebSessionCallback cb = new WebSessionCallback();
        ds.registerConnectionAffinityCallback(cb);
        try (Connection c = ds.getConnection()) {
            cb.placedOn = c.unwrap(AffinityConnection.class).nodeName();
        }
        return cb;
    }

    @Override
    public boolean setConnectionAffinityContext(Object context) {
        if (invalidated) {
            throw new IllegalStateException("setAttribute: Session already invalidated");
        }
        if (declines) {
            return false;
        }
        this.context = context;
        return true;
    }

    @Override
    public Object getConnectionAffinityContext() {
        return context;
    }

    @Override
    public void setAffinityPolicy(AffinityPolicy policy) {}

    @Override
    public AffinityPolicy getAffinityPolicy() {
        return AffinityPolicy.WEBSESSION_BASED_AFFINITY;
    }
}
