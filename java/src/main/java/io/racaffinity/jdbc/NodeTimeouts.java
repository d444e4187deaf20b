package io.racaffinity.jdbc;

import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * The timeouts the data sources give the node pools they build from URLs, unless the user
 * set them (docs/java-datasource.md, "Node timeouts"). With the drivers' own defaults a call
 * on a node whose server stops answering while the connection stays open (a stopped or
 * swapped-out server, a dropped route) blocks until the server comes back: pgjdbc's
 * {@code socketTimeout} and Oracle's {@code oracle.jdbc.ReadTimeout} are 0 (none).
 *
 * <p>pgjdbc takes them as URL parameters, which every pool passes on (HikariCP's
 * {@code jdbcUrl}, pgjdbc's own data sources' {@code setUrl}, {@code DriverManager});
 * Oracle's are connection properties, in milliseconds.
 */
final class NodeTimeouts {
    static final int CONNECT_TIMEOUT_SECONDS = 10;
    static final int LOGIN_TIMEOUT_SECONDS = 10;
    static final int SOCKET_TIMEOUT_SECONDS = 30;

    static final String ORACLE_CONNECT_TIMEOUT = "oracle.net.CONNECT_TIMEOUT";
    static final String ORACLE_READ_TIMEOUT = "oracle.jdbc.ReadTimeout";

    private NodeTimeouts() {}

    static boolean isPgjdbc(String url) {
        return url.regionMatches(true, 0, "jdbc:postgresql:", 0, "jdbc:postgresql:".length());
    }

    static boolean isOracle(String url) {
        return url.regionMatches(true, 0, "jdbc:oracle:", 0, "jdbc:oracle:".length());
    }

    /**
     * @param url a node URL
     * @param properties the bean's {@code dataSourceProperties} (setters of the node pool)
     * @return {@code url} with pgjdbc's {@code connectTimeout}, {@code loginTimeout} and
     *     {@code socketTimeout} (seconds) added, each unless the URL or the properties set it;
     *     any other URL unchanged
     */
    static String pgjdbcUrl(String url, Map<String, String> properties) {
        return pgjdbcUrl(url, properties, 0);
    }

    /**
     * {@link #pgjdbcUrl(String, Map)} with the data source's {@code loginTimeout}.
     *
     * @param loginSeconds the data source's {@code loginTimeout}; 0 for the default
     */
    static String pgjdbcUrl(String url, Map<String, String> properties, int loginSeconds) {
        if (!isPgjdbc(url)) {
            return url;
        }
        Set<String> set = setKeys(url, properties);
        StringBuilder sb = new StringBuilder(url);
        char sep = url.indexOf('?') < 0 ? '?' : '&';
        if (url.endsWith("?") || url.endsWith("&")) {
            sep = 0;
        }
        Map<String, Integer> defaults = new LinkedHashMap<>();
        defaults.put("connectTimeout", CONNECT_TIMEOUT_SECONDS);
        defaults.put("loginTimeout", loginSeconds > 0 ? loginSeconds : LOGIN_TIMEOUT_SECONDS);
        defaults.put("socketTimeout", SOCKET_TIMEOUT_SECONDS);
        for (Map.Entry<String, Integer> d : defaults.entrySet()) {
            if (!set.contains(d.getKey().toLowerCase(Locale.ROOT))) {
                if (sep != 0) {
                    sb.append(sep);
                }
                sb.append(d.getKey()).append('=').append(d.getValue());
                sep = '&';
            }
        }
        return sb.toString();
    }

    /**
     * @param url a node URL
     * @param properties the bean's {@code dataSourceProperties}
     * @return for an Oracle URL, the connection properties {@code oracle.net.CONNECT_TIMEOUT}
     *     and {@code oracle.jdbc.ReadTimeout} (milliseconds) that neither the URL (Oracle 19c+
     *     takes connection properties after {@code ?}) nor the properties set; else none
     */
    static Map<String, String> oracleProperties(String url, Map<String, String> properties) {
        return oracleProperties(url, properties, 0);
    }

    /**
     * {@link #oracleProperties(String, Map)} with the data source's {@code loginTimeout}, which is
     * Oracle's connect timeout (it bounds the login as well).
     *
     * @param loginSeconds the data source's {@code loginTimeout}; 0 for the default
     */
    static Map<String, String> oracleProperties(String url, Map<String, String> properties, int loginSeconds) {
        Map<String, String> out = new LinkedHashMap<>();
        if (!isOracle(url)) {
            return out;
        }
        Set<String> set = setKeys(url, properties);
        if (!set.contains(ORACLE_CONNECT_TIMEOUT.toLowerCase(Locale.ROOT))) {
            out.put(ORACLE_CONNECT_TIMEOUT,
                    Long.toString((loginSeconds > 0 ? loginSeconds : CONNECT_TIMEOUT_SECONDS) * 1000L));
        }
        if (!set.contains(ORACLE_READ_TIMEOUT.toLowerCase(Locale.ROOT))) {
            out.put(ORACLE_READ_TIMEOUT, Long.toString(SOCKET_TIMEOUT_SECONDS * 1000L));
        }
        return out;
    }

    /** Lower-cased names of the URL's query parameters and of the properties. */
    private static Set<String> setKeys(String url, Map<String, String> properties) {
        Set<String> keys = new TreeSet<>();
        int q = url.indexOf('?');
        if (q >= 0) {
            for (String p : url.substring(q + 1).split("&")) {
                int eq = p.indexOf('=');
                keys.add((eq < 0 ? p : p.substring(0, eq)).trim().toLowerCase(Locale.ROOT));
            }
        }
        for (String k : properties.keySet()) {
            keys.add(k.trim().toLowerCase(Locale.ROOT));
        }
        return keys;
    }
}
