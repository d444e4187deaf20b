package io.racaffinity.xa;

import io.racaffinity.Cluster;
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
     * The key a global transaction is registered under in the core ({@link Cluster#xaTransactionKey}): the
     * formatId and the gtrid, so two transaction managers' equal gtrids of different formats stay two
     * transactions. Built by the core, as for C and Python, so every process places it alike.
     */
    static byte[] transactionKey(int formatId, byte[] gtrid) {
        return Cluster.xaTransactionKey(formatId, gtrid);
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
