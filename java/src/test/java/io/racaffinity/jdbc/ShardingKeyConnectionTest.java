package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.sql.Connection;
import java.sql.JDBCType;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.sql.ShardingKey;
import java.util.List;
import org.junit.jupiter.api.AutoClose;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * JDBC 4.3's sharding key on a connection already held, UCP's call shape for RAC data affinity:
 * {@code if (!c.setShardingKeyIfValid(key, t)) { c.close(); c = builder.shardingKey(key).build(); }}.
 * The answer is the core's route of the key, compared with the connection's node.
 */
@ExtendWith(PgNodes.class)
class ShardingKeyConnectionTest {
    private static final List<String> NAMES = List.of("MYDB1", "MYDB2", "MYDB3");

    @AutoClose
    private final Pools pools = new Pools(NAMES);

    private ShardingKey key(AffinityDataSource ds, int k) throws SQLException {
        return ds.createShardingKeyBuilder().subkey(k, JDBCType.INTEGER).build();
    }

    /** A key the core routes to another node than {@code node}. */
    private int keyOffNode(Cluster cluster, String node) {
        for (int k = 1;; k++) {
            if (!cluster.routeKey((long) k).nodeName().equals(node)) {
                return k;
            }
        }
    }

    @Test
    void setShardingKeyIfValidSaysWhetherTheKeyBelongsOnTheConnectionsNode() throws Exception {
        AffinityDataSource ds = pools.affinity("name = keyifvalid; nodes = MYDB1, MYDB2, MYDB3");
        Cluster cluster = ds.getCluster();
        ShardingKey mine = key(ds, 1000);
        try (Connection c = ds.createConnectionBuilder().shardingKey(mine).build()) {
            String node = c.unwrap(AffinityConnection.class).nodeName();
            assertEquals(cluster.routeKey(1000L).nodeName(), node);
            assertTrue(c.setShardingKeyIfValid(mine, 5), "the key's own connection");
            c.setShardingKey(mine);
            int other = keyOffNode(cluster, node);
            ShardingKey elsewhere = key(ds, other);
            assertFalse(c.setShardingKeyIfValid(elsewhere, 5), "key " + other + " belongs on "
                    + cluster.routeKey((long) other).nodeName() + ", not " + node);
            SQLException e = assertThrows(SQLException.class, () -> c.setShardingKey(elsewhere));
            assertFalse(e instanceof SQLFeatureNotSupportedException, e.toString());
            assertThrows(SQLFeatureNotSupportedException.class, () -> c.setShardingKeyIfValid(mine, mine, 5),
                    "super sharding keys are not supported, as in the connection builder");
            assertThrows(SQLException.class, () -> c.setShardingKeyIfValid(mine, -1), "a negative timeout");
        }
        Connection closed = ds.createConnectionBuilder().shardingKey(mine).build();
        closed.close();
        assertThrows(SQLException.class, () -> closed.setShardingKeyIfValid(mine, 5), "a closed connection");
        assertNotEquals(0, cluster.nodeNames().size());
    }
}
