package io.racaffinity.spring;

import io.racaffinity.Cluster;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import io.racaffinity.jdbc.AbstractAffinityDataSource;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.HealthIndicator;

/**
 * The {@code racaffinity} health component: each node with the core's state for it
 * ({@code UP}, {@code DRAINING} or {@code DOWN}, and why), the component itself {@code UP}
 * while any node takes new work and {@code DOWN} when none does.
 *
 * <p>The nodes are details of one component, not components of their own: Spring Boot
 * aggregates every component into the application's status, so a node component
 * {@code DOWN} would take the whole application down (and a Kubernetes probe would
 * restart it) while the other nodes serve every request.
 */
public class RacAffinityHealthIndicator implements HealthIndicator {
    private final AbstractAffinityDataSource<?> dataSource;

    public RacAffinityHealthIndicator(AbstractAffinityDataSource<?> dataSource) {
        this.dataSource = dataSource;
    }

    @Override
    public Health health() {
        Cluster cluster;
        try {
            cluster = dataSource.getCluster();
        } catch (Exception e) {
            return Health.down(e).build();
        }
        Map<String, Object> nodes = new LinkedHashMap<>();
        boolean usable = false;
        for (NodeMetrics n : cluster.nodeMetrics()) {
            Map<String, Object> node = new LinkedHashMap<>();
            node.put("status", n.state().name());
            if (n.state() != NodeState.UP) {
                node.put("cause", n.downCause().toLowerCase(Locale.ROOT));
            }
            node.put("inFlight", n.inFlight());
            nodes.put(n.name(), node);
            usable |= n.state() == NodeState.UP;
        }
        Health.Builder health = usable ? Health.up() : Health.down();
        return health.withDetail("cluster", cluster.name()).withDetail("nodes", nodes).build();
    }
}
