package io.racaffinity;

/**
 * The JNI exports of {@code libracaffinity} ({@code rust/ffi/src/jni/}). Every
 * method converts its arguments, calls the core and maps errors to
 * {@link AffinityException} subclasses: no routing logic lives here or on the
 * Rust side of these calls.
 *
 * <p>{@code h} is the C ABI's cluster handle (table slot + generation), so a
 * closed or stale handle throws {@link ClusterClosedException} instead of
 * touching freed memory. Routes come back packed in a {@code long}: bits 0..32
 * the node id, bits 32..40 the {@link RouteKind} ordinal.
 */
final class Native {
    static {
        NativeLoader.load();
        NativeLoader.checkVersion(version());
    }

    private Native() {}

    static int node(long packed) {
        return (int) packed;
    }

    static RouteKind kind(long packed) {
        return RouteKind.of((int) (packed >>> 32) & 0xff);
    }

    /** Set in {@link #contextRouteCacheable}'s result when the route may be cached. */
    static final long CACHEABLE = 1L << 40;
    /** Set by {@link #contextPickHostLeased}: the library began a host lease for Java. */
    static final long HOST_LEASED = 1L << 41;
    /** Set by {@link #contextPickHostLeased}: the library leased the node, the host lease word was full. */
    static final long OVER_CAP = 1L << 42;
    /** The packed route without the flags above. */
    static final long ROUTE_BITS = CACHEABLE - 1;

    // --- library ---------------------------------------------------------
    static native String version();

    static native long noop(long h, long x);

    static native String[] exceptionClasses();

    // --- cluster ---------------------------------------------------------
    static native long clusterNew(String config);

    static native void clusterFree(long h);

    static native String clusterName(long h);

    static native long heartbeatIntervalMillis(long h);

    // --- seed 002 (UCP) parity: jni/ucp.rs ------------------------------------
    static native long contextPinFor(long h, long context, int scope);

    static native long partitionMapReplace(long h, int[] partitions, String[] nodes, String source);

    static native void partitionMapLoadFailed(long h, String source, String error);

    static native boolean recoveryIsDatabase(long h);

    // seed 001: session routing data carried in the session id (jni/token.rs)
    static native long sessionRouting(long h, byte[] key);

    static native String sessionTokenNew(long h, String sessionId);

    static native String sessionTokenRoute(long h, String token, long[] route);

    static native String sessionTokensRoute(long h, String[] tokens, long[] out);

    static native String[] nodeNames(long h);

    static native int[] nodeIds(long h);

    static native String nodeName(long h, int node);

    static native String nodeAddress(long h, int node);

    static native int nodeFind(long h, String name);

    static native int nodeState(long h, int node);

    static native boolean nodeDownIsPlanned(long h, int node);

    static native int nodeSetState(long h, String name, int state);

    static native int nodeAdd(long h, String name, String address, int weight);

    static native int nodeRemove(long h, String name);

    static native void setStrict(long h, int scope, boolean strict);

    static native boolean isStrict(long h, int scope);

    static native int eventApply(long h, String line);

    static native boolean feedRecordApply(long h, long version, String key, String value);

    static native long feedEventPublish(long h, String line);

    static native boolean probeReport(long h, int node, boolean ok);

    static native boolean outcomeReport(long h, int node, boolean ok);

    static native String metricsJson(long h);

    static native String metricsPrometheus(long h);

    static native Object[] nodeMetrics(long h);

    static native long[] nodeTxSpans(long h);

    static native Object[] feedStatus(long h);

    // --- continuity (docs/continuity.md) ---------------------------------------
    static native int sqlstateClassify(String sqlstate);

    static native int pgXactStatusOutcome(String status);

    static native int sqlTransactionControl(String sql);

    static native int sqlReading(String sql);

    static native long replayDecide(long h, int node, int errorClass, boolean commitInFlight, int outcome,
            boolean forced, int replays, boolean replayable);

    // --- pins and leases -------------------------------------------------
    static native long contextNew(long h);

    static native long contextPin(long h, long context);

    static native boolean contextUnpin(long h, long context);

    static native boolean contextRelease(long h, long context);

    static native int contextPinnedNode(long h, long context);

    static native long contextRoute(long h, long context);

    static native long contextPick(long h, long context);

    // --- routing epoch (a cached pinned route crosses no JNI) ------------------

    static native long contextRouteCacheable(long h, long context);

    static native long epochPage(long h);

    static native java.nio.ByteBuffer epochBuffer(long page);

    static native void epochPageFree(long page);

    static native void countHostHits(long h, int node, long count);

    static native long contextPickHostLeased(long h, long context, int stripe, int cap);

    static native void hostLeaseEnd(long h, int node, int outcome);

    static native long requestPick(long h, byte[] gtrid, byte[] key, long keyI64, boolean keyIsI64, byte[] session,
            long context);

    static native long requestRoute(long h, byte[] gtrid, byte[] key, long keyI64, boolean keyIsI64, byte[] session,
            long context);

    static native long requestRepick(long h, byte[] key, long keyI64, boolean keyIsI64, byte[] session, long context,
            int failed);

    static native void leaseBegin(long h, int node);

    static native void leaseEnd(long h, int node, int outcome);

    // --- transactions, sessions, data --------------------------------------
    static native byte[] xaTransactionKey(int formatId, byte[] gtrid);

    static native long txBegin(long h, byte[] gtrid);

    static native long txBeginOn(long h, byte[] gtrid, int preferred);

    static native long txBeginFor(long h, byte[] gtrid, byte[] key, long keyI64, boolean keyIsI64, byte[] session,
            String token, long context);

    static native long txRoute(long h, byte[] gtrid);

    static native int txPrepared(long h, byte[] gtrid);

    static native int txEnd(long h, byte[] gtrid);

    static native int txComplete(long h, byte[] gtrid);

    static native void txRecovered(long h, byte[] gtrid, int node);

    static native long sessionRoute(long h, byte[] key);

    static native boolean sessionEnd(long h, byte[] key);

    static native long keyRoute(long h, byte[] key);

    static native long keyRouteLong(long h, long key);

    static native int keyPartition(long h, byte[] key);

    static native int keyPartitionLong(long h, long key);

    static native int partitionOwner(long h, int partition);

    // --- only in the `testing` build of the library --------------------------
    static native long testPanic(String message);

    static native long testPanicFast(long code);
}
