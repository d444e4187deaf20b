package io.racaffinity.jdbc;

import io.racaffinity.LibraryThreads;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.sql.SQLException;
import java.sql.SQLNonTransientException;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ThreadFactory;
import javax.sql.DataSource;

/**
 * Creates one node DataSource from a class name and configures it by
 * reflection, the way pools and app servers configure beans:
 *
 * <ul>
 *   <li>the URL through the first of {@code setUrl}, {@code setURL}, {@code setJdbcUrl};
 *   <li>the user through {@code setUser}, {@code setUsername} or {@code setUserName};
 *   <li>the password through {@code setPassword};
 *   <li>each extra property {@code p} through {@code setP(String|int|long|boolean|...)};
 *   <li>{@code setPoolName("<cluster>-<node>")} when the class has it and no
 *       {@code poolName} property is given (HikariCP, UCP).
 * </ul>
 *
 * <p>Messages name the node, class and setter, never a credential value.
 */
final class NodeDataSourceFactory {
    private static final List<String> URL_SETTERS = List.of("setUrl", "setURL", "setJdbcUrl");
    private static final List<String> USER_SETTERS = List.of("setUser", "setUsername", "setUserName");

    private NodeDataSourceFactory() {}

    /** A node's {@code type} ({@link DataSource} or {@link javax.sql.XADataSource}) of class {@code className}. */
    static <T> T create(
            Class<T> type,
            String className,
            String cluster,
            String node,
            String url,
            String user,
            String password,
            Map<String, String> properties,
            Map<String, String> driverProperties,
            Redactor redactor)
            throws SQLException {
        String where = "node " + node + "'s DataSource " + className;
        Class<?> cls;
        try {
            cls = load(className);
        } catch (ClassNotFoundException | LinkageError e) {
            throw new SQLNonTransientException(
                    "AffinityDataSource: dataSourceClassName " + className + " cannot be loaded: " + e, "HY000");
        }
        if (!type.isAssignableFrom(cls)) {
            throw new SQLNonTransientException(
                    "AffinityDataSource: dataSourceClassName " + className + " is not a " + type.getName(), "HY000");
        }
        Object ds;
        try {
            ds = cls.getConstructor().newInstance();
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new SQLNonTransientException(
                    "AffinityDataSource: cannot instantiate " + where + " (it needs a public no-argument constructor): "
                            + redactor.redact(String.valueOf(e instanceof InvocationTargetException ? e.getCause() : e)),
                    "HY000");
        }
        if (url != null) {
            set(ds, where, URL_SETTERS, "URL", url, false, redactor);
        }
        if (user != null) {
            set(ds, where, USER_SETTERS, "user", user, true, redactor);
        }
        if (password != null) {
            set(ds, where, List.of("setPassword"), "password", password, true, redactor);
        }
        boolean poolNamed = false;
        for (Map.Entry<String, String> p : properties.entrySet()) {
            String key = p.getKey();
            poolNamed |= key.equalsIgnoreCase("poolName");
            String setter = "set" + key.substring(0, 1).toUpperCase(Locale.ROOT) + key.substring(1);
            boolean secret = Redactor.isSecretKey(key);
            set(ds, where, List.of(setter), "property " + key, p.getValue(), secret, redactor);
        }
        if (!poolNamed) {
            Method m = find(cls, "setPoolName");
            if (m != null) {
                invoke(ds, m, cluster + "-" + node, where, "pool name", false, redactor);
            }
        }
        if (!driverProperties.isEmpty()) {
            driverProperties(ds, cls, driverProperties, where);
        }
        poolThreads(ds, cls, cluster + "-" + node, where);
        return type.cast(ds);
    }

    /**
     * Gives the driver connection properties through the first way the class has: UCP's
     * {@code setConnectionProperty(String, String)}, HikariCP's
     * {@code addDataSourceProperty(String, Object)} (passed to the driver with a
     * {@code jdbcUrl}), or {@code OracleDataSource}'s {@code setConnectionProperties(Properties)}
     * (added to what it has). A class with none of them gets a WARNING naming the properties.
     */
    private static void driverProperties(Object ds, Class<?> cls, Map<String, String> props, String where)
            throws SQLException {
        try {
            Method m = method(cls, "setConnectionProperty", String.class, String.class);
            if (m == null) {
                m = method(cls, "addDataSourceProperty", String.class, Object.class);
            }
            if (m != null) {
                for (Map.Entry<String, String> p : props.entrySet()) {
                    m.invoke(ds, p.getKey(), p.getValue());
                }
                return;
            }
            Method set = method(cls, "setConnectionProperties", Properties.class);
            if (set != null) {
                Method get = method(cls, "getConnectionProperties");
                Properties merged = new Properties();
                Object had = get == null ? null : get.invoke(ds);
                if (had instanceof Properties) {
                    merged.putAll((Properties) had);
                }
                props.forEach(merged::putIfAbsent);
                set.invoke(ds, merged);
                return;
            }
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new SQLNonTransientException("AffinityDataSource: cannot set the connection properties "
                    + props.keySet() + " of " + where + ": "
                    + (e instanceof InvocationTargetException ? e.getCause() : e), "HY000");
        }
        System.getLogger(NodeDataSourceFactory.class.getPackageName()).log(System.Logger.Level.WARNING,
                "AffinityDataSource: " + where + " takes no connection properties: set " + props
                        + " (or your own values) yourself, or calls on a node that stops answering wait for it");
    }

