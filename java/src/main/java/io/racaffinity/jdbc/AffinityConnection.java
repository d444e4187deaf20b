package io.racaffinity.jdbc;

import io.racaffinity.AffinityException;
import io.racaffinity.ClusterClosedException;
import io.racaffinity.Lease;
import io.racaffinity.Outcome;
import io.racaffinity.Route;
import io.racaffinity.RouteKind;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.sql.Array;
import java.sql.Blob;
import java.sql.CallableStatement;
import java.sql.Clob;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.NClob;
import java.sql.PreparedStatement;
import java.sql.SQLClientInfoException;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.sql.SQLNonTransientConnectionException;
import java.sql.SQLNonTransientException;
import java.sql.SQLWarning;
import java.sql.SQLXML;
import java.sql.Savepoint;
import java.sql.ShardingKey;
import java.sql.Statement;
import java.sql.Struct;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Executor;

/**
 * A connection handed out by {@link AffinityDataSource}: the node pool's
 * connection plus the routing lease it was obtained under.
 *
 * <ul>
 *   <li>{@link #close()} closes the node pool's connection and releases the lease
 *       (once: closing again is a no-op);
 *   <li>an {@link SQLException} whose SQLState starts with {@code 08} (connection
 *       exception; the list is {@link AffinityDataSource#setNodeFailureSqlStates
 *       configurable}), thrown by any method of this connection or of the statements,
 *       result sets and metadata it returns, reports a node failure: the lease is
 *       released {@link Outcome#FAILED} at once, which feeds passive ejection;
 *   <li>{@link #unwrap(Class)} reaches the physical connection (for example
 *       {@code unwrap(org.postgresql.PGConnection.class)} or
 *       {@code oracle.jdbc.OracleConnection}); {@link #physical()} returns the node
 *       pool's connection itself.
 * </ul>
 *
 * <p>Close it (try-with-resources): nothing gives back a connection the application drops.
 * The node pool keeps its physical connection checked out, and a lease taken by
 * {@code Cluster.pick()} on an Up node (pinned or not) is a host lease that stays in flight on
 * its node until the cluster closes (a lease routed otherwise is released {@code NEUTRAL} once
 * the connection is collected); see
 * docs/java-datasource.md, "Connections never closed". HikariCP's
 * {@code leakDetectionThreshold} reports where a connection was taken and never closed.
 *
 * <p>The methods below the marker line are generated from {@code java.sql.Connection} by
 * {@code tools/GenJdbcDelegates.java} (reflection on the JDK; {@code make lint} fails when they
 * are stale); the lifecycle and wrapper methods above it are written by hand.
 */
public final class AffinityConnection implements Connection {
    // A VarHandle, not an AtomicBoolean (no allocation per connection) nor a field updater (whose
    // every call checks the object's class: a sample in a profile of the pinned borrow).
    private static final VarHandle STATE;
    /** {@link #state} bit: the application closed or aborted the connection. */
    private static final int CLOSED = 1;
    /**
     * {@link #state} bit: a reported failure released the lease. One word for both, so that close,
     * abort and a failure on another thread release the lease exactly once (a host lease's own
     * flag is a plain field, which two threads releasing at once both pass) with the one
     * compare-and-set a close always paid.
     */
    private static final int RELEASED = 2;
    /** {@link #state} bit: abort() came while close() was under way, whose failure is then its doing. */
    private static final int ABORTED = 4;

