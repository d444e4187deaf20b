package io.racaffinity.jdbc;

import java.sql.Connection;
import java.sql.ConnectionBuilder;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.sql.SQLNonTransientException;
import java.sql.ShardingKey;

/**
 * JDBC 4.3 connection builder of {@link AffinityDataSource}: a sharding key
 * routes by data affinity, a user (and its password, if any) go to the node pool's
 * {@code getConnection(user, password)}.
 */
final class AffinityConnectionBuilder implements ConnectionBuilder {
    private final AffinityDataSource ds;
    private String user;
    private String password;
    private ShardingKey shardingKey;
    private ShardingKey superShardingKey;

    AffinityConnectionBuilder(AffinityDataSource ds) {
        this.ds = ds;
    }

    @Override
    public ConnectionBuilder user(String username) {
        this.user = username;
        return this;
    }

    @Override
    public ConnectionBuilder password(String pass) {
        this.password = pass;
        return this;
    }

    @Override
    public ConnectionBuilder shardingKey(ShardingKey key) {
        this.shardingKey = key;
        return this;
    }

    @Override
    public ConnectionBuilder superShardingKey(ShardingKey key) {
        this.superShardingKey = key;
        return this;
    }

    @Override
    public Connection build() throws SQLException {
        if (superShardingKey != null) {
            throw new SQLFeatureNotSupportedException("super sharding keys (Oracle Sharding shard groups) are not"
                    + " supported: RAC data affinity routes by the sharding key alone", "0A000");
        }
        if (shardingKey != null && !(shardingKey instanceof AffinityShardingKey)) {
            throw new SQLNonTransientException("the sharding key must come from this data source's"
                    + " createShardingKeyBuilder(), got " + shardingKey.getClass().getName(), "22023");
        }
        // A user alone is getConnection(user, null): a login without a password (trust, Kerberos, a
        // wallet) is the driver's to accept. A password alone names nobody to log in as.
        if (user == null && password != null) {
            throw new SQLNonTransientException("a password without a user: set the user too", "28000");
        }
        return ds.connect(user, password, (AffinityShardingKey) shardingKey);
    }

    @Override
    public String toString() {
        return "AffinityConnectionBuilder[" + (shardingKey != null ? shardingKey : "no sharding key")
                + (user != null ? ", credentials set]" : "]");
    }
}
