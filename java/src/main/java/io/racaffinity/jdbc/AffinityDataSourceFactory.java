package io.racaffinity.jdbc;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.sql.SQLException;
import java.util.Enumeration;
import java.util.Hashtable;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.naming.Context;
import javax.naming.Name;
import javax.naming.NamingException;
import javax.naming.RefAddr;
import javax.naming.Reference;
import javax.naming.spi.ObjectFactory;

/**
 * A JNDI {@link ObjectFactory} that builds an {@link AffinityDataSource} (or, for
 * {@code type="javax.sql.XADataSource"}, an {@link AffinityXADataSource}) from a
 * resource's attributes, so an app server creates it without code. Tomcat:
 *
 * <pre>{@code
 * <Resource name="jdbc/rac" auth="Container" type="javax.sql.DataSource"
 *           factory="io.racaffinity.jdbc.AffinityDataSourceFactory" closeMethod="close"
 *           config="name = orcl; nodes = RAC1, RAC2, RAC3"
 *           urlTemplate="jdbc:oracle:thin:@//dbhost:1521/MYDB/{instance}"
 *           dataSourceClassName="com.zaxxer.hikari.HikariDataSource"
 *           user="scott" password="tiger"
 *           policy="least_outstanding" transactionStrict="true" sessionStrict="false"/>
 * }</pre>
 *
 * <p>Each attribute is, in this order:
 * <ol>
 *   <li>a bean property of the data source ({@code config}, {@code urlTemplate},
 *       {@code nodeUrlList}, {@code dataSourceClassName}, {@code dataSourcePropertyList},
 *       {@code user}, {@code password}, {@code heartbeatIntervalMillis}, {@code registerMBean},
 *       {@code transactionAffinity} (XA), ...), set through its setter;
 *   <li>a core config key, appended to {@code config}: written as the key itself
 *       ({@code transaction.strict="true"}, {@code node.RAC1.weight="2"}) or in camel case
 *       ({@code transactionStrict}, {@code sessionIdleTtl}, {@code healthEjectAfterFailures},
 *       {@code recoveryScope}, {@code topologyFeed}, {@code localMachine}, {@code localitySpillPercent},
 *       {@code policy}, {@code panic}, {@code nodes}, {@code database}, {@code service}, and
 *       {@code name}, the cluster's name: Tomcat keeps {@code <Resource name="jdbc/rac">} as the
 *       JNDI name and does not pass it here);
 *   <li>one of the container's own ({@code factory}, {@code type}, {@code auth}, {@code scope},
 *       {@code singleton}, {@code description}, {@code closeMethod}), ignored.
 * </ol>
 * Any other attribute is an error naming it. The data source is initialised before it is
 * returned, so a bad configuration fails the lookup with the core's message, led by the
 * attribute that gave the refused key ({@code attribute `transactionStrict`: invalid config
 * key `transaction.strict`: ...}).
 */
public class AffinityDataSourceFactory implements ObjectFactory {
    // Not `name`: Tomcat keeps a resource's name as its JNDI name (a bean property of its ContextResource) and
    // never passes it, so a `name` that reaches us is the user's, the core's cluster name key.
    private static final Set<String> CONTAINER = Set.of("factory", "type", "auth", "scope", "singleton",
            "description", "closemethod", "lookupname", "global");
    /** The key the core names in its config errors (rust/core/src/error.rs, {@code Error::Config}). */
    private static final Pattern CORE_KEY = Pattern.compile("invalid config key `([^`]*)`");
    /** Every section of the core's keys (rust/core/src/config.rs, KEYS): one missing here refuses its keys' camel case. */
    private static final List<String> SECTIONS = List.of("thread", "transaction", "session", "data", "health",
            "heartbeat", "recovery", "local", "locality", "topology");
    private static final Set<String> TOP_KEYS = Set.of("name", "database", "service", "nodes", "policy", "panic");

