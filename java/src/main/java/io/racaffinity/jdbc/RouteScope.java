package io.racaffinity.jdbc;

import io.racaffinity.Cluster;
import io.racaffinity.Route;
import java.util.Objects;

/**
 * A request's routing-token decision ({@link AffinityDataSource#withRequestRoute}):
 * while open, a connection of an affinity data source on the same thread whose
 * cluster made the decision, and that has no transaction, sharding key or own
 * session scope, goes to the decided node ({@code Cluster.routeToken}, seed 001).
 * Scopes nest; closing restores the enclosing one. Close it on the thread that opened it.
 */
public final class RouteScope implements AutoCloseable {
    private static final ThreadLocal<RouteScope> CURRENT = new ThreadLocal<>();
    private final Cluster cluster;
    private final Route route;
    private final RouteScope previous;
    private final Thread owner;
    private boolean closed;

    RouteScope(Cluster cluster, Route route) {
        this.cluster = Objects.requireNonNull(cluster, "cluster");
        this.route = Objects.requireNonNull(route, "route");
        this.previous = CURRENT.get();
        this.owner = Thread.currentThread();
        CURRENT.set(this);
    }

    /** @return the decided route */
    public Route route() {
        return route;
    }

    /** @return the calling thread's decision for {@code cluster}, or null */
    static Route current(Cluster cluster) {
        RouteScope s = CURRENT.get();
        return s != null && s.cluster == cluster ? s.route : null;
    }

    /** Ends the scope. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        if (Thread.currentThread() != owner) {
            throw new IllegalStateException("a route scope must be closed on the thread that opened it");
        }
        closed = true;
        if (previous == null) {
            CURRENT.remove();
        } else {
            CURRENT.set(previous);
        }
    }
}
