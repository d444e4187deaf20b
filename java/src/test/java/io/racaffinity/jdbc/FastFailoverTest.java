package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.AffinityDataSourceTest.keyOn;
import static io.racaffinity.jdbc.AffinityDataSourceTest.portOf;
import static io.racaffinity.jdbc.FcfPools.aborted;
import static io.racaffinity.jdbc.FcfPools.driverClosed;
import static io.racaffinity.test.Pools.await;
import static io.racaffinity.test.Pools.serverPort;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.racaffinity.Cluster;
import io.racaffinity.NodeState;
import io.racaffinity.test.BlockingLogHandler;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.testsupport.FaultProxy;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.ShardingKey;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Fast connection failover in the node pools (issue [continuity], docs/continuity.md "Java"):
 * a node gone Down has its idle connections closed, its connections in use aborted (not at a
 * planned drain's end; a node that fails during its drain is a hard Down), the threads waiting on its pool served by another node at once, and its pool
 * refilled when it is Up again. Node 2 is killed by one test and restarted at its end.
 */
@ExtendWith(PgNodes.class)
class FastFailoverTest {
    static final List<String> NAMES = AffinityDataSourceTest.NAMES;
    static final String APP = "racaff-fcf-java";
    static final long CONNECTION_TIMEOUT_MS = FcfPools.CONNECTION_TIMEOUT_MS;
    /** How long a test waits for threads sent on at once (a bound on the test, not a measure). */
    static final long SERVED_WITHIN_S = 30;

    private Pools pools;
    private ExecutorService threads;

    @AfterEach
    void close() {
        if (threads != null) {
            threads.shutdownNow();
        }
        if (pools != null) {
            pools.close();
        }
    }

    private AffinityDataSource ds(String name, String extra) {
        return FcfPools.dataSource(pools, name, extra);
    }

    /** {@link FcfPools}' pools, changed by {@code tweak}, and a data source over them whose upkeep runs every {@code upkeepMillis}. */
    private AffinityDataSource fcfDataSource(String name, long upkeepMillis, Consumer<HikariConfig> tweak) {
        pools = FcfPools.pools(APP, tweak);
        return FcfPools.dataSource(pools, name, upkeepMillis);
    }

    static String fan(String node, String tail) {
        return FcfPools.fan(node, tail);
    }

    /** This test's connections open on a node, as its server counts them. */
    static int serverConns(String node) {
        return FcfPools.serverConns(APP, node);
    }

    /** {@code n} threads asking for a connection by {@code key}; each answers the port that served it. */
    private List<Future<Integer>> askers(AffinityDataSource ds, ShardingKey key, int n) {
        threads = Executors.newFixedThreadPool(n);
        List<Future<Integer>> served = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            served.add(threads.submit(() -> {
                try (Connection c = ds.createConnectionBuilder().shardingKey(key).build()) {
                    return serverPort(c);
                }
            }));
        }
        return served;
    }

    @Test
    void threadsWaitingOnAKilledNodesPoolAreServedByAnotherNodeAndItsBorrowedConnectionIsAborted()
            throws Exception {
        pools = new Pools(NAMES, c -> {
            c.setConnectionTimeout(CONNECTION_TIMEOUT_MS);
            if (c.getPoolName().endsWith("MYDB2")) {
                c.setMaximumPoolSize(1);
                c.setMinimumIdle(0);
            }
        });
        AffinityDataSource ds = ds("fcf-kill", "");
        ShardingKey key2 = keyOn(ds, "MYDB2");
        HikariDataSource pool2 = pools.get("MYDB2");
        try {
            Connection held = ds.createConnectionBuilder().shardingKey(key2).build();
            assertEquals(portOf("MYDB2"), serverPort(held));
            List<Future<Integer>> served = askers(ds, key2, 4);
            assertTrue(await(Duration.ofSeconds(15),
                    () -> pool2.getHikariPoolMXBean().getThreadsAwaitingConnection() == 4),
                    "4 threads wait on node 2's pool");

            PgNodes.kill(2);
            ds.applyEvent(fan("MYDB2", "status=down reason=FAILURE"));

            for (Future<Integer> f : served) {
                // get() throws the thread's SQLException, if any surfaced
                assertNotEquals(portOf("MYDB2"), f.get(SERVED_WITHIN_S, TimeUnit.SECONDS),
                        "served by another node");
            }
            assertTrue(await(Duration.ofSeconds(SERVED_WITHIN_S), () -> {
                try {
                    return driverClosed(held);
                } catch (SQLException e) {
                    return false;
                }
            }), "the connection in use on the crashed node is aborted");
            SQLException next = assertThrows(SQLException.class,
                    () -> serverPort(held));
            assertTrue(next.getSQLState().startsWith("08"), next.getSQLState() + ": " + next.getMessage());
            held.close();
        } finally {
            PgNodes.restart(2);
        }
    }

    /**
     * A log handler that blocks (a full pipe: a forked test JVM's output that its parent reads slowly under load, a
     * stalled syslog) must not hold up fast connection failover: the upkeep aborts a hard Down's connections in use
     * before it logs the state change. It logged first, and a JtaRoutingTest run in CI waited past 5 s on it.
     */
    @Test
    void aHardDownAbortsTheConnectionsInUseEvenWhileTheLogHandlerBlocks() throws Exception {
        AffinityDataSource ds = fcfDataSource("fcf-log", 50, c -> {});
        Cluster cluster = ds.getCluster();
        Connection held = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
        try (BlockingLogHandler stuck = new BlockingLogHandler("fcf-log: node MYDB1 UP -> DOWN")) {
            assertEquals(portOf("MYDB1"), serverPort(held));
            cluster.applyEvent(fan("MYDB1", "status=down reason=FAILURE"));
            assertTrue(stuck.logging.await(10, TimeUnit.SECONDS), "the upkeep logs the Down");
            assertTrue(await(Duration.ofSeconds(10), () -> aborted(held)),
                    "the connection in use is aborted while the Down's log line is stuck in its handler");
        } finally {
            held.close();
        }
    }

    /**
     * The first Down's log line stays stuck in its handler: a later hard Down of another node is still acted on
     * (its connections in use aborted). The upkeep logged on its own thread, so one blocked handler call held every
     * later round.
     */
    @Test
    void aSecondHardDownIsActedOnWhileTheFirstDownsLogLineIsStuckInItsHandler() throws Exception {
        AffinityDataSource ds = fcfDataSource("fcf-log2", 50, c -> {});
        Cluster cluster = ds.getCluster();
        Connection held1 = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
        Connection held3 = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB3")).build();
        try (BlockingLogHandler stuck = new BlockingLogHandler("fcf-log2: node MYDB1 UP -> DOWN")) {
            assertEquals(portOf("MYDB1"), serverPort(held1));
            assertEquals(portOf("MYDB3"), serverPort(held3));
            cluster.applyEvent(fan("MYDB1", "status=down reason=FAILURE"));
            assertTrue(stuck.logging.await(10, TimeUnit.SECONDS), "the Down of MYDB1 is being logged");
            cluster.applyEvent(fan("MYDB3", "status=down reason=FAILURE"));
            assertTrue(await(Duration.ofSeconds(10), () -> aborted(held3)),
                    "MYDB3's connection in use is aborted while MYDB1's Down is stuck in the log handler");
        } finally {
            held1.close();
            held3.close();
        }
    }

    @Test
    void aDownNodesIdleConnectionsCloseAndItsPoolRefillsWhenItIsUp() throws Exception {
        AffinityDataSource ds = fcfDataSource("fcf-idle", 50, c -> c.setMinimumIdle(3));
        Cluster cluster = ds.getCluster();
        assertTrue(await(Duration.ofSeconds(15), () -> serverConns("MYDB1") >= 3));

        cluster.setNodeState("MYDB1", NodeState.DOWN);
        assertTrue(await(Duration.ofSeconds(10), () -> serverConns("MYDB1") == 0),
                "left: " + serverConns("MYDB1"));
        // HikariCP's housekeeper refills every 30 s: back well before it, the pool was told.
        cluster.setNodeState("MYDB1", NodeState.UP);
        assertTrue(await(Duration.ofSeconds(10), () -> serverConns("MYDB1") >= 3),
                "refilled: " + serverConns("MYDB1"));
    }

    @Test
    void aDrainedNodesConnectionInUseFinishesItsWorkAndClosesWhenReturned() throws Exception {
        AffinityDataSource ds = fcfDataSource("fcf-drain", 50, c -> c.setMinimumIdle(2));
        Cluster cluster = ds.getCluster();
        ShardingKey key3 = keyOn(ds, "MYDB3");
        assertTrue(await(Duration.ofSeconds(15), () -> serverConns("MYDB3") >= 2));
        Connection held = ds.createConnectionBuilder().shardingKey(key3).build();
        held.setAutoCommit(false);
        assertEquals(portOf("MYDB3"), serverPort(held));

        ds.applyEvent(fan("MYDB3", "status=down reason=USER drain_timeout=600"));
        assertEquals(NodeState.DRAINING, cluster.nodeState("MYDB3"));
        // New borrows go elsewhere at once; the idle ones close.
        for (int i = 0; i < 20; i++) {
            try (Connection c = ds.createConnectionBuilder().shardingKey(key3).build()) {
                assertNotEquals(portOf("MYDB3"), serverPort(c));
            }
        }
        assertTrue(await(Duration.ofSeconds(10), () -> serverConns("MYDB3") == 1),
                "only the one in use left: " + serverConns("MYDB3"));
        // The drain's deadline (the operator's Down after the drain): still not aborted.
        long rounds = ds.upkeepRounds();
        cluster.setNodeState("MYDB3", NodeState.DOWN);
        // Two rounds later, one began after the Down and acted on it.
        assertTrue(await(Duration.ofSeconds(5), () -> ds.upkeepRounds() >= rounds + 2));
        assertFalse(driverClosed(held), "a drained node's connection in use is not aborted");
        assertEquals(portOf("MYDB3"), serverPort(held));
        held.commit();
        held.close(); // its request boundary: the pool closes it
        assertTrue(await(Duration.ofSeconds(10), () -> serverConns("MYDB3") == 0),
                "left: " + serverConns("MYDB3"));
    }

    @Test
    void aNodeThatFailsDuringItsDrainHasItsConnectionsInUseAborted() throws Exception {
        failureDuringDrain(false);
    }

    /**
     * The failure reaches the cluster by another path than the data source's own {@code applyEvent}
     * (the topology feed, an ONS relay, JMX {@code ClusterMonitor.applyEvent}): the core's down cause
     * tells the drain's end from a failure, whoever applied it.
     */
    @Test
    void aFailureDeliveredToTheClusterDuringADrainAbortsConnectionsInUseToo() throws Exception {
        failureDuringDrain(true);
    }

    /**
     * A drain whose deadline passed between two upkeep rounds: the rounds never saw the node
     * Draining, and the core says the Down ended a planned drain, so the connection in use goes
     * on. Before, Up then Down read as a failure and the connection was aborted.
     */
    @Test
    void aDrainThatEndedBetweenTwoUpkeepRoundsLetsConnectionsInUseFinish() throws Exception {
        AffinityDataSource ds = fcfDataSource("fcf-drain-unseen", 600_000, c -> {}); // a round only when poked
        Cluster cluster = ds.getCluster();
        Connection held = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB3")).build();
        try {
            held.setAutoCommit(false);
            assertEquals(portOf("MYDB3"), serverPort(held));
            cluster.applyEvent(fan("MYDB3", "status=down reason=USER drain_timeout=1")); // no round
            assertTrue(await(Duration.ofSeconds(5), () -> cluster.nodeState("MYDB3") == NodeState.DOWN));
            long rounds = ds.upkeepRounds();
            ds.applyEvent(fan("MYDB1", "status=up")); // pokes the first round since the drain began
            assertTrue(await(Duration.ofSeconds(5), () -> ds.upkeepRounds() > rounds), "a round ran");
            assertFalse(driverClosed(held), "the end of a planned drain lets the connection in use finish");
            assertEquals(portOf("MYDB3"), serverPort(held));
        } finally {
            held.close();
        }
    }

    /**
     * A node Down and Up again between two upkeep rounds (the operator's setNodeState, a FAN event
     * applied to the cluster, the topology feed: nothing that pokes the upkeep) restarted meanwhile: its
     * pool's idle connection, used within HikariCP's alive-check bypass (500 ms), is dead. The next
     * round sees the node Up both times and only the core's state change count moved: the pool is
     * retired then, so the next borrow gets a live connection. Before, its first statement failed
     * ("terminating connection due to administrator command").
     */
    @Test
    void aDownAndUpBetweenTwoUpkeepRoundsRetiresTheNodesDeadIdleConnections() throws Exception {
        AffinityDataSource ds = fcfDataSource("fcf-down-up-unseen", 600_000, c -> {}); // a round only when poked
        Cluster cluster = ds.getCluster();
        ShardingKey key1 = keyOn(ds, "MYDB1");
        try (Connection admin = DriverManager.getConnection(PgNodes.url(1), "postgres", "");
                Statement kill = admin.createStatement()) {
            long rounds = ds.upkeepRounds();
            ds.applyEvent(fan("MYDB2", "status=up")); // a round after the start, which read the counts
            assertTrue(await(Duration.ofSeconds(5), () -> ds.upkeepRounds() > rounds), "a round ran");
            try (Connection c = ds.createConnectionBuilder().shardingKey(key1).build()) {
                assertEquals(portOf("MYDB1"), serverPort(c)); // young and idle in the pool from here
            }
            long returned = System.nanoTime();
            cluster.setNodeState("MYDB1", NodeState.DOWN);
            // The restart, for this test's sessions: they end as at a shutdown.
            try (ResultSet rs = kill.executeQuery("SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
                    + " WHERE application_name = '" + APP + "'")) {
                rs.next();
                assertTrue(rs.getInt(1) >= 1, "the pooled session was ended");
            }
            cluster.setNodeState("MYDB1", NodeState.UP);
            long before = ds.upkeepRounds();
            ds.applyEvent(fan("MYDB2", "status=up")); // a round, which sees MYDB1 Up as the last one did
            assertTrue(await(Duration.ofSeconds(5), () -> ds.upkeepRounds() > before), "a round ran");
            try (Connection c = ds.createConnectionBuilder().shardingKey(key1).build()) {
                long sinceUse = (System.nanoTime() - returned) / 1_000_000;
                assertEquals(portOf("MYDB1"), serverPort(c),
                        "the first statement on MYDB1 after its restart succeeds (" + sinceUse
                                + " ms after its last use)");
            }
        }
    }

    /**
     * The drain's end lets the connection in use finish; the node then fails (a FAN failure: shut
     * down abort, a crash) and that connection, which would hang on a blackholed node, is aborted as
     * at any hard Down. Before, a node that stayed Down was never looked at again.
     */
    @Test
    void aFailureAfterADrainEndedAbortsTheConnectionsStillFinishing() throws Exception {
        AffinityDataSource ds = fcfDataSource("fcf-drain-then-failure", 50, c -> {});
        Cluster cluster = ds.getCluster();
        Connection held = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB3")).build();
        try {
            held.setAutoCommit(false);
            assertEquals(portOf("MYDB3"), serverPort(held));
            cluster.applyEvent(fan("MYDB3", "status=down reason=USER drain_timeout=1"));
            assertTrue(await(Duration.ofSeconds(5), () -> cluster.nodeState("MYDB3") == NodeState.DOWN));
            long rounds = ds.upkeepRounds();
            assertTrue(await(Duration.ofSeconds(5), () -> ds.upkeepRounds() >= rounds + 2), "the drain's end acted on");
            assertFalse(driverClosed(held), "the end of a planned drain lets the connection in use finish");
            cluster.applyEvent(fan("MYDB3", "status=down reason=FAILURE"));
            assertTrue(await(Duration.ofSeconds(5), () -> aborted(held)),
                    "the failed node's connection still finishing is aborted");
        } finally {
            held.close();
        }
    }

    private void failureDuringDrain(boolean throughCluster) throws Exception {
        AffinityDataSource ds = fcfDataSource(throughCluster ? "fcf-drain-failure-cluster" : "fcf-drain-failure", 50,
                c -> {});
        Cluster cluster = ds.getCluster();
        Connection held = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB3")).build();
        try {
            held.setAutoCommit(false);
            assertEquals(portOf("MYDB3"), serverPort(held));
            ds.applyEvent(fan("MYDB3", "status=down reason=USER drain_timeout=600"));
            long rounds = ds.upkeepRounds();
            assertTrue(await(Duration.ofSeconds(5), () -> ds.upkeepRounds() >= rounds + 2), "the drain acted on");
            assertFalse(driverClosed(held), "a drained node's connection in use works on");
            // The node fails before the drain's deadline: a hard Down, as without the drain.
            String failure = fan("MYDB3", "status=down reason=FAILURE");
            if (throughCluster) {
                cluster.applyEvent(failure);
            } else {
                ds.applyEvent(failure);
            }
            assertEquals(NodeState.DOWN, cluster.nodeState("MYDB3"));
            assertTrue(await(Duration.ofSeconds(5), () -> aborted(held)),
                    "the failed node's connection in use is aborted, not left to its drain's end");
        } finally {
            held.close();
        }
    }

    @Test
    void aNodeTheHeartbeatFindsDeadDuringItsDrainHasItsConnectionsInUseAborted() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(3))) {
            pools = new Pools(NAMES, c -> {
                c.setConnectionTimeout(2000);
                if (c.getPoolName().endsWith("MYDB3")) {
                    c.setJdbcUrl(proxy.url());
                }
            });
            AffinityDataSource ds = ds("fcf-drain-heartbeat", "heartbeat.misses = 2");
            ds.setPoolMaintenanceMillis(50);
            ds.setHeartbeatIntervalMillis(100);
            ds.setHeartbeatTimeoutSeconds(1);
            Cluster cluster = ds.getCluster();
            Connection held = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB3")).build();
            try {
                held.setAutoCommit(false);
                assertEquals(portOf("MYDB3"), serverPort(held));
                ds.applyEvent(fan("MYDB3", "status=down reason=USER drain_timeout=600"));
                long rounds = ds.upkeepRounds();
                assertTrue(await(Duration.ofSeconds(5), () -> ds.upkeepRounds() >= rounds + 2), "the drain acted on");
                proxy.blackhole(); // the node stops answering: the heartbeat's probes miss
                assertTrue(await(Duration.ofSeconds(20), () -> cluster.nodeState("MYDB3") == NodeState.DOWN),
                        "the heartbeat took it Down");
                assertTrue(await(Duration.ofSeconds(5), () -> aborted(held)),
                        "the dead node's connection in use is aborted, not left hanging to its request's end");
            } finally {
                proxy.heal();
                held.close();
            }
        }
    }

    @Test
    void aPlannedDrainAndItsDeadlineFailNoRequestUnderLoad() throws Exception {
        pools = new Pools(NAMES, c -> {
            c.setConnectionTimeout(CONNECTION_TIMEOUT_MS);
            c.setMaximumPoolSize(4);
        });
        for (int i = 1; i <= 3; i++) {
            try (Connection c = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                    Statement s = c.createStatement()) {
                s.execute("CREATE TABLE IF NOT EXISTS java_drain (id text PRIMARY KEY)");
                s.execute("TRUNCATE java_drain");
            }
        }
        AffinityDataSource ds = ds("fcf-drain-load", "");
        ds.setPoolMaintenanceMillis(50);
        Cluster cluster = ds.getCluster();
        // Six web sessions, three of them placed on the node to drain: they keep working there during
        // the drain and move at its deadline.
        List<String> sessions = new ArrayList<>();
        for (int i = 0; sessions.size() < 6; i++) {
            String id = "drain-session-" + i;
            String node = cluster.routeSession(id).nodeName();
            long onDrained = sessions.stream().filter(x -> x.endsWith("@MYDB2")).count();
            if (node.equals("MYDB2") ? onDrained < 3 : sessions.size() - onDrained < 3) {
                sessions.add(id + "@" + node);
            }
        }
        java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
        java.util.concurrent.atomic.AtomicInteger ok = new java.util.concurrent.atomic.AtomicInteger();
        java.util.concurrent.atomic.AtomicInteger onDrainedNode = new java.util.concurrent.atomic.AtomicInteger();
        List<Throwable> failures = java.util.Collections.synchronizedList(new ArrayList<>());
        threads = Executors.newFixedThreadPool(sessions.size());
        List<Future<?>> workers = new ArrayList<>();
        for (String entry : sessions) {
            String session = entry.substring(0, entry.indexOf('@'));
            workers.add(threads.submit(() -> {
                for (int n = 0; !stop.get(); n++) {
                    try (SessionScope scope = ds.withSession(session); Connection c = ds.getConnection()) {
                        c.setAutoCommit(false);
                        try (java.sql.PreparedStatement s = c.prepareStatement("INSERT INTO java_drain VALUES (?)")) {
                            s.setString(1, session + "-" + n);
                            s.executeUpdate();
                        }
                        if (serverPort(c) == portOf("MYDB2")) {
                            onDrainedNode.incrementAndGet();
                        }
                        c.commit();
                        ok.incrementAndGet();
                    } catch (Throwable t) {
                        failures.add(t);
                    }
                }
            }));
        }
        try {
            assertTrue(await(Duration.ofSeconds(30), () -> ok.get() >= 60 && onDrainedNode.get() >= 10));
            int beforeDrain = onDrainedNode.get();
            ds.applyEvent(fan("MYDB2", "status=down reason=USER drain_timeout=1"));
            assertTrue(await(Duration.ofSeconds(30), () -> cluster.nodeState("MYDB2") == NodeState.DOWN),
                    "the drain's deadline passes");
            assertTrue(onDrainedNode.get() > beforeDrain, "the sessions there kept working during the drain");
            long rounds = ds.upkeepRounds();
            assertTrue(await(Duration.ofSeconds(10), () -> ds.upkeepRounds() >= rounds + 2));
            int atDeadline = ok.get();
            assertTrue(await(Duration.ofSeconds(30), () -> ok.get() >= atDeadline + 60), "requests go on");
        } finally {
            stop.set(true);
            for (Future<?> w : workers) {
                w.get(SERVED_WITHIN_S, TimeUnit.SECONDS);
            }
        }
        assertEquals(List.of(), failures.stream().map(String::valueOf).toList(), "no failed request");
        int rows = 0;
        for (int i = 1; i <= 3; i++) {
            try (Connection c = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                    Statement s = c.createStatement();
                    ResultSet rs = s.executeQuery("SELECT count(*) FROM java_drain")) {
                rs.next();
                rows += rs.getInt(1);
            }
        }
        assertEquals(ok.get(), rows, "every request committed exactly once");
    }

    @Test
    void waitersOnANodeThatAFailedConnectionEjectsAreServedElsewhereAtOnce() throws Exception {
        pools = new Pools(NAMES, c -> {
            c.setConnectionTimeout(CONNECTION_TIMEOUT_MS);
            if (c.getPoolName().endsWith("MYDB2")) {
                c.setMaximumPoolSize(1);
                c.setMinimumIdle(0);
            }
        });
        // One failure ejects; the crash's "terminating connection due to unexpected postmaster exit" (57P01) counts.
        AffinityDataSource ds = ds("fcf-eject", "health.eject_after_failures = 1; health.eject_backoff = 10m; health.eject_backoff_max = 1h");
        ds.setNodeFailureSqlStates("08,57P01,57P02,57P03");
        ShardingKey key2 = keyOn(ds, "MYDB2");
        HikariDataSource pool2 = pools.get("MYDB2");
        try {
            Connection held = ds.createConnectionBuilder().shardingKey(key2).build();
            assertEquals(portOf("MYDB2"), serverPort(held));
            List<Future<Integer>> served = askers(ds, key2, 3);
            assertTrue(await(Duration.ofSeconds(15),
                    () -> pool2.getHikariPoolMXBean().getThreadsAwaitingConnection() == 3));

            PgNodes.kill(2); // no event, no heartbeat: the connection in use finds out
            assertThrows(SQLException.class, () -> serverPort(held));
            for (Future<Integer> f : served) {
                assertNotEquals(portOf("MYDB2"), f.get(SERVED_WITHIN_S, TimeUnit.SECONDS));
            }
            assertEquals(NodeState.DOWN, ds.getCluster().nodeState("MYDB2"));
            held.close();
        } finally {
            PgNodes.restart(2);
        }
    }
}
