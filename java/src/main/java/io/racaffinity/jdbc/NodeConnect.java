package io.racaffinity.jdbc;

import java.lang.ref.WeakReference;
import java.security.AccessController;
import java.security.PrivilegedActionException;
import java.security.PrivilegedExceptionAction;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.concurrent.ConcurrentHashMap;
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
    // Node DataSources that have given a connection, by identity; weak, so a closed data
    // source's pools go. A hash collision only means the privileged path once more.
    private static final ConcurrentHashMap<Integer, WeakReference<DataSource>> STARTED = new ConcurrentHashMap<>();

    private NodeConnect() {}

    static Connection open(DataSource ds, String username, String pass) throws SQLException {
        if (!INHERITS_CONTEXT) {
            return connect(ds, username, pass);
        }
        int id = System.identityHashCode(ds);
        WeakReference<DataSource> seen = STARTED.get(id);
        if (seen != null && seen.get() == ds) {
            return connect(ds, username, pass);
        }
        Connection c = privileged(ds, username, pass);
        STARTED.put(id, new WeakReference<>(ds));
        return c;
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
