package io.racaffinity.test;

import io.racaffinity.testsupport.PreparedXacts;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.postgresql.xa.PGXADataSource;

/** The rows XA tests write (one table per node) and what each node holds: the split check. */
public final class XaRows {
    public static final String TABLE = "racaff_xa_rows";
    public static final String INSERT = "INSERT INTO " + TABLE + " (run, tx, branch, port) VALUES (?, ?, ?, inet_server_port())";

    private XaRows() {}

    public static Connection connect(int node) throws SQLException {
        return DriverManager.getConnection(PgNodes.url(node), "postgres", "");
    }

    public static PGXADataSource xaDataSource(int node) {
        PGXADataSource ds = new PGXADataSource();
        ds.setUrl(PgNodes.url(node));
        ds.setUser("postgres");
        // no XA test can hang on a node: every connect, login and read is bounded
        ds.setConnectTimeout(5);
        ds.setLoginTimeout(10);
        ds.setSocketTimeout(60);
        return ds;
    }

    /** Creates the table on every node. */
    public static void create() throws SQLException {
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            try (Connection c = connect(i); Statement s = c.createStatement()) {
                s.execute("CREATE TABLE IF NOT EXISTS " + TABLE
                        + " (run text NOT NULL, tx int NOT NULL, branch int NOT NULL, port int NOT NULL,"
                        + " PRIMARY KEY (run, tx, branch))");
            }
        }
    }

    /** Per node (1-based): tx → its rows there, for one run. */
    public static Map<Integer, Map<Integer, Integer>> rowsByNode(String run) throws SQLException {
        Map<Integer, Map<Integer, Integer>> out = new HashMap<>();
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            Map<Integer, Integer> m = new HashMap<>();
            try (Connection c = connect(i);
                    PreparedStatement ps = c.prepareStatement(
                            "SELECT tx, count(*) FROM " + TABLE + " WHERE run = ? GROUP BY tx")) {
                ps.setString(1, run);
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) {
                        m.put(rs.getInt(1), rs.getInt(2));
                    }
                }
            }
            out.put(i, m);
        }
        return out;
    }

    /** tx → the nodes holding any of its rows. */
    public static Map<Integer, Set<Integer>> nodesByTx(Map<Integer, Map<Integer, Integer>> rows) {
        Map<Integer, Set<Integer>> out = new HashMap<>();
        rows.forEach((node, m) -> m.keySet().forEach(tx -> out.computeIfAbsent(tx, k -> new TreeSet<>()).add(node)));
        return out;
    }

    /** gids of prepared transactions on node i. */
    public static List<String> prepared(int node) throws SQLException {
        try (Connection c = connect(node)) {
            return PreparedXacts.gids(c);
        }
    }

    /** pgjdbc's gid prefix of Narayana xids (format id 131077). */
    public static final String NARAYANA_GID = "131077_";

    /** Rolls back Narayana-made prepared transactions on every node (leftovers of an aborted earlier run). */
    public static int rollbackAllPrepared() throws SQLException {
        int n = 0;
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            for (String gid : prepared(i)) {
                if (!gid.startsWith(NARAYANA_GID)) {
                    continue;
                }
                try (Connection c = connect(i); Statement s = c.createStatement()) {
                    s.execute("ROLLBACK PREPARED '" + gid.replace("'", "''") + "'");
                    n++;
                }
            }
        }
        return n;
    }
}
