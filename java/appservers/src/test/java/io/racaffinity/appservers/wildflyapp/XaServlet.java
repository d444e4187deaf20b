package io.racaffinity.appservers.wildflyapp;

import jakarta.servlet.annotation.WebServlet;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.transaction.TransactionManager;
import jakarta.transaction.UserTransaction;
import java.io.IOException;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Base64;
import javax.naming.InitialContext;
import javax.sql.DataSource;
import javax.transaction.xa.Xid;

/**
 * The WildFly test deployment's only servlet. It names no racaffinity class: it sees two
 * XA data sources in JNDI and WildFly's transaction manager, as any Jakarta EE
 * application does.
 * <ul>
 *   <li>{@code /xa/tx?id=X}: one global transaction ({@code UserTransaction}) that inserts
 *       row X into {@code wf_orders} through {@code RacOrders} and into {@code wf_audit}
 *       through {@code RacAudit}, each row carrying the port of the PostgreSQL server it
 *       was written on ({@code inet_server_port()}, the server's own word); answers
 *       {@code committed <orders port> <audit port>} or {@code failed ... <exception>}.
 *       With {@code hold=1} a {@link HoldingXAResource} is enlisted last, so the
 *       transaction waits between prepare and commit until {@code /xa/release}.
 *   <li>{@code /xa/held}: waits (up to 60 s) until the held transaction is in prepare and
 *       answers its gtrid, base64 as pgjdbc writes it into {@code pg_prepared_xacts.gid}.
 *   <li>{@code /xa/release}: lets the held transaction go on to its commit.
 * </ul>
 */
@WebServlet("/xa/*")
public class XaServlet extends HttpServlet {
    private static final long serialVersionUID = 1L;
    private static volatile HoldingXAResource holding;

    @Override
    protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
        String path = req.getPathInfo() == null ? "" : req.getPathInfo();
        String answer;
        try {
            answer = switch (path) {
                case "/tx" -> transaction(req.getParameter("id"), "1".equals(req.getParameter("hold")));
                case "/held" -> held();
                case "/release" -> release();
                default -> null;
            };
        } catch (Exception e) {
            resp.sendError(500, String.valueOf(e));
            return;
        }
        if (answer == null) {
            resp.sendError(404, path);
            return;
        }
        resp.setContentType("text/plain");
        resp.getWriter().print(answer);
    }

    private static String transaction(String id, boolean hold) throws Exception {
        InitialContext jndi = new InitialContext();
        UserTransaction ut = (UserTransaction) jndi.lookup("java:comp/UserTransaction");
        TransactionManager tm = (TransactionManager) jndi.lookup("java:jboss/TransactionManager");
        DataSource orders = (DataSource) jndi.lookup("java:jboss/datasources/RacOrders");
        DataSource audit = (DataSource) jndi.lookup("java:jboss/datasources/RacAudit");
        ut.begin();
        int ordersPort = -1;
        int auditPort = -1;
        try {
            ordersPort = insert(orders, "wf_orders", id);
            auditPort = insert(audit, "wf_audit", id);
            if (hold) {
                HoldingXAResource h = new HoldingXAResource();
                holding = h;
                tm.getTransaction().enlistResource(h);
            }
        } catch (Exception e) {
            ut.rollback();
            return "failed " + ordersPort + " " + auditPort + " " + e;
        }
        try {
            ut.commit();
            return "committed " + ordersPort + " " + auditPort;
        } catch (Exception e) {
            return "failed " + ordersPort + " " + auditPort + " " + e;
        }
    }

    private static int insert(DataSource ds, String table, String id) throws SQLException {
        try (Connection c = ds.getConnection();
                PreparedStatement st = c.prepareStatement(
                        "insert into " + table + " (id, port) values (?, inet_server_port()) returning port")) {
            st.setString(1, id);
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                return rs.getInt(1);
            }
        }
    }

    private static String held() throws InterruptedException {
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (holding == null && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        HoldingXAResource h = holding;
        if (h == null || !h.awaitPrepare(60)) {
            return "none";
        }
        Xid xid = h.held();
        return Base64.getEncoder().encodeToString(xid.getGlobalTransactionId());
    }

    private static String release() {
        HoldingXAResource h = holding;
        if (h == null) {
            return "none";
        }
        h.release();
        holding = null;
        return "released";
    }
}
