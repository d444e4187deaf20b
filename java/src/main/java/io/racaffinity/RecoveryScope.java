package io.racaffinity;

/**
 * What the nodes are to each other ({@code recovery.scope}), which decides how
 * in-doubt transactions are recovered.
 */
public enum RecoveryScope {
    /**
     * Independent databases: every node is scanned, each xid is completed on the
     * node that returned it, and an xid on two nodes is a split transaction.
     */
    NODE,
    /**
     * Instances of one database (Oracle RAC): any instance lists every in-doubt
     * xid and can complete it, so one answering instance suffices.
     */
    DATABASE
}
