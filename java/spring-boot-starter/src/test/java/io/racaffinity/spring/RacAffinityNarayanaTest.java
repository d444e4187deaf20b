package io.racaffinity.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.arjuna.ats.arjuna.recovery.RecoveryManager;
import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.testsupport.PgNodesScript;
import io.racaffinity.testsupport.xa.EmptyXAResource;
import jakarta.transaction.TransactionManager;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.sql.DataSource;
import javax.transaction.xa.XAException;
import javax.transaction.xa.Xid;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.health.actuate.endpoint.HealthEndpoint;
import org.springframework.boot.health.contributor.Status;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.SingleConnectionDataSource;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.support.TransactionTemplate;

/**
 * The starter under Narayana's Spring Boot integration, against the 3 local PostgreSQL nodes
 * (java/run_module_tests.sh starts them): {@code racaffinity.xa-data-source-class-name} makes
 * the {@code AffinityXADataSource}, the application's DataSource enlists in JTA, every
 * connection of one transaction lands on the gtrid's node, and a node killed between prepare
 * and commit is completed by Narayana's recovery through the starter's data source.
 */
@SpringBootTest(properties = {
    "racaffinity.xa-data-source-class-name=org.postgresql.xa.PGXADataSource",
    "racaffinity.username=postgres",
    "racaffinity.register-mbean=false",
    "racaffinity.heartbeat-interval-millis=0",
    "narayana.transaction-manager-id=racaffinity-boot",
    "narayana.recovery-backoff-period=1",
    "narayana.periodic-recovery-period=3600",
})
class RacAffinityNarayanaTest {
    @SpringBootApplication
    static class App {}

    @DynamicPropertySource
    static void nodes(DynamicPropertyRegistry r) {
        r.add("racaffinity.config", () -> "name = boot-xa; nodes = N1, N2, N3");
        for (int i = 1; i <= 3; i++) {
            String url = url(i);
            r.add("racaffinity.node-urls.N" + i, () -> url);
        }
    }

    static String url(int i) {
        return "jdbc:postgresql://127.0.0.1:" + RacAffinityStarterTest.port(i) + "/postgres";
    }

    @Autowired
    DataSource dataSource;

    @Autowired
    AffinityXADataSource xa;

    @Autowired
    PlatformTransactionManager transactions;

    @Autowired
    TransactionManager jta;

    @Autowired
    HealthEndpoint health;

    static int nodeOfPort(int port) {
        for (int i = 1; i <= 3; i++) {
            if (Integer.parseInt(RacAffinityStarterTest.port(i)) == port) {
                return i;
            }
        }
        throw new AssertionError("no node listens on " + port);
    }

    static List<String> sql(int node, String query) throws Exception {
        List<String> out = new ArrayList<>();
        try (Connection c = DriverManager.getConnection(url(node), "postgres", "");
                Statement s = c.createStatement()) {
            if (!s.execute(query)) {
                return out;
            }
            try (ResultSet rs = s.getResultSet()) {
                while (rs.next()) {
                    out.add(rs.getString(1));
                }
            }
        }
        return out;
    }

    static int preparedEverywhere() throws Exception {
        int n = 0;
        for (int i = 1; i <= 3; i++) {
            n += sql(i, "select gid from pg_prepared_xacts").size();
        }
        return n;
    }

    long liveTransactions() throws Exception {
        Matcher m = Pattern.compile("\"transaction\":\\{[^}]*\"live\":(\\d+)").matcher(xa.getCluster().metricsJson());
        assertTrue(m.find(), "the transaction scope in the metrics");
        return Long.parseLong(m.group(1));
    }

    @BeforeEach
    void emptyTables() throws Exception {
        for (int i = 1; i <= 3; i++) {
            for (String gid : sql(i, "select gid from pg_prepared_xacts")) {
                sql(i, "rollback prepared '" + gid + "'");
            }
            sql(i, "create table if not exists boot_xa (id int, note text)");
            sql(i, "truncate boot_xa");
        }
    }

