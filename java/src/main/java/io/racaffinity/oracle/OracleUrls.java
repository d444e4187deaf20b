package io.racaffinity.oracle;

import io.racaffinity.Cluster;
import io.racaffinity.InvalidArgumentException;
import java.util.Objects;

/**
 * Per-instance Oracle JDBC URLs (seed 000): each node pool connects with
 * {@code INSTANCE_NAME} set, so the listener does not load-balance the pool
 * away from its instance. The strings are built and validated by the core
 * ({@code racaffinity::connect}), the same code C and Python use: a value that
 * could break the descriptor syntax ({@code (}, {@code )}, {@code =}, spaces,
 * quotes, ...) throws {@link InvalidArgumentException}. ojdbc is not needed.
 *
 * <pre>{@code
 * OracleUrls.descriptorUrl("MYDBHOST1", 1522, "MYDB", "MYDB1")
 *   → jdbc:oracle:thin:@(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=MYDBHOST1)(PORT=1522)))
 *       (CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB1)))        (one line)
 * OracleUrls.easyConnectUrl("MYDBHOST1", 1522, "MYDB", "MYDB1")
 *   → jdbc:oracle:thin:@//MYDBHOST1:1522/MYDB/MYDB1
 * }</pre>
 */
public final class OracleUrls {
    static {
        // Loads libracaffinity (the same library the rest of the jar uses).
        Cluster.libraryVersion();
    }

    private static final int DESCRIPTOR = 0;
    private static final int EASY_CONNECT = 1;
    private static final int JDBC_DESCRIPTOR = 2;
    private static final int JDBC_EASY_CONNECT = 3;

    private OracleUrls() {}

    /**
     * {@code jdbc:oracle:thin:@(DESCRIPTION=...(INSTANCE_NAME=instance))}.
     *
     * @param host listener host
     * @param port listener port, 1..65535
     * @param service service name
     * @param instance instance name
     * @return the JDBC URL
     * @throws InvalidArgumentException if a value is invalid
     */
    public static String descriptorUrl(String host, int port, String service, String instance) {
        return build(JDBC_DESCRIPTOR, host, port, service, instance);
    }

    /**
     * {@code jdbc:oracle:thin:@//host:port/service/instance}.
     *
     * @param host listener host
     * @param port listener port, 1..65535
     * @param service service name
     * @param instance instance name
     * @return the JDBC URL
     * @throws InvalidArgumentException if a value is invalid
     */
    public static String easyConnectUrl(String host, int port, String service, String instance) {
        return build(JDBC_EASY_CONNECT, host, port, service, instance);
    }

    /**
     * The bare connect descriptor {@code (DESCRIPTION=...)} (for tnsnames or OCI).
     *
     * @param host listener host
     * @param port listener port, 1..65535
     * @param service service name
     * @param instance instance name
     * @return the descriptor
     * @throws InvalidArgumentException if a value is invalid
     */
    public static String descriptor(String host, int port, String service, String instance) {
        return build(DESCRIPTOR, host, port, service, instance);
    }

    /**
     * The bare Easy Connect string {@code host:port/service/instance}.
     *
     * @param host listener host
     * @param port listener port, 1..65535
     * @param service service name
     * @param instance instance name
     * @return the Easy Connect string
     * @throws InvalidArgumentException if a value is invalid
     */
    public static String easyConnect(String host, int port, String service, String instance) {
        return build(EASY_CONNECT, host, port, service, instance);
    }

    private static String build(int form, String host, int port, String service, String instance) {
        Objects.requireNonNull(host, "host");
        Objects.requireNonNull(service, "service");
        Objects.requireNonNull(instance, "instance");
        return connectString(form, host, port, service, instance);
    }

    /** Implemented in {@code rust/ffi/src/jni/connect.rs}; {@code form} is a {@code racaffinity_connect_form}. */
    private static native String connectString(int form, String host, int port, String service, String instance);
}
