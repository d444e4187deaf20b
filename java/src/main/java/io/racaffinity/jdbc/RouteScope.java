package io.racaffinity.jdbc;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.Route;
import java.util.Objects;

/**
 * A request's routing-token decision ({@link AffinityDataSource#withRequestRoute}):
 * while open, a connection of an affinity data source on the same thread whose
 * cluster made the decision, and that has no transaction, sharding key or own
 * session scope, goes to the decided node ({@code Cluster.routeToken}, seed 001).
 * When the core refused the request ({@link AffinityDataSource#withRequestRefusal}), such a
 * connection is refused with that error instead.
 * Scopes nest; closing restores the enclosing one, and ends the scopes opened inside it that are
 * still open. Close it on the thread that opened it.
 */
public final class RouteScope implements AutoCloseable {
    private static final ThreadLocal<RouteScope> CURRENT = new ThreadLocal<>();
    /** Whether a route scope was ever opened in this JVM (as {@link SessionScope#everOpened}). */
    static volatile boolean everOpened;
    private final Cluster cluster;
    private final Route route;
    private final AffinityException refusal;
    private final String token;
    private final RouteScope previous;
    private final Thread owner;
    private boolean closed;
    /** An enclosing scope closed first: this one ended with it, and its own close changes nothing. */
    private boolean ended;

    RouteScope(Cluster cluster, Route route, String token) {
        this(cluster, Objects.requireNonNull(route, "route"), null, token);
    }

    RouteScope(Cluster cluster, AffinityException refusal, String token) {
        this(cluster, null, Objects.requireNonNull(refusal, "refusal"), token);
    }

    private RouteScope(Cluster cluster, Route route, AffinityException refusal, String token) {
        this.cluster = Objects.requireNonNull(cluster, "cluster");
        this.route = route;
        this.refusal = refusal;
        this.token = token;
        this.previous = CURRENT.get();
        this.owner = Thread.currentThread();
        everOpened = true;
        CURRENT.set(this);
    }

    /** @return the decided route, or null when the core refused the request */
    public Route route() {
        return route;
    }

    /** @return the core's refusal of the request, or null when it decided a route */
    public AffinityException refusal() {
        return refusal;
    }

    /**
     * @return the routing token the decision was made for (the one the client keeps), or null when the
     *     scope was opened without it; a new transaction of the request is placed by it
     */
    public String token() {
        return token;
    }

    /** @return the calling thread's decision (route or refusal) for {@code cluster}, or null */
    static RouteScope current(Cluster cluster) {
        // The innermost of this cluster's: a scope of another cluster opened inside it (a second
        // AffinityFilter, for another database) does not end its decision. Only open scopes are chained.
        for (RouteScope s = CURRENT.get(); s != null; s = s.previous) {
            if (s.cluster == cluster) {
                return s;
            }
        }
        return null;
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
        if (ended) {
            return;
        }
        // Closed before scopes opened inside it: they end with it.
        for (RouteScope s = CURRENT.get(); s != null && s != this; s = s.previous) {
            s.ended = true;
        }
        if (previous == null) {
            CURRENT.remove();
        } else {
            CURRENT.set(previous);
        }
    }
}
