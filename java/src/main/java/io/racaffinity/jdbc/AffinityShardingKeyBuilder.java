package io.racaffinity.jdbc;

import io.racaffinity.Cluster;
import io.racaffinity.InvalidArgumentException;
import java.io.ByteArrayOutputStream;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.sql.SQLException;
import java.sql.SQLNonTransientException;
import java.sql.SQLType;
import java.sql.ShardingKey;
import java.sql.ShardingKeyBuilder;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.UUID;

/**
 * JDBC 4.3 sharding key builder, as UCP uses it for RAC data affinity:
 *
 * <pre>{@code
 * ShardingKey key = ds.createShardingKeyBuilder().subkey(1000, JDBCType.INTEGER).build();
 * Connection c = ds.createConnectionBuilder().shardingKey(key).build();
 * }</pre>
 *
 * <p>Encoding ({@code racaffinity-jdbc-key-v1}) of the bytes the core routes:
 * <ul>
 *   <li>{@code Integer}, {@code Long}, {@code Short}, {@code Byte}, and a {@code BigInteger}
 *       or integral {@code BigDecimal} in the {@code long} range: the value as a
 *       64-bit integer in 8 little-endian bytes, which is exactly how the core
 *       hashes integer keys, so {@code subkey(1000, ...)} routes like
 *       {@code cluster.routeKey(1000L)} in every language;
 *   <li>a {@code String} with an integer {@code SQLType} ({@code INTEGER}, {@code BIGINT},
 *       {@code SMALLINT}, {@code TINYINT}, {@code NUMERIC}, {@code DECIMAL}, Oracle's
 *       {@code NUMBER}) that parses as a {@code long}: as that integer;
 *   <li>any other {@code String} (and {@code Character}): its UTF-8 bytes;
 *   <li>{@code byte[]}: the bytes as given;
 *   <li>{@code UUID}: its canonical lower-case text in UTF-8;
 *   <li>several subkeys: for each, its length as a 4-byte big-endian integer
 *       followed by its bytes (one subkey has no length prefix).
 * </ul>
 * The result must be 1..1024 bytes. Other types are refused by {@link #build()}.
 */
public final class AffinityShardingKeyBuilder implements ShardingKeyBuilder {
    private static final Set<String> INTEGER_TYPES =
            Set.of("INTEGER", "BIGINT", "SMALLINT", "TINYINT", "NUMERIC", "DECIMAL", "NUMBER", "BINARY_INTEGER");

    private final List<Object> values = new ArrayList<>();
    private final List<SQLType> types = new ArrayList<>();

    /** Creates an empty builder; {@link AffinityDataSource#createShardingKeyBuilder()} returns one. */
    public AffinityShardingKeyBuilder() {}

    @Override
    public AffinityShardingKeyBuilder subkey(Object subkey, SQLType subkeyType) {
        values.add(subkey);
        types.add(subkeyType);
        return this;
    }

    @Override
    public ShardingKey build() throws SQLException {
        if (values.isEmpty()) {
            throw new SQLNonTransientException("a sharding key needs at least one subkey", "22023");
        }
        if (values.size() == 1) {
            return new AffinityShardingKey(bounded(encode(values.get(0), types.get(0))));
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        for (int i = 0; i < values.size(); i++) {
            byte[] b = encode(values.get(i), types.get(i));
            out.writeBytes(ByteBuffer.allocate(4).putInt(b.length).array());
            out.writeBytes(b);
        }
        return new AffinityShardingKey(bounded(out.toByteArray()));
    }

    /** The core's bound on a data key (docs/semantics.md, data affinity): refused where the key is built. */
    static final int MAX_KEY_BYTES = 1024;

    static byte[] bounded(byte[] key) throws SQLNonTransientException {
        if (key.length == 0 || key.length > MAX_KEY_BYTES) {
            throw new SQLNonTransientException("a sharding key must be 1.." + MAX_KEY_BYTES + " bytes, got "
                    + key.length, "22023");
        }
        return key;
    }

    static byte[] encode(Object v, SQLType type) throws SQLException {
        if (v == null) {
            throw new SQLNonTransientException("a sharding subkey must not be null", "22023");
        }
        if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte) {
            return integer(((Number) v).longValue());
        }
        if (v instanceof BigInteger) {
            try {
                return integer(((BigInteger) v).longValueExact());
            } catch (ArithmeticException e) {
                throw new SQLNonTransientException("sharding subkey " + v + " is outside the long range", "22003");
            }
        }
        if (v instanceof BigDecimal) {
            try {
                return integer(((BigDecimal) v).longValueExact());
            } catch (ArithmeticException e) {
                throw new SQLNonTransientException(
                        "sharding subkey " + v + " is not an integer in the long range", "22003");
            }
        }
        if (v instanceof String) {
            String s = (String) v;
            if (type != null && INTEGER_TYPES.contains(type.getName().toUpperCase(Locale.ROOT))) {
                try {
                    return integer(Long.parseLong(s.trim()));
                } catch (NumberFormatException e) {
                    // not an integer: a text key
                }
            }
            return text(s);
        }
        if (v instanceof Character) {
            // A lone surrogate char is no more text than a String of it.
            return text(v.toString());
        }
        if (v instanceof byte[]) {
            return ((byte[]) v).clone();
        }
        if (v instanceof UUID) {
            return v.toString().getBytes(StandardCharsets.UTF_8);
        }
        throw new SQLNonTransientException("unsupported sharding subkey type " + v.getClass().getName()
                + ": use String, Integer, Long, Short, Byte, BigInteger, BigDecimal, byte[] or UUID", "22023");
    }

    private static byte[] text(String s) throws SQLNonTransientException {
        try {
            // Cluster's check: a lone surrogate would become '?' and two
            // different keys would route as one.
            return Cluster.keyBytes(s, "sharding key");
        } catch (InvalidArgumentException e) {
            throw new SQLNonTransientException(e.getMessage(), "22023", e);
        }
    }

    private static byte[] integer(long v) {
        return ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(v).array();
    }
}
