package io.racaffinity.jdbc;

import io.racaffinity.Cluster;
import io.racaffinity.Lease;
import io.racaffinity.Outcome;
import java.lang.reflect.Field;
import java.sql.Connection;
import java.sql.SQLException;
import javax.sql.DataSource;

/**
 * The parts of a pinned {@code AffinityDataSource} borrow, apart, for {@code InterleavedBench --datasource}
 * ([fast-paths-2], [continuity]): a data source whose fast connection failover bookkeeping is off (a control,
 * never shipped: no waiter hand-off, no aborts), and the leased floor with a failover slot taken and freed
 * around the borrow as the data source does.
 */
public final class PinnedBorrowParts {
    private PinnedBorrowParts() {}

    /**
     * Turns {@code ds}'s failover bookkeeping off: a {@link NodeFailover} of no node, whose every borrow
     * gets "no slot" (as a node added at runtime does). Call after {@code init()}; pool upkeep keeps the
     * old one, which sees no borrow.
     */
    public static void failoverOff(AffinityDataSource ds) {
        try {
            Field f = AffinityDataSource.class.getDeclaredField("failover");
            f.setAccessible(true);
            f.set(ds, new NodeFailover(0));
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    /** A failover bookkeeping of {@code nodes} nodes, for {@link SlotWrapped}. */
    public static Object failover(int nodes) {
        return new NodeFailover(nodes);
    }

    /**
     * The floor with the lease and the failover slot: {@code ds}'s connection borrowed from a slot
     * of {@code failover}'s node and the lease, freed and released on close.
     */
    public static SlotWrapped borrow(Object failover, Cluster c, DataSource ds) throws SQLException {
        NodeFailover f = (NodeFailover) failover;
        Lease lease = c.pick();
        int node = lease.node();
        int slot = f.waiting(node);
        Connection physical = ds.getConnection();
        f.done(node, slot, physical);
        return new SlotWrapped(physical, lease, f, slot);
    }

    /** What {@link #borrow} hands out. */
    public static final class SlotWrapped implements AutoCloseable {
        private final Connection physical;
        private final Lease lease;
        private final NodeFailover failover;
        private final int slot;

        SlotWrapped(Connection physical, Lease lease, NodeFailover failover, int slot) {
            this.physical = physical;
            this.lease = lease;
            this.failover = failover;
            this.slot = slot;
        }

        @Override
        public void close() throws SQLException {
            failover.returned(lease.node(), slot);
            try {
                physical.close();
            } finally {
                lease.release(Outcome.OK);
            }
        }
    }
}
