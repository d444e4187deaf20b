package io.racaffinity.jdbc;

import java.security.AccessController;
import java.security.PrivilegedActionException;
import java.security.PrivilegedExceptionAction;
import io.racaffinity.LibraryThreads;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLTransientConnectionException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
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
    private static final AtomicLong BOUNDED_CONNECTS = new AtomicLong();

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

    /**
     * A connection of {@code ds} (the data source's credentials) within {@code millis}, whatever the
     * pool's own wait ({@code connectionTimeout}, 30 s by default in HikariCP): for a request that
     * must ask a node something before it can answer the application (the outcome check of a
     * replay), where a node that stays down must cost the check's deadline, not the pool's.
     * HikariCP is asked through its pool's own bounded borrow ({@code HikariPool.getConnection(long)},
     * by reflection: the jar depends on no pool), on the calling thread. Any other DataSource is
     * asked on a library thread of its own, whose wait is interrupted at the deadline (pools give a
     * wait up on an interrupt); a connection that comes after the deadline is closed.
     *
     * @param cluster the data source's cluster name, in the thread's name: the thread may outlive the call (a pool
     *     that ignores the interrupt), and a leak check must tell whose it is
     * @throws SQLTransientConnectionException (SQLState 08001) when none came in time
     */
    static Connection within(DataSource ds, String cluster, long millis) throws SQLException {
        Connection c = hikariWithin(ds, millis);
        if (c != null) {
            return c;
        }
        CompletableFuture<Connection> got = new CompletableFuture<>();
        Thread t = LibraryThreads.newThread(() -> {
            try {
                got.complete(ds.getConnection());
            } catch (Throwable e) {
                got.completeExceptionally(e);
            }
        }, "racaffinity-bounded-connect-" + cluster + "-" + BOUNDED_CONNECTS.incrementAndGet(),
                NodeConnect.class.getClassLoader());
        t.start();
        try {
            return got.get(millis, TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof SQLException s) {
                throw s;
            }
            throw new SQLException(String.valueOf(cause), "08001", cause);
        } catch (TimeoutException | InterruptedException e) {
            if (e instanceof InterruptedException) {
                Thread.currentThread().interrupt();
            }
            t.interrupt();
            got.thenAccept(NodeConnect::closeQuietly);
            throw new SQLTransientConnectionException("no connection within " + millis + " ms", "08001", e);
        }
    }

    /** HikariCP's bounded borrow, or null when {@code ds} is not a started HikariCP pool. */
    private static Connection hikariWithin(DataSource ds, long millis) throws SQLException {
        Object pool;
        Method borrow;
        try {
            pool = ds.getClass().getMethod("getHikariPoolMXBean").invoke(ds);
            if (pool == null) {
                return null;
            }
            borrow = pool.getClass().getMethod("getConnection", long.class);
        } catch (ReflectiveOperationException | LinkageError | RuntimeException e) {
            return null;
        }
        try {
            return (Connection) borrow.invoke(pool, Math.max(1, millis));
        } catch (InvocationTargetException e) {
            if (e.getCause() instanceof SQLException s) {
                throw s;
            }
            throw new SQLException(String.valueOf(e.getCause()), "08001", e.getCause());
        } catch (ReflectiveOperationException | LinkageError | ClassCastException e) {
            return null;
        }
    }

    private static void closeQuietly(Connection c) {
        try {
            if (c != null) {
                c.close();
            }
        } catch (SQLException | RuntimeException e) {
            // given up on already
        }
    }
}
