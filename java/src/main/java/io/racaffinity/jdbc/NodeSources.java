package io.racaffinity.jdbc;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import java.lang.reflect.Array;
import java.sql.SQLException;
import java.sql.SQLNonTransientException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.function.Consumer;
import javax.naming.InitialContext;
import javax.naming.NamingException;

/**
 * The bean configuration that {@link AffinityDataSource} and {@link AffinityXADataSource}
 * share (the cluster, where the node data sources come from, credentials, heartbeat and
 * failure detection) and the resolution of the node data sources from it. The beans keep
 * their own public setters, which delegate here, so that both stay plain JavaBeans for
 * JNDI factories and app-server configuration.
 *
 * @param <T> the node data source type, {@code DataSource} or {@code XADataSource}
 */
final class NodeSources<T> {
    private final String owner;
    private final Class<T> type;
    private final String givenProperty;
    private final String urlsNeedClassName;
    private final Runnable checkNotStarted;

    private String config;
    private Cluster cluster;
    private Map<String, T> given;
    private Map<String, String> nodeJndiNames;
    private Properties jndiEnvironment;
    private Map<String, String> nodeUrls;
    private String urlTemplate;
    private String dataSourceClassName;
    private final Map<String, String> dataSourceProperties = new LinkedHashMap<>();
    private String user;
    private String password;
    private int loginTimeout;
    private long heartbeatIntervalMillis = -1;
    private int heartbeatTimeoutSeconds = 5;
    private boolean registerMBean = true;
    private volatile List<String> nodeFailureStates = SqlErrors.DEFAULT_NODE_FAILURE_STATES;

    /**
     * @param owner the bean's class name, for messages
     * @param type the node data source type
     * @param givenProperty the bean property of application-built node data sources
     * @param urlsNeedClassName why node URLs need a class name, or null when they fall back to
     *     {@link DriverDataSource}
     * @param checkNotStarted throws once the bean is initialised, before every setter
     */
    NodeSources(String owner, Class<T> type, String givenProperty, String urlsNeedClassName,
            Runnable checkNotStarted) {
        this.owner = owner;
        this.type = type;
        this.givenProperty = givenProperty;
        this.urlsNeedClassName = urlsNeedClassName;
        this.checkNotStarted = checkNotStarted;
    }

    // ---- properties -----------------------------------------------------------

    void setConfig(String config) {
        checkNotStarted.run();
        this.config = config;
    }

    String getConfig() {
        return config;
    }

    void setCluster(Cluster cluster) {
        checkNotStarted.run();
        this.cluster = cluster;
    }

    /** @return the cluster given to the bean, or null */
    Cluster givenCluster() {
        return cluster;
    }

    void setGiven(Map<String, ? extends T> given) {
        checkNotStarted.run();
        this.given = given == null ? null : new LinkedHashMap<>(given);
    }

    void setNodeJndiNames(Map<String, String> nodeJndiNames) {
        checkNotStarted.run();
        this.nodeJndiNames = nodeJndiNames == null ? null : new LinkedHashMap<>(nodeJndiNames);
    }

    void setNodeJndiNameList(String list) {
        setNodeJndiNames(ListProperty.parse(list, "nodeJndiNameList"));
    }

    void setJndiEnvironment(Properties env) {
        checkNotStarted.run();
        this.jndiEnvironment = env;
    }

    void setNodeUrls(Map<String, String> nodeUrls) {
        checkNotStarted.run();
        this.nodeUrls = nodeUrls == null ? null : new LinkedHashMap<>(nodeUrls);
    }

    void setNodeUrlList(String list) {
        setNodeUrls(ListProperty.parse(list, "nodeUrlList"));
    }

    void setUrlTemplate(String urlTemplate) {
        checkNotStarted.run();
        this.urlTemplate = urlTemplate;
    }

    String getUrlTemplate() {
        return urlTemplate;
    }

    void setDataSourceClassName(String className) {
        checkNotStarted.run();
        this.dataSourceClassName = className;
    }

    String getDataSourceClassName() {
        return dataSourceClassName;
    }

