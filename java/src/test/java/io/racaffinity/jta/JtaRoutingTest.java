package io.racaffinity.jta;

import static io.racaffinity.test.Pools.serverPort;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.Pin;
import io.racaffinity.Route;
import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.jdbc.AffinityShardingKey;
import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.jdbc.FailoverView;
import io.racaffinity.jdbc.RouteScope;
import io.racaffinity.jdbc.SessionScope;
import io.racaffinity.test.Narayana;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.test.XaRows;
import io.racaffinity.xa.AffinityXAResource;
import jakarta.transaction.Transaction;
import jakarta.transaction.TransactionManager;
import java.sql.Connection;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import javax.sql.XAConnection;
import javax.sql.XADataSource;
import javax.transaction.xa.XAResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * AffinityDataSource inside JTA transactions (Narayana's TransactionSynchronizationRegistry):
 * every connection of a transaction, from any thread, on the transaction's node, the same
 * node its XA branches get; the affinity ends at completion.
 */
@ExtendWith(PgNodes.class)
class JtaRoutingTest {
    static final List<String> NAMES = List.of("RAC1", "RAC2", "RAC3");
    private Pools pools;
    private Cluster cluster;
    private AffinityDataSource ds;
    private final TransactionManager tm = Narayana.tm();
    private final ExecutorService workers = Executors.newFixedThreadPool(2);

    @BeforeAll
    static void narayana() throws Exception {
        Narayana.init();
    }

    @BeforeEach
    void setUp() throws Exception {
        pools = new Pools(NAMES);
        cluster = Cluster.fromConfig("name = jta-routing; nodes = RAC1, RAC2, RAC3");
        ds = jtaDataSource(cluster);
        assertTrue(ds.isJtaRouting());
    }

    /** A data source over {@code cluster} that routes by the JTA transaction of Narayana's {@link #tm}. */
    /** An XA data source over the three nodes, no heartbeat, no MBean; its cluster or config is the caller's. */
    private static AffinityXADataSource xaDataSource() {
        Map<String, XADataSource> xa = new LinkedHashMap<>();
        for (int i = 1; i <= 3; i++) {
            xa.put("RAC" + i, XaRows.xaDataSource(i));
        }
        AffinityXADataSource xads = new AffinityXADataSource();
        xads.setNodeXADataSources(xa);
        xads.setHeartbeatIntervalMillis(0);
        xads.setRegisterMBean(false);
        return xads;
    }

    private AffinityDataSource jtaDataSource(Cluster cluster) throws Exception {
        AffinityDataSource jta = new AffinityDataSource();
        jta.setCluster(cluster);
        jta.setNodeDataSources(pools.asMap());
        jta.setHeartbeatIntervalMillis(0);
        jta.setRegisterMBean(false);
        jta.setTransactionSynchronizationRegistry(Narayana.tsr());
        jta.setTransactionManager(tm);
        jta.init();
        return jta;
    }

    @AfterEach
    void tearDown() throws Exception {
        // A test that failed inside tm.begin() .. commit leaves its transaction on this thread, and
        // every later test's begin() would fail with it (ARJUNA016051; seen in a CI run).
        if (tm.getStatus() != jakarta.transaction.Status.STATUS_NO_TRANSACTION) {
            tm.rollback();
        }
        workers.shutdownNow();
        ds.close();
        pools.close();
        cluster.close();
    }

    int port() throws Exception {
        try (Connection c = ds.getConnection()) {
            return serverPort(c);
        }
    }

    /** Ports of one transaction's connections: one on this thread, two on workers (tm.resume there). */
    List<Integer> portsOfOneTransaction(Transaction txn) throws Exception {
        List<Integer> ports = new ArrayList<>();
        ports.add(port());
        tm.suspend();
        List<Future<Integer>> fs = new ArrayList<>();
        for (int w = 0; w < 2; w++) {
            fs.add(workers.submit(() -> {
                tm.resume(txn);
                try {
                    return port();
                } finally {
                    tm.suspend();
                }
            }));
        }
        for (Future<Integer> f : fs) {
            ports.add(f.get(30, TimeUnit.SECONDS));
        }
        tm.resume(txn);
        return ports;
    }

    long liveTransactions() throws Exception {
        var n = new com.fasterxml.jackson.databind.ObjectMapper().readTree(cluster.metricsJson());
        return n.path("scopes").path("transaction").path("live").asLong(-1);
    }

    @Test
    void everyConnectionOfATransactionFromAnyThreadGoesToItsNodeAndTheNextMayGoElsewhere() throws Exception {
        Set<Integer> used = new HashSet<>();
        for (int t = 0; t < 60; t++) {
            tm.begin();
            List<Integer> ports = portsOfOneTransaction(tm.getTransaction());
            assertEquals(1, new HashSet<>(ports).size(), "one transaction, one node: " + ports);
            assertEquals(1, liveTransactions());
            if (t % 2 == 0) {
                tm.commit();
            } else {
                tm.rollback();
            }
            assertEquals(0, liveTransactions(), "the affinity ends at completion");
            used.add(ports.get(0));
        }
        assertTrue(used.size() >= 2, "transactions are placed afresh: " + used);
    }

    @Test
    void aRollbackOnlyTransactionKeepsAllItsConnectionsOnOneNodeAndLeavesNothingBehind() throws Exception {
        // balanced placement: a transaction the affinity lost would be placed afresh on any node
        ds.close();
        cluster.close();
        cluster = Cluster.fromConfig("name = jta-rollback-only; nodes = RAC1, RAC2, RAC3;"
                + " transaction.placement = balanced");
        ds = jtaDataSource(cluster);
        for (int t = 0; t < 20; t++) {
            tm.begin();
            List<Integer> ports;
            try {
                tm.setRollbackOnly(); // Narayana now refuses synchronizations: the affinity must hold without one
                ports = portsOfOneTransaction(tm.getTransaction());
                ports.add(port());
            } finally {
                tm.rollback();
            }
            assertEquals(1, new HashSet<>(ports).size(), "one rollback-only transaction, one node: " + ports);
        }
        port(); // any later use completes the bookkeeping of finished transactions
        assertEquals(0, liveTransactions(), "no gtrid of a finished rollback-only transaction stays in the core");
    }

    @Test
    void aRollbackOnlyTransactionsAffinityEndsAfterItsRollbackWithoutAnyLaterConnection() throws Exception {
        tm.begin();
        try {
            tm.setRollbackOnly(); // Narayana refuses synchronizations now: nothing tells the data source of the end
            port();
            assertEquals(1, liveTransactions());
        } finally {
            tm.rollback();
        }
        // an idle application: no later getConnection sweeps it
        assertTrue(Pools.await(java.time.Duration.ofSeconds(10), () -> {
            try {
                return liveTransactions() == 0;
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }), "the rolled-back transaction's gtrid stays live in the core: " + liveTransactions());
    }

    @Test
    void outsideATransactionConnectionsAreBalancedAsUsual() throws Exception {
        Set<Integer> used = new HashSet<>();
        for (int i = 0; i < 30; i++) {
            used.add(port());
        }
        assertTrue(used.size() >= 2, "balanced: " + used);
        assertEquals(0, liveTransactions());
    }

    @Test
    void aPinnedThreadPlacesItsTransactionsOnItsNode() throws Exception {
        try (Pin pin = ds.pin()) {
            int pinned = PgNodes.port(pin.node() + 1);
            for (int t = 0; t < 10; t++) {
                tm.begin();
                assertEquals(List.of(pinned, pinned, pinned), portsOfOneTransaction(tm.getTransaction()));
                tm.commit();
            }
        }
    }

    /**
     * Token mode (AffinityFilter keeps the request's routing token in its route scope): a JTA transaction begun
     * inside the request goes to the node the token routes the request to, even with the thread pinned
     * elsewhere, so the request's session work and its transaction share a node. Before, the core never saw
     * the token and placed the transaction on the pin's node.
     */
    @Test
    void aTransactionBegunInATokenRequestGoesToTheNodeItsTokenRoutesTo() throws Exception {
        int elsewhere = 0;
        try (Pin pin = ds.pin()) {
            for (int i = 0; i < 12; i++) {
                String token = cluster.sessionToken("jta-token-" + i);
                Route route = cluster.routeToken(token).route();
                int expected = PgNodes.port(route.node() + 1);
                elsewhere += route.node() != pin.node() ? 1 : 0;
                try (RouteScope s = AffinityDataSource.withRequestRoute(cluster, route, token)) {
                    tm.begin();
                    try {
                        assertEquals(List.of(expected, expected, expected),
                                portsOfOneTransaction(tm.getTransaction()), "token " + token);
                    } finally {
                        tm.commit();
                    }
                }
            }
        }
        assertTrue(elsewhere > 0, "some tokens name another node than the pin's");
    }

    /**
     * docs/semantics.md: a new gtrid goes to the owner of the request's data key, else its session's node, else
     * its pin. A JTA transaction begun inside a web request (AffinityFilter's request session) must be placed on
     * the session's node, as an XA branch begun there is; 12 sessions, so a placement by gtrid alone misses most.
     */
    @Test
    void aTransactionBegunInAWebRequestIsPlacedOnTheSessionsNode() throws Exception {
        List<String> elsewhere = new ArrayList<>();
        for (int s = 0; s < 12; s++) {
            try (SessionScope request = AffinityDataSource.withRequestSession("jta-web-session-" + s)) {
                int sessionPort = port();
                tm.begin();
                try {
                    int txPort = port();
                    if (txPort != sessionPort) {
                        elsewhere.add("session " + s + " on port " + sessionPort + ", its transaction on " + txPort);
                    }
                } finally {
                    tm.rollback();
                }
                assertEquals(sessionPort, port(), "the session stays on its node");
            }
        }
        assertEquals(List.of(), elsewhere, "transactions placed without their web session");
        assertEquals(0, liveTransactions());
    }

    /** The same rule for the data key: a transaction's first connection with a sharding key goes to its owner. */
    @Test
    void aTransactionsFirstConnectionWithAShardingKeyIsPlacedOnTheKeysOwner() throws Exception {
        List<String> elsewhere = new ArrayList<>();
        for (long k = 0; k < 12; k++) {
            int owner = PgNodes.port(NAMES.indexOf(cluster.routeKey(k).nodeName()) + 1);
            tm.begin();
            try {
                int txPort;
                try (Connection c = ds.createConnectionBuilder().shardingKey(AffinityShardingKey.of(k)).build()) {
                    txPort = serverPort(c);
                }
                if (txPort != owner) {
                    elsewhere.add("key " + k + " owned by port " + owner + ", its transaction on " + txPort);
                }
                assertEquals(txPort, port(), "the transaction's later connections follow it");
            } finally {
                tm.rollback();
            }
        }
        assertEquals(List.of(), elsewhere, "transactions placed without their sharding key");
        assertEquals(0, liveTransactions());
    }

    @Test
    void jtaConnectionsAndXaBranchesOfOneTransactionShareTheNode() throws Exception {
        try (AffinityXADataSource xads = xaDataSource()) {
            xads.setCluster(cluster);
            Set<String> nodes = new HashSet<>();
            for (int t = 0; t < 12; t++) {
                tm.begin();
                XAConnection xc = xads.getXAConnection();
                try {
                    XAResource xr = xc.getXAResource();
                    tm.getTransaction().enlistResource(xr);
                    String branchNode = ((AffinityXAResource) xr).boundNodeName();
                    int port = port();
                    assertEquals(PgNodes.port(NAMES.indexOf(branchNode) + 1), port,
                            "the XA branch and the JTA-routed connection are on one node");
                    nodes.add(branchNode);
                    tm.getTransaction().delistResource(xr, XAResource.TMSUCCESS);
                    tm.commit();
                } finally {
                    xc.close();
                }
            }
            assertTrue(nodes.size() >= 2, "placed by gtrid: " + nodes);
            assertEquals(0, liveTransactions());
        }
    }

    /**
     * Fast connection failover inside a Narayana transaction: at a hard Down (FAN {@code reason=FAILURE}) of the
     * transaction's node, both its JTA-routed connection and its enlisted XA branch's handle are aborted at once,
     * and the TM's rollback leaves nothing behind.
     */
    @Test
    void aHardDownAbortsATransactionsJtaConnectionAndItsXaBranchOnTheNode() throws Exception {
        try (AffinityXADataSource xads = xaDataSource()) {
            xads.setCluster(cluster);
            tm.begin();
            XAConnection xc = xads.getXAConnection();
            try {
                XAResource xr = xc.getXAResource();
                tm.getTransaction().enlistResource(xr);
                String node = ((AffinityXAResource) xr).boundNodeName();
                int id = NAMES.indexOf(node);
                Connection branch = xc.getConnection();
                Connection jdbc = ds.getConnection();
                assertEquals(PgNodes.port(id + 1), serverPort(jdbc));
                assertEquals(serverPort(jdbc), serverPort(branch));
                cluster.applyEvent("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=" + node
                        + " host=h status=down reason=FAILURE");
                // Each polled on its own: the message must say which of the two was left working.
                boolean[] gone = new boolean[2];
                Pools.await(java.time.Duration.ofSeconds(5), () -> {
                    gone[0] = gone[0] || dead(jdbc);
                    gone[1] = gone[1] || dead(branch);
                    return gone[0] && gone[1];
                });
                assertTrue(gone[0] && gone[1], () -> "both of the transaction's connections on the failed node "
                        + node + " are aborted: JTA connection aborted " + gone[0] + " ("
                        + FailoverView.of(ds, id, jdbc) + "); XA branch aborted " + gone[1] + " ("
                        + FailoverView.of(xads, id, xc) + ")");
                jdbc.close();
                tm.rollback();
            } finally {
                xc.close();
            }
            assertEquals(0, liveTransactions());
            assertEquals(0, xads.getRouter().trackedBranches());
        }
    }

    /** Whether a call on {@code c} fails as on a connection that was aborted (SQLState class 08). */
    private static boolean dead(Connection c) {
        try (var s = c.createStatement()) {
            s.execute("SELECT 1");
            return false;
        } catch (java.sql.SQLException e) {
            return e.getSQLState() != null && e.getSQLState().startsWith("08");
        }
    }

    /**
     * Strict transaction affinity with a settle time: a pin is this process's own state, so it never places a new
     * gtrid (docs/semantics.md). Another process (its own Cluster, the same configuration, no pin) places the same
     * transaction's XA branch by the core alone; both must land on one node.
     */
    @Test
    void aStrictTransactionOnAPinnedThreadLandsWhereAnotherProcessPlacesItsXaBranch() throws Exception {
        String config = "nodes = RAC1, RAC2, RAC3; transaction.strict = true; transaction.settle = 1s";
        ds.close();
        cluster.close();
        cluster = Cluster.fromConfig("name = jta-strict-p1; " + config);
        ds = jtaDataSource(cluster);
        try (AffinityXADataSource xads = xaDataSource()) {
            xads.setConfig("name = jta-strict-p2; " + config);
            xads.init();
            Thread.sleep(1500); // the nodes just added are shared inputs: strict placement waits out the settle time
            List<String> split = new ArrayList<>();
            try (Pin pin = ds.pin()) {
                for (int t = 0; t < 12; t++) {
                    tm.begin();
                    XAConnection xc = xads.getXAConnection();
                    try {
                        int port = port(); // the first connection places the transaction
                        XAResource xr = xc.getXAResource();
                        tm.getTransaction().enlistResource(xr);
                        String branchNode = ((AffinityXAResource) xr).boundNodeName();
                        if (PgNodes.port(NAMES.indexOf(branchNode) + 1) != port) {
                            split.add("tx " + t + ": JTA on port " + port + ", XA branch on " + branchNode
                                    + " (pinned to " + pin.nodeName() + ")");
                        }
                        tm.getTransaction().delistResource(xr, XAResource.TMSUCCESS);
                        tm.commit();
                    } finally {
                        xc.close();
                    }
                }
            }
            assertEquals(List.of(), split, "strict transactions on two nodes");
            assertEquals(0, liveTransactions());
        }
    }

    /**
     * Strict mode, the pinned node marked down: the pin places no new gtrid, so a new transaction is placed by the
     * core (refused only when the gtrid's own node is the down one), never refused for the pin alone.
     */
    @Test
    void aStrictTransactionOnAThreadPinnedToADownNodeIsPlacedByTheCore() throws Exception {
        ds.close();
        cluster.close();
        cluster = Cluster.fromConfig("name = jta-strict-down; nodes = RAC1, RAC2, RAC3; transaction.strict = true;"
                + " transaction.settle = 1s");
        ds = jtaDataSource(cluster);
        Thread.sleep(1500); // the nodes just added are shared inputs: strict placement waits out the settle time
        int placed = 0;
        try (Pin pin = ds.pin()) {
            int down = PgNodes.port(pin.node() + 1);
            cluster.setNodeState(pin.nodeName(), io.racaffinity.NodeState.DOWN);
            for (int t = 0; t < 12; t++) {
                tm.begin();
                try {
                    int port = port();
                    assertTrue(port != down, "placed on the down node " + pin.nodeName());
                    placed++;
                } catch (java.sql.SQLException e) {
                    // the gtrid's own node is the down one: strict mode refuses it
                } finally {
                    tm.rollback();
                }
            }
            cluster.setNodeState(pin.nodeName(), io.racaffinity.NodeState.UP);
        }
        assertTrue(placed > 0, "every new transaction refused for the pinned node being down");
        port();
        assertEquals(0, liveTransactions());
    }
}
