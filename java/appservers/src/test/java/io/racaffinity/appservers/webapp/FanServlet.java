package io.racaffinity.appservers.webapp;

import jakarta.servlet.annotation.WebServlet;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import javax.naming.InitialContext;
import javax.naming.NamingException;
import javax.sql.DataSource;

/**
 * Hands a FAN line to the application's data source ({@code AffinityDataSource.applyEvent}),
 * as a FAN subscriber inside the application would (by reflection: the
 * test module compiles against no racaffinity jar): the continuity run announces its planned
 * drains ({@code status=down reason=USER}) and the node's return ({@code status=up}) here.
 * Only the continuity run's requests reach it.
 */
@WebServlet("/fan")
public class FanServlet extends HttpServlet {
    private static final long serialVersionUID = 1L;

    @Override
    protected void doPost(HttpServletRequest req, HttpServletResponse resp) throws IOException {
        try {
            DataSource ds = (DataSource) new InitialContext().lookup("java:comp/env/jdbc/rac");
            String line = new String(req.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
            // By reflection: the test module compiles against no racaffinity jar, as the
            // application sees only a javax.sql.DataSource.
            Object applied = ds.getClass().getMethod("applyEvent", String.class).invoke(ds, line);
            resp.setContentType("text/plain");
            resp.getWriter().print(applied);
        } catch (NamingException | ReflectiveOperationException | RuntimeException e) {
            resp.sendError(500, String.valueOf(e));
        }
    }
}
