package io.racaffinity.testsupport;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

/** What a PostgreSQL node holds prepared: the XA tests' view of transactions in doubt. */
public final class PreparedXacts {
    private PreparedXacts() {
    }

    /** The gids in {@code pg_prepared_xacts} (pgjdbc's: formatId_gtrid_bqual, base64), sorted. */
    public static List<String> gids(Connection c) throws SQLException {
        List<String> gids = new ArrayList<>();
        try (Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT gid FROM pg_prepared_xacts ORDER BY gid")) {
            while (rs.next()) {
                gids.add(rs.getString(1));
            }
        }
        return gids;
    }
}
