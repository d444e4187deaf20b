package io.racaffinity.jdbc;

/**
 * A web-session scope from {@link AffinityDataSource#withSession(String)}:
 * while open, {@code getConnection()} on the same thread routes by the
 * session's affinity (UCP's web-session affinity; strict with
 * {@code session.strict} / JMX {@code UseStrictWebSessionAffinity}). Scopes
 * nest; closing restores the enclosing one, and ends the scopes opened inside it that are
 * still open. Close it on the thread that opened it.
 */
public final class SessionScope implements AutoCloseable {
    /**
     * Whether a session scope was ever opened in this JVM: until one is, a borrow skips the
     * session thread-locals. Set before the thread-local, so the opening thread always sees it;
     * another thread has no scope of its own to miss until it opens one (and sets it itself).
     */
    static volatile boolean everOpened;
    /**
     * The thread's innermost open scope, of any slot, as a frame {slot, value it replaced, enclosing
     * frame, ended}: a scope closed before one opened inside it ends that one too, whose own close
     * then changes nothing. JDK types only, as the slots' values: a scope an application leaks on an
     * app server's thread must not keep the web application's class loader. Removed when the last
     * scope closes.
     */
    private static final ThreadLocal<Object[]> TOP = new ThreadLocal<>();
    private static final int SLOT = 0;
    private static final int PREVIOUS = 1;
    private static final int OUTER = 2;
    private static final int ENDED = 3;
    private final Object[] frame;
    private final Thread owner;
    private boolean closed;

    SessionScope(ThreadLocal<byte[]> slot, byte[] key) {
        this.owner = Thread.currentThread();
        this.frame = new Object[] {slot, slot.get(), TOP.get(), null};
        everOpened = true;
        slot.set(key);
        TOP.set(frame);
    }

    /** Ends the scope (not the session: see {@link AffinityDataSource#endSession(String)}). */
    @Override
    @SuppressWarnings("unchecked") // a frame's slot is a ThreadLocal<byte[]>, as the constructor put it
    public void close() {
        if (closed) {
            return;
        }
        if (Thread.currentThread() != owner) {
            throw new IllegalStateException("a session scope must be closed on the thread that opened it");
        }
        closed = true;
        if (frame[ENDED] != null) {
            return;
        }
        // Innermost first, so that each slot ends up with what it held before the outermost scope
        // ended here: the scopes opened inside this one end with it.
        for (Object[] f = TOP.get(); f != null; f = (Object[]) f[OUTER]) {
            f[ENDED] = Boolean.TRUE;
            ThreadLocal<byte[]> slot = (ThreadLocal<byte[]>) f[SLOT];
            if (f[PREVIOUS] == null) {
                slot.remove();
            } else {
                slot.set((byte[]) f[PREVIOUS]);
            }
            if (f == frame) {
                break;
            }
        }
        Object[] outer = (Object[]) frame[OUTER];
        if (outer == null) {
            TOP.remove();
        } else {
            TOP.set(outer);
        }
    }
}
