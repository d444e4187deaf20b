package io.racaffinity.xa;

import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.test.Narayana;
import jakarta.transaction.Transaction;
import jakarta.transaction.TransactionManager;
import java.io.PrintStream;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.TimeUnit;
import javax.sql.XAConnection;
import javax.sql.XADataSource;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.postgresql.xa.PGXADataSource;

/**
 * The JVM that crashes (run by {@link CrashRecoveryTest}): global transactions through
 * Narayana and AffinityXADataSource, each stopped at a chosen point of two-phase commit
 * and held there until the test kills this JVM with SIGKILL:
 *
 * <ul>
 *   <li>LOGGED: every branch prepared and the TM's log written; held in the first
 *       {@code commit}: recovery must commit it;
 *   <li>ORPHAN: held right after the second of three prepares, before the TM writes
 *       its log: recovery must roll back its two prepared branches (presumed abort).
 * </ul>
 *
 * Transactions are started one at a time until every node holds at least two LOGGED
 * and one ORPHAN transaction. Output lines: {@code TX <role> <tx> <node>}, then {@code READY}.
 *
 * <p>Arguments: object store dir, run id, node URLs (RAC1, RAC2, ...).
 */
public final class CrashChild {
    enum Role { LOGGED, ORPHAN }

    static final ThreadLocal<Role> ROLE = new ThreadLocal<>();
    static final ThreadLocal<int[]> PREPARES = ThreadLocal.withInitial(() -> new int[1]);
    static final SynchronousQueue<String> HELD = new SynchronousQueue<>();

    /** Holds the calling thread at its stop point forever (the JVM is killed meanwhile). */
    static void hold(String what) {
        try {
            HELD.put(what);
            new CountDownLatch(1).await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        Runtime.getRuntime().halt(3);
    }

    /** An XAResource wrapper that stops two-phase commit where the transaction's role says. */
    static final class Stopping extends XaSupport.ForwardingXAResource {
        Stopping(XAResource d) {
            super(d);
        }

        @Override
        public int prepare(Xid xid) throws XAException {
            int r = d.prepare(xid);
            if (ROLE.get() == Role.ORPHAN && ++PREPARES.get()[0] == 2) {
                hold("prepared 2 of 3, no log");
            }
            return r;
        }

        @Override
        public void commit(Xid xid, boolean onePhase) throws XAException {
            if (ROLE.get() == Role.LOGGED) {
                hold("logged, before the first commit");
            }
            d.commit(xid, onePhase);
        }
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = System.out;
        Narayana.init(Path.of(args[0]));
        String run = args[1];
        Map<String, XADataSource> nodes = new LinkedHashMap<>();
        for (int i = 2; i < args.length; i++) {
            PGXADataSource x = new PGXADataSource();
            x.setUrl(args[i]);
            x.setUser("postgres");
            nodes.put("RAC" + (i - 1), x);
        }
        // Self-destruct if the test never kills us.
        Thread guard = new Thread(() -> {
            try {
                Thread.sleep(120_000);
            } catch (InterruptedException e) {
                return;
            }
            Runtime.getRuntime().halt(4);
        });
        guard.setDaemon(true);
        guard.start();

        AffinityXADataSource ds = new AffinityXADataSource();
        ds.setConfig("name = xa-crash; nodes = " + String.join(", ", nodes.keySet()));
        ds.setNodeXADataSources(nodes);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        TransactionManager tm = Narayana.tm();
        Map<String, int[]> need = new HashMap<>(); // node -> {logged, orphans}
        for (String n : nodes.keySet()) {
            need.put(n, new int[] {2, 1});
        }
        for (int tx = 0; tx < 90 && need.values().stream().anyMatch(a -> a[0] > 0 || a[1] > 0); tx++) {
            final int t = tx;
            String[] where = new String[1];
            Role[] role = new Role[1];
            Thread th = new Thread(() -> {
                try {
                    tm.begin();
                    Transaction txn = tm.getTransaction();
                    List<XAConnection> used = new ArrayList<>();
                    for (int b = 0; b < 3; b++) {
                        XAConnection xc = ds.getXAConnection();
                        used.add(xc);
                        XAResource xr = xc.getXAResource();
                        Stopping st = new Stopping(xr);
                        txn.enlistResource(st);
                        try (Connection c = xc.getConnection(); PreparedStatement ps = c.prepareStatement(
                                io.racaffinity.test.XaRows.INSERT)) {
                            ps.setString(1, run);
                            ps.setInt(2, t);
                            ps.setInt(3, b);
                            ps.executeUpdate();
                        }
                        txn.delistResource(st, XAResource.TMSUCCESS);
                        where[0] = ((AffinityXAResource) xr).boundNodeName();
                    }
                    synchronized (need) {
                        int[] a = need.get(where[0]);
                        role[0] = a[1] > 0 ? Role.ORPHAN : Role.LOGGED;
                        a[role[0] == Role.ORPHAN ? 1 : 0]--;
                    }
                    ROLE.set(role[0]);
                    tm.commit();
                    out.println("UNEXPECTED commit returned for tx " + t);
                } catch (Throwable e) {
                    e.printStackTrace();
                    out.println("FAILED " + e);
                    out.flush();
                    Runtime.getRuntime().halt(5);
                }
            }, "crash-tx-" + tx);
            th.setDaemon(true);
            th.start();
            String held = HELD.poll(60, TimeUnit.SECONDS);
            if (held == null) {
                out.println("FAILED tx " + t + " did not reach its stop point");
                out.flush();
                Runtime.getRuntime().halt(6);
            }
            out.println("TX " + role[0] + " " + t + " " + where[0]);
        }
        out.println("READY");
        out.flush();
        new CountDownLatch(1).await(); // killed here
    }
}
