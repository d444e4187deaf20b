package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import javax.sql.XAConnection;
import javax.sql.XADataSource;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import io.racaffinity.test.Stubs;
import org.junit.jupiter.api.Test;

/**
 * No credential shows in what the library builds or forwards: toString(), and every message of every
 * exception in the chain (causes, next exceptions, suppressed) of a failed connect, whoever wrote it
 * (the library, DriverManager, the driver). SQLState and vendor code survive.
 */
class CredentialRedactionTest {
    static final String SECRET = "tiger";

    /** Every message and toString() of {@code t}'s whole graph: causes, next exceptions, suppressed. */
    static List<String> texts(Throwable t) {
        List<String> out = new ArrayList<>();
        Set<Throwable> seen = Collections.newSetFromMap(new IdentityHashMap<>());
        List<Throwable> todo = new ArrayList<>(List.of(t));
        while (!todo.isEmpty()) {
            Throwable x = todo.remove(todo.size() - 1);
            if (x == null || !seen.add(x)) {
                continue;
            }
            out.add(String.valueOf(x.getMessage()));
            out.add(x.toString());
            out.add(String.valueOf(x.getLocalizedMessage()));
            todo.add(x.getCause());
            todo.addAll(List.of(x.getSuppressed()));
            if (x instanceof SQLException) {
                todo.add(((SQLException) x).getNextException());
            }
        }
        return out;
    }

    static void assertNoSecret(Throwable t, String secret) {
        for (String s : texts(t)) {
            assertFalse(s.contains(secret), "a credential leaks: " + s);
        }
    }

    @Test
    void anOracleQuotedPasswordWithAnAtSignNeverShowsInToString() {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = quoted; nodes = RAC1");
        ds.setNodeUrlList("RAC1=jdbc:oracle:thin:scott/\"ti@ger\"@//h1:1521/svc/RAC1");
        String shown = ds.toString();
        assertFalse(shown.contains("ger"), shown);
        assertFalse(shown.contains("ti@"), shown);
        assertTrue(shown.contains("scott/****@//h1:1521"), shown);
    }

    @Test
    void aUserinfoPasswordWithAnAtSignNeverShowsInToString() {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = userinfo; nodes = RAC1");
        ds.setNodeUrlList("RAC1=jdbc:postgresql://u:ti@ger@127.0.0.1:1/db");
        String shown = ds.toString();
        assertFalse(shown.contains("ger"), shown);
        assertTrue(shown.contains("//u:****@127.0.0.1:1/db"), shown);
    }

    /** A node data source whose setter echoes the value it refuses, as drivers' setters do. */
    public static class EchoingDataSource extends org.postgresql.ds.PGSimpleDataSource {
        private static final long serialVersionUID = 1L;

        public void setPwd(String pwd) {
            throw new IllegalArgumentException("refused pwd " + pwd);
        }
    }

    /**
     * A node data source property is a credential by the same words a URL parameter is (password, passwd, pwd,
     * secret, credentials): its value shows neither in toString() nor in a failed setter's message.
     */
    @Test
    void aCredentialNodePropertyNamedLikeAUrlSecretNeverShows() {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = secret-props; nodes = RAC1");
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        ds.setNodeUrlList("RAC1=jdbc:postgresql://127.0.0.1:1/db");
        ds.setDataSourceClassName(EchoingDataSource.class.getName());
        ds.setDataSourcePropertyList("pwd=" + SECRET + "1 | dbPasswd=" + SECRET + "2 | clientSecret=" + SECRET
                + "3 | credentials=" + SECRET + "4 | applicationName=shown");
        String shown = ds.toString();
        assertFalse(shown.contains(SECRET), shown);
        assertTrue(shown.contains("applicationName=shown"), shown);
        SQLException e = assertThrows(SQLException.class, ds::init);
        assertTrue(e.getMessage().contains("setPwd"), e.getMessage());
        assertNoSecret(e, SECRET);
    }

