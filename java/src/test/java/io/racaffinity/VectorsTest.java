package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.racaffinity.jdbc.AffinityShardingKey;
import io.racaffinity.jdbc.AffinityShardingKeyBuilder;
import io.racaffinity.test.Vectors;
import io.racaffinity.test.Vectors.Run;
import java.sql.JDBCType;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The shared rendezvous vectors ({@code tests/vectors/rendezvous.json}) through
 * the Java API: transactions, sessions, data keys (also as JDBC sharding keys),
 * partition owners, removals and errors. A marshalling bug in the JNI layer
 * shows up here as a disagreement with the Rust and Python implementations.
 */
class VectorsTest {
    private static final Map<String, Class<? extends Throwable>> KINDS = Map.of(
            "InvalidArgument", InvalidArgumentException.class,
            "UnknownNode", UnknownNodeException.class,
            "UnknownTransaction", UnknownTransactionException.class,
            "NoNodeAvailable", NoNodeAvailableException.class);

    @Test
    void rendezvousVectorsRouteTheSameInJava() throws Exception {
        JsonNode top = Vectors.load("rendezvous.json");
        assertEquals("racaffinity-hrw-v2", top.get("hash_version").asText());
        Run run = new Run("rendezvous.json");
        for (JsonNode t : top.get("topologies")) {
            topology(run, t);
        }
        String first = top.get("topologies").get(0).get("config").asText();
        for (JsonNode e : top.get("errors")) {
            String op = e.get("op").asText();
            JsonNode arg = e.get("arg");
            Class<? extends Throwable> want = KINDS.get(e.get("error").asText());
            try (Cluster c = Cluster.fromConfig(first)) {
                String ctx = "errors: " + op;
                Runnable call = switch (op) {
                    case "tx_begin" -> () -> c.txBegin(Vectors.bytes(arg));
                    case "session_route" -> () -> c.routeSession(Vectors.bytes(arg));
                    case "route_key" -> () -> c.routeKey(Vectors.bytes(arg));
                    case "partition_of" -> () -> c.partitionOf(Vectors.bytes(arg));
                    case "partition_owner" -> () -> c.partitionOwner(arg.asInt());
                    case "remove_node" -> () -> c.removeNode(arg.asText());
                    default -> null;
                };
                if (call == null) {
                    run.fail(ctx, "no handler for op " + op);
                } else {
                    run.err(ctx, call, want);
                }
            }
        }
        System.err.println("rendezvous vector cases through Java: " + run.cases);
        assertTrue(run.failures.isEmpty(), run.report());
        assertTrue(run.cases >= 400, "only " + run.cases + " cases: the vector file shrank?");
    }

    private static void topology(Run run, JsonNode t) throws SQLException {
        String name = t.get("name").asText();
        String config = t.get("config").asText();
        try (Cluster c = Cluster.fromConfig(config)) {
            List<String> wantNodes = new ArrayList<>();
            for (JsonNode n : t.get("nodes")) {
                wantNodes.add(n.get("name").asText() + "/" + n.get("weight").asInt());
            }
            List<String> gotNodes = new ArrayList<>();
            for (NodeMetrics m : c.nodeMetrics()) {
                gotNodes.add(m.name() + "/" + m.weight());
            }
            run.eq(name + ": nodes (name/weight) in id order", gotNodes, wantNodes);
            routed(run, name, c, t);
            for (JsonNode p : t.get("partition_owners")) {
                int part = p.get("partition").asInt();
                run.eq(name + ": partitionOwner(" + part + ")", c.nodeName(c.partitionOwner(part)),
                        p.get("owner").asText());
            }
        }
        for (JsonNode r : t.get("removals")) {
            String ctx = name + " without " + r.get("remove").asText();
            try (Cluster c = Cluster.fromConfig(config)) {
                int id = c.removeNode(r.get("remove").asText());
                run.eq(ctx + ": removed node", c.nodeName(id), r.get("removed").asText());
                routed(run, ctx, c, r);
                for (JsonNode p : r.get("partition_owners")) {
                    int part = p.get("partition").asInt();
                    run.eq(ctx + ": partitionOwner(" + part + ")", c.nodeName(c.partitionOwner(part)),
                            p.get("owner").asText());
                }
            }
        }
    }

    private static String owner(Route r) {
        return r.nodeName() + "/" + r.kind();
    }

    private static void routed(Run run, String ctx, Cluster c, JsonNode m) throws SQLException {
        for (JsonNode row : m.get("transactions")) {
            byte[] g = Vectors.bytes(row.get("gtrid"));
            run.eq(ctx + ": txBegin(" + Vectors.show(g) + ")", owner(c.txBegin(g)),
                    row.get("owner").asText() + "/PLACED");
        }
        for (JsonNode row : m.get("sessions")) {
            byte[] k = Vectors.bytes(row.get("key"));
            run.eq(ctx + ": routeSession(" + Vectors.show(k) + ")", owner(c.routeSession(k)),
                    row.get("owner").asText() + "/AFFINITY");
        }
        for (JsonNode row : m.get("data")) {
            String want = row.get("owner").asText() + "/AFFINITY";
            int partition = row.get("partition").asInt();
            if (row.has("key")) {
                byte[] k = Vectors.bytes(row.get("key"));
                String what = ctx + ": routeKey(" + Vectors.show(k) + ")";
                run.eq(what + ": partitionOf", c.partitionOf(k), partition);
                run.eq(what, owner(c.routeKey(k)), want);
                // The same key as a JDBC sharding key (one byte[] subkey) routes the same.
                AffinityShardingKey sk = (AffinityShardingKey) new AffinityShardingKeyBuilder()
                        .subkey(k, JDBCType.VARBINARY).build();
                run.eq(what + " as a ShardingKey", owner(c.routeKey(sk.bytes())), want);
                if (row.get("key").has("utf8")) {
                    String text = row.get("key").get("utf8").asText();
                    AffinityShardingKey sks = (AffinityShardingKey) new AffinityShardingKeyBuilder()
                            .subkey(text, JDBCType.VARCHAR).build();
                    run.eq(what + " as a String ShardingKey", owner(c.routeKey(sks.bytes())), want);
                }
            } else {
                long k = Long.parseLong(row.get("i64").asText());
                String what = ctx + ": routeKey(" + k + "L)";
                run.eq(what + ": partitionOf", c.partitionOf(k), partition);
                run.eq(what, owner(c.routeKey(k)), want);
                // UCP's call shape: subkey(number, NUMBER) routes like the integer key.
                AffinityShardingKey sk = (AffinityShardingKey) new AffinityShardingKeyBuilder()
                        .subkey(k, JDBCType.BIGINT).build();
                run.eq(what + " as a Long ShardingKey", owner(c.routeKey(sk.bytes())), want);
                if (k >= Integer.MIN_VALUE && k <= Integer.MAX_VALUE) {
                    AffinityShardingKey ski = (AffinityShardingKey) new AffinityShardingKeyBuilder()
                            .subkey((int) k, JDBCType.INTEGER).build();
                    run.eq(what + " as an Integer ShardingKey", owner(c.routeKey(ski.bytes())), want);
                }
            }
        }
    }
}
