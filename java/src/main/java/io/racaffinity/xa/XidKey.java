package io.racaffinity.xa;

import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import javax.transaction.xa.Xid;

/** A value copy of an {@link Xid} (drivers' Xid classes do not all implement equals/hashCode). */
final class XidKey {
    final int formatId;
    final byte[] gtrid;
    final byte[] bqual;
    /** The core's registry key of the global transaction: {@link #transactionKey(int, byte[])}. */
    final byte[] tx;
    private final int hash;

    private XidKey(int formatId, byte[] gtrid, byte[] bqual) {
        this.formatId = formatId;
        this.gtrid = gtrid;
        this.bqual = bqual;
        this.tx = transactionKey(formatId, gtrid);
        this.hash = 31 * (31 * formatId + Arrays.hashCode(gtrid)) + Arrays.hashCode(bqual);
    }

    static XidKey of(Xid xid) {
        if (xid == null) {
            return null;
        }
        byte[] g = xid.getGlobalTransactionId();
        byte[] b = xid.getBranchQualifier();
        return new XidKey(xid.getFormatId(), g == null ? new byte[0] : g.clone(), b == null ? new byte[0] : b.clone());
    }

    /** Whether both are branches of one global transaction: XA names it by formatId and gtrid together. */
    boolean sameGtrid(XidKey o) {
        return formatId == o.formatId && Arrays.equals(gtrid, o.gtrid);
    }

    /**
     * The key a global transaction is registered under in the core: the formatId (4 bytes, big-endian) and
     * the gtrid, so two transaction managers' equal gtrids of different formats stay two transactions. A
     * gtrid longer than 60 bytes is replaced by its SHA-256 digest to keep the key within the core's 64
     * bytes. A gtrid no conforming TM makes (empty, or over 64 bytes) is passed on as it is, for the
     * core to refuse. Python's {@code racaffinity.tpc.transaction_key} builds the same key
     * (docs/semantics.md).
     */
    static byte[] transactionKey(int formatId, byte[] gtrid) {
        if (gtrid.length == 0 || gtrid.length > 64) {
            return gtrid;
        }
        byte[] g = gtrid.length <= 60 ? gtrid : sha256(gtrid);
        return ByteBuffer.allocate(4 + g.length).putInt(formatId).put(g).array();
    }

    private static byte[] sha256(byte[] b) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(b);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e); // every JDK has SHA-256
        }
    }

    @Override
    public boolean equals(Object o) {
        if (this == o) {
            return true;
        }
        if (!(o instanceof XidKey)) {
            return false;
        }
        XidKey k = (XidKey) o;
        return hash == k.hash && formatId == k.formatId && Arrays.equals(gtrid, k.gtrid)
                && Arrays.equals(bqual, k.bqual);
    }

    @Override
    public int hashCode() {
        return hash;
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder(b.length * 2);
        for (byte x : b) {
            sb.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        }
        return sb.toString();
    }

    @Override
    public String toString() {
        return formatId + ":" + hex(gtrid) + ":" + hex(bqual);
    }
}
