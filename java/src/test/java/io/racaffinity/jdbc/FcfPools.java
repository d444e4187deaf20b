package io.racaffinity.jdbc;

import com.zaxxer.hikari.HikariConfig;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import java.util.function.Consumer;

/**
 * The set-up the fast connection failover tests share (FastFailoverTest, NodeRemovalTest): node pools whose
 * sessions carry the test's application name, so that {@link #serverConns} counts them on the server, and that
 * wait far longer for a connection than any test waits; a data source over them without heartbeat or MBean.
 */
final class FcfPools {
    static final List<String> NAMES = AffinityDataSourceTest.NAMES;
    /**
     * Far longer than any test waits: a thread still in a pool's wait when a test looks has waited
     * for the connection timeout, not been sent on.
     */
    static final long CONNECTION_TIMEOUT_MS = 120_000;

    private FcfPools() {}

    /** Pools over the nodes that name their sessions {@code app} and wait {@link #CONNECTION_TIMEOUT_MS}, changed by {@code tweak}. */
    static Pools pools(String app, Consumer<HikariConfig> tweak) {
        return new Pools(NAMES, c -> {
            c.setConnectionTimeout(CONNECTION_TIMEOUT_MS);
            c.addDataSourceProperty("ApplicationName", app);
            tweak.accept(c);
        });
    }

    /** A data source named {@code name} over {@code pools} (which close it), the core's config plus {@code extra}. */
    static AffinityDataSource dataSource(Pools pools, String name, String extra) {
        AffinityDataSource ds = pools.affinity("name = " + name
                + "; database = orcl; service = svc; nodes = MYDB1, MYDB2, MYDB3; policy = random; " + extra);
        ds.setRegisterMBean(false);
        return ds;
    }

    /** {@link #dataSource(Pools, String, String)} whose pool upkeep runs every {@code upkeepMillis}. */
    static AffinityDataSource dataSource(Pools pools, String name, long upkeepMillis) {
        AffinityDataSource ds = dataSource(pools, name, "");
        ds.setPoolMaintenanceMillis(upkeepMillis);
        return ds;
    }

    /** Whether the driver's connection under {@code c} is closed (a pool's proxy keeps its own flag). */
    static boolean driverClosed(Connection c) throws SQLException {
        return ((Connection) c.unwrap(org.postgresql.PGConnection.class)).isClosed();
    }

    /** Whether {@code c} was aborted: its driver's connection closed, or the pool's proxy too (it unwraps no more). */
    static boolean aborted(Connection c) {
        try {
            return driverClosed(c);
        } catch (SQLException e) {
            return true;
        }
    }

    static String fan(String node, String tail) {
        return "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=" + node + " host=h " + tail;
    }

    /** The sessions named {@code app} open on a node of {@link #NAMES}, as its server counts them. */
    static int serverConns(String app, String node) {
        int i = NAMES.indexOf(node);
        if (i < 0) {
            throw new IllegalArgumentException(node + " is not one of " + NAMES);
        }
        return serverConns(app, i + 1);
    }

    /** The sessions named {@code app} open on node {@code i} (1-based, as {@link PgNodes#url}). */
    static int serverConns(String app, int i) {
        try (Connection c = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = '" + app + "'")) {
            rs.next();
            return rs.getInt(1);
        } catch (SQLException e) {
            throw new IllegalStateException(e);
        }
    }
}
