package io.racaffinity;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * What the host-lease tests read ({@link HostLeaseEndTest}, {@link UnpinnedHostLeaseTest},
 * {@link RouteCacheTest}): a node's metrics as the core reports them, and the host leases in flight
 * on the epoch page, where the library begins and ends them without a call.
 */
final class HostLeases {
    private static final VarHandle PAGE = MethodHandles.byteBufferViewVarHandle(long[].class,
            ByteOrder.nativeOrder());

    private HostLeases() {}

    static NodeMetrics metrics(Cluster c, int node) {
        return c.nodeMetrics().stream().filter(m -> m.node() == node).findFirst().orElseThrow();
    }

    /**
     * Host leases in flight on {@code node}, read from the epoch page the way
     * the core reads them (the low 24 bits of each stripe's word): the only
     * view of a removed node's leases, which the metrics no longer list.
     */
    static long inFlight(Cluster c, int node) throws ReflectiveOperationException {
        Field f = Cluster.class.getDeclaredField("page");
        f.setAccessible(true);
        ByteBuffer page = (ByteBuffer) f.get(c);
        long n = 0;
        for (int stripe = 0; stripe < ThreadContexts.HOST_LEASE_STRIPES; stripe++) {
            int word = ThreadContexts.HOST_LEASE_OFFSET + (stripe * ThreadContexts.HOST_LEASE_NODES + node) * 8;
            n += (long) PAGE.getVolatile(page, word) & ((1L << 24) - 1);
        }
        return n;
    }
}
