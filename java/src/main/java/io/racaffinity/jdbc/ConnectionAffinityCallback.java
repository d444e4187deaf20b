package io.racaffinity.jdbc;

/**
 * UCP's connection affinity callback ({@code oracle.ucp.ConnectionAffinityCallback},
 * seed 002 §10.4.2), with the same members, for
 * {@link AffinityDataSource#registerConnectionAffinityCallback}. A UCP
 * implementation compiles against it with only its import changed.
 *
 * <p>On each {@code getConnection()} (without a sharding key or a JTA
 * transaction) the data source reads {@link #getConnectionAffinityContext()}:
 * <ul>
 *   <li>{@code null}: it places a new affinity by the pool's load balancing
 *       (runtime load balancing from RLB advisories, random without them) and
 *       hands the callback a {@link ConnectionAffinityContext} naming that
 *       instance ({@link #setConnectionAffinityContext}); later
 *       {@code getConnection()} calls go there;</li>
 *   <li>a context it handed out: the connection comes from its instance.</li>
 * </ul>
 * The application ends the affinity by setting the context to {@code null}.
 * {@link AffinityPolicy#TRANSACTION_BASED_AFFINITY} contexts follow the
 * transaction scope ({@code transaction.strict}, UCP's {@code UseStrictXAAffinity});
 * {@link AffinityPolicy#WEBSESSION_BASED_AFFINITY} contexts follow the session
 * scope ({@code session.strict}, {@code UseStrictWebSessionAffinity}) and are
 * also released by the instance (an RLB advisory with {@code aff=FALSE}). When a
 * context's instance fails (or a planned drain times out), soft mode moves the
 * affinity and sets a fresh context naming the new instance; strict mode throws
 * {@code SQLTransientConnectionException} (SQLState 08001, cause
 * {@code StrictAffinityException}).
 * {@link AffinityPolicy#DATA_BASED_AFFINITY} sets no context: the sharding key of each
 * connection is its affinity.
 */
public interface ConnectionAffinityCallback {
    /**
     * A lock for implementations that guard their context, as the seed's sample
     * ({@code AffinityCallbackSample}, §10.4.2.1) does with {@code synchronized
     * (lockObj)} without declaring it. Shared by every implementation: hold it
     * only for the field access, as the sample does.
     */
    Object lockObj = new Object();

    /** The affinity policy, UCP's names. */
    enum AffinityPolicy {
        /** Transaction-based affinity: the transaction scope's rules. */
        TRANSACTION_BASED_AFFINITY,
        /** Web-session affinity: the session scope's rules (released by {@code aff=FALSE}). */
        WEBSESSION_BASED_AFFINITY,
        /**
         * Data affinity (UCP 12.1 and later): each connection's sharding key routes it
         * ({@code createConnectionBuilder().shardingKey(k)}, the data scope's rules:
         * {@code data.strict}); the data source hands the callback no context, and a
         * connection without a key is routed as without a callback (the thread's pin, else
         * load balancing).
         */
        DATA_BASED_AFFINITY
    }

    /**
     * Stores the context the data source hands out (or a context the
     * application sets; {@code null} ends the affinity).
     *
     * @param context the opaque context
     * @return whether it was stored; false declines it: no affinity is established (the data source
     *     releases the context's pin at once, this call's connection is still served from its node, and
     *     the next {@code getConnection()} places anew, as with no context)
     */
    boolean setConnectionAffinityContext(Object context);

    /** @return the stored context, or {@code null} for none */
    Object getConnectionAffinityContext();

    /** @param policy the affinity policy of contexts created from now on */
    void setAffinityPolicy(AffinityPolicy policy);

    /** @return the affinity policy ({@code null} reads as transaction-based) */
    AffinityPolicy getAffinityPolicy();
}