    private static Method method(Class<?> cls, String name, Class<?>... params) {
        try {
            return cls.getMethod(name, params);
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    /**
     * A pool that starts its threads lazily (HikariCP's housekeeper, connection adder and
     * closer, on the first getConnection) would have them inherit whatever request thread
     * came first, and so keep its web application's class loader after a redeploy: give
     * it the library's thread factory, with the pool's own loader as context loader.
     */
    private static void poolThreads(Object ds, Class<?> cls, String pool, String where) throws SQLException {
        Method m;
        try {
            m = cls.getMethod("setThreadFactory", ThreadFactory.class);
        } catch (NoSuchMethodException e) {
            return;
        }
        try {
            m.invoke(ds, LibraryThreads.factory("racaffinity-pool-" + pool, cls.getClassLoader()));
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new SQLNonTransientException("AffinityDataSource: cannot set the thread factory of " + where
                    + ": " + (e instanceof InvocationTargetException ? e.getCause() : e), "HY000");
        }
    }

    /**
     * The context class loader first (Tomcat: the driver in the application's WEB-INF/lib,
     * the library in lib/), then the library's own: an app server's own threads may have a
     * context loader that sees neither (WildFly's recovery thread has the transaction
     * manager's module, and after a restart it is the first to start an XA data source),
     * while the library's module also holds the driver.
     */
    private static Class<?> load(String className) throws ClassNotFoundException {
        ClassLoader own = NodeDataSourceFactory.class.getClassLoader();
        ClassLoader context = Thread.currentThread().getContextClassLoader();
        if (context != null && context != own) {
            try {
                return Class.forName(className, true, context);
            } catch (ClassNotFoundException e) {
                try {
                    return Class.forName(className, true, own);
                } catch (ClassNotFoundException notOurs) {
                    e.addSuppressed(notOurs);
                    throw e;
                }
            }
        }
        return Class.forName(className, true, own);
    }

    private static void set(
            Object ds, String where, List<String> setters, String what, String value, boolean secret, Redactor r)
            throws SQLException {
        for (String name : setters) {
            Method m = find(ds.getClass(), name);
            if (m != null) {
                invoke(ds, m, value, where, what, secret, r);
                return;
            }
        }
        throw new SQLNonTransientException("AffinityDataSource: cannot set the " + what + " of " + where
                + ": it has no public one-argument setter " + String.join(" / ", setters), "HY000");
    }

    private static Method find(Class<?> cls, String name) {
        Method best = null;
        for (Method m : cls.getMethods()) {
            if (m.getName().equals(name) && m.getParameterCount() == 1 && !Modifier.isStatic(m.getModifiers())) {
                if (m.getParameterTypes()[0] == String.class) {
                    return m;
                }
                if (convertible(m.getParameterTypes()[0])) {
                    best = m;
                }
            }
        }
        return best;
    }

    private static boolean convertible(Class<?> t) {
        return t == int.class || t == Integer.class || t == long.class || t == Long.class || t == boolean.class
                || t == Boolean.class || t == short.class || t == Short.class || t == double.class
                || t == Double.class || t == char[].class;
    }

    private static Object convert(Class<?> t, String v) {
        if (t == String.class) {
            return v;
        }
        if (t == int.class || t == Integer.class) {
            return Integer.valueOf(v.trim());
        }
        if (t == long.class || t == Long.class) {
            return Long.valueOf(v.trim());
        }
        if (t == short.class || t == Short.class) {
            return Short.valueOf(v.trim());
        }
        if (t == double.class || t == Double.class) {
            return Double.valueOf(v.trim());
        }
        if (t == char[].class) {
            return v.toCharArray();
        }
        String b = v.trim().toLowerCase(Locale.ROOT);
        if (b.equals("true") || b.equals("false")) {
            return Boolean.valueOf(b);
        }
        throw new IllegalArgumentException("expected true or false");
    }

    private static void invoke(Object ds, Method m, String value, String where, String what, boolean secret, Redactor r)
            throws SQLException {
        try {
            m.invoke(ds, convert(m.getParameterTypes()[0], value));
        } catch (InvocationTargetException e) {
            // A setter's own message may echo the value: never show it for secrets.
            throw new SQLNonTransientException("AffinityDataSource: " + m.getName() + " of " + where + " failed"
                    + (secret ? "" : ": " + r.redact(String.valueOf(e.getCause()))), "HY000");
        } catch (IllegalAccessException | IllegalArgumentException e) {
            throw new SQLNonTransientException("AffinityDataSource: cannot set the " + what + " of " + where
                    + " through " + m.getName() + "(" + m.getParameterTypes()[0].getSimpleName() + ")"
                    + (secret ? "" : ": " + r.redact(String.valueOf(e))), "HY000");
        }
    }
}