    @Test
    void theDataSourceEnlistsInJtaAndKeepsOneTransactionOnOneNode() throws Exception {
        assertNotEquals(AffinityXADataSource.class, dataSource.getClass(), "the JTA wrapper's DataSource");
        assertInstanceOf(AffinityXADataSource.class, xa);
        assertEquals(Status.UP, health.healthForPath("racaffinity").getStatus(), "the health component covers XA too");
        TransactionTemplate tx = new TransactionTemplate(transactions);
        for (int t = 0; t < 6; t++) {
            int id = t;
            int[] ports = new int[2];
            int[] pids = new int[2];
            long starts = xa.getRouter().statistics().get("starts");
            tx.executeWithoutResult(status -> {
                // Two connections, two XA branches of one global transaction: one node.
                try (Connection a = dataSource.getConnection(); Connection b = dataSource.getConnection()) {
                    ports[0] = new JdbcTemplate(new SingleConnectionDataSource(a, true)).queryForObject("select inet_server_port()", Integer.class);
                    ports[1] = new JdbcTemplate(new SingleConnectionDataSource(b, true)).queryForObject("select inet_server_port()", Integer.class);
                    pids[0] = new JdbcTemplate(new SingleConnectionDataSource(a, true)).queryForObject("select pg_backend_pid()", Integer.class);
                    pids[1] = new JdbcTemplate(new SingleConnectionDataSource(b, true)).queryForObject("select pg_backend_pid()", Integer.class);
                    new JdbcTemplate(new SingleConnectionDataSource(a, true)).update("insert into boot_xa values (?, 'a')", id);
                    new JdbcTemplate(new SingleConnectionDataSource(b, true)).update("insert into boot_xa values (?, 'b')", id);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            assertNotEquals(pids[0], pids[1], "two sessions, so two branches that could have gone apart");
            assertEquals(2, xa.getRouter().statistics().get("starts") - starts, "two XA branches started");
            assertEquals(ports[0], ports[1], "both branches of transaction " + t + " on one node");
            int node = nodeOfPort(ports[0]);
            assertEquals(List.of("a", "b"), sql(node, "select note from boot_xa where id = " + id + " order by note"));
        }
        // A rollback leaves nothing anywhere.
        tx.executeWithoutResult(status -> {
            new JdbcTemplate(dataSource).update("insert into boot_xa values (100, 'rolled back')");
            status.setRollbackOnly();
        });
        for (int i = 1; i <= 3; i++) {
            assertEquals(List.of(), sql(i, "select note from boot_xa where id = 100"), "node " + i);
        }
        assertEquals(0, preparedEverywhere());
        assertEquals(0, liveTransactions(), "the core's transaction registry is empty again");
    }

    /** A second resource, enlisted last: its prepare kills the node of the first one's branch. */
    static final class KillOnPrepare extends EmptyXAResource {
        final int node;

        KillOnPrepare(int node) {
            this.node = node;
        }

        @Override
        public int prepare(Xid xid) throws XAException {
            try {
                PgNodesScript.run("kill", Integer.toString(node));
            } catch (Exception e) {
                throw new XAException(XAException.XAER_RMERR);
            }
            return XA_OK;
        }
    }

    @Test
    void aNodeKilledBetweenPrepareAndCommitIsCompletedByNarayanasRecovery() throws Exception {
        int[] node = new int[1];
        Throwable[] outcome = new Throwable[1];
        try {
            new TransactionTemplate(transactions).executeWithoutResult(status -> {
                JdbcTemplate j = new JdbcTemplate(dataSource);
                node[0] = nodeOfPort(j.queryForObject("select inet_server_port()", Integer.class));
                j.update("insert into boot_xa values (7, 'in doubt, then committed')");
                try {
                    jta.getTransaction().enlistResource(new KillOnPrepare(node[0]));
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
        } catch (RuntimeException e) {
            outcome[0] = e; // the TM may report the failed commit; recovery finishes it either way
        }
        PgNodesScript.run("restart", Integer.toString(node[0]));
        assertEquals(1, sql(node[0], "select gid from pg_prepared_xacts").size(),
                "the branch stayed prepared across the crash (outcome " + outcome[0] + ")");
        RecoveryManager recovery = RecoveryManager.manager();
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (preparedEverywhere() > 0 && System.nanoTime() < end) {
            recovery.scan();
        }
        assertEquals(0, preparedEverywhere(), "Narayana's recovery completed the branch through racaffinity");
        assertEquals(List.of("in doubt, then committed"), sql(node[0], "select note from boot_xa where id = 7"));
        for (int i = 1; i <= 3; i++) {
            if (i != node[0]) {
                assertEquals(List.of(), sql(i, "select note from boot_xa"), "node " + i);
            }
        }
    }
}
