package io.racaffinity.jdbc;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.CallableStatement;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * Dynamic proxies for the statements, result sets and metadata an
 * {@link AffinityConnection} returns, so that a connection exception thrown by
 * any of their methods (say {@code executeQuery} on a node that just died)
 * reports the node failure, and {@code getConnection()} returns the affinity
 * connection rather than the physical one.
 */
final class JdbcWrappers {
    private JdbcWrappers() {}

    /** Wraps {@code target} as {@code type} (or a more specific JDBC type it implements). */
    static <T> T wrap(AffinityConnection conn, Class<T> type, T target) {
        return wrap(conn, type, target, null);
    }

    /**
     * {@link #wrap(AffinityConnection, Class, Object)} for an object another wrapper returned: {@code parent}
     * is that wrapper (a result set's {@code getStatement()} answers it, the statement that produced it).
     */
    private static <T> T wrap(AffinityConnection conn, Class<T> type, T target, Object parent) {
        if (target == null || Proxy.isProxyClass(target.getClass())
                && Proxy.getInvocationHandler(target) instanceof Handler) {
            return target;
        }
        Class<?> iface = type;
        if (target instanceof CallableStatement) {
            iface = CallableStatement.class;
        } else if (target instanceof PreparedStatement) {
            iface = PreparedStatement.class;
        }
        Object proxy = Proxy.newProxyInstance(
                JdbcWrappers.class.getClassLoader(), new Class<?>[] {iface}, new Handler(conn, iface, target, parent));
        return type.cast(proxy);
    }

    private static final class Handler implements InvocationHandler {
        private final AffinityConnection conn;
        private final Class<?> iface;
        private final Object target;
        /** The wrapper that returned this one (a result set's statement), or null. */
        private final Object parent;

        Handler(AffinityConnection conn, Class<?> iface, Object target, Object parent) {
            this.conn = conn;
            this.iface = iface;
            this.target = target;
            this.parent = parent;
        }

        @Override
        public Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
            String name = method.getName();
            int argc = args == null ? 0 : args.length;
            if (method.getDeclaringClass() == Object.class) {
                switch (name) {
                    case "equals":
                        return proxy == args[0];
                    case "hashCode":
                        return System.identityHashCode(proxy);
                    default:
                        return iface.getSimpleName() + "@" + conn + "[" + target + "]";
                }
            }
            if (argc == 0 && name.equals("getConnection")) {
                return conn;
            }
            if (argc == 1 && (name.equals("unwrap") || name.equals("isWrapperFor"))) {
                Class<?> c = (Class<?>) args[0];
                if (c.isInstance(proxy)) {
                    return name.equals("unwrap") ? proxy : Boolean.TRUE;
                }
                if (c.isInstance(target)) {
                    return name.equals("unwrap") ? target : Boolean.TRUE;
                }
            }
            Object result;
            try {
                result = method.invoke(target, args);
            } catch (InvocationTargetException e) {
                Throwable cause = e.getCause();
                if (cause instanceof SQLException) {
                    throw conn.failed((SQLException) cause);
                }
                throw cause;
            }
            if (result instanceof ResultSet && method.getReturnType() == ResultSet.class) {
                return wrap(conn, ResultSet.class, (ResultSet) result, proxy);
            }
            if (argc == 0 && name.equals("getStatement") && result instanceof Statement
                    && parent instanceof Statement) {
                // The statement that produced this result set, not a second wrapper of its physical statement.
                return parent;
            }
            if (result instanceof Statement && Statement.class.isAssignableFrom(method.getReturnType())) {
                @SuppressWarnings("unchecked")
                Class<Statement> rt = (Class<Statement>) method.getReturnType();
                return wrap(conn, rt, rt.cast(result));
            }
            if (result instanceof DatabaseMetaData && method.getReturnType() == DatabaseMetaData.class) {
                return wrap(conn, DatabaseMetaData.class, (DatabaseMetaData) result);
            }
            if (result instanceof Connection) {
                return conn;
            }
            return result;
        }
    }
}
