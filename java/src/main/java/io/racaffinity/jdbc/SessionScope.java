package io.racaffinity.jdbc;

/**
 * A web-session scope from {@link AffinityDataSource#withSession(String)}:
 * while open, {@code getConnection()} on the same thread routes by the
 * session's affinity (UCP's web-session affinity; strict with
 * {@code session.strict} / JMX {@code UseStrictWebSessionAffinity}). Scopes
 * nest; closing restores the enclosing one. Close it on the thread that opened it.
 */
public final class SessionScope implements AutoCloseable {
    /**
     * Whether a session scope was ever opened in this JVM: until one is, a borrow skips the
     * session thread-locals. Set before the thread-local, so the opening thread always sees it;
     * another thread has no scope of its own to miss until it opens one (and sets it itself).
     */
    static volatile boolean everOpened;
    private final ThreadLocal<byte[]> slot;
    private final byte[] previous;
    private final Thread owner;
    private boolean closed;

    SessionScope(ThreadLocal<byte[]> slot, byte[] key) {
        this.slot = slot;
        this.previous = slot.get();
        this.owner = Thread.currentThread();
        everOpened = true;
        slot.set(key);
    }

    /** Ends the scope (not the session: see {@link AffinityDataSource#endSession(String)}). */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        if (Thread.currentThread() != owner) {
            throw new IllegalStateException("a session scope must be closed on the thread that opened it");
        }
        closed = true;
        if (previous == null) {
            slot.remove();
        } else {
            slot.set(previous);
        }
    }
}
