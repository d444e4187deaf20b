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
 * call (pgjdbc's cleaner, started with the first connection) would keep the calling web
 * application's class loader for as long as they live (issue 17: a Tomcat redeploy leaked
 * one loader through pgjdbc's thread). In a privileged block only the frames from here on
 * count. From Java 24 on the block is a plain call.
 */
final class NodeConnect {
    private NodeConnect() {}

    @SuppressWarnings("removal") // AccessController: still what cuts the inherited context before Java 24
    static Connection open(DataSource ds, String username, String pass) throws SQLException {
        try {
            return AccessController.doPrivileged((PrivilegedExceptionAction<Connection>) () ->
                    username == null ? ds.getConnection() : ds.getConnection(username, pass));
        } catch (PrivilegedActionException e) {
            Exception cause = e.getException();
            if (cause instanceof SQLException s) {
                throw s;
            }
            throw new SQLException(cause.getMessage(), cause); // getConnection declares only SQLException
        }
    }
}
