package io.racaffinity.jdbc;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.sql.SQLNonTransientException;
import java.sql.ShardingKey;
import java.util.Arrays;

/**
 * A data-affinity key built by {@link AffinityShardingKeyBuilder}: the bytes
 * the core routes ({@code key → partition → node}, racaffinity-hrw-v2).
 * Equal keys have equal bytes.
 */
public final class AffinityShardingKey implements ShardingKey {
    private final byte[] bytes;

    AffinityShardingKey(byte[] bytes) {
        this.bytes = bytes;
    }

    /**
     * The key for one integer subkey: its 8 little-endian bytes, so it routes
     * exactly like the core's integer keys ({@code Cluster.routeKey(long)}).
     *
     * @param key the integer key
     * @return the sharding key
     */
    public static AffinityShardingKey of(long key) {
        return new AffinityShardingKey(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(key).array());
    }

    /**
     * The key for raw bytes, bounded as {@link AffinityShardingKeyBuilder#build()} bounds a key.
     *
     * @param key the key bytes (copied), 1..1024 of them
     * @return the sharding key
     * @throws SQLNonTransientException (SQLState 22023) for an empty key or one over 1024 bytes
     */
    public static AffinityShardingKey of(byte[] key) throws SQLNonTransientException {
        return new AffinityShardingKey(AffinityShardingKeyBuilder.bounded(key.clone()));
    }

    /** @return a copy of the encoded key bytes */
    public byte[] bytes() {
        return bytes.clone();
    }

    byte[] raw() {
        return bytes;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof AffinityShardingKey && Arrays.equals(bytes, ((AffinityShardingKey) o).bytes);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(bytes);
    }

    @Override
    public String toString() {
        StringBuilder sb = new StringBuilder("AffinityShardingKey[").append(bytes.length).append(" bytes: ");
        for (int i = 0; i < Math.min(bytes.length, 32); i++) {
            sb.append(String.format("%02x", bytes[i] & 0xff));
        }
        return sb.append(bytes.length > 32 ? "...]" : "]").toString();
    }
}
