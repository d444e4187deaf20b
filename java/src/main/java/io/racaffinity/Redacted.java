package io.racaffinity;

import java.lang.reflect.Constructor;
import java.lang.reflect.Modifier;
import java.sql.SQLException;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.function.UnaryOperator;
import javax.transaction.xa.XAException;

/**
 * Copies of exceptions with every message of their graph (causes, next exceptions,
 * suppressed) passed through a redaction function, for the exceptions the JDBC and XA
 * layers build or forward: a driver writes the URL it was given into its messages
 * ({@code No suitable driver found for jdbc:oracle:thin:scott/tiger@...}), and a stack
 * trace prints every cause.
 *
 * <p>An exception none of whose texts changes is returned as is (a driver's own class,
 * for {@code unwrap} and its extra fields). A copy keeps what callers classify by: the
 * SQLState, the vendor code and the XA error code; the class where it can be rebuilt
 * (every {@code java.sql} and {@code java.io} exception, and any class with a public
 * {@code (String)} constructor), else the nearest ancestor that can (a driver's
 * {@code PSQLException} becomes an {@link SQLException}); and the stack traces.
 * For the library's own use; public because its packages share it.
 */
public final class Redacted {
    private Redacted() {}

    /**
     * @param e an exception to forward
     * @param redact the redaction of one message
     * @return {@code e}, or its redacted copy
     */
    public static SQLException sql(SQLException e, UnaryOperator<String> redact) {
        Throwable t = throwable(e, redact);
        return t instanceof SQLException ? (SQLException) t : e;
    }

    /**
     * @param e an XA error to forward
     * @param redact the redaction of one message
     * @return {@code e}, or its redacted copy (same error code)
     */
    public static XAException xa(XAException e, UnaryOperator<String> redact) {
        Throwable t = throwable(e, redact);
        return t instanceof XAException ? (XAException) t : e;
    }

    /**
     * @param t a throwable to forward, or null
     * @param redact the redaction of one message
     * @return {@code t}, or its redacted copy
     */
    public static Throwable throwable(Throwable t, UnaryOperator<String> redact) {
        if (t == null || redact == null || clean(t, redact, new IdentityHashMap<>())) {
            return t;
        }
        return copy(t, redact, new IdentityHashMap<>());
    }

    /** Whether no message of {@code t}'s graph changes under {@code redact}. */
    private static boolean clean(Throwable t, UnaryOperator<String> redact, Map<Throwable, Boolean> seen) {
        for (Throwable x = t; x != null; x = x.getCause()) {
            if (seen.put(x, Boolean.TRUE) != null) {
                return true;
            }
            if (changes(x.getMessage(), redact)) {
                return false;
            }
            for (Throwable s : x.getSuppressed()) {
                if (!clean(s, redact, seen)) {
                    return false;
                }
            }
            if (x instanceof SQLException) {
                SQLException next = ((SQLException) x).getNextException();
                if (next != null && !clean(next, redact, seen)) {
                    return false;
                }
            }
        }
        return true;
    }

    private static boolean changes(String s, UnaryOperator<String> redact) {
        return s != null && !s.equals(redact.apply(s));
    }

    private static Throwable copy(Throwable t, UnaryOperator<String> redact, Map<Throwable, Throwable> done) {
        Throwable have = done.get(t);
        if (have != null) {
            return have;
        }
        String msg = t.getMessage() == null ? null : redact.apply(t.getMessage());
        Throwable cause = t.getCause();
        Throwable c = build(t, msg);
        done.put(t, c);
        if (cause != null && cause != t) {
            try {
                c.initCause(copy(cause, redact, done));
            } catch (IllegalStateException | IllegalArgumentException e) {
                // a constructor set a cause of its own: keep it
            }
        }
        c.setStackTrace(t.getStackTrace());
        for (Throwable s : t.getSuppressed()) {
            c.addSuppressed(copy(s, redact, done));
        }
        if (t instanceof SQLException && c instanceof SQLException) {
            SQLException next = ((SQLException) t).getNextException();
            if (next != null && next != t) {
                ((SQLException) c).setNextException((SQLException) copy(next, redact, done));
            }
        }
        return c;
    }

    /** A new exception of {@code t}'s class (or the nearest that can be rebuilt) without a cause. */
    private static Throwable build(Throwable t, String msg) {
        if (t instanceof XAException) {
            XAException x = new XAException(msg);
            x.errorCode = ((XAException) t).errorCode;
            return x;
        }
        if (t instanceof SQLException) {
            SQLException s = (SQLException) t;
            for (Class<?> k = t.getClass(); k != null && SQLException.class.isAssignableFrom(k); k = k.getSuperclass()) {
                if (k.getName().startsWith("java.sql.")) {
                    try {
                        Constructor<?> ctor = k.getConstructor(String.class, String.class, int.class);
                        return (Throwable) ctor.newInstance(msg, s.getSQLState(), s.getErrorCode());
                    } catch (ReflectiveOperationException | RuntimeException e) {
                        // BatchUpdateException, DataTruncation: up one class
                    }
                }
            }
            return new SQLException(msg, s.getSQLState(), s.getErrorCode());
        }
        for (Class<?> k = t.getClass(); k != null && Throwable.class.isAssignableFrom(k); k = k.getSuperclass()) {
            if (!Modifier.isPublic(k.getModifiers()) || Modifier.isAbstract(k.getModifiers())) {
                continue;
            }
            try {
                return (Throwable) k.getConstructor(String.class).newInstance(msg);
            } catch (ReflectiveOperationException | RuntimeException e) {
                // no such constructor: up one class
            }
        }
        return new Exception(msg);
    }
}