    void setDataSourceProperties(Properties properties) {
        checkNotStarted.run();
        dataSourceProperties.clear();
        if (properties != null) {
            for (String k : properties.stringPropertyNames()) {
                dataSourceProperties.put(k, properties.getProperty(k));
            }
        }
    }

    void setDataSourcePropertyList(String list) {
        checkNotStarted.run();
        dataSourceProperties.clear();
        Map<String, String> m = ListProperty.parse(list, "dataSourcePropertyList");
        if (m != null) {
            dataSourceProperties.putAll(m);
        }
    }

    Map<String, String> dataSourceProperties() {
        return dataSourceProperties;
    }

    void setUser(String user) {
        checkNotStarted.run();
        this.user = user;
    }

    void setPassword(String password) {
        checkNotStarted.run();
        this.password = password;
    }

    void setLoginTimeout(int seconds) {
        checkNotStarted.run();
        if (seconds < 0) {
            throw new IllegalArgumentException("loginTimeout must be >= 0 (0: the default, 10 s)");
        }
        this.loginTimeout = seconds;
    }

    int loginTimeout() {
        return loginTimeout;
    }

    void setHeartbeatIntervalMillis(long millis) {
        checkNotStarted.run();
        if (millis < -1) {
            // Only -1 means "the config's": -5 is a typo, which would otherwise silently probe at the config's period.
            throw new IllegalArgumentException("heartbeatIntervalMillis must be -1 (the config's heartbeat.interval),"
                    + " 0 (no heartbeat) or a period in milliseconds, got " + millis);
        }
        this.heartbeatIntervalMillis = millis;
    }

    long getHeartbeatIntervalMillis() {
        return heartbeatIntervalMillis;
    }

    void setHeartbeatTimeoutSeconds(int seconds) {
        checkNotStarted.run();
        if (seconds < 0) {
            // isValid(-1) throws: every heartbeat probe would miss and mark every node Down.
            throw new IllegalArgumentException("heartbeatTimeoutSeconds must be >= 0 (0: no timeout), got " + seconds);
        }
        this.heartbeatTimeoutSeconds = seconds;
    }

    int heartbeatTimeoutSeconds() {
        return heartbeatTimeoutSeconds;
    }

    void setRegisterMBean(boolean register) {
        checkNotStarted.run();
        this.registerMBean = register;
    }

    boolean registerMBean() {
        return registerMBean;
    }

    void setNodeFailureSqlStates(String prefixes) {
        checkNotStarted.run();
        if (prefixes == null) {
            throw new IllegalArgumentException("nodeFailureSqlStates must not be null (an empty list: no SQLState"
                    + " reports a node failure, only a SQLRecoverableException)");
        }
        List<String> l = new ArrayList<>();
        for (String p : prefixes.split(",")) {
            if (!p.isBlank()) {
                l.add(p.trim());
            }
        }
        this.nodeFailureStates = List.copyOf(l);
    }

    List<String> nodeFailureStates() {
        return nodeFailureStates;
    }

    // ---- use ------------------------------------------------------------------

    /** @return the node data source type's simple name, for messages */
    String typeName() {
        return type.getSimpleName();
    }

    /**
     * Settings that another setting overrides (HikariCP warns likewise about conflicting
     * settings): the data source still starts, from the first node source in the order of
     * {@link #resolve}, and each line says which one was ignored.
     *
     * @return one line per ignored setting; empty when nothing conflicts
     */
    List<String> overridden() {
        List<String> w = new ArrayList<>();
        List<String> set = new ArrayList<>();
        if (given != null) {
            set.add(givenProperty);
        }
        if (nodeJndiNames != null) {
            set.add("nodeJndiNames");
        }
        if (nodeUrls != null || urlTemplate != null) {
            set.add(nodeUrls != null ? "nodeUrls" : "urlTemplate");
        }
        if (set.size() > 1) {
            w.add("several node sources are set (" + String.join(", ", set) + "): " + set.get(0)
                    + " is used, " + String.join(" and ", set.subList(1, set.size())) + " ignored");
        }
        if (cluster != null && config != null) {
            w.add("both cluster and config are set: the given cluster is used, config ignored");
        }
        if (given != null || nodeJndiNames != null) {
            List<String> unused = new ArrayList<>();
            if (dataSourceClassName != null) {
                unused.add("dataSourceClassName");
            }
            if (!dataSourceProperties.isEmpty()) {
                unused.add("dataSourceProperties");
            }
            if (user != null || password != null) {
                unused.add("user/password");
            }
            if (loginTimeout > 0) {
                unused.add("loginTimeout");
            }
            if (!unused.isEmpty()) {
                w.add(String.join(", ", unused) + " only apply to node URLs, and the nodes come from "
                        + set.get(0) + ": ignored");
            }
        }
        return w;
    }

