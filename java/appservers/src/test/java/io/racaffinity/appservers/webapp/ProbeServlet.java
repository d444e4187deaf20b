package io.racaffinity.appservers.webapp;

import jakarta.servlet.annotation.WebServlet;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import javax.naming.InitialContext;
import javax.naming.NamingException;
import javax.sql.DataSource;

/**
 * The test web application's only servlet, deployed into a real Tomcat: {@code /port}
 * answers with the port of the PostgreSQL server its connection runs on, asked of the
 * server itself ({@code inet_server_port()}), so the routing checks never trust the
 * library's own account of where it connected. It names no racaffinity class: the
 * application sees a plain {@code javax.sql.DataSource} from JNDI, as a Tomcat user's would.
 */
@WebServlet("/port")
public class ProbeServlet extends HttpServlet {
    private static final long serialVersionUID = 1L;

    @Override
    protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
        try {
            DataSource ds = (DataSource) new InitialContext().lookup("java:comp/env/jdbc/rac");
            String port;
            try (Connection c = ds.getConnection();
                    Statement st = c.createStatement();
                    ResultSet rs = st.executeQuery("select inet_server_port()")) {
                rs.next();
                port = Integer.toString(rs.getInt(1));
            }
            resp.setContentType("text/plain");
            resp.getWriter().print(port);
        } catch (NamingException | SQLException e) {
            resp.sendError(500, String.valueOf(e));
        }
    }
}
