package io.racaffinity;

import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/**
 * (a) The cost of one JNI transition against a pinned pick through JNI, side by
 * side in one run. In package {@code io.racaffinity} to reach {@link Native}.
 *
 * <ul>
 *   <li>{@code noop}: {@code Native.noop(h, x)}, an export that returns its argument
 *       through the same {@code with_env} wrapper every call uses: the floor;
 *   <li>{@code nativePinnedRoute}: the raw pinned routing call, {@code Native.contextRoute}
 *       (handle-table lookup, the core's context pin, a packed long back);
 *   <li>{@code pinnedRoute}: the public API, {@code Cluster.route()} on a pinned thread
 *       (ThreadLocal context key + the call + a {@link Route} with the cached node name);
 *   <li>{@code pinnedPickRelease}: {@code Cluster.pick()} + {@code Lease.release(OK)}: two
 *       JNI calls, what a data source does per connection.
 * </ul>
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Thread)
public class JniBench {
    private Cluster cluster;
    private Pin pin;
    private long handle;
    private long context;
    private long x;

    @Setup(Level.Trial)
    public void setUp() {
        cluster = Cluster.fromConfig("name = bench; nodes = RAC1, RAC2, RAC3");
        pin = cluster.pin(); // on the benchmark thread: JMH runs Thread-state setup there
        handle = cluster.handle();
        context = Native.contextNew(handle);
        Native.contextPin(handle, context);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        pin.close();
        cluster.close();
    }

    @Benchmark
    public long noop() {
        return Native.noop(handle, x++);
    }

    @Benchmark
    public long nativePinnedRoute() {
        return Native.contextRoute(handle, context);
    }

    @Benchmark
    public Route pinnedRoute() {
        return cluster.route();
    }

    @Benchmark
    public int pinnedPickRelease() {
        Lease l = cluster.pick();
        l.release(Outcome.OK);
        return l.node();
    }
}
