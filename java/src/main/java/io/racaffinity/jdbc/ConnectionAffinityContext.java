package io.racaffinity.jdbc;

import io.racaffinity.AffinityContext;
import java.time.Instant;

/**
 * The context an {@link AffinityDataSource} hands a {@link ConnectionAffinityCallback}:
 * opaque to the application, printable ({@code instance}, {@code policy},
 * {@code since}). It holds a core pin context; dropping every reference to it
 * (for instance by setting the callback's context to {@code null}) releases the
 * affinity. When the affinity moves (soft failover) the data source sets a new
 * context naming the new instance, with a new {@code since}.
 */
public final class ConnectionAffinityContext {
    final AffinityDataSource owner;
    final AffinityContext context;
    final int node;
    private final String instance;
    private final ConnectionAffinityCallback.AffinityPolicy policy;
    private final Instant since;

    ConnectionAffinityContext(AffinityDataSource owner, AffinityContext context, int node, String instance,
            ConnectionAffinityCallback.AffinityPolicy policy) {
        this.owner = owner;
        this.context = context;
        this.node = node;
        this.instance = instance;
        this.policy = policy;
        this.since = Instant.now();
    }

    /** @return the instance (node) name the affinity is on */
    public String instance() {
        return instance;
    }

    /** @return the policy it was made with */
    public ConnectionAffinityCallback.AffinityPolicy policy() {
        return policy;
    }

    /** @return when the affinity was placed on this instance */
    public Instant since() {
        return since;
    }

    @Override
    public String toString() {
        return "ConnectionAffinityContext[instance=" + instance + ", policy=" + policy + ", since=" + since + "]";
    }
}