    @Override
    public Object getObjectInstance(Object obj, Name name, Context nameCtx, Hashtable<?, ?> environment)
            throws NamingException {
        if (!(obj instanceof Reference)) {
            return null;
        }
        Reference ref = (Reference) obj;
        String type = ref.getClassName();
        boolean xa;
        if (type == null || type.equals("javax.sql.DataSource") || type.equals(AffinityDataSource.class.getName())) {
            xa = false;
        } else if (type.equals("javax.sql.XADataSource") || type.equals(AffinityXADataSource.class.getName())) {
            xa = true;
        } else {
            return null; // not ours
        }
        Map<String, String> attributes = new LinkedHashMap<>();
        Enumeration<RefAddr> all = ref.getAll();
        while (all.hasMoreElements()) {
            RefAddr a = all.nextElement();
            if (a.getType() != null && a.getContent() != null) {
                attributes.put(a.getType(), a.getContent().toString());
            }
        }
        String where = name != null ? name.toString() : "(unnamed)";
        try {
            return create(attributes, xa);
        } catch (SQLException | RuntimeException e) {
            NamingException ne = new NamingException("AffinityDataSourceFactory " + where + ": " + e.getMessage());
            ne.setRootCause(e);
            throw ne;
        }
    }

    /**
     * Builds and initialises a data source from attributes (see the class comment).
     *
     * @param attributes attribute name → value
     * @param xa an {@link AffinityXADataSource} instead of an {@link AffinityDataSource}
     * @return the data source
     * @throws SQLException if an attribute is unknown or the configuration is invalid
     */
    public static Object create(Map<String, String> attributes, boolean xa) throws SQLException {
        Object ds = xa ? new AffinityXADataSource() : new AffinityDataSource();
        String config = null;
        StringBuilder keys = new StringBuilder();
        Map<String, String> written = new LinkedHashMap<>(); // core key (lower case) → the attribute(s) giving it
        for (Map.Entry<String, String> e : attributes.entrySet()) {
            String attr = e.getKey().trim();
            String value = e.getValue();
            if (attr.isEmpty()) {
                // Not the value: it may be a password whose name was lost.
                throw new java.sql.SQLNonTransientException("an attribute without a name: each is a property of "
                        + ds.getClass().getSimpleName() + " or a config key", "HY000");
            }
            if (CONTAINER.contains(attr.toLowerCase(Locale.ROOT))) {
                continue;
            }
            // Before the setter lookup, which matches case-insensitively: `Config` must not reach setConfig and
            // then be overwritten by the config keys appended below.
            if (attr.equalsIgnoreCase("config")) {
                config = value;
                continue;
            }
            Method setter = setter(ds.getClass(), attr);
            if (setter != null) {
                set(ds, setter, attr, value);
                continue;
            }
            String key = configKey(attr);
            if (key == null) {
                throw new java.sql.SQLNonTransientException("unknown attribute `" + attr + "`: not a property of "
                        + ds.getClass().getSimpleName() + " nor a config key (see the README's configuration table)",
                        "HY000");
            }
            if (value.indexOf('\n') >= 0 || value.indexOf(';') >= 0) {
                throw new java.sql.SQLNonTransientException("attribute `" + attr + "`: a config value must not"
                        + " contain a newline or `;`", "HY000");
            }
            keys.append(key).append(" = ").append(value.trim()).append('\n');
            written.merge(key.toLowerCase(Locale.ROOT), "`" + attr + "`", (a, b) -> a + ", " + b);
        }
        try {
            return init(ds, xa, config, keys);
        } catch (SQLException e) {
            throw namingTheAttribute(e, written);
        }
    }

