package io.racaffinity.appservers.webapp;

import jakarta.servlet.annotation.WebServlet;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import javax.naming.InitialContext;
import javax.naming.NamingException;
import javax.sql.DataSource;

/**
 * The continuity run's request (TomcatContinuityTest): one transaction, auto-commit off, that
 * inserts the request's id and reads it back, as an application would write an order and
 * read what it wrote. It reads nothing that depends on the node (no {@code inet_server_port()}:
 * a replay on another node would read another value and be abandoned, by design), so the
 * test finds the session's node by asking each node which holds the last id. A failure
 * answers 500 with the exception and every cause and suppressed exception, so the test can
 * tell a replay refusal (its {@code refusal()}) from any other error.
 */
@WebServlet("/tx")
public class TxServlet extends HttpServlet {
    private static final long serialVersionUID = 1L;

    @Override
    protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
        String id = req.getParameter("id");
        if (id == null || id.isEmpty()) {
            resp.sendError(400, "id missing");
            return;
        }
        try {
            // retry=1: the mutant of the continuity run, an application that runs the request
            // again after any SQLException, with no commit-outcome guard: a COMMIT whose reply
            // was lost commits twice, and the run's exactly-once check must say so.
            if (!transaction(id, resp, "1".equals(req.getParameter("retry")))) {
                resp.reset();
                transaction(id, resp, false);
            }
        } finally {
            // Tells the test whether the library left this worker thread interrupted (its
            // fast connection failover interrupts threads waiting on a failed node's pool):
            // the next request Tomcat runs on it would find its waits cut short. Cleared
            // here so that one finding does not spread to later requests.
            if (Thread.interrupted()) {
                resp.setHeader("X-Thread-Interrupted", "true");
            }
        }
    }

    /** @return false when {@code retryable} and an SQLException ended it (nothing written then) */
    private static boolean transaction(String id, HttpServletResponse resp, boolean retryable) throws IOException {
        try {
            DataSource ds = (DataSource) new InitialContext().lookup("java:comp/env/jdbc/rac");
            try (Connection c = ds.getConnection()) {
                c.setAutoCommit(false);
                try (PreparedStatement ins = c.prepareStatement("insert into continuity_requests (id) values (?)")) {
                    ins.setString(1, id);
                    ins.executeUpdate();
                }
                String read;
                try (PreparedStatement sel = c.prepareStatement("select id from continuity_requests where id = ?")) {
                    sel.setString(1, id);
                    try (ResultSet rs = sel.executeQuery()) {
                        read = rs.next() ? rs.getString(1) : null;
                    }
                }
                if (!id.equals(read)) {
                    c.rollback();
                    resp.sendError(500, "read back " + read + " for " + id);
                    return true;
                }
                c.commit();
            }
            resp.setContentType("text/plain");
            resp.getWriter().print("ok");
        } catch (SQLException e) {
            if (retryable) {
                return false;
            }
            resp.setStatus(500);
            resp.setContentType("text/plain");
            resp.getWriter().print(chain(e));
        } catch (NamingException e) {
            resp.setStatus(500);
            resp.setContentType("text/plain");
            resp.getWriter().print(chain(e));
        }
        return true;
    }

    /** The exception, its causes and suppressed exceptions, one per line. */
    static String chain(Throwable t) {
        StringBuilder sb = new StringBuilder();
        java.util.Set<Throwable> seen = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        java.util.ArrayDeque<Throwable> todo = new java.util.ArrayDeque<>();
        todo.add(t);
        while (!todo.isEmpty()) {
            Throwable x = todo.poll();
            if (!seen.add(x)) {
                continue;
            }
            sb.append(x).append('\n');
            if (x.getCause() != null) {
                todo.add(x.getCause());
            }
            for (Throwable s : x.getSuppressed()) {
                todo.add(s);
            }
        }
        return sb.toString();
    }
}