    static {
        try {
            STATE = MethodHandles.lookup().findVarHandle(AffinityConnection.class, "state", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final AffinityDataSource owner;
    private final Connection delegate;
    private final Lease lease;
    /** Where fast connection failover keeps this connection while it is in use ({@link NodeFailover}). */
    private final NodeFailover failover;
    private final int slot;

    @SuppressWarnings("unused") // through STATE
    private volatile int state;

    AffinityConnection(AffinityDataSource owner, Connection delegate, Lease lease, NodeFailover failover, int slot) {
        this.owner = owner;
        this.delegate = delegate;
        this.lease = lease;
        this.failover = failover;
        this.slot = slot;
    }

    /** @return the node pool's (physical) connection */
    public Connection physical() {
        return delegate;
    }

    /** @return the id of the node this connection is on */
    public int node() {
        return lease.node();
    }

    /** @return the name (RAC instance) of the node this connection is on */
    public String nodeName() {
        return lease.nodeName();
    }

    /** @return how the node was chosen */
    public RouteKind routeKind() {
        return lease.kind();
    }

    /**
     * Reports a node failure if {@code e} is a connection exception (SQLState
     * {@code 08...}, see {@link AffinityDataSource#setNodeFailureSqlStates}), then
     * returns it for rethrowing.
     */
    <E extends SQLException> E failed(E e) {
        // After the data source's close() the failure is most likely the abort of close() itself, which
        // says nothing of the node (of a cluster the application may share).
        if (owner.isNodeFailure(e) && !owner.isClosed()) {
            for (int s = state; (s & CLOSED) == 0; s = state) {
                // Closed or aborted by the application: a call failing on it says nothing of the node
                // (the application's own abort, or a call on a closed connection: 08003).
                if ((s & RELEASED) != 0 || STATE.compareAndSet(this, s, s | RELEASED)) {
                    if ((s & RELEASED) == 0) {
                        release(Outcome.FAILED);
                    }
                    owner.nodeFailureReported(this, e);
                    break;
                }
            }
        }
        return e;
    }

    /**
     * {@link #failed}, for a call that may fail as one on a closed connection: HikariCP's closed proxy throws
     * "Connection is closed" with no SQLState, where pgjdbc (an unpooled node) and the replay connection say 08003,
     * which an application's handler sorts by.
     */
    SQLException failedCall(SQLException e) {
        failed(e);
        if (e.getSQLState() == null && (state & CLOSED) != 0) {
            return new SQLNonTransientConnectionException("the connection is closed", "08003", e);
        }
        return e;
    }

    /**
     * Marks the connection closed.
     *
     * @return -1 if it was closed already, else whether the caller releases the lease (no failure did)
     */
    private int markClosed() {
        if (STATE.compareAndSet(this, 0, CLOSED)) {
            return 1;
        }
        for (int s = state; (s & CLOSED) == 0; s = state) {
            if (STATE.compareAndSet(this, s, s | CLOSED)) {
                return (s & RELEASED) == 0 ? 1 : 0;
            }
        }
        return -1;
    }

    private void release(Outcome outcome) {
        try {
            lease.tryRelease(outcome);
        } catch (ClusterClosedException e) {
            // The data source was closed under this connection: nothing to release.
        }
    }

    /** Closes the node pool's connection and releases the lease ({@code OK} unless a failure was reported). */
    @Override
    public void close() throws SQLException {
        int owns = markClosed();
        if (owns < 0) {
            return;
        }
        failover.returned(lease.node(), slot);
        Outcome outcome = Outcome.OK;
        try {
            delegate.close();
        } catch (SQLException e) {
            if ((state & ABORTED) == 0 && owner.isNodeFailure(e)) {
                outcome = Outcome.FAILED;
                owner.nodeFailureReported(this, e);
            }
            throw e;
        } finally {
            if (owns == 1) {
                release(outcome);
            }
        }
    }

    @Override
    public boolean isClosed() throws SQLException {
        if ((state & CLOSED) != 0) {
            return true;
        }
        try {
            return delegate.isClosed();
        } catch (SQLException e) {
            throw failed(e);
        }
    }

    /**
     * Aborts the physical connection, drops it from the node pool and releases the lease
     * {@code NEUTRAL}. On a closed connection only the pool's or driver's abort runs (a no-op there,
     * and what ends a close() still under way). A call that fails because of it is no node failure.
     */
    @Override
    public void abort(Executor executor) throws SQLException {
        if (executor == null) {
            throw new SQLException("abort: executor is null", "HY009");
        }
        int owns = markClosed();
        if (owns < 0) {
            // Closed, or closing: a close() hung on its connection (a rollback on return, on a node
            // that stopped answering) ends with the abort of that connection; on a closed one, the
            // pool's or driver's abort does nothing. The lease is close()'s to release.
            STATE.getAndBitwiseOr(this, ABORTED);
            delegate.abort(executor);
            return;
        }
        failover.returned(lease.node(), slot);
        try {
            delegate.abort(executor);
        } finally {
            try {
                // A pool's handle stays checked out after an abort of the connection under it (HikariCP
                // keeps the entry in use), and the application's close() after this one is a no-op.
                owner.aborted(lease.node(), delegate, executor);
            } finally {
                if (owns == 1) {
                    release(Outcome.NEUTRAL);
                }
            }
        }
    }

    @Override
    public <T> T unwrap(Class<T> iface) throws SQLException {
        if (iface.isInstance(this)) {
            return iface.cast(this);
        }
        if (iface.isInstance(delegate)) {
            return iface.cast(delegate);
        }
        try {
            return delegate.unwrap(iface);
        } catch (SQLException e) {
            throw failed(e);
        }
    }

    @Override
    public boolean isWrapperFor(Class<?> iface) throws SQLException {
        if (iface.isInstance(this) || iface.isInstance(delegate)) {
            return true;
        }
        try {
            return delegate.isWrapperFor(iface);
        } catch (SQLException e) {
            throw failed(e);
        }
    }

    @Override
    public void beginRequest() throws SQLException {
        try {
            delegate.beginRequest();
        } catch (SQLException e) {
            throw failed(e);
        }
    }

    @Override
    public void endRequest() throws SQLException {
        try {
            delegate.endRequest();
        } catch (SQLException e) {
            throw failed(e);
        }
    }

    /**
     * JDBC 4.3, UCP's call shape for data affinity: whether {@code shardingKey} belongs on this
     * connection, that is whether the core routes it to this connection's node (as
     * {@code createConnectionBuilder().shardingKey(key)} would) and the connection is valid. On
     * false, close it and build one with the key.
     */
    @Override
    public boolean setShardingKeyIfValid(ShardingKey shardingKey, ShardingKey superShardingKey, int timeout)
            throws SQLException {
        if (timeout < 0) {
            throw new SQLNonTransientException("setShardingKeyIfValid: timeout must be >= 0, got " + timeout,
                    "22023");
        }
        return keyRoute(shardingKey, superShardingKey).node() == node() && isValid(timeout);
    }

    @Override
    public boolean setShardingKeyIfValid(ShardingKey shardingKey, int timeout) throws SQLException {
        return setShardingKeyIfValid(shardingKey, null, timeout);
    }

    /** JDBC 4.3: accepts {@code shardingKey} if the core routes it to this connection's node, else throws. */
    @Override
    public void setShardingKey(ShardingKey shardingKey, ShardingKey superShardingKey) throws SQLException {
        Route r = keyRoute(shardingKey, superShardingKey);
        if (r.node() != node()) {
            throw new SQLNonTransientException("sharding key " + shardingKey + " belongs on node " + r.nodeName()
                    + ", this connection is on node " + nodeName()
                    + ": build a connection with it (createConnectionBuilder().shardingKey(key))", "22023");
        }
    }

    @Override
    public void setShardingKey(ShardingKey shardingKey) throws SQLException {
        setShardingKey(shardingKey, null);
    }

    /** @return the core's route of {@code key}, checked as the connection builder checks it */
    private Route keyRoute(ShardingKey key, ShardingKey superKey) throws SQLException {
        if ((state & CLOSED) != 0) {
            throw new SQLNonTransientConnectionException("the connection is closed", "08003");
        }
        if (superKey != null) {
            throw new SQLFeatureNotSupportedException("super sharding keys (Oracle Sharding shard groups) are not"
                    + " supported: RAC data affinity routes by the sharding key alone", "0A000");
        }
        if (!(key instanceof AffinityShardingKey)) {
            throw new SQLNonTransientException("the sharding key must come from the data source's"
                    + " createShardingKeyBuilder(), got " + (key == null ? "null" : key.getClass().getName()),
                    "22023");
        }
        try {
            return owner.clusterOf().routeKey(((AffinityShardingKey) key).raw());
        } catch (AffinityException e) {
            throw SqlErrors.routing(e);
        }
    }

    @Override
    public String toString() {
        String node;
        try {
            node = lease.nodeName();
        } catch (RuntimeException e) {
            node = "#" + lease.node();
        }
        return "AffinityConnection[node=" + node + ", kind=" + lease.kind()
                + ((state & CLOSED) != 0 ? ", closed" : "") + "]";
    }

    // ---- generated by tools/GenJdbcDelegates.java from java.sql.Connection: do not edit below ----

    @Override
    public void clearWarnings() throws SQLException {
        try {
            delegate.clearWarnings();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public void commit() throws SQLException {
        try {
            delegate.commit();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public Array createArrayOf(String a0, Object[] a1) throws SQLException {
        try {
            return delegate.createArrayOf(a0, a1);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public Blob createBlob() throws SQLException {
        try {
            return delegate.createBlob();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public Clob createClob() throws SQLException {
        try {
            return delegate.createClob();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public NClob createNClob() throws SQLException {
        try {
            return delegate.createNClob();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public SQLXML createSQLXML() throws SQLException {
        try {
            return delegate.createSQLXML();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public Statement createStatement() throws SQLException {
        try {
            return JdbcWrappers.wrap(this, Statement.class, delegate.createStatement());
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public Statement createStatement(int a0, int a1) throws SQLException {
        try {
            return JdbcWrappers.wrap(this, Statement.class, delegate.createStatement(a0, a1));
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public Statement createStatement(int a0, int a1, int a2) throws SQLException {
        try {
            return JdbcWrappers.wrap(this, Statement.class, delegate.createStatement(a0, a1, a2));
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public Struct createStruct(String a0, Object[] a1) throws SQLException {
        try {
            return delegate.createStruct(a0, a1);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public boolean getAutoCommit() throws SQLException {
        try {
            return delegate.getAutoCommit();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public String getCatalog() throws SQLException {
        try {
            return delegate.getCatalog();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public Properties getClientInfo() throws SQLException {
        try {
            return delegate.getClientInfo();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public String getClientInfo(String a0) throws SQLException {
        try {
            return delegate.getClientInfo(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public int getHoldability() throws SQLException {
        try {
            return delegate.getHoldability();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public DatabaseMetaData getMetaData() throws SQLException {
        try {
            return JdbcWrappers.wrap(this, DatabaseMetaData.class, delegate.getMetaData());
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public int getNetworkTimeout() throws SQLException {
        try {
            return delegate.getNetworkTimeout();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public String getSchema() throws SQLException {
        try {
            return delegate.getSchema();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public int getTransactionIsolation() throws SQLException {
        try {
            return delegate.getTransactionIsolation();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public Map<String, Class<?>> getTypeMap() throws SQLException {
        try {
            return delegate.getTypeMap();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public SQLWarning getWarnings() throws SQLException {
        try {
            return delegate.getWarnings();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public boolean isReadOnly() throws SQLException {
        try {
            return delegate.isReadOnly();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public boolean isValid(int a0) throws SQLException {
        try {
            return delegate.isValid(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public String nativeSQL(String a0) throws SQLException {
        try {
            return delegate.nativeSQL(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public CallableStatement prepareCall(String a0) throws SQLException {
        try {
            return JdbcWrappers.wrap(this, CallableStatement.class, delegate.prepareCall(a0));
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public CallableStatement prepareCall(String a0, int a1, int a2) throws SQLException {
        try {
            return JdbcWrappers.wrap(this, CallableStatement.class, delegate.prepareCall(a0, a1, a2));
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public CallableStatement prepareCall(String a0, int a1, int a2, int a3) throws SQLException {
        try {
            return JdbcWrappers.wrap(this, CallableStatement.class, delegate.prepareCall(a0, a1, a2, a3));
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public PreparedStatement prepareStatement(String a0) throws SQLException {
        try {
            return JdbcWrappers.wrap(this, PreparedStatement.class, delegate.prepareStatement(a0));
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public PreparedStatement prepareStatement(String a0, String[] a1) throws SQLException {
        try {
            return JdbcWrappers.wrap(this, PreparedStatement.class, delegate.prepareStatement(a0, a1));
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public PreparedStatement prepareStatement(String a0, int a1) throws SQLException {
        try {
            return JdbcWrappers.wrap(this, PreparedStatement.class, delegate.prepareStatement(a0, a1));
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public PreparedStatement prepareStatement(String a0, int a1, int a2) throws SQLException {
        try {
            return JdbcWrappers.wrap(this, PreparedStatement.class, delegate.prepareStatement(a0, a1, a2));
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public PreparedStatement prepareStatement(String a0, int a1, int a2, int a3) throws SQLException {
        try {
            return JdbcWrappers.wrap(this, PreparedStatement.class, delegate.prepareStatement(a0, a1, a2, a3));
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public PreparedStatement prepareStatement(String a0, int[] a1) throws SQLException {
        try {
            return JdbcWrappers.wrap(this, PreparedStatement.class, delegate.prepareStatement(a0, a1));
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public void releaseSavepoint(Savepoint a0) throws SQLException {
        try {
            delegate.releaseSavepoint(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public void rollback() throws SQLException {
        try {
            delegate.rollback();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public void rollback(Savepoint a0) throws SQLException {
        try {
            delegate.rollback(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public void setAutoCommit(boolean a0) throws SQLException {
        try {
            delegate.setAutoCommit(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public void setCatalog(String a0) throws SQLException {
        try {
            delegate.setCatalog(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public void setClientInfo(Properties a0) throws SQLClientInfoException {
        try {
            delegate.setClientInfo(a0);
        } catch (SQLClientInfoException e) {
            throw failed(e);
        }
    }

    @Override
    public void setClientInfo(String a0, String a1) throws SQLClientInfoException {
        try {
            delegate.setClientInfo(a0, a1);
        } catch (SQLClientInfoException e) {
            throw failed(e);
        }
    }

    @Override
    public void setHoldability(int a0) throws SQLException {
        try {
            delegate.setHoldability(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public void setNetworkTimeout(Executor a0, int a1) throws SQLException {
        try {
            delegate.setNetworkTimeout(a0, a1);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public void setReadOnly(boolean a0) throws SQLException {
        try {
            delegate.setReadOnly(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public Savepoint setSavepoint() throws SQLException {
        try {
            return delegate.setSavepoint();
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public Savepoint setSavepoint(String a0) throws SQLException {
        try {
            return delegate.setSavepoint(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public void setSchema(String a0) throws SQLException {
        try {
            delegate.setSchema(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public void setTransactionIsolation(int a0) throws SQLException {
        try {
            delegate.setTransactionIsolation(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }

    @Override
    public void setTypeMap(Map<String, Class<?>> a0) throws SQLException {
        try {
            delegate.setTypeMap(a0);
        } catch (SQLException e) {
            throw failedCall(e);
        }
    }
}
