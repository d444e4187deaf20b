package io.racaffinity.test;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;

/** JDBC stubs with scripted failures, for tests that need exact exceptions without a server. */
public final class Stubs {
    private Stubs() {}

    /**
     * A proxy of {@code iface} that is equal only to itself and prints as {@code text}; every
     * other call goes to {@code calls}.
     */
    public static <T> T proxy(Class<T> iface, String text, InvocationHandler calls) {
        return iface.cast(Proxy.newProxyInstance(Stubs.class.getClassLoader(), new Class<?>[] {iface},
                (proxy, m, args) -> {
                    if (m.getDeclaringClass() != Object.class) {
                        return calls.invoke(proxy, m, args);
                    }
                    switch (m.getName()) {
                        case "toString":
                            return text;
                        case "hashCode":
                            return System.identityHashCode(proxy);
                        default:
                            return proxy == args[0];
                    }
                }));
    }

    /**
     * Calls {@code m} on {@code target} for a proxy that wraps it: what the call throws is thrown as itself, as the
     * caller of the real object would see it, not wrapped in an InvocationTargetException.
     */
    public static Object forward(Object target, Method m, Object[] args) throws Throwable {
        try {
            return m.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    /**
     * A DataSource whose connections throw {@code failures.get(methodName)} from that
     * method (and, under key "getConnection", from getConnection itself).
     */
    public static DataSource dataSource(String name, Map<String, SQLException> failures, AtomicInteger closes) {
        return proxy(DataSource.class, "StubDataSource[" + name + "]", (proxy, m, args) -> {
            if (!m.getName().equals("getConnection")) {
                return null;
            }
            if (failures.containsKey("getConnection")) {
                throw failures.get("getConnection");
            }
            return connection(failures, closes);
        });
    }

    private static Connection connection(Map<String, SQLException> failures, AtomicInteger closes) {
        boolean[] closed = {false};
        return proxy(Connection.class, "StubConnection", (proxy, m, args) -> {
            SQLException f = failures.get(m.getName());
            if (f != null) {
                throw f;
            }
            switch (m.getName()) {
                case "close":
                    closed[0] = true;
                    closes.incrementAndGet();
                    return null;
                case "isClosed":
                    return closed[0];
                case "isValid":
                    return !closed[0];
                case "unwrap":
                case "isWrapperFor":
                    throw new SQLException("stub");
                default:
                    Class<?> r = m.getReturnType();
                    return r == boolean.class ? false : r == int.class ? 0 : null;
            }
        });
    }
}
