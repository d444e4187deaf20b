package io.racaffinity.xa;

import javax.transaction.xa.Xid;

/**
 * {@link XidKey#of}, which every call of {@code AffinityXAResource} makes (one JNI call for the transaction key
 * since 37fc80a), for {@code InterleavedBench --xid}.
 */
public final class XidKeyParts {
    private XidKeyParts() {}

    /** @return the key of {@code xid}, as an XA call builds it */
    public static Object of(Xid xid) {
        return XidKey.of(xid);
    }
}
