package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.AffinityDataSourceTest.keyOn;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Continuity.Refusal;
import io.racaffinity.Continuity.ReplayRefusedException;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.test.Stubs;
import io.racaffinity.testsupport.FaultProxy;
import io.racaffinity.testsupport.FaultProxy.Hold;
import java.lang.reflect.InvocationTargetException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The outcome check of a replay (docs/continuity.md, "Java") asks the failed node itself on
 * independent databases ({@code recovery.scope = node}); when that node stays down, the request
 * gives up with {@code OUTCOME_UNKNOWN} at the check's deadline ({@code heartbeatTimeoutSeconds}),
 * not after the node pool's {@code connectionTimeout}. Through a HikariCP pool (its bounded
 * borrow) and through a pool that is not HikariCP's (a borrow on a thread of its own, given up at
 * the deadline).
 */
@ExtendWith(PgNodes.class)
class OutcomeCheckDeadlineTest {
    /** The node pools' wait for a connection: far beyond the check's deadline. */
    static final long CONNECTION_TIMEOUT_MS = 20_000;
    /** The check's deadline ({@code heartbeatTimeoutSeconds}). */
    static final int CHECK_SECONDS = 2;
    private Pools pools;

    @BeforeEach
    void table() throws SQLException {
        for (int i = 1; i <= 3; i++) {
            try (Connection c = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                    Statement s = c.createStatement()) {
                s.execute("CREATE TABLE IF NOT EXISTS java_req (id text PRIMARY KEY)");
                s.execute("DELETE FROM java_req WHERE id LIKE 'deadline-%'");
            }
        }
    }

    @AfterEach
    void close() {
        if (pools != null) {
            pools.close();
        }
    }

    private static Refusal refusalOf(SQLException e) {
        for (Throwable t = e.getCause(); t != null; t = t.getCause()) {
            if (t instanceof ReplayRefusedException r) {
                return r.refusal();
            }
        }
        for (Throwable t : e.getSuppressed()) {
            if (t instanceof ReplayRefusedException r) {
                return r.refusal();
            }
        }
        return null;
    }

    /** The pool, seen as a DataSource that is not HikariCP's (as an app server's pool would be). */
    private static DataSource notHikari(DataSource pool) {
        return Stubs.proxy(DataSource.class, "NotHikari[" + pool + "]", (p, m, args) -> {
            try {
                return m.invoke(pool, args);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        });
    }

    @Test
    void throughHikariCPTheCheckOfANodeThatStaysDownEndsAtItsDeadline() throws Exception {
        aCommitWhoseNodeStaysDownGivesUpAtTheCheckDeadline(false);
    }

    @Test
    void throughAnotherPoolTheCheckOfANodeThatStaysDownEndsAtItsDeadline() throws Exception {
        aCommitWhoseNodeStaysDownGivesUpAtTheCheckDeadline(true);
    }

    private void aCommitWhoseNodeStaysDownGivesUpAtTheCheckDeadline(boolean wrapped) throws Exception {
        String id = "deadline-" + (wrapped ? "wrapped" : "hikari");
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = new Pools(ReplayTest.NAMES, c -> {
                c.setConnectionTimeout(CONNECTION_TIMEOUT_MS);
                if (c.getPoolName().endsWith("MYDB1")) {
                    c.setJdbcUrl(proxy.url());
                }
            });
            Map<String, DataSource> nodes = pools.asMap();
            if (wrapped) {
                nodes.put("MYDB1", notHikari(nodes.get("MYDB1")));
            }
            AffinityDataSource ds = new AffinityDataSource();
            ds.setConfig("name = replay-deadline; database = orcl; service = svc; nodes = MYDB1, MYDB2, MYDB3;"
                    + " policy = random; thread.auto_pin = false"); // recovery.scope = node: node 1 must answer
            ds.setNodeDataSources(nodes);
            ds.setHeartbeatIntervalMillis(0);
            ds.setRegisterMBean(false);
            ds.setReplay(true);
            ds.setHeartbeatTimeoutSeconds(CHECK_SECONDS);
            pools.own(ds);
            Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
            try {
                c.setAutoCommit(false);
                try (PreparedStatement s = c.prepareStatement("INSERT INTO java_req VALUES (?)")) {
                    s.setString(1, id);
                    s.executeUpdate();
                }
                Hold hold = proxy.holdNextCommitReply();
                CompletableFuture<SQLException> committing = CompletableFuture.supplyAsync(() -> {
                    try {
                        c.commit();
                        return null;
                    } catch (SQLException e) {
                        return e;
                    }
                });
                assertTrue(hold.withheld.await(30, TimeUnit.SECONDS));
                PgNodes.kill(1); // committed, and node 1 stays down for the rest of the request
                long t0 = System.nanoTime();
                hold.release();
                SQLException e = committing.get(120, TimeUnit.SECONDS);
                long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                assertEquals(Refusal.OUTCOME_UNKNOWN, e == null ? null : refusalOf(e), String.valueOf(e));
                // A bound on behaviour, not a measure: the check's 2 s deadline against a 20 s pool wait.
                assertTrue(tookMs < CONNECTION_TIMEOUT_MS / 2, "gave up after " + tookMs + " ms; the check's"
                        + " deadline is " + CHECK_SECONDS + " s, the pool's connectionTimeout "
                        + CONNECTION_TIMEOUT_MS + " ms");
            } finally {
                c.close();
                PgNodes.restart(1);
            }
            assertEquals(1, ReplayTest.rowsOf(id).get("MYDB1"), "committed once, never replayed blind");
        }
    }
}
