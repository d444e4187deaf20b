package io.racaffinity.xa;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.InvalidArgumentException;
import io.racaffinity.UnknownTransactionException;
import io.racaffinity.test.Vectors;
import io.racaffinity.test.Vectors.Run;
import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HexFormat;
import javax.transaction.xa.Xid;
import org.junit.jupiter.api.Test;

/**
 * The XA transaction key is the core's ({@code racaffinity_xa_transaction_key}): the fixed vectors are those
 * of rust/core/tests/transactions.rs, tests/c/test_api.c and python/tests/test_tpc_key.py, so a binding that
 * built its own key would show here; and the shared vectors of {@code tests/vectors/xa_keys.json}, which C,
 * Python and the core check too.
 */
class XidKeyTest {
    private static byte[] key(int formatId, String gtrid) {
        return XidKey.transactionKey(formatId, gtrid.getBytes(StandardCharsets.UTF_8));
    }

    private static String hex(byte[] b) {
        return HexFormat.of().formatHex(b);
    }

    @Test
    void theKeyIsTheCores() {
        assertEquals("00001234616263", hex(key(0x1234, "abc")));
        assertEquals("ffffffff67", hex(key(-1, "g")));
        assertEquals("5241464678", hex(key(0x52414646, "x")));
        assertEquals("00000007" + "78".repeat(60), hex(key(7, "x".repeat(60))));
        assertEquals("00000007c508e75f24e25db94dff52c9564a51025f69510191cc7dc2cfe16a6cb4b29f53",
                hex(key(7, "x".repeat(61))));
        assertEquals("", hex(key(7, "")), "empty: passed on, for the core to refuse");
        assertEquals("79".repeat(65), hex(key(7, "y".repeat(65))), "over 64 bytes: passed on");
    }

    @Test
    void xaRouterAndXidKeyGiveTheCoresKey() {
        Xid xid = new Xid() {
            @Override
            public int getFormatId() {
                return 0x1234;
            }

            @Override
            public byte[] getGlobalTransactionId() {
                return "abc".getBytes(StandardCharsets.UTF_8);
            }

            @Override
            public byte[] getBranchQualifier() {
                return new byte[] {1};
            }
        };
        byte[] want = Cluster.xaTransactionKey(0x1234, "abc".getBytes(StandardCharsets.UTF_8));
        assertArrayEquals(want, XaRouter.transactionKey(xid));
        assertArrayEquals(want, XidKey.of(xid).tx);
        assertTrue(XidKey.of(xid).sameGtrid(XidKey.of(xid)));
    }

    @Test
    void theKeysOfOneGtridInTwoFormatsAreTwoTransactions() {
        try (Cluster c = Cluster.fromConfig("nodes = A, B")) {
            byte[] one = key(1, "tx");
            byte[] two = key(2, "tx");
            assertFalse(Arrays.equals(one, two));
            c.txBegin(one);
            c.txBegin(two);
            c.txEnd(one);
            assertThrows(UnknownTransactionException.class, () -> c.txEnd(one));
            c.txEnd(two);
            assertThrows(InvalidArgumentException.class, () -> c.txBegin(key(7, "")));
            assertThrows(InvalidArgumentException.class, () -> c.txBegin(key(7, "y".repeat(65))));
        }
    }

    @Test
    void aNullGtridIsRefused() {
        assertThrows(NullPointerException.class, () -> Cluster.xaTransactionKey(1, null));
    }

    private static Xid xid(int formatId, byte[] gtrid) {
        return new Xid() {
            @Override
            public int getFormatId() {
                return formatId;
            }

            @Override
            public byte[] getGlobalTransactionId() {
                return gtrid.clone();
            }

            @Override
            public byte[] getBranchQualifier() {
                return new byte[] {1};
            }
        };
    }

    @Test
    void theSharedXaKeyVectorsGiveTheSameKeysInJava() throws Exception {
        JsonNode top = Vectors.load("xa_keys.json");
        Run run = new Run("xa_keys.json");
        HexFormat hex = HexFormat.of();
        for (JsonNode c : top.get("keys")) {
            int formatId = Math.toIntExact(c.get("format_id").asLong());
            byte[] gtrid = hex.parseHex(c.get("gtrid").asText());
            String ctx = "XaRouter.transactionKey(" + formatId + ", " + Vectors.show(gtrid) + ")";
            run.eq(ctx, hex.formatHex(XaRouter.transactionKey(xid(formatId, gtrid))), c.get("key").asText());
        }
        assertTrue(run.failures.isEmpty(), run.report());
        assertTrue(run.cases >= 90, "only " + run.cases + " cases: the vector file shrank?");
    }
}
