import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.StrictAffinityException;
import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.jdbc.ConnectionAffinityCallback;
import io.racaffinity.jdbc.ConnectionAffinityCallback.AffinityPolicy;
import io.racaffinity.jdbc.ConnectionAffinityContext;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLNonTransientException;
import java.sql.SQLTransientConnectionException;
import java.util.List;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AutoClose;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Seed 002 §10.4.2: the guide's own {@code AffinityCallbackSample}
 * ({@code java/src/test/java/AffinityCallbackSample.java}, copied as written with
 * only its import line changed, hence in the default package like here) drives
 * connection affinity of an {@link AffinityDataSource} over the 3 local
 * PostgreSQL nodes; each connection's node is checked with the server's own port.
 */
@ExtendWith(PgNodes.class)
class AffinityCallbackSampleTest {
    static final List<String> NAMES = List.of("RAC1", "RAC2", "RAC3");
    @AutoClose // after each test, with the data sources built on it
    private final Pools pools = new Pools(NAMES);

    private AffinityDataSource ds(String name, String extra) {
        AffinityDataSource ds = pools.affinity("name = " + name
                + "; database = orcl; service = svc; nodes = RAC1, RAC2, RAC3; policy = random; " + extra);
        ds.setRegisterMBean(false);
        return ds;
    }

    static int portOf(String node) {
        return PgNodes.port(NAMES.indexOf(node) + 1);
    }

    static String down(String node) {
        return "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=" + node + " host=h status=down"
                + " reason=FAILURE card=1 timestamp=2026-12-01 08:00:00";
    }

    /** An RLB advisory: every node 33 %, {@code aff=FALSE} for {@code noAffinity}. */
    static String advisory(String noAffinity) {
        return "VERSION=1.0 database=orcl service=svc { " + NAMES.stream()
                .map(n -> "{instance=" + n + " percent=33 flag=GOOD aff=" + (n.equals(noAffinity) ? "FALSE" : "TRUE")
                        + "}")
                .collect(Collectors.joining()) + " } timestamp=2026-12-01 08:00:00";
    }

    static int port(AffinityDataSource ds) throws SQLException {
        try (Connection c = ds.getConnection()) {
            return Pools.serverPort(c);
        }
    }

    static ConnectionAffinityContext context(ConnectionAffinityCallback cb) {
        return assertInstanceOf(ConnectionAffinityContext.class, cb.getConnectionAffinityContext());
    }

    /** Every getConnection() of the context lands on its instance; returns that port. */
    static int assertSticks(AffinityDataSource ds, ConnectionAffinityCallback cb) throws SQLException {
        int first = port(ds);
        ConnectionAffinityContext ctx = context(cb);
        assertEquals(portOf(ctx.instance()), first, ctx.toString());
        for (int i = 0; i < 20; i++) {
            assertEquals(first, port(ds), "connection " + i + " left " + ctx);
        }
        assertSame(ctx, cb.getConnectionAffinityContext(), "a context that holds is not replaced");
        return first;
    }

    @Test
    void theSeedSampleKeepsEveryConnectionOnOneInstanceAndMovesOnAFanDown() throws Exception {
        AffinityDataSource ds = ds("sample-soft", "");
        AffinityCallbackSample cb = new AffinityCallbackSample();
        ds.registerConnectionAffinityCallback(cb);
        assertEquals(null, cb.getConnectionAffinityContext());
        int port = assertSticks(ds, cb);
        ConnectionAffinityContext ctx = context(cb);
        assertEquals(AffinityPolicy.TRANSACTION_BASED_AFFINITY, ctx.policy());
        assertTrue(ctx.toString().contains("instance=" + ctx.instance())
                && ctx.toString().contains("TRANSACTION_BASED_AFFINITY") && ctx.toString().contains("since="), ctx.toString());

        ds.applyEvent(down(ctx.instance()));
        int moved = assertSticks(ds, cb);
        assertNotEquals(port, moved, "the FAN down moved the affinity");
        ConnectionAffinityContext fresh = context(cb);
        assertNotSame(ctx, fresh, "soft failover set a fresh context");
        assertNotEquals(ctx.instance(), fresh.instance());

        // The application ends the affinity with null; the next getConnection() places a new one.
        cb.setConnectionAffinityContext(null);
        assertSticks(ds, cb);
        assertNotSame(fresh, cb.getConnectionAffinityContext());
    }

    @Test
    void strictXaAffinityRefusesInsteadOfMoving() throws Exception {
        AffinityDataSource ds = ds("sample-strict-xa", "transaction.strict = true");
        AffinityCallbackSample cb = new AffinityCallbackSample();
        ds.registerConnectionAffinityCallback(cb);
        assertSticks(ds, cb);
        ConnectionAffinityContext ctx = context(cb);
        ds.applyEvent(down(ctx.instance()));
        SQLTransientConnectionException e = assertThrows(SQLTransientConnectionException.class, ds::getConnection);
        assertEquals("08001", e.getSQLState());
        assertInstanceOf(StrictAffinityException.class, e.getCause());
        assertSame(ctx, cb.getConnectionAffinityContext(), "strict mode keeps the context");
        // Ending the affinity lets the application go on elsewhere.
        cb.setConnectionAffinityContext(null);
        assertNotEquals(portOf(ctx.instance()), assertSticks(ds, cb));
    }