    /** @return a redactor of the configured password */
    Redactor redactor() {
        return new Redactor(password);
    }

    /**
     * Builds the cluster from the config, or without one from the node map's keys.
     *
     * @return the new cluster, which the caller owns
     * @throws SQLException if there are no nodes or the config is invalid
     */
    Cluster newCluster() throws SQLException {
        String text = config;
        if (text == null) {
            Map<String, ?> m = given != null ? given : nodeJndiNames != null ? nodeJndiNames : nodeUrls;
            if (m == null || m.isEmpty()) {
                throw new SQLNonTransientException(owner + ": no nodes: set config (with `nodes = ...`), or "
                        + givenProperty + ", nodeJndiNames or nodeUrls", "HY000");
            }
            text = "nodes = " + String.join(", ", m.keySet());
        }
        try {
            return Cluster.fromConfig(text);
        } catch (AffinityException e) {
            throw SqlErrors.routing(e);
        }
    }

    /** @return the heartbeat period in milliseconds for {@code c} (0: none) */
    long heartbeatInterval(Cluster c) {
        return heartbeatIntervalMillis < 0 ? c.heartbeatInterval().toMillis() : heartbeatIntervalMillis;
    }

    /**
     * Resolves one node data source per node of {@code c}.
     *
     * @param c the cluster
     * @param redactor masks credentials in messages
     * @param created receives each node data source built from a URL (which the bean then owns)
     * @return the node data sources by node id
     * @throws SQLException if a node has none, or one names no node of the cluster
     */
    T[] resolve(Cluster c, Redactor redactor, Consumer<? super T> created) throws SQLException {
        int[] ids = c.nodeIds();
        int max = -1;
        for (int id : ids) {
            max = Math.max(max, id);
        }
        @SuppressWarnings("unchecked")
        T[] byId = (T[]) Array.newInstance(type, max + 1);
        String kind = type.getSimpleName();
        String where = owner + " " + c.name() + ": ";
        List<String> names = new ArrayList<>();
        for (int id : ids) {
            names.add(c.nodeName(id));
        }
        String source;
        Map<String, ?> entries;
        if (given != null) {
            source = givenProperty;
            entries = given;
        } else if (nodeJndiNames != null) {
            source = "nodeJndiNames";
            entries = nodeJndiNames;
        } else if (nodeUrls != null || urlTemplate != null) {
            source = "nodeUrls";
            entries = nodeUrls == null ? Map.of() : nodeUrls;
            if (urlsNeedClassName != null && dataSourceClassName == null) {
                throw new SQLNonTransientException(where + urlsNeedClassName, "HY000");
            }
        } else {
            throw new SQLNonTransientException(where + "no node " + kind + "s: set " + givenProperty
                    + ", nodeJndiNames, nodeUrls or urlTemplate", "HY000");
        }
        Map<String, Object> lookup = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
        for (Map.Entry<String, ?> e : entries.entrySet()) {
            // Node names match case-insensitively: two keys for one node would leave one of them unused, silently.
            if (lookup.containsKey(e.getKey())) {
                List<String> same = new ArrayList<>();
                for (String k : entries.keySet()) {
                    if (k.equalsIgnoreCase(e.getKey())) {
                        same.add("`" + k + "`");
                    }
                }
                throw new SQLNonTransientException(where + source + " names one node more than once: "
                        + String.join(", ", same), "HY000");
            }
            lookup.put(e.getKey(), e.getValue());
        }
        for (String k : entries.keySet()) {
            if (names.stream().noneMatch(k::equalsIgnoreCase)) {
                throw new SQLNonTransientException(where + source + " names `" + k
                        + "`, which is not a node of the cluster (nodes: " + names + ")", "HY000");
            }
        }
        InitialContext jndi = null;
        try {
            for (int i = 0; i < ids.length; i++) {
                String node = names.get(i);
                Object v = lookup.get(node);
                T ds;
                if (given != null || v == null && nodeJndiNames != null) {
                    ds = type.cast(v);
                } else if (nodeJndiNames != null) {
                    if (jndi == null) {
                        jndi = jndiEnvironment == null ? new InitialContext() : new InitialContext(jndiEnvironment);
                    }
                    Object o = jndi.lookup((String) v);
                    if (!type.isInstance(o)) {
                        throw new SQLNonTransientException(where + "JNDI name " + v + " of node " + node + " is a "
                                + (o == null ? "null" : o.getClass().getName()) + ", not "
                                // "an XADataSource": X reads "ex".
                                + (kind.startsWith("X") ? "an " : "a ") + kind, "HY000");
                    }
                    ds = type.cast(o);
                } else {
                    ds = fromUrl(c, node, (String) v, redactor);
                    if (ds != null) {
                        created.accept(ds);
                    }
                }
                if (ds == null) {
                    throw new SQLNonTransientException(where + "node " + node + " has no entry in " + source,
                            "HY000");
                }
                byId[ids[i]] = ds;
            }
        } catch (NamingException e) {
            throw new SQLNonTransientException(where + "JNDI lookup of a node " + kind + " failed: "
                    + redactor.redact(String.valueOf(e)), "HY000", e);
        } finally {
            if (jndi != null) {
                try {
                    jndi.close();
                } catch (NamingException e) {
                    // nothing to do
                }
            }
        }
        return byId;
    }

