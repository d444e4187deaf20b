package io.racaffinity.test;

import jakarta.transaction.Status;
import jakarta.transaction.Synchronization;
import jakarta.transaction.Transaction;
import jakarta.transaction.TransactionManager;
import jakarta.transaction.TransactionSynchronizationRegistry;
import javax.transaction.xa.XAResource;

/**
 * A transaction manager stand-in (no database) whose one transaction is rollback-only, as Narayana's is: neither
 * the transaction nor the registry takes a synchronization, so the library follows the transaction to its end by
 * asking its status from its sweeper. The hooks hold a thread where a test needs it: the sweeper's when it asks the
 * status ({@link #onSweep}), a joining thread just before the registry refuses it ({@link #beforeRefusing}).
 */
public final class RollbackOnlyTm {
    private final String key;
    private volatile int status = Status.STATUS_MARKED_ROLLBACK;
    private volatile Runnable onSweep = () -> {};
    private volatile Runnable beforeRefusing = () -> {};
    private final Transaction transaction = new Tx();

    /** @param key the transaction's key in the registry */
    public RollbackOnlyTm(String key) {
        this.key = key;
    }

    /** What the transaction, the registry and the manager answer for its status from now on (its end). */
    public void setStatus(int status) {
        this.status = status;
    }

    /** Runs when the sweeper's thread (not a joining one) asks the transaction its status, before it answers. */
    public void onSweep(Runnable hook) {
        onSweep = hook;
    }

    /** Runs on a joining thread that registers a synchronization, before the registry refuses it. */
    public void beforeRefusing(Runnable hook) {
        beforeRefusing = hook;
    }

    public Transaction transaction() {
        return transaction;
    }

    public TransactionManager manager() {
        return new Tm();
    }

    public TransactionSynchronizationRegistry registry() {
        return new Tsr();
    }

    private final class Tx implements Transaction {
        @Override
        public void commit() {}

        @Override
        public boolean delistResource(XAResource r, int f) {
            return false;
        }

        @Override
        public boolean enlistResource(XAResource r) {
            return false;
        }

        @Override
        public int getStatus() {
            if (Thread.currentThread().getName().startsWith("racaffinity-jta-sweep-")) {
                onSweep.run();
            }
            return status;
        }

        @Override
        public void registerSynchronization(Synchronization s) {
            throw new IllegalStateException("rollback-only");
        }

        @Override
        public void rollback() {}

        @Override
        public void setRollbackOnly() {}
    }

    private final class Tsr implements TransactionSynchronizationRegistry {
        @Override
        public Object getTransactionKey() {
            return key;
        }

        @Override
        public void putResource(Object k, Object v) {}

        @Override
        public Object getResource(Object k) {
            return null;
        }

        @Override
        public void registerInterposedSynchronization(Synchronization s) {
            beforeRefusing.run();
            throw new IllegalStateException("the transaction is marked rollback-only"); // as Narayana
        }

        @Override
        public int getTransactionStatus() {
            return status;
        }

        @Override
        public void setRollbackOnly() {}

        @Override
        public boolean getRollbackOnly() {
            return true;
        }
    }

    private final class Tm implements TransactionManager {
        @Override
        public void begin() {}

        @Override
        public void commit() {}

        @Override
        public int getStatus() {
            return status;
        }

        @Override
        public Transaction getTransaction() {
            return transaction;
        }

        @Override
        public void resume(Transaction t) {}

        @Override
        public void rollback() {}

        @Override
        public void setRollbackOnly() {}

        @Override
        public void setTransactionTimeout(int s) {}

        @Override
        public Transaction suspend() {
            return null;
        }
    }
}