    /** The sample set to web-session affinity, as the guide's servlet filter uses it. */
    private static AffinityCallbackSample webSessionCallback(AffinityDataSource ds) throws SQLException {
        AffinityCallbackSample cb = new AffinityCallbackSample();
        cb.setAffinityPolicy(AffinityPolicy.WEBSESSION_BASED_AFFINITY);
        ds.registerConnectionAffinityCallback(cb);
        return cb;
    }

    @Test
    void strictWebSessionAffinityRefusesAndTheXaSwitchDoesNotApply() throws Exception {
        AffinityDataSource ds = ds("sample-strict-web", "session.strict = true");
        AffinityCallbackSample cb = webSessionCallback(ds);
        assertSticks(ds, cb);
        ConnectionAffinityContext web = context(cb);
        assertEquals(AffinityPolicy.WEBSESSION_BASED_AFFINITY, web.policy());
        ds.applyEvent(down(web.instance()));
        SQLTransientConnectionException e = assertThrows(SQLTransientConnectionException.class, ds::getConnection);
        assertInstanceOf(StrictAffinityException.class, e.getCause());
        // A transaction-based context on the same data source is soft here: it moves.
        cb.setAffinityPolicy(AffinityPolicy.TRANSACTION_BASED_AFFINITY);
        cb.setConnectionAffinityContext(null);
        assertNotEquals(portOf(web.instance()), assertSticks(ds, cb));
    }

    @Test
    void anAdvisoryWithdrawingAffinityMovesWebSessionContextsOnly() throws Exception {
        AffinityDataSource ds = ds("sample-aff", "");
        AffinityCallbackSample web = webSessionCallback(ds);
        int webPort = assertSticks(ds, web);
        String instance = context(web).instance();

        // A transaction-based context on the same instance (a second data source over the same cluster).
        AffinityDataSource txDs = new AffinityDataSource();
        txDs.setCluster(ds.getCluster());
        txDs.setNodeDataSources(pools.asMap());
        txDs.setHeartbeatIntervalMillis(0);
        txDs.setRegisterMBean(false);
        pools.own(txDs);
        AffinityCallbackSample tx = new AffinityCallbackSample();
        txDs.registerConnectionAffinityCallback(tx);
        int txPort = -1;
        for (int i = 0; i < 200 && txPort != webPort; i++) {
            tx.setConnectionAffinityContext(null);
            txPort = port(txDs);
        }
        assertEquals(webPort, txPort, "a transaction context on the web context's instance");

        ds.applyEvent(advisory(instance));
        int moved = assertSticks(ds, web);
        assertNotEquals(webPort, moved, "aff=FALSE released the web-session context");
        assertNotEquals(instance, context(web).instance());
        assertEquals(webPort, assertSticks(txDs, tx), "a transaction context stays");
    }

    @Test
    void oneCallbackPerDataSource() throws Exception {
        AffinityDataSource ds = ds("sample-one", "");
        ConnectionAffinityCallback cb = new AffinityCallbackSample();
        ds.registerConnectionAffinityCallback(cb);
        SQLNonTransientException e = assertThrows(SQLNonTransientException.class,
                () -> ds.registerConnectionAffinityCallback(new AffinityCallbackSample()));
        assertTrue(e.getMessage().contains("already has a connection affinity callback"), e.getMessage());
        ds.removeConnectionAffinityCallback();
        ConnectionAffinityCallback second = new AffinityCallbackSample();
        ds.registerConnectionAffinityCallback(second);
        assertSame(second, ds.getConnectionAffinityCallback());
        assertSticks(ds, second);
        assertNotNull(second.getConnectionAffinityContext());
        assertEquals(null, cb.getConnectionAffinityContext(), "the removed callback is not used");
    }
    /**
     * UCP 12.1's third policy: data affinity comes from each connection's sharding key, so the data source
     * hands the callback no context; a connection without a key is balanced (or follows the thread's pin).
     */
    @Test
    void dataBasedAffinityRoutesByTheShardingKeyAndHandsOutNoContext() throws Exception {
        AffinityDataSource ds = ds("sample-data", "");
        AffinityCallbackSample cb = new AffinityCallbackSample();
        cb.setAffinityPolicy(AffinityPolicy.DATA_BASED_AFFINITY);
        ds.registerConnectionAffinityCallback(cb);
        java.util.Set<Integer> unkeyed = new java.util.HashSet<>();
        for (int i = 0; i < 30; i++) {
            unkeyed.add(port(ds));
        }
        assertEquals(null, cb.getConnectionAffinityContext(), "no context: the key is the affinity");
        assertTrue(unkeyed.size() >= 2, "without a key, balanced: " + unkeyed);
        for (long k = 0; k < 20; k++) {
            java.sql.ShardingKey key = ds.createShardingKeyBuilder().subkey(k, java.sql.JDBCType.BIGINT).build();
            try (Connection c = ds.createConnectionBuilder().shardingKey(key).build()) {
                assertEquals(portOf(ds.getCluster().routeKey(k).nodeName()), Pools.serverPort(c), "key " + k);
            }
        }
        assertEquals(null, cb.getConnectionAffinityContext());
    }
}

