package io.racaffinity.jdbc;

import java.security.AccessController;
import java.security.PrivilegedActionException;
import java.security.PrivilegedExceptionAction;
import java.sql.Connection;
import java.sql.SQLException;
import javax.sql.DataSource;

/**
 * Asks a node's pool for a connection with the caller's stack cut off. Before Java 24 a
 * thread inherits the protection domains of every class on its creator's stack, and
 * each names its class loader: the threads a pool or driver starts lazily inside this
 * call (HikariCP starts its pool on the first call, whose fail-fast connection starts
 * pgjdbc's cleaner thread) would keep the calling web application's class loader for as
 * long as they live (issue 17: a Tomcat redeploy leaked one loader so). In a privileged
 * block only the frames from here on count.
 *
 * <p>The block costs about as much as a pooled borrow itself (NodeConnectTiming, about
 * 1.5x on Java 17), so it wraps only a node DataSource's first successful call: a pool
 * starts its threads then, and creates later connections on its own threads. A plain
 * (unpooled) DataSource is wrapped on its first call only too; its later calls open a
 * connection each, which dwarfs any thread start. From Java 24 on there is nothing to cut.
 */
final class NodeConnect {
    private static final boolean INHERITS_CONTEXT = Runtime.version().feature() < 24;

    private NodeConnect() {}

    /**
     * @param started whether this node DataSource has given the caller a connection before
     *     (the caller keeps the flag per node: a plain read on the hot path, where a shared
     *     identity map cost about 5% of a pooled borrow)
     */
    static Connection open(DataSource ds, boolean started, String username, String pass) throws SQLException {
        if (started || !INHERITS_CONTEXT) {
            return connect(ds, username, pass);
        }
        return privileged(ds, username, pass);
    }

    private static Connection connect(DataSource ds, String username, String pass) throws SQLException {
        return username == null ? ds.getConnection() : ds.getConnection(username, pass);
    }

    @SuppressWarnings("removal") // AccessController: still what cuts the inherited context before Java 24
    private static Connection privileged(DataSource ds, String username, String pass) throws SQLException {
        try {
            return AccessController.doPrivileged((PrivilegedExceptionAction<Connection>) () ->
                    connect(ds, username, pass));
        } catch (PrivilegedActionException e) {
            Exception cause = e.getException();
            if (cause instanceof SQLException s) {
                throw s;
            }
            throw new SQLException(cause.getMessage(), cause); // getConnection declares only SQLException
        }
    }
}
