package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.JDBCType;
import java.sql.SQLException;
import java.sql.SQLNonTransientException;
import org.junit.jupiter.api.Test;

/**
 * The sharding key builder's documented bounds: a key is 1..1024 bytes, and {@code build()} refuses
 * any other (SQLState 22023), where the caller builds it, not at a later connection request.
 */
class ShardingKeyBuilderTest {

    private static void refused(String what, AffinityShardingKeyBuilder b) {
        SQLException e = assertThrows(SQLNonTransientException.class, b::build, what + " was built");
        assertEquals("22023", e.getSQLState(), what);
    }

    @Test
    void buildRefusesAnEmptyOrOversizedKey() throws Exception {
        refused("an empty text key", new AffinityShardingKeyBuilder().subkey("", JDBCType.VARCHAR));
        refused("an empty byte key", new AffinityShardingKeyBuilder().subkey(new byte[0], JDBCType.VARBINARY));
        refused("a 1025-byte key", new AffinityShardingKeyBuilder().subkey(new byte[1025], JDBCType.VARBINARY));
        refused("a 1025-byte composite key", new AffinityShardingKeyBuilder()
                .subkey(new byte[1000], JDBCType.VARBINARY).subkey(new byte[17], JDBCType.VARBINARY));
        assertEquals(1024, ((AffinityShardingKey) new AffinityShardingKeyBuilder()
                .subkey(new byte[1024], JDBCType.VARBINARY).build()).bytes().length);
        assertEquals(1, ((AffinityShardingKey) new AffinityShardingKeyBuilder().subkey("x", JDBCType.VARCHAR)
                .build()).bytes().length);
    }

    @Test
    void ofBytesRefusesWhatTheBuilderRefuses() throws Exception {
        for (int size : new int[] {0, 1025}) {
            SQLException e = assertThrows(SQLNonTransientException.class, () -> AffinityShardingKey.of(new byte[size]),
                    "a " + size + "-byte key was made");
            assertEquals("22023", e.getSQLState());
            assertTrue(e.getMessage().contains("1..1024 bytes, got " + size), e.getMessage());
        }
        assertEquals(1024, AffinityShardingKey.of(new byte[1024]).bytes().length);
        assertEquals(AffinityShardingKey.of(new byte[] {7}),
                new AffinityShardingKeyBuilder().subkey(new byte[] {7}, JDBCType.VARBINARY).build());
    }

    /**
     * A lone surrogate {@code Character} is not text: its UTF-8 encoding is {@code '?'}, so two such subkeys (and
     * {@code '?'} itself) made one key and routed as one, where a {@code String} of that surrogate is refused.
     */
    @Test
    void aLoneSurrogateCharacterIsRefusedAsItsStringIs() throws Exception {
        refused("a lone surrogate String", new AffinityShardingKeyBuilder().subkey("\uD800", JDBCType.CHAR));
        refused("a lone surrogate Character", new AffinityShardingKeyBuilder().subkey('\uD800', JDBCType.CHAR));
        refused("a lone low surrogate Character in a composite key", new AffinityShardingKeyBuilder()
                .subkey(1, JDBCType.INTEGER).subkey('\uDC00', JDBCType.CHAR));
        assertEquals(new AffinityShardingKeyBuilder().subkey("\u00e9", JDBCType.CHAR).build(),
                new AffinityShardingKeyBuilder().subkey('\u00e9', JDBCType.CHAR).build(), "a Character keys as its String");
    }
}