    private static Object init(Object ds, boolean xa, String config, StringBuilder keys) throws SQLException {
        if (config != null || keys.length() > 0) {
            String text = (config == null ? "" : config + "\n") + keys;
            if (xa) {
                ((AffinityXADataSource) ds).setConfig(text);
            } else {
                ((AffinityDataSource) ds).setConfig(text);
            }
        }
        if (xa) {
            ((AffinityXADataSource) ds).init();
        } else {
            ((AffinityDataSource) ds).init();
        }
        return ds;
    }

    /**
     * The core names the key it refused, which for a camel-case attribute is not what the user wrote: lead with
     * the attribute (the core's message, key and reason, follows).
     */
    private static SQLException namingTheAttribute(SQLException e, Map<String, String> written) {
        Matcher m = CORE_KEY.matcher(String.valueOf(e.getMessage()));
        String attrs = m.find() ? written.get(m.group(1).toLowerCase(Locale.ROOT)) : null;
        if (attrs == null) {
            return e;
        }
        return new java.sql.SQLNonTransientException((attrs.indexOf(',') > 0 ? "attributes " : "attribute ") + attrs
                + ": " + e.getMessage(), e.getSQLState(), e.getErrorCode(), e);
    }

    /** {@code transactionStrict} → {@code transaction.strict}; {@code node.X.weight} as is; else null. */
    static String configKey(String attr) {
        if (attr.indexOf('.') > 0) {
            return attr;
        }
        if (TOP_KEYS.contains(attr)) {
            return attr;
        }
        for (String s : SECTIONS) {
            if (attr.startsWith(s) && attr.length() > s.length() && Character.isUpperCase(attr.charAt(s.length()))) {
                StringBuilder k = new StringBuilder(s).append('.');
                String rest = attr.substring(s.length());
                for (int i = 0; i < rest.length(); i++) {
                    char c = rest.charAt(i);
                    if (Character.isUpperCase(c)) {
                        if (i > 0) {
                            k.append('_');
                        }
                        k.append(Character.toLowerCase(c));
                    } else {
                        k.append(c);
                    }
                }
                return k.toString();
            }
        }
        return null;
    }

    private static Method setter(Class<?> cls, String attr) {
        String name = "set" + Character.toUpperCase(attr.charAt(0)) + attr.substring(1);
        Method best = null;
        for (Method m : cls.getMethods()) {
            if (!m.getName().equalsIgnoreCase(name) || m.getParameterCount() != 1
                    || Modifier.isStatic(m.getModifiers())) {
                continue;
            }
            Class<?> t = m.getParameterTypes()[0];
            if (t == String.class) {
                return m;
            }
            if (t == int.class || t == long.class || t == boolean.class) {
                best = m;
            }
        }
        return best;
    }

    private static void set(Object ds, Method m, String attr, String value) throws SQLException {
        Class<?> t = m.getParameterTypes()[0];
        Object v;
        try {
            if (t == String.class) {
                v = value;
            } else if (t == int.class) {
                v = Integer.valueOf(value.trim());
            } else if (t == long.class) {
                v = Long.valueOf(value.trim());
            } else {
                String b = value.trim().toLowerCase(Locale.ROOT);
                if (!b.equals("true") && !b.equals("false")) {
                    throw new IllegalArgumentException("expected true or false");
                }
                v = Boolean.valueOf(b);
            }
        } catch (IllegalArgumentException e) {
            throw new java.sql.SQLNonTransientException("attribute `" + attr + "`: bad value for "
                    + t.getSimpleName() + (attr.toLowerCase(Locale.ROOT).contains("password") ? "" : ": " + value),
                    "HY000");
        }
        try {
            m.invoke(ds, v);
        } catch (InvocationTargetException e) {
            Throwable c = e.getCause();
            if (c instanceof SQLException) {
                throw (SQLException) c;
            }
            throw new java.sql.SQLNonTransientException("attribute `" + attr + "`: " + c.getMessage(), "HY000", c);
        } catch (IllegalAccessException e) {
            throw new java.sql.SQLNonTransientException("attribute `" + attr + "`: " + e, "HY000");
        }
    }
}
