package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.zaxxer.hikari.HikariDataSource;
import io.racaffinity.test.PgNodes;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.logging.Logger;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The node pools' default timeouts (issue 27, Java 6): with pgjdbc's own defaults a commit on
 * a node whose server is stopped (SIGSTOP: the connection stays open, nothing answers) waits
 * until the server resumes, and so does a login. The data source sets socket, connect and
 * login timeouts on the node pools it builds from URLs unless the user set them; a value the
 * user set wins.
 */
@ExtendWith(PgNodes.class)
class NodeTimeoutsTest {
    /** What the data source's defaults promise, plus a margin for a loaded machine. */
    private static final long MARGIN_SECONDS = 10;
    private static final ExecutorService RUNNER = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "node-timeouts-test");
        t.setDaemon(true);
        return t;
    });

    @AfterAll
    static void stopRunner() {
        RUNNER.shutdownNow();
    }

    private static AffinityDataSource ds(String name, String url, String poolClass) {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = " + name + "; nodes = A");
        ds.setNodeUrls(Map.of("A", url));
        ds.setUser("postgres");
        ds.setHeartbeatIntervalMillis(0);
        if (poolClass != null) {
            ds.setDataSourceClassName(poolClass);
            if (poolClass.contains("Hikari")) {
                ds.setDataSourcePropertyList("maximumPoolSize=2 | minimumIdle=0");
            }
        }
        return ds;
    }

    private static int backendPid(Connection c) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("select pg_backend_pid()")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    private static void signal(String sig, long pid) throws IOException, InterruptedException {
        Process p = new ProcessBuilder("kill", "-" + sig, Long.toString(pid)).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertTrue(p.waitFor(10, TimeUnit.SECONDS) && p.exitValue() == 0, "kill -" + sig + " " + pid + ": " + out);
    }

    /**
     * Runs {@code call} while process {@code pid} is stopped; it must end with an
     * SQLException within {@code bound} seconds. The process is resumed in any case.
     *
     * @return how long the call took, in seconds
     */
    private static double failsWhileStopped(long pid, long bound, String what, SqlCall call) throws Exception {
        signal("STOP", pid);
        long t0 = System.nanoTime();
        Future<?> f = RUNNER.submit(() -> {
            call.run();
            return null;
        });
        try {
            f.get(bound, TimeUnit.SECONDS);
            fail(what + " on a stopped server succeeded");
        } catch (TimeoutException e) {
            fail(what + " on a stopped server still blocked after " + bound + " s (no timeout ended it)");
        } catch (ExecutionException e) {
            assertTrue(e.getCause() instanceof SQLException, what + " failed with " + e.getCause());
        } finally {
            signal("CONT", pid);
        }
        double took = (System.nanoTime() - t0) / 1e9;
        System.out.printf("%s on a stopped server failed after %.1f s%n", what, took);
        return took;
    }

    @FunctionalInterface
    interface SqlCall {
        void run() throws Exception;
    }

    @Test
    void aCommitOnAStoppedServerEndsWithinTheDefaultSocketTimeout() throws Exception {
        try (AffinityDataSource ds = ds("to-commit", PgNodes.url(1), "com.zaxxer.hikari.HikariDataSource")) {
            Connection c = ds.getConnection();
            c.setAutoCommit(false);
            int pid = backendPid(c);
            try (Statement s = c.createStatement()) {
                s.execute("select txid_current()");
            }
            failsWhileStopped(pid, NodeTimeouts.SOCKET_TIMEOUT_SECONDS + MARGIN_SECONDS, "commit", c::commit);
            c.close();
        }
    }

    @Test
    void aLoginToAStoppedServerEndsWithinTheDefaultLoginTimeout() throws Exception {
        long postmaster;
        try (Connection c = java.sql.DriverManager.getConnection(PgNodes.url(2), "postgres", null);
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("show data_directory")) {
            rs.next();
            postmaster = Long.parseLong(Files.readAllLines(Path.of(rs.getString(1), "postmaster.pid")).get(0).trim());
        }
        // Unpooled: every getConnection is a login.
        try (AffinityDataSource ds = ds("to-login", PgNodes.url(2), null)) {
            ds.init();
            failsWhileStopped(postmaster, NodeTimeouts.LOGIN_TIMEOUT_SECONDS + MARGIN_SECONDS, "login",
                    () -> ds.getConnection().close());
        }
    }

    @Test
    void aSocketTimeoutTheUserSetWins() throws Exception {
        try (AffinityDataSource ds = ds("to-user", PgNodes.url(3) + "?socketTimeout=2",
                "com.zaxxer.hikari.HikariDataSource")) {
            Connection c = ds.getConnection();
            String url = ds.getNodeDataSource("A").unwrap(HikariDataSource.class).getJdbcUrl();
            assertTrue(url.contains("socketTimeout=2"), url);
            assertFalse(url.contains("socketTimeout=" + NodeTimeouts.SOCKET_TIMEOUT_SECONDS), url);
            c.setAutoCommit(false);
            int pid = backendPid(c);
            double took = failsWhileStopped(pid, 2 + MARGIN_SECONDS, "commit", c::commit);
            assertTrue(took < NodeTimeouts.SOCKET_TIMEOUT_SECONDS, "the user's 2 s, not the default: " + took);
            c.close();
        }
    }

    @Test
    void defaultsGoIntoPgjdbcUrlsUnlessSet() throws Exception {
        String base = PgNodes.url(1);
        try (AffinityDataSource ds = ds("to-url", base, "com.zaxxer.hikari.HikariDataSource")) {
            ds.init();
            String url = ds.getNodeDataSource("A").unwrap(HikariDataSource.class).getJdbcUrl();
            assertEquals(base + "?connectTimeout=" + NodeTimeouts.CONNECT_TIMEOUT_SECONDS + "&loginTimeout="
                    + NodeTimeouts.LOGIN_TIMEOUT_SECONDS + "&socketTimeout=" + NodeTimeouts.SOCKET_TIMEOUT_SECONDS,
                    url);
        }
        // A pgjdbc DataSource's own property counts as set.
        try (AffinityDataSource ds = ds("to-prop", base + "?loginTimeout=3", "org.postgresql.ds.PGSimpleDataSource")) {
            ds.setDataSourcePropertyList("socketTimeout=0");
            ds.init();
            org.postgresql.ds.PGSimpleDataSource pg =
                    (org.postgresql.ds.PGSimpleDataSource) ds.getNodeDataSource("A");
            assertEquals(0, pg.getSocketTimeout(), "the user's 0 (no timeout) stays");
            assertEquals(3, pg.getLoginTimeout());
            assertEquals(NodeTimeouts.CONNECT_TIMEOUT_SECONDS, pg.getConnectTimeout());
        }
    }

    /** The XA data source's node data sources built from URLs get them too. */
    @Test
    void xaNodeDataSourcesGetThemToo() throws Exception {
        try (AffinityXADataSource xa = new AffinityXADataSource()) {
            xa.setConfig("name = to-xa; nodes = A");
            xa.setNodeUrls(Map.of("A", PgNodes.url(1)));
            xa.setDataSourceClassName("org.postgresql.xa.PGXADataSource");
            xa.setUser("postgres");
            xa.setHeartbeatIntervalMillis(0);
            xa.setRegisterMBean(false);
            xa.init();
            org.postgresql.xa.PGXADataSource pg = (org.postgresql.xa.PGXADataSource) xa.getNodeXADataSource("A");
            assertEquals(NodeTimeouts.SOCKET_TIMEOUT_SECONDS, pg.getSocketTimeout());
            assertEquals(NodeTimeouts.LOGIN_TIMEOUT_SECONDS, pg.getLoginTimeout());
            assertEquals(NodeTimeouts.CONNECT_TIMEOUT_SECONDS, pg.getConnectTimeout());
        }
    }

    /** Oracle's timeouts are connection properties, in milliseconds; a URL parameter the user set wins. */
    @Test
    void oracleDefaultsAreConnectionProperties() throws Exception {
        try (AffinityDataSource ds = new AffinityDataSource()) {
            ds.setConfig("name = to-ora; nodes = RAC1");
            ds.setUrlTemplate("jdbc:oracle:thin:@//db:1521/svc/{instance}?oracle.jdbc.ReadTimeout=5000");
            ds.setDataSourceClassName(FakeOracleDataSource.class.getName());
            ds.setHeartbeatIntervalMillis(0);
            ds.init();
            FakeOracleDataSource o = (FakeOracleDataSource) ds.getNodeDataSource("RAC1");
            assertEquals(Map.of("oracle.net.CONNECT_TIMEOUT", Long.toString(NodeTimeouts.CONNECT_TIMEOUT_SECONDS * 1000)),
                    o.props, "ReadTimeout is in the URL already");
        }
    }

    /** UCP's and OracleDataSource's shape: a URL and {@code setConnectionProperty(String, String)}. */
    public static final class FakeOracleDataSource implements DataSource {
        final Map<String, String> props = new LinkedHashMap<>();
        String url;

        public void setURL(String url) {
            this.url = url;
        }

        public void setConnectionProperty(String name, String value) {
            props.put(name, value);
        }

        @Override
        public Connection getConnection() throws SQLException {
            throw new SQLException("fake");
        }

        @Override
        public Connection getConnection(String u, String p) throws SQLException {
            throw new SQLException("fake");
        }

        @Override
        public PrintWriter getLogWriter() {
            return null;
        }

        @Override
        public void setLogWriter(PrintWriter out) {}

        @Override
        public void setLoginTimeout(int seconds) {}

        @Override
        public int getLoginTimeout() {
            return 0;
        }

        @Override
        public Logger getParentLogger() {
            return Logger.getGlobal();
        }

        @Override
        public <T> T unwrap(Class<T> iface) throws SQLException {
            throw new SQLException("no");
        }

        @Override
        public boolean isWrapperFor(Class<?> iface) {
            return false;
        }
    }
}