    @Test
    void driverManagersNoSuitableDriverNeverShowsTheOracleInlinePassword() {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = no-driver; nodes = RAC1");
        ds.setNodeUrlList("RAC1=jdbc:oracle:thin:scott/" + SECRET + "@//127.0.0.1:1/svc/RAC1");
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        try (ds) {
            SQLException e = assertThrows(SQLException.class, ds::getConnection);
            assertTrue(texts(e).stream().anyMatch(s -> s.contains("No suitable driver")), texts(e).toString());
            assertEquals("08001", e.getSQLState(), "DriverManager's SQLState is kept");
            assertNoSecret(e, SECRET);
        }
    }

    @Test
    void pgjdbcsUnableToParseUrlNeverShowsTheUserinfoPassword() {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = bad-url; nodes = RAC1");
        ds.setNodeUrlList("RAC1=jdbc:postgresql://u:" + SECRET + "@127.0.0.1:notaport/db");
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        try (ds) {
            SQLException e = assertThrows(SQLException.class, ds::getConnection);
            assertTrue(texts(e).stream().anyMatch(s -> s.contains("parse URL")), texts(e).toString());
            assertNoSecret(e, SECRET);
        }
    }

    @Test
    void theConfiguredPasswordNeverShowsInADriversExceptionOrItsCauses() {
        // A driver that echoes the password it was given, in its message and in a cause and next exception.
        SQLException driver = new SQLException("login failed for password " + SECRET, "28P01", 1017);
        driver.setNextException(new SQLException("detail: " + SECRET, "28P01"));
        driver.initCause(new IllegalStateException("cause: " + SECRET));
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = echo; nodes = RAC1");
        ds.setNodeDataSources(Map.of("RAC1", Stubs.proxy(javax.sql.DataSource.class, "echoing", (p, m, a) -> {
            if (m.getName().equals("getConnection")) {
                throw driver;
            }
            return null;
        })));
        ds.setPassword(SECRET);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        try (ds) {
            SQLException e = assertThrows(SQLException.class, ds::getConnection);
            assertEquals("28P01", e.getSQLState());
            assertEquals(1017, e.getErrorCode());
            assertTrue(e.getMessage().contains("login failed for password ****"), e.getMessage());
            assertNoSecret(e, SECRET);
        }
    }

    @Test
    void anXaConnectFailureNeverForwardsTheDriversMessageUnredacted() throws Exception {
        SQLException driver = new SQLException("No suitable driver found for jdbc:oracle:thin:scott/" + SECRET
                + "@//h1:1521/svc", "08001");
        XADataSource failing = new XADataSource() {
            @Override
            public XAConnection getXAConnection() throws SQLException {
                throw driver;
            }

            @Override
            public XAConnection getXAConnection(String user, String password) throws SQLException {
                throw driver;
            }

            @Override
            public java.io.PrintWriter getLogWriter() {
                return null;
            }

            @Override
            public void setLogWriter(java.io.PrintWriter out) {}

            @Override
            public void setLoginTimeout(int seconds) {}

            @Override
            public int getLoginTimeout() {
                return 0;
            }

            @Override
            public java.util.logging.Logger getParentLogger() {
                return null;
            }
        };
        try (AffinityXADataSource ds = new AffinityXADataSource()) {
            ds.setConfig("name = xa-echo; nodes = RAC1");
            ds.setNodeXADataSources(new LinkedHashMap<>(Map.of("RAC1", failing)));
            ds.setHeartbeatIntervalMillis(0);
            ds.setRegisterMBean(false);
            XAConnection c = ds.getXAConnection();
            XAResource r = c.getXAResource();
            Xid x = new Xid() {
                @Override
                public int getFormatId() {
                    return 0x1234;
                }

                @Override
                public byte[] getGlobalTransactionId() {
                    return "redact".getBytes(java.nio.charset.StandardCharsets.UTF_8);
                }

                @Override
                public byte[] getBranchQualifier() {
                    return new byte[] {1};
                }
            };
            XAException e = assertThrows(XAException.class, () -> r.start(x, XAResource.TMNOFLAGS));
            assertEquals(XAException.XAER_RMFAIL, e.errorCode);
            assertTrue(e.getCause() instanceof SQLException, String.valueOf(e.getCause()));
            assertEquals("08001", ((SQLException) e.getCause()).getSQLState(), "the cause keeps its SQLState");
            assertNoSecret(e, SECRET);
            c.close();
        }
    }
}
