package io.racaffinity.test;

import com.arjuna.ats.arjuna.common.ObjectStoreEnvironmentBean;
import com.arjuna.ats.arjuna.common.arjPropertyManager;
import com.arjuna.ats.arjuna.common.recoveryPropertyManager;
import com.arjuna.ats.jta.common.jtaPropertyManager;
import com.arjuna.common.internal.util.propertyservice.BeanPopulator;
import jakarta.transaction.TransactionManager;
import jakarta.transaction.TransactionSynchronizationRegistry;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * Narayana (arjunacore JTA) configured once per JVM: a file object store in a
 * directory of its own, a fixed node identifier (so recovery rolls back this
 * node's orphans), recovery driven by hand (no background thread, no listener).
 */
public final class Narayana {
    public static final String NODE_ID = "racaff-test";
    private static Path store;

    private Narayana() {}

    /** Configures Narayana with a new object store directory (idempotent per JVM). */
    public static synchronized Path init() throws IOException {
        if (store == null) {
            Path target = PgNodes.repo().resolve("java/target");
            Files.createDirectories(target);
            init(Files.createTempDirectory(target, "narayana-store-"));
        }
        return store;
    }

    /** Configures Narayana over an existing object store (the crash child and its recovering parent share one). */
    public static synchronized void init(Path dir) {
        if (store != null) {
            if (!store.equals(dir)) {
                throw new IllegalStateException("Narayana already uses " + store);
            }
            return;
        }
        String d = dir.toAbsolutePath().toString();
        for (String name : new String[] {null, "communicationStore", "stateStore"}) {
            ObjectStoreEnvironmentBean b = name == null
                    ? BeanPopulator.getDefaultInstance(ObjectStoreEnvironmentBean.class)
                    : BeanPopulator.getNamedInstance(ObjectStoreEnvironmentBean.class, name);
            b.setObjectStoreDir(d);
            // A killed JVM loses nothing the kernel already has: no fsync needed for these tests.
            b.setObjectStoreSync(false);
            b.setTransactionSync(false);
        }
        try {
            arjPropertyManager.getCoreEnvironmentBean().setNodeIdentifier(NODE_ID);
        } catch (com.arjuna.ats.arjuna.common.CoreEnvironmentBeanException e) {
            throw new IllegalStateException(e);
        }
        arjPropertyManager.getCoordinatorEnvironmentBean().setDefaultTimeout(120);
        arjPropertyManager.getCoordinatorEnvironmentBean().setTransactionStatusManagerEnable(false);
        jtaPropertyManager.getJTAEnvironmentBean().setXaRecoveryNodes(List.of(NODE_ID));
        // Orphans (prepared, no TM log) of a killed JVM are rolled back at once, not after 20 s.
        jtaPropertyManager.getJTAEnvironmentBean().setOrphanSafetyInterval(0);
        var rec = recoveryPropertyManager.getRecoveryEnvironmentBean();
        rec.setRecoveryListener(false);
        rec.setRecoveryBackoffPeriod(1);
        rec.setPeriodicRecoveryPeriod(3600);
        rec.setRecoveryModuleClassNames(List.of(
                "com.arjuna.ats.internal.arjuna.recovery.AtomicActionRecoveryModule",
                "com.arjuna.ats.internal.jta.recovery.arjunacore.XARecoveryModule"));
        rec.setExpiryScannerClassNames(List.of());
        store = dir;
    }

    public static TransactionManager tm() {
        return com.arjuna.ats.jta.TransactionManager.transactionManager();
    }

    public static TransactionSynchronizationRegistry tsr() {
        return new com.arjuna.ats.internal.jta.transaction.arjunacore.TransactionSynchronizationRegistryImple();
    }
}
