package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.racaffinity.test.PgNodes;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * JDBC 4.3's connection builder with a user and no password, as {@code getConnection(user, null)}:
 * a login without a password (PostgreSQL's trust or peer, Kerberos, a wallet) is the driver's to
 * accept or refuse.
 */
@ExtendWith(PgNodes.class)
class ConnectionBuilderCredentialsTest {

    @Test
    void aUserWithoutAPasswordLogsInAsThatUser() throws Exception {
        try (AffinityDataSource ds = new AffinityDataSource()) {
            ds.setConfig("name = builderuser; nodes = A");
            ds.setNodeUrls(Map.of("A", PgNodes.url(1)));
            ds.setHeartbeatIntervalMillis(0);
            ds.setRegisterMBean(false);
            try (Connection c = ds.createConnectionBuilder().user("postgres").build();
                    Statement s = c.createStatement();
                    ResultSet rs = s.executeQuery("SELECT current_user")) {
                rs.next();
                assertEquals("postgres", rs.getString(1));
            }
        }
    }
}
