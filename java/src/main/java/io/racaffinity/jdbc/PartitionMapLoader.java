package io.racaffinity.jdbc;

import java.util.Map;

/**
 * Supplies the data-partition map (partition → instance name) that
 * {@link AffinityDataSource} loads at start, after each HA event (a node state
 * change) and on a period ({@code partitionMapReloadMillis}): seed 002
 * §10.4.1.3, where the pool learns which partitions are affinitized to which
 * instance and re-syncs after HA events. Each successful load replaces the
 * whole map in one step ({@code Cluster.replacePartitionMap}, source
 * {@code loader}). A load that throws, returns null or names an unknown node or
 * partition keeps the last good map: it is logged and counted
 * ({@link AffinityDataSource#getPartitionMapLoadFailures()}), and routing goes on.
 * Loads run one at a time and outside the data source's upkeep lock: a loader
 * that hangs holds up no FAN event ({@code applyEvent}) and no {@code close()}
 * (the hung load's result is dropped once the data source is closed).
 */
@FunctionalInterface
public interface PartitionMapLoader {
    /**
     * @return the whole map; partitions left out are placed by the cluster's placement (rendezvous)
     * @throws Exception if the map cannot be read now
     */
    Map<Integer, String> load() throws Exception;
}
