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
    /**
     * The thread's innermost open scope, of any slot: a scope closed before one opened inside it
     * ends that one too, whose own close then changes nothing. Removed when the last scope closes.
     */
    private static final ThreadLocal<SessionScope> TOP = new ThreadLocal<>();
    private final ThreadLocal<byte[]> slot;
    private final byte[] previous;
    private final SessionScope outer;
    private final Thread owner;
    private boolean closed;
    /** An enclosing scope closed first and restored what this one replaced. */
    private boolean ended;

    SessionScope(ThreadLocal<byte[]> slot, byte[] key) {
        this.slot = slot;
        this.previous = slot.get();
        this.owner = Thread.currentThread();
        everOpened = true;
        slot.set(key);
        this.outer = TOP.get();
        TOP.set(this);
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
        if (ended) {
            return;
        }
        // Innermost first, so that each slot ends up with what it held before the outermost scope
        // ended here: the scopes opened inside this one end with it.
        for (SessionScope s = TOP.get(); s != null; s = s.outer) {
            s.ended = true;
            if (s.previous == null) {
                s.slot.remove();
            } else {
                s.slot.set(s.previous);
            }
            if (s == this) {
                break;
            }
        }
        if (outer == null) {
            TOP.remove();
        } else {
            TOP.set(outer);
        }
    }
}
