package io.racaffinity;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * One database's nodes (RAC instances), its load-balancing policy and its
 * affinity registries, held by the Rust core through {@code libracaffinity}.
 *
 * <p>Every method is safe to call from any number of threads. All routing
 * decisions are the core's: this class converts arguments, calls it and
 * returns its answers. Build one from the config text every binding shares
 * ({@link #fromConfig(String)}) or with {@link #builder()}, and {@link #close()}
 * it when done; a call after {@code close()} throws {@link ClusterClosedException}.
 *
 * <pre>{@code
 * try (Cluster cluster = Cluster.builder().name("orcl").nodes("MYDB1", "MYDB2", "MYDB3")
 *         .strict(Scope.TRANSACTION, true).build()) {
 *     try (Pin pin = cluster.pin()) {               // this Java thread sticks to one node
 *         Lease lease = cluster.pick();            // == pin.node()
 *         lease.release(Outcome.OK);
 *     }
 *     Route tx = cluster.txBegin(gtrid);            // every branch of gtrid goes to tx.node()
 * }
 * }</pre>
 *
 * <p><b>Thread pins.</b> A pin belongs to the Java {@link Thread}, platform or
 * virtual: each thread holds its own core context key in a {@link ThreadLocal}.
 * OS-thread pins (the C ABI's {@code racaffinity_thread_pin}) are not used,
 * because virtual threads share carrier OS threads.
 */
public final class Cluster implements AutoCloseable {
    /** Frees unreachable clusters and thread contexts, and releases unreachable leases ({@link Lease}). */
    static final Reaper CLEANER = new Reaper();

    /**
     * The core's handle, freed by {@link #close()} or, for a cluster nobody closed, by the
     * cleaner once this object is unreachable. A method whose last use of {@code this} is
     * reading it keeps {@code this} reachable until its native call returns
     * ({@link Reference#reachabilityFence} in a {@code finally}): compiled code may otherwise
     * let the collector find the cluster unreachable during its own call, and the cleaner
     * free the handle before the library looked it up ({@link ClusterClosedException} for a
     * cluster the caller never closed).
     */
    private final long handle;
    private final String name;
    private final AtomicBoolean closed = new AtomicBoolean();
    private final Cleaner.Cleanable freeOnGc;
    // JDK types only in this ThreadLocal (see ThreadContexts): a one-element
    // holder, so that the Cleaner watches the holder while its action keeps
    // the context array itself (to merge the hits it counted).
    private final ThreadLocal<AtomicLongArray[]> context;
    private volatile String[] names = new String[0];
    /**
     * The core's routing epoch page (native order): at 0 the epoch word,
     * which moves on every change that could alter a route; from
     * {@link ThreadContexts#HOST_LEASE_OFFSET} the host lease words, changed
     * only with atomic adds. The page is freed when this buffer becomes
     * unreachable, not at {@link #close()}: a thread may read it, and end a
     * lease on it, after another closed the cluster.
     */
    private final ByteBuffer page;
    /** Thread contexts whose host-served hits are merged into the core's metrics. */
    private final Set<AtomicLongArray> hostHits = ConcurrentHashMap.newKeySet();
    /**
     * One immutable {@link Route} per (node, kind), so a cached route costs no
     * allocation; copied on growth.
     */
    private volatile Route[] routes = new Route[0];

    private static final VarHandle PAGE = MethodHandles.byteBufferViewVarHandle(long[].class,
            ByteOrder.nativeOrder());

    private Cluster(long handle) {
        this.handle = handle;
        this.freeOnGc = CLEANER.registerCluster(this, new Free(handle));
        this.name = Native.clusterName(handle);
        this.context = ThreadLocal.withInitial(this::newContext);
        long handOut = Native.epochPage(handle);
        this.page = Native.epochBuffer(handOut).order(ByteOrder.nativeOrder());
        CLEANER.registerLasting(page, new FreeEpochPage(handOut));
    }

    /**
     * Builds a cluster from config text ({@code key = value} entries separated by
     * newlines or {@code ;}; the keys are in the README).
     *
     * @param config the config text
     * @return the cluster
     * @throws InvalidConfigException if the text is invalid (the message names the key)
     */
    public static Cluster fromConfig(String config) {
        Objects.requireNonNull(config, "config");
        return new Cluster(Native.clusterNew(config));
    }

    /** @return a builder that renders config text and passes it to the core */
    public static Builder builder() {
        return new Builder();
    }

    /** @return the library version */
    public static String libraryVersion() {
        return Native.version();
    }

    /**
     * The key the core registers the XA global transaction ({@code formatId}, {@code gtrid}) under, the
     * {@code gtrid} that {@link #txBegin}, {@link #txRoute} and the other transaction calls take for an
     * Xid: the formatId (4 bytes, big-endian) then the gtrid, or its SHA-256 digest when it is over 60
     * bytes. XA names a transaction by both, so equal gtrids of two formats stay two transactions. The
     * core builds it, for C and Python too, so every process places a transaction alike
     * (docs/semantics.md). A gtrid no conforming transaction manager makes (empty, or over 64 bytes) comes
     * back as it is, for the transaction call given it to refuse.
     *
     * @param formatId the Xid's format id
     * @param gtrid the Xid's global transaction id
     * @return a new array
     */
    public static byte[] xaTransactionKey(int formatId, byte[] gtrid) {
        return Native.xaTransactionKey(formatId, gtrid(gtrid));
    }

    long handle() {
        return handle;
    }

    // ---- identity and nodes ---------------------------------------------

    /** @return the config's {@code name} (metrics label and JMX name) */
    public String name() {
        return name;
    }

    /** @return live node names in id order */
    public List<String> nodeNames() {
        try {
            return List.of(Native.nodeNames(handle));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** @return live node ids, ascending */
    public int[] nodeIds() {
        try {
            return Native.nodeIds(handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * A node's listener address, as the core parsed it from {@code node.<NAME>.address}.
     *
     * @param node node id
     * @return {@code host:port}, or empty when the node has no address
     * @throws UnknownNodeException if there never was such a node
     */
    public Optional<String> nodeAddress(int node) {
        try {
            String a = Native.nodeAddress(handle, node);
            return a.isEmpty() ? Optional.empty() : Optional.of(a);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * A node's name; also for removed nodes (ids are never reused, so names are cached).
     *
     * @param node node id
     * @return its name
     * @throws UnknownNodeException if there never was such a node
     */
    public String nodeName(int node) {
        String[] cache = names;
        if (node >= 0 && node < cache.length && cache[node] != null) {
            return cache[node];
        }
        String n = Native.nodeName(handle, node);
        synchronized (this) {
            names = withSet(names, node, n);
        }
        return n;
    }

    /** A node's name for a {@code toString}: {@code #<id>} once the cluster is closed and cannot name it. */
    String nodeLabel(int node) {
        try {
            return nodeName(node);
        } catch (ClusterClosedException e) {
            return "#" + node;
        }
    }

    /**
     * A live node's id by name (case-insensitive).
     *
     * @param nodeName node name
     * @return its id
     * @throws UnknownNodeException if no live node has that name
     */
    public int nodeId(String nodeName) {
        try {
            return Native.nodeFind(handle, Objects.requireNonNull(nodeName, "nodeName"));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * @param node node id
     * @return its state (a removed node reads as {@code DOWN})
     */
    public NodeState nodeState(int node) {
        try {
            return NodeState.of(Native.nodeState(handle, node));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * @param nodeName node name
     * @return its state
     */
    public NodeState nodeState(String nodeName) {
        return nodeState(nodeId(nodeName));
    }

    /**
     * Whether the node is Down at the end of a planned drain (its deadline passed, or the
     * operator's Down came while it drained; or it was removed while it drained): a pool lets the
     * connections in use on it finish their requests. False while it is Up or Draining, and for a
     * Down by a failure (a FAN failure however delivered, missed heartbeats, an ejection, the
     * operator's Down of a node taking work), after which a pool aborts them. The core's answer:
     * a pool that polls states may never see the node Draining.
     *
     * @param node node id
     * @return whether its Down ended a planned drain
     */
    public boolean nodeDownIsPlanned(int node) {
        try {
            return Native.nodeDownIsPlanned(handle, node);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The core's routing epoch: it moves on every change that could alter a route, every node
     * state change among them. A poller of node states reads the nodes' {@link
     * NodeMetrics#stateChanges()} only when it moved, to find a node that went Down and Up again
     * between two of its reads (it shows Up to both).
     *
     * @return the epoch now
     */
    public long routingEpoch() {
        long e = (long) PAGE.getAcquire(page, 0);
        Reference.reachabilityFence(page);
        return e;
    }

    /**
     * Sets a node's state as an operator would (cause {@code admin}: only another
     * operator call lifts an operator's {@code DOWN}).
     *
     * @param nodeName node name
     * @param state new state
     * @return the previous state
     */
    public NodeState setNodeState(String nodeName, NodeState state) {
        Objects.requireNonNull(state, "state");
        try {
            return NodeState.of(Native.nodeSetState(handle, Objects.requireNonNull(nodeName, "nodeName"),
                    state.ordinal()));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Adds a node at runtime; it gets the next id and starts {@code UP}.
     *
     * @param nodeName node name
     * @param address {@code host:port} of its listener, or null
     * @param weight 1..1000000 (0 means 1)
     * @return the new node's id
     */
    public int addNode(String nodeName, String address, int weight) {
        try {
            return Native.nodeAdd(handle, Objects.requireNonNull(nodeName, "nodeName"), address, weight);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Removes a node at runtime; affinities to it break as if it were down and,
     * under rendezvous placement, only its keys move.
     *
     * @param nodeName node name
     * @return the removed node's id
     */
    public int removeNode(String nodeName) {
        try {
            return Native.nodeRemove(handle, Objects.requireNonNull(nodeName, "nodeName"));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Switches a scope between strict and soft at runtime.
     *
     * @param scope the scope
     * @param strict true to refuse instead of moving work
     */
    public void setStrict(Scope scope, boolean strict) {
        try {
            Native.setStrict(handle, scope.ordinal(), strict);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * @param scope the scope
     * @return whether it is strict
     */
    public boolean isStrict(Scope scope) {
        try {
            return Native.isStrict(handle, scope.ordinal());
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** @return how often hosts should probe each node ({@code heartbeat.interval}) */
    public Duration heartbeatInterval() {
        try {
            return Duration.ofMillis(Native.heartbeatIntervalMillis(handle));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    // ---- seed 002 (UCP) parity ----------------------------------------------

    /**
     * A new, unpinned context that follows {@code scope}'s rules (UCP's
     * connection affinity context): {@link AffinityContext#pin()} places it.
     *
     * @param scope {@code TRANSACTION}, {@code SESSION} or {@code THREAD}
     * @return the context; close it (or drop it) to release its pin
     * @throws InvalidArgumentException for {@code DATA} (at the first pin)
     */
    public AffinityContext newAffinityContext(Scope scope) {
        Objects.requireNonNull(scope, "scope");
        return new AffinityContext(this, Native.contextNew(handle), scope);
    }

    /** Releases context {@code key} when {@code owner} is closed or becomes unreachable. */
    Cleaner.Cleanable releaseWhenUnreachable(Object owner, long key) {
        return CLEANER.register(owner, new ReleaseContext(handle, key));
    }

    /**
     * Replaces the whole explicit partition → node map in one step (one new map
     * epoch: routes see the old map or the new one, never a mix). Partitions
     * left out fall back to placement. Any bad entry (partition out of range,
     * unknown node) changes nothing.
     *
     * @param map partition → node name
     * @param source who produced the map, for the metrics ({@code partition_map.source}):
     *        1-64 letters, digits or {@code _-.:/}
     * @return the map's new epoch
     */
    public long replacePartitionMap(Map<Integer, String> map, String source) {
        Objects.requireNonNull(map, "map");
        int[] partitions = new int[map.size()];
        String[] nodes = new String[map.size()];
        int i = 0;
        for (Map.Entry<Integer, String> e : map.entrySet()) {
            partitions[i] = Objects.requireNonNull(e.getKey(), "partition");
            nodes[i++] = Objects.requireNonNull(e.getValue(), "node name");
        }
        try {
            return Native.partitionMapReplace(handle, partitions, nodes, Objects.requireNonNull(source, "source"));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Records that the application's partition-map loader failed: the map in
     * force stays, and the metrics count the failure and keep its message
     * ({@code partition_map.load_failures}, {@code last_error}).
     *
     * @param source the loader's name, as given to {@link #replacePartitionMap}
     * @param error what went wrong (free text, e.g. the failed query's message)
     * @throws InvalidArgumentException for a source {@link #replacePartitionMap} would refuse
     */
    public void partitionMapLoadFailed(String source, String error) {
        try {
            Native.partitionMapLoadFailed(handle, Objects.requireNonNull(source, "source"),
                    Objects.requireNonNull(error, "error"));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** @return whether the nodes are independent databases or instances of one ({@code recovery.scope}) */
    public RecoveryScope recoveryScope() {
        try {
            return Native.recoveryIsDatabase(handle) ? RecoveryScope.DATABASE : RecoveryScope.NODE;
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    // ---- session routing tokens (seed 001, WebLogic) -----------------------

    /**
     * The routing data a new session with this key gets (WebLogic's primary
     * and backup): the first node of the key's rendezvous ranking that takes
     * new work, and as backup the next one on another machine
     * ({@code node.<N>.machine}, default the host of its address), else any
     * other usable node, else none.
     *
     * @param key the session key (1..=1024 bytes)
     * @return the primary and the backup
     * @throws NoNodeAvailableException if no node takes new work
     */
    public SessionRouting sessionRouting(byte[] key) {
        Objects.requireNonNull(key, "key");
        long r = Native.sessionRouting(handle, key);
        int primary = (int) r;
        int backup = (int) (r >>> 32);
        return new SessionRouting(primary, nodeName(primary), backup < 0 ? OptionalInt.empty() : OptionalInt.of(backup),
                backup < 0 ? Optional.empty() : Optional.of(nodeName(backup)));
    }

    /**
     * A new session token: the session id with its routing data appended,
     * {@code <session-id>!ra1.<primary>.<backup>} (cookie-safe; every binding
     * and process reads it the same way).
     *
     * @param sessionId the session id (1..=1024 cookie-safe characters)
     * @return the token
     * @throws InvalidArgumentException if the id cannot be carried in a cookie
     */
    public String sessionToken(String sessionId) {
        Objects.requireNonNull(sessionId, "sessionId");
        try {
            return Native.sessionTokenNew(handle, sessionId);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Routes a request carrying a session token by seed 001's rules: the
     * primary while it is usable; else the backup is promoted and a new backup
     * chosen; with both gone, a fresh primary and backup; an empty backup slot
     * is filled when a node is back. Strict session mode refuses instead of
     * promoting.
     *
     * @param token the token the client sent
     * @return the node for this request and the rewritten token, if the routing data changed
     * @throws InvalidArgumentException if the token is malformed or of a foreign format
     * @throws StrictAffinityException in strict session mode when the primary is gone
     */
    public TokenRoute routeToken(String token) {
        Objects.requireNonNull(token, "token");
        long[] out = new long[1];
        String rewritten = Native.sessionTokenRoute(handle, token, out);
        return new TokenRoute(route(out[0]), Optional.ofNullable(rewritten));
    }

    /**
     * Routes a request that carries several tokens (a browser sends one cookie per path it holds, the longest
     * path first, so a stale token may come before the current one): the core chooses the first token that names
     * a node of this cluster as primary or backup, else the first well-formed one, and routes it as
     * {@link #routeToken(String)} does (docs/wls-routing.md).
     *
     * @param tokens the request's tokens, in the order the client sent them
     * @return the chosen token and its route (whose {@link TokenChoice#route()} throws a refusal); empty when no
     *     token is well-formed: the request starts a new session ({@link #sessionToken(String)})
     */
    public Optional<TokenChoice> routeTokens(List<String> tokens) {
        String[] candidates = tokens.toArray(new String[0]);
        for (int i = 0; i < candidates.length; i++) {
            Objects.requireNonNull(candidates[i], "tokens[" + i + "]");
        }
        long[] out = {0, -1};
        try {
            String rewritten = Native.sessionTokensRoute(handle, candidates, out);
            return out[1] < 0 ? Optional.empty()
                    : Optional.of(new TokenChoice((int) out[1], candidates[(int) out[1]],
                            new TokenRoute(route(out[0]), Optional.ofNullable(rewritten)), null));
        } catch (StrictAffinityException | NoNodeAvailableException refused) {
            if (out[1] < 0) {
                throw refused;
            }
            return Optional.of(new TokenChoice((int) out[1], candidates[(int) out[1]], null, refused));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    // ---- picks, pins, leases ----------------------------------------------

    private AtomicLongArray[] newContext() {
        AtomicLongArray c = ThreadContexts.create(Native.contextNew(handle));
        AtomicLongArray[] holder = {c};
        hostHits.add(c);
        // A thread that dies pinned must not leave its pin in the core: when
        // its ThreadLocal value becomes unreachable, release the context (and
        // merge the hits it served).
        CLEANER.register(holder, new ReleaseThreadContext(handle, c, hostHits));
        return holder;
    }

    /** The calling thread's context (see {@link ThreadContexts}). */
    private AtomicLongArray threadContext() {
        return context.get()[0];
    }

    private long contextKey() {
        return threadContext().getPlain(ThreadContexts.KEY);
    }

    /**
     * Routes the calling thread's next unit of work (its pin, else load
     * balancing, or a new pin with {@code thread.auto_pin}) and leases the node.
     *
     * @return the lease; release it with an outcome
     */
    public Lease pick() {
        AtomicLongArray c = threadContext();
        long e = (long) PAGE.getAcquire(page, 0);
        long cached = c.getPlain(ThreadContexts.ROUTE);
        // Nodes past the host lease table are leased by the library.
        if (Native.node(cached) < ThreadContexts.HOST_LEASE_NODES && cacheHit(c, e)) {
            // A host lease: one atomic add here and one at release, no call
            // into the library (see the core's RoutingEpoch).
            return beginHostLease(c, Native.node(cached), Native.kind(cached), e);
        }
        return pickAndCache(c, e);
    }

    /**
     * A {@link #pick()} the cache could not serve; {@code e} was read before
     * the call. Apart from the hit path, so that {@code pick()} stays small
     * enough to be inlined into its caller, where escape analysis can then
     * drop a host lease's allocation.
     */
    private Lease pickAndCache(AtomicLongArray c, long e) {
        long generation = c.get(ThreadContexts.GENERATION);
        long stripe = c.getPlain(ThreadContexts.LEASE_STRIPE);
        // One crossing for every route: the library picks and, on an Up node,
        // begins the host lease itself, which this thread ends on the page
        // (pinned or not: an unpinned borrow needs no second crossing either).
        long r = Native.contextPickHostLeased(handle, c.getPlain(ThreadContexts.KEY),
                ThreadContexts.stripeIndex(stripe), HOST_LEASE_CAP);
        int node = Native.node(r);
        RouteKind kind = Native.kind(r);
        if ((r & Native.CACHEABLE) != 0) {
            cache(c, r & Native.ROUTE_BITS, generation, e);
        } else {
            c.setPlain(ThreadContexts.EPOCH, 0);
        }
        if ((r & Native.HOST_LEASED) != 0) {
            return new Lease(this, node, kind, (int) stripe + node * 8, e);
        }
        if ((r & Native.OVER_CAP) != 0) {
            logHostLeaseCap(node);
        }
        return new Lease(this, node, kind);
    }

    /** Whether the calling thread's cached route answers a route begun at epoch {@code e}. */
    private static boolean cacheHit(AtomicLongArray c, long e) {
        if (e == c.getPlain(ThreadContexts.EPOCH)
                && c.get(ThreadContexts.GENERATION) == c.getPlain(ThreadContexts.CACHED_GENERATION)) {
            // Nothing that could alter a route changed since the core said
            // this pin may be cached, and this context's pin was not touched.
            c.setPlain(ThreadContexts.HIT_COUNT, c.getPlain(ThreadContexts.HIT_COUNT) + 1);
            return true;
        }
        return false;
    }

    private void cache(AtomicLongArray c, long r, long generation, long e) {
        ThreadContexts.moveHitsTo(c, Native.node(r), handle);
        c.setPlain(ThreadContexts.ROUTE, r);
        c.setPlain(ThreadContexts.CACHED_GENERATION, generation);
        c.setPlain(ThreadContexts.EPOCH, e);
    }

    /**
     * Host leases in flight per stripe and node past which a pick is a library lease: a host lease
     * has no cleaner, so one dropped without a release would stay in flight for good; this bounds them.
     */
    static final int HOST_LEASE_CAP = 64;

    private Lease beginHostLease(AtomicLongArray c, int node, RouteKind kind, long e) {
        int word = (int) c.getPlain(ThreadContexts.LEASE_STRIPE) + node * 8;
        // Checked before the add, so the page only ever counts leases that end through it (threads of one
        // stripe racing past the check overshoot the cap by a few: a bound, not an exact limit).
        if (((long) PAGE.getOpaque(page, word) & ((1L << 24) - 1)) >= HOST_LEASE_CAP) {
            return overHostLeaseCap(node, kind);
        }
        PAGE.getAndAdd(page, word, ThreadContexts.HOST_LEASE_BEGIN);
        Reference.reachabilityFence(page);
        return new Lease(this, node, kind, word, e);
    }

    /** Whether the host lease cap was reached once (logged once per cluster). */
    private volatile boolean hostLeaseCapLogged;

    /**
     * {@link #HOST_LEASE_CAP} host leases are in flight on this stripe and node: many threads pinned to the
     * node hold one each, or leases were dropped without a release. Either way this one is a library lease,
     * which the garbage collector releases if it is dropped.
     */
    private Lease overHostLeaseCap(int node, RouteKind kind) {
        logHostLeaseCap(node);
        Native.leaseBegin(handle, node);
        return new Lease(this, node, kind);
    }

    private void logHostLeaseCap(int node) {
        if (!hostLeaseCapLogged) {
            hostLeaseCapLogged = true;
            System.getLogger("io.racaffinity").log(System.Logger.Level.WARNING, () -> "cluster " + name + ": "
                    + HOST_LEASE_CAP + " host leases are in flight on node " + nodeName(node)
                    + " from one stripe (leases dropped without a release? they stay in flight); further ones are"
                    + " library leases, released by the garbage collector if dropped (logged once)");
        }
    }

    /**
     * Ends a host lease: in Java's memory while the epoch it began under
     * holds and the outcome is not a failure; otherwise the core must see
     * the outcome (the node may have been ejected or marked down meanwhile).
     */
    void endHostLease(int node, int word, long epoch, Outcome outcome) {
        ByteBuffer p = page;
        if (outcome != Outcome.FAILED && (long) PAGE.getAcquire(p, 0) == epoch) {
            PAGE.getAndAdd(p, word, outcome == Outcome.OK
                    ? ThreadContexts.HOST_LEASE_END_OK : ThreadContexts.HOST_LEASE_END_NEUTRAL);
            Reference.reachabilityFence(p);
        } else {
            endHostLeaseInCore(node, word, outcome);
        }
    }

    private void endHostLeaseInCore(int node, int word, Outcome outcome) {
        ByteBuffer p = page;
        PAGE.getAndAdd(p, word, ThreadContexts.HOST_LEASE_END_NEUTRAL);
        Reference.reachabilityFence(p);
        try {
            Native.hostLeaseEnd(handle, node, outcome.ordinal());
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Routes and leases one unit of work that may hold several affinities at
     * once: the core picks the first that applies, in this order: the
     * transaction {@code gtrid} (begun with {@link #txBegin}), the data
     * {@code key}, the {@code session}, then the calling thread's pin, else
     * load balancing (as {@link #pick()}). Every argument may be null ("none").
     *
     * @param gtrid the global transaction's gtrid, or null
     * @param key a data (sharding) key, as for {@link #routeKey(byte[])}, or null
     * @param session a web-session key, as for {@link #routeSession(byte[])}, or null
     * @return the lease; release it with an outcome
     */
    public Lease pickFor(byte[] gtrid, byte[] key, byte[] session) {
        if (gtrid == null && key == null && session == null) {
            // Nothing but the pin: the one-affinity call keeps the JNI fast path
            // (no arrays to read) for the commonest connection request.
            return pick();
        }
        long r = Native.requestPick(handle, gtrid, key, 0, false, session, contextKey());
        return new Lease(this, Native.node(r), Native.kind(r));
    }

    /**
     * {@link #pickFor(byte[], byte[], byte[])} with an integer data key (routed as
     * {@link #routeKey(long)}).
     *
     * @param gtrid the global transaction's gtrid, or null
     * @param key the data key
     * @param session a web-session key, or null
     * @return the lease; release it with an outcome
     */
    public Lease pickFor(byte[] gtrid, long key, byte[] session) {
        long r = Native.requestPick(handle, gtrid, null, key, true, session, contextKey());
        return new Lease(this, Native.node(r), Native.kind(r));
    }

    /**
     * Routes a request again after the node of its lease could not give a
     * connection (refused, reset, connect timeout): the core names another node
     * and moves the affinity that chose the failed one (the thread's pin, the
     * session), so that the caller retries once within its own call and later
     * requests follow. Release the failed lease with {@link Outcome#FAILED}
     * first, so that ejection counts the failure. The request is the one given
     * to {@link #pickFor(byte[], byte[], byte[])}, without a transaction: a
     * transaction's branch is never moved.
     *
     * @param key the request's data key, or null
     * @param session the request's web-session key, or null
     * @param failedNode the node that failed
     * @return a lease on the next node, or null for no retry (a strict scope,
     *     which refuses rather than moves, or no other usable node)
     */
    public Lease repickFor(byte[] key, byte[] session, int failedNode) {
        return repick(key, session, contextKey(), failedNode);
    }

    Lease repick(byte[] key, byte[] session, long context, int failedNode) {
        long r = Native.requestRepick(handle, key, 0, false, session, context, failedNode);
        return r < 0 ? null : new Lease(this, Native.node(r), Native.kind(r));
    }

    /**
     * Like {@link #pickFor(byte[], byte[], byte[])} without a lease: the core's
     * precedence (transaction, data key, session, the thread's pin, else load
     * balancing) for work that leases its node some other way, or not at all.
     *
     * @param gtrid the global transaction's gtrid, or null
     * @param key a data (sharding) key, or null
     * @param session a web-session key, or null
     * @return the route
     */
    public Route routeFor(byte[] gtrid, byte[] key, byte[] session) {
        if (gtrid == null && key == null && session == null) {
            return route();
        }
        return route(Native.requestRoute(handle, gtrid, key, 0, false, session, contextKey()));
    }

    /**
     * {@link #routeFor(byte[], byte[], byte[])} with an integer data key.
     *
     * @param gtrid the global transaction's gtrid, or null
     * @param key the data key
     * @param session a web-session key, or null
     * @return the route
     */
    public Route routeFor(byte[] gtrid, long key, byte[] session) {
        return route(Native.requestRoute(handle, gtrid, null, key, true, session, contextKey()));
    }

    /**
     * Like {@link #pick()} without a lease: the cheapest routing call.
     *
     * @return the route
     */
    public Route route() {
        AtomicLongArray c = threadContext();
        long e = (long) PAGE.getAcquire(page, 0);
        // The page is freed by a Cleaner on the buffer: keep it reachable
        // until the read above is done.
        Reference.reachabilityFence(page);
        if (cacheHit(c, e)) {
            return route(c.getPlain(ThreadContexts.ROUTE));
        }
        return routeAndCache(c, e);
    }

    /** A {@link #route()} the cache could not serve; {@code e} was read before the call. */
    private Route routeAndCache(AtomicLongArray c, long e) {
        long generation = c.get(ThreadContexts.GENERATION);
        long r = Native.contextRouteCacheable(handle, c.getPlain(ThreadContexts.KEY));
        if ((r & Native.CACHEABLE) != 0) {
            r &= ~Native.CACHEABLE;
            cache(c, r, generation, e);
        } else {
            c.setPlain(ThreadContexts.EPOCH, 0);
        }
        return route(r);
    }

    /**
     * Pins the calling Java thread (or deepens its pin) until the returned
     * scope is closed.
     *
     * @return the pin scope
     */
    public Pin pin() {
        AtomicLongArray c = threadContext();
        Pin p = new Pin(this, c, Native.contextPin(handle, c.getPlain(ThreadContexts.KEY)));
        ThreadContexts.pinChanged(c);
        return p;
    }

    /** @return the calling thread's pinned node id, if pinned */
    public OptionalInt pinnedNode() {
        try {
            int n = Native.contextPinnedNode(handle, contextKey());
            return n < 0 ? OptionalInt.empty() : OptionalInt.of(n);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Releases the calling thread's pin at every nesting level (for example at
     * the end of a request whose pin scopes were not all closed).
     *
     * @return whether a pin existed
     */
    public boolean unpinAll() {
        AtomicLongArray c = threadContext();
        try {
            boolean had = Native.contextRelease(handle, c.getPlain(ThreadContexts.KEY));
            ThreadContexts.pinChanged(c);
            return had;
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Leases a node that another call routed to (a transaction, session or key
     * route), so the work's outcome feeds balancing and health.
     *
     * @param route the route
     * @return the lease
     */
    public Lease lease(Route route) {
        Native.leaseBegin(handle, route.node());
        return new Lease(this, route.node(), route.kind());
    }

    /**
     * Leases a node by id (kind {@code AFFINITY}).
     *
     * @param node node id
     * @return the lease
     */
    public Lease lease(int node) {
        Native.leaseBegin(handle, node);
        return new Lease(this, node, RouteKind.AFFINITY);
    }

    // ---- transactions ---------------------------------------------------

    /**
     * Begins or joins a branch of a global transaction: every branch, from any
     * thread or process that sees the same topology, gets the owning node.
     *
     * @param gtrid the XA global transaction id, 1..64 bytes
     * @return the route
     */
    public Route txBegin(byte[] gtrid) {
        return route(Native.txBegin(handle, gtrid(gtrid)));
    }

    /**
     * Like {@link #txBegin(byte[])}, but a new gtrid is placed on {@code preferred}
     * (for example the thread's pinned node, or where the transaction manager placed
     * it) when that node accepts new work. Otherwise strict transaction mode refuses
     * with {@link StrictAffinityException} (a branch elsewhere would split the
     * transaction) and soft mode places the gtrid as {@link #txBegin(byte[])} does.
     *
     * @param gtrid the gtrid
     * @param preferred preferred node id
     * @return the route
     */
    public Route txBegin(byte[] gtrid, int preferred) {
        return route(Native.txBeginOn(handle, gtrid(gtrid), preferred));
    }

    /**
     * Begins or joins a branch of a global transaction, like {@link #txBegin(byte[])};
     * the core places a <em>new</em> gtrid where the request's other affinities
     * point: the data {@code key}, else the {@code session}, else the calling
     * thread's pin, else by the transaction placement policy (also when that node
     * cannot take new work). An existing gtrid is joined wherever it lives.
     *
     * @param gtrid the gtrid
     * @param key a data (sharding) key, or null
     * @param session a web-session key, or null
     * @return the route
     */
    public Route txBeginFor(byte[] gtrid, byte[] key, byte[] session) {
        return route(Native.txBeginFor(handle, gtrid(gtrid), key, 0, false, session, null, contextKey()));
    }

    /**
     * {@link #txBeginFor(byte[], byte[], byte[])} for a request that carries a session
     * routing {@code token} ({@link #routeToken}): a <em>new</em> gtrid goes to the data
     * {@code key}'s owner, else to the node the token routes the request to, so that the
     * request's session work and its transaction share a node; in strict transaction
     * mode across processes ({@code transaction.settle} &gt; 0), to the token's primary
     * while every process sees it take new work, else by the gtrid's own placement. The
     * token never makes the call fail for its node's sake, even in strict session mode
     * (no branch exists yet); a malformed or foreign token is an
     * {@link InvalidArgumentException} and changes nothing.
     *
     * @param gtrid the gtrid
     * @param key a data (sharding) key, or null
     * @param session a web-session key, or null
     * @param token the request's routing token, or null
     * @return the route
     */
    public Route txBeginFor(byte[] gtrid, byte[] key, byte[] session, String token) {
        return route(Native.txBeginFor(handle, gtrid(gtrid), key, 0, false, session, token, contextKey()));
    }

    /**
     * {@link #txBeginFor(byte[], byte[], byte[])} with an integer data key.
     *
     * @param gtrid the gtrid
     * @param key the data key
     * @param session a web-session key, or null
     * @return the route
     */
    public Route txBeginFor(byte[] gtrid, long key, byte[] session) {
        return route(Native.txBeginFor(handle, gtrid(gtrid), null, key, true, session, null, contextKey()));
    }

    /**
     * Where 2PC commands (prepare, commit, rollback) for a gtrid go. Never moves it.
     *
     * @param gtrid the gtrid
     * @return the route
     * @throws UnknownTransactionException if the gtrid is not registered
     */
    public Route txRoute(byte[] gtrid) {
        return route(Native.txRoute(handle, gtrid(gtrid)));
    }

    /**
     * Marks a branch prepared: from now on the transaction never moves.
     *
     * @param gtrid the gtrid
     * @return the owning node id
     */
    public int txPrepared(byte[] gtrid) {
        try {
            return Native.txPrepared(handle, gtrid(gtrid));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Ends one branch (at its commit or rollback); the entry goes with the last.
     *
     * @param gtrid the gtrid
     * @return the owning node id
     */
    public int txEnd(byte[] gtrid) {
        try {
            return Native.txEnd(handle, gtrid(gtrid));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Forgets the transaction whatever its branch count.
     *
     * @param gtrid the gtrid
     * @return the owning node id
     */
    public int txComplete(byte[] gtrid) {
        try {
            return Native.txComplete(handle, gtrid(gtrid));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Records that {@code node} returned {@code gtrid} from a recovery scan, so
     * its commit or rollback is routed there. A second node reporting the same
     * gtrid is a split transaction: an error.
     *
     * @param gtrid the gtrid
     * @param node node id
     */
    public void txRecovered(byte[] gtrid, int node) {
        try {
            Native.txRecovered(handle, gtrid(gtrid), node);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * {@link #txRecovered(byte[], int)} by node name.
     *
     * @param gtrid the gtrid
     * @param nodeName node name
     */
    public void txRecovered(byte[] gtrid, String nodeName) {
        txRecovered(gtrid, nodeId(nodeName));
    }

    // ---- sessions and data keys -------------------------------------------

    /**
     * Routes a request of a web session.
     *
     * @param sessionKey the session key (UTF-8, 1..1024 bytes)
     * @return the route
     */
    public Route routeSession(String sessionKey) {
        return routeSession(utf8(sessionKey, "sessionKey"));
    }

    /**
     * Routes a request of a web session.
     *
     * @param sessionKey the session key bytes, 1..1024
     * @return the route
     */
    public Route routeSession(byte[] sessionKey) {
        return route(Native.sessionRoute(handle, Objects.requireNonNull(sessionKey, "sessionKey")));
    }

    /**
     * Ends a session's affinity.
     *
     * @param sessionKey the session key
     * @return whether it had one
     */
    public boolean endSession(String sessionKey) {
        return endSession(utf8(sessionKey, "sessionKey"));
    }

    /**
     * Ends a session's affinity.
     *
     * @param sessionKey the session key bytes
     * @return whether it had one
     */
    public boolean endSession(byte[] sessionKey) {
        try {
            return Native.sessionEnd(handle, Objects.requireNonNull(sessionKey, "sessionKey"));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Routes a data (sharding) key: key → partition → owning node; soft mode
     * falls back to load balancing while the owner is unavailable.
     *
     * @param key key bytes, 1..1024
     * @return the route
     */
    public Route routeKey(byte[] key) {
        return route(Native.keyRoute(handle, Objects.requireNonNull(key, "key")));
    }

    /**
     * Routes an integer data key (hashed as its 8 little-endian bytes).
     *
     * @param key the key
     * @return the route
     */
    public Route routeKey(long key) {
        return route(Native.keyRouteLong(handle, key));
    }

    /**
     * Routes a string data key (its UTF-8 bytes).
     *
     * @param key the key
     * @return the route
     */
    public Route routeKey(String key) {
        return routeKey(utf8(key, "key"));
    }

    /**
     * @param key key bytes
     * @return the partition the key falls in
     */
    public int partitionOf(byte[] key) {
        try {
            return Native.keyPartition(handle, Objects.requireNonNull(key, "key"));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * @param key integer key
     * @return the partition the key falls in
     */
    public int partitionOf(long key) {
        try {
            return Native.keyPartitionLong(handle, key);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * @param partition a partition, 0..data.partitions-1
     * @return the id of the node owning it, ignoring node state
     */
    public int partitionOwner(int partition) {
        try {
            return Native.partitionOwner(handle, partition);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    // ---- failover inputs ----------------------------------------------------

    /**
     * Applies one FAN event or RLB advisory line. Malformed text
     * ({@link EventParseException}), an unknown instance ({@link UnknownNodeException})
     * or another database/service ({@link ForeignEventException}) change nothing.
     *
     * @param line the event line
     * @return the number of node state changes
     */
    public int applyEvent(String line) {
        try {
            return Native.eventApply(handle, Objects.requireNonNull(line, "line"));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Applies one record of a fleet feed (docs/operations.md, "Feed records"): the versioned path
     * for shared inputs such as an operator tool's drain, a weight or a partition map. Processes
     * given the same records in any order end alike; a plain {@link #setNodeState} is this
     * process's own input.
     *
     * @param version the record's fleet-wide order (the log's revision), read as unsigned
     * @param key the key relative to the feed's prefix, for example {@code node/RAC2/state}
     * @param value its value, for example {@code draining timeout=30s}; {@code null} when deleted
     * @return false when a record with a higher version was already in (nothing changed)
     * @throws InvalidArgumentException a record of no known form (nothing changed)
     * @throws UnknownNodeException a record about a node this cluster does not have
     */
    public boolean applyFeedRecord(long version, String key, String value) {
        try {
            return Native.feedRecordApply(handle, version, Objects.requireNonNull(key, "key"), value);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Relays one FAN or RLB line into this cluster's topology feed ({@code topology.feed}): an ONS
     * relay, so every subscribed process of the fleet (Java, Python, C) gets the event; applied
     * here too, at the record's revision.
     *
     * @param line the event line, as ONS delivered it
     * @return the record's revision in etcd
     * @throws EventParseException a malformed line (nothing written)
     * @throws ForeignEventException a line for another database or service (nothing written)
     * @throws UnknownNodeException a line about an instance or host this cluster does not have (nothing written)
     * @throws FeedUnavailableException no feed configured, or etcd did not take the write
     */
    public long publishEvent(String line) {
        try {
            return Native.feedEventPublish(handle, Objects.requireNonNull(line, "line"));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The next step for a request a failure interrupted (docs/continuity.md): a pure decision of
     * the core that changes nothing, so the caller asks again after each step with what it
     * learned.
     *
     * @param failure the failed request as the caller saw it
     * @return what to do next
     * @throws UnknownNodeException a node id this cluster never had
     */
    public Continuity.Step replayStep(Continuity.Failure failure) {
        try {
            long r = Native.replayDecide(handle, failure.node(), failure.errorClass().ordinal(),
                    failure.commitInFlight(), failure.outcome() == null ? 0 : failure.outcome().code(),
                    failure.forced(), failure.replays(), failure.replayable());
            return Continuity.Step.unpack(r);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Reports a heartbeat probe; {@code heartbeat.misses} consecutive misses mark the node down. A removed
     * node's id is taken and ignored (a probe begun before the removal); an id the cluster never had is an
     * {@link UnknownNodeException}.
     *
     * @param node node id
     * @param ok whether it answered
     * @return whether the node's state changed
     */
    public boolean reportProbe(int node, boolean ok) {
        try {
            return Native.probeReport(handle, node, ok);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Reports a node-level success or failure outside a lease. A removed node's id is taken and ignored, as in
     * {@link #reportProbe}.
     *
     * @param node node id
     * @param ok success
     * @return whether the node's state changed
     */
    public boolean reportOutcome(int node, boolean ok) {
        try {
            return Native.outcomeReport(handle, node, ok);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    // ---- metrics ----------------------------------------------------------

    /** @return the metrics snapshot as JSON */
    public String metricsJson() {
        mergeHostHits();
        try {
            return Native.metricsJson(handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** @return the metrics snapshot in the Prometheus text format (0.0.4) */
    public String metricsPrometheus() {
        mergeHostHits();
        try {
            return Native.metricsPrometheus(handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** @return every live node's state and counters, from one snapshot */
    public List<NodeMetrics> nodeMetrics() {
        mergeHostHits();
        try {
            Object[] m = Native.nodeMetrics(handle);
            String[] names = (String[]) m[0];
            String[] causes = (String[]) m[1];
            long[] c = (long[]) m[2];
            int k = c.length / Math.max(1, names.length);
            long[] spans = Native.nodeTxSpans(handle); // {id, tx_spans} pairs
            List<NodeMetrics> out = new ArrayList<>(names.length);
            for (int i = 0; i < names.length; i++) {
                int o = i * k;
                long span = 0;
                for (int j = 0; j + 1 < spans.length; j += 2) {
                    if (spans[j] == c[o]) {
                        span = spans[j + 1];
                        break;
                    }
                }
                out.add(new NodeMetrics((int) c[o], names[i], NodeState.of((int) c[o + 1]), causes[i],
                        (int) c[o + 2], (int) c[o + 3], c[o + 4], c[o + 5], c[o + 6], c[o + 7], c[o + 8], c[o + 9],
                        c[o + 10], c[o + 11], c[o + 12], span));
            }
            return Collections.unmodifiableList(out);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The topology feed's health ({@code topology.feed}, docs/operations.md "Topology feed"):
     * connected, the applied revision, the lag, the records applied and refused, the last
     * error. The same fields as the {@code feed} object of {@link #metricsJson()}.
     *
     * @return the feed's status, empty when the cluster has no feed
     */
    public Optional<FeedStatus> feedStatus() {
        try {
            return Optional.ofNullable(FeedStatus.of(Native.feedStatus(handle)));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** Adds the pinned routes that threads served from their caches to the core's counters. */
    private void mergeHostHits() {
        for (AtomicLongArray c : hostHits) {
            ThreadContexts.mergeHits(c, handle);
        }
    }

    // ---- lifecycle ----------------------------------------------------------

    /** @return whether {@link #close()} was called */
    public boolean isClosed() {
        return closed.get();
    }

    /** Frees the native cluster. Idempotent; later calls on it throw {@link ClusterClosedException}. */
    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            freeOnGc.clean();
        }
    }

    @Override
    public String toString() {
        if (closed.get()) {
            return "Cluster[" + name + ", closed]";
        }
        try {
            return "Cluster[" + name + ", nodes=" + nodeNames() + "]";
        } catch (ClusterClosedException e) {
            return "Cluster[" + name + ", closed]";
        }
    }

    // ---- helpers ------------------------------------------------------------

    Route route(long packed) {
        int node = Native.node(packed);
        RouteKind kind = Native.kind(packed);
        int i = node * RouteKind.COUNT + kind.ordinal();
        Route[] rs = routes;
        Route r = i < rs.length ? rs[i] : null;
        if (r == null) {
            r = new Route(node, nodeName(node), kind);
            if (node >= 0) {
                remember(i, r);
            }
        }
        return r;
    }

    private synchronized void remember(int i, Route r) {
        routes = withSet(routes, i, r);
    }

    /** A copy of {@code a} with {@code a[i] = v}, grown if needed: readers of the old array never see a write. */
    private static <T> T[] withSet(T[] a, int i, T v) {
        T[] copy = Arrays.copyOf(a, i < a.length ? a.length : Math.max(i + 1, a.length * 2));
        copy[i] = v;
        return copy;
    }

    private static byte[] gtrid(byte[] gtrid) {
        return Objects.requireNonNull(gtrid, "gtrid");
    }

    /**
     * A text key as UTF-8. A lone surrogate is not Unicode text (String.getBytes would
     * write {@code ?} for it, so different strings would name one key): it is refused,
     * as the C ABI refuses invalid UTF-8 and the JNI string arguments refuse it.
     */
    /**
     * The bytes the library routes a text key by (a session id, a data key): its
     * UTF-8. A lone surrogate has no UTF-8 ({@code getBytes} would make it
     * {@code ?}, so two such ids would name one session) and is refused.
     *
     * @param text the key
     * @param what the parameter's name, for the message
     * @return its UTF-8 bytes
     * @throws InvalidArgumentException if it holds a lone surrogate
     */
    public static byte[] keyBytes(String text, String what) {
        return utf8(text, what);
    }

    private static byte[] utf8(String s, String what) {
        Objects.requireNonNull(s, what);
        for (int i = 0, n = s.length(); i < n; i++) {
            char ch = s.charAt(i);
            if (Character.isSurrogate(ch)) {
                if (Character.isHighSurrogate(ch) && i + 1 < n && Character.isLowSurrogate(s.charAt(i + 1))) {
                    i++;
                    continue;
                }
                throw new InvalidArgumentException(String.format(
                        "`%s` is not valid Unicode: a lone surrogate U+%04X at index %d", what, (int) ch, i));
            }
        }
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** Frees the handle when the cluster is closed or becomes unreachable. */
    private static final class Free implements Runnable {
        private final long handle;

        Free(long handle) {
            this.handle = handle;
        }

        @Override
        public void run() {
            try {
                Native.clusterFree(handle);
            } catch (ClusterClosedException e) {
                // already freed
            }
        }
    }

    /** Frees the routing epoch page once its buffer is unreachable. */
    private static final class FreeEpochPage implements Runnable {
        private final long page;

        FreeEpochPage(long page) {
            this.page = page;
        }

        @Override
        public void run() {
            Native.epochPageFree(page);
        }
    }

    /** Releases a dead thread's pin context and merges the hits it served. */
    private static final class ReleaseThreadContext implements Runnable {
        private final long handle;
        private final long key;
        private final AtomicLongArray hits;
        private final Set<AtomicLongArray> registry;

        // Holds the context array, not its holder: the Cleaner runs when the
        // thread's ThreadLocal value (the holder) is unreachable.
        ReleaseThreadContext(long handle, AtomicLongArray context, Set<AtomicLongArray> registry) {
            this.handle = handle;
            this.key = context.getPlain(ThreadContexts.KEY);
            this.hits = context;
            this.registry = registry;
        }

        @Override
        public void run() {
            registry.remove(hits);
            try {
                ThreadContexts.mergeHits(hits, handle);
                Native.contextRelease(handle, key);
            } catch (RuntimeException e) {
                // the cluster is closed: its pins and counters are gone with it
            }
        }
    }

    /** Releases a pin context (an {@link AffinityContext}'s) when its owner is unreachable. */
    private static final class ReleaseContext implements Runnable {
        private final long handle;
        private final long key;

        ReleaseContext(long handle, long key) {
            this.handle = handle;
            this.key = key;
        }

        @Override
        public void run() {
            try {
                Native.contextRelease(handle, key);
            } catch (RuntimeException e) {
                // the cluster is closed: its pins are gone with it
            }
        }
    }

    /**
     * Renders config text from typed settings and passes it to the core, which
     * validates it: {@code Cluster.builder().nodes("A", "B").policy("random")
     * .strict(Scope.TRANSACTION, true).build()}. Setting a key again replaces it.
     * Its setters are in {@code ClusterBuilder.java}.
     */
    public static final class Builder extends ClusterBuilder<Builder> {
        Builder() {}
    }
}
