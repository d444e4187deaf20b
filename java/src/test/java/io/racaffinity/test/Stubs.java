package io.racaffinity.test;

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
     * A DataSource whose connections throw {@code failures.get(methodName)} from that
     * method (and, under key "getConnection", from getConnection itself).
     */
    public static DataSource dataSource(String name, Map<String, SQLException> failures, AtomicInteger closes) {
        return (DataSource) Proxy.newProxyInstance(Stubs.class.getClassLoader(), new Class<?>[] {DataSource.class},
                (proxy, m, args) -> {
                    switch (m.getName()) {
                        case "getConnection":
                            if (failures.containsKey("getConnection")) {
                                throw failures.get("getConnection");
                            }
                            return connection(failures, closes);
                        case "toString":
                            return "StubDataSource[" + name + "]";
                        case "hashCode":
                            return System.identityHashCode(proxy);
                        case "equals":
                            return proxy == args[0];
                        default:
                            return null;
                    }
                });
    }

    private static Connection connection(Map<String, SQLException> failures, AtomicInteger closes) {
        boolean[] closed = {false};
        return (Connection) Proxy.newProxyInstance(Stubs.class.getClassLoader(), new Class<?>[] {Connection.class},
                (proxy, m, args) -> {
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
                        case "toString":
                            return "StubConnection";
                        case "hashCode":
                            return System.identityHashCode(proxy);
                        case "equals":
                            return proxy == args[0];
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
