// The README's Java quick start. Runs with nothing but racaffinity.jar and a JDBC
// driver on the class path, no -Djava.library.path (the jar loads its own library):
//
//   java -cp racaffinity-0.2.0.jar:postgresql.jar QuickStart.java
//
// It routes over three PostgreSQL nodes standing in for RAC instances
// (tests/cluster/pgnodes start 3; URLs from RACAFF_NODE<i>_URL, else 127.0.0.1:5543<i>).

import io.racaffinity.Cluster;
import io.racaffinity.Pin;
import io.racaffinity.Route;
import io.racaffinity.jdbc.AffinityDataSource;
import java.sql.Connection;
import java.sql.JDBCType;
import java.sql.ResultSet;
import java.sql.ShardingKey;
import java.sql.Statement;
import java.util.LinkedHashMap;
import java.util.Map;

public class QuickStart {
    static int port(Connection c) throws Exception {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT inet_server_port()")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> urls = new LinkedHashMap<>();
        for (int i = 1; i <= 3; i++) {
            String url = System.getenv("RACAFF_NODE" + i + "_URL");
            urls.put("RAC" + i, url != null ? url : "jdbc:postgresql://127.0.0.1:" + (55430 + i) + "/postgres");
        }

        try (AffinityDataSource ds = new AffinityDataSource()) {
            ds.setConfig("name = quickstart; nodes = RAC1, RAC2, RAC3; transaction.strict = true");
            ds.setNodeUrls(urls);                    // or setUrlTemplate("jdbc:oracle:thin:@//host:1521/svc/{instance}")
            ds.setUser("postgres");                  // with setDataSourceClassName(...) for a pool per node

            // Thread affinity: pin the thread, every connection goes to one node.
            try (Pin pin = ds.pin()) {
                for (int i = 0; i < 3; i++) {
                    try (Connection c = ds.getConnection()) {
                        System.out.println("pinned to " + pin.nodeName() + ": port " + port(c));
                    }
                }
            }

            // RAC data affinity with UCP's call shape.
            ShardingKey key = ds.createShardingKeyBuilder().subkey(1000, JDBCType.INTEGER).build();
            try (Connection c = ds.createConnectionBuilder().shardingKey(key).build()) {
                System.out.println("key 1000: port " + port(c));
            }

            // The routing core itself: XA branches of one gtrid share a node.
            Cluster cluster = ds.getCluster();
            Route tx = cluster.txBegin("gtrid-42".getBytes());
            System.out.println("gtrid-42 lives on " + tx.nodeName() + ", branch 2 on "
                    + cluster.txBegin("gtrid-42".getBytes()).nodeName());
            cluster.txComplete("gtrid-42".getBytes());
            System.out.println("quickstart ok");
        }
    }
}