    private T fromUrl(Cluster c, String node, String url, Redactor redactor) throws SQLException {
        if (url != null && url.isBlank()) {
            // Spring's `node-urls.X=` binds "": a pool would only say "jdbcUrl is required" at the first use
            throw new SQLNonTransientException(owner + " " + c.name() + ": nodeUrls gives node " + node
                    + " an empty URL", "HY000");
        }
        if (url == null) {
            if (urlTemplate == null) {
                return null;
            }
            try {
                url = AffinityDataSource.instanceUrl(urlTemplate, node);
            } catch (IllegalArgumentException e) {
                throw new SQLNonTransientException(owner + " " + c.name() + ": " + e.getMessage(), "HY000");
            }
        }
        // Bounded calls on a node that stops answering, unless the user chose otherwise.
        Map<String, String> driverProperties = NodeTimeouts.oracleProperties(url, dataSourceProperties,
                loginTimeout);
        url = NodeTimeouts.pgjdbcUrl(url, dataSourceProperties, loginTimeout);
        if (dataSourceClassName == null) {
            return type.cast(new DriverDataSource(url, user, password, driverProperties));
        }
        return NodeDataSourceFactory.create(type, dataSourceClassName, c.name(), node, url, user, password,
                dataSourceProperties, driverProperties, redactor);
    }

    /**
     * Appends where the nodes come from, credentials masked, to a bean's {@code toString()}.
     *
     * @param sb the description
     * @param r masks credentials
     * @param classNameProperty the bean's name for {@code dataSourceClassName}
     * @return whether the nodes come from URLs
     */
    boolean describe(StringBuilder sb, Redactor r, String classNameProperty) {
        if (given != null) {
            sb.append(", ").append(givenProperty).append('=').append(given.keySet());
            return false;
        }
        if (nodeJndiNames != null) {
            sb.append(", nodeJndiNames=").append(nodeJndiNames);
            return false;
        }
        if (nodeUrls != null) {
            Map<String, String> shown = new LinkedHashMap<>();
            nodeUrls.forEach((k, v) -> shown.put(k, r.redact(v)));
            sb.append(", nodeUrls=").append(shown);
        }
        if (urlTemplate != null) {
            sb.append(", urlTemplate=").append(r.redact(urlTemplate));
        }
        if (dataSourceClassName != null) {
            sb.append(", ").append(classNameProperty).append('=').append(dataSourceClassName);
        }
        return true;
    }

    /** @return whether a user or password is set */
    boolean hasCredentials() {
        return user != null || password != null;
    }
}
