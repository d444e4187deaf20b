package io.racaffinity.web;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.racaffinity.jdbc.AffinityDataSourceFactory;
import io.racaffinity.test.PgNodes;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.net.CookieManager;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import javax.naming.InitialContext;
import javax.sql.DataSource;
import org.apache.catalina.Context;
import org.apache.catalina.LifecycleException;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.util.descriptor.web.ContextResource;
import org.apache.tomcat.util.descriptor.web.FilterDef;
import org.apache.tomcat.util.descriptor.web.FilterMap;

/**
 * The embedded Tomcat of the web tests, set up as an application server would be from its
 * {@code server.xml}/{@code context.xml}: a {@code jdbc/rac} Resource built by
 * {@link AffinityDataSourceFactory} and an {@link AffinityFilter} in front of the servlets.
 */
final class EmbeddedTomcat {
    /** JNDI name the filter and the servlets look the data source up by. */
    static final String DATA_SOURCE = "java:comp/env/jdbc/rac";

    private EmbeddedTomcat() {}

    /**
     * A servlet that answers GETs in plain text, computed from the request and the
     * {@link #DATA_SOURCE} it looks up as an application would; any failure is a 500 that
     * carries the exception, for the test's assertion message.
     */
    abstract static class TextServlet extends HttpServlet {
        private static final long serialVersionUID = 1L;

        abstract String answer(HttpServletRequest req, DataSource ds) throws Exception;

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            try {
                String body = answer(req, (DataSource) new InitialContext().lookup(DATA_SOURCE));
                resp.setContentType("text/plain");
                resp.getWriter().print(body);
            } catch (Exception e) {
                resp.sendError(500, String.valueOf(e));
            }
        }
    }

    /** A Tomcat with JNDI, on a free port, under a new directory of {@code java/target}. */
    static Tomcat create(Path base) {
        Tomcat tomcat = new Tomcat();
        tomcat.setBaseDir(base.toString());
        tomcat.setPort(0);
        tomcat.getConnector();
        tomcat.enableNaming();
        return tomcat;
    }

    static Path baseDir(String prefix) throws IOException {
        return Files.createTempDirectory(PgNodes.repo().resolve("java/target"), prefix);
    }

    static Context addContext(Tomcat tomcat, Path base, String path) throws IOException {
        return tomcat.addContext(path, Files.createDirectories(base.resolve("webapp" + path)).toString());
    }

    /**
     * {@code <Resource name="jdbc/rac" type="javax.sql.DataSource" factory="...AffinityDataSourceFactory">}
     * over Hikari pools, one per node, the nodes named by their ports so that the URL template can place
     * them; the caller adds the attributes its test is about.
     */
    static ContextResource affinityResource(String config, String poolProperties) {
        ContextResource res = new ContextResource();
        res.setName("jdbc/rac");
        res.setType("javax.sql.DataSource");
        res.setAuth("Container");
        res.setCloseMethod("close");
        res.setProperty("factory", AffinityDataSourceFactory.class.getName());
        res.setProperty("config", config);
        res.setProperty("urlTemplate", "jdbc:postgresql://127.0.0.1:{instance}/postgres");
        res.setProperty("dataSourceClassName", "com.zaxxer.hikari.HikariDataSource");
        res.setProperty("dataSourcePropertyList", poolProperties);
        res.setProperty("user", "postgres");
        res.setProperty("registerMBean", "false");
        return res;
    }

    /** The {@link AffinityFilter} on {@code urlPattern}, routing {@link #DATA_SOURCE}. */
    static void addAffinityFilter(Context ctx, String urlPattern, Map<String, String> initParameters) {
        FilterDef fd = new FilterDef();
        fd.setFilterName("racaffinity");
        fd.setFilterClass(AffinityFilter.class.getName());
        initParameters.forEach(fd::addInitParameter);
        fd.addInitParameter("dataSources", DATA_SOURCE);
        ctx.addFilterDef(fd);
        FilterMap fm = new FilterMap();
        fm.setFilterName("racaffinity");
        fm.addURLPattern(urlPattern);
        ctx.addFilterMap(fm);
    }

    static void stop(Tomcat tomcat) throws LifecycleException {
        if (tomcat != null) {
            tomcat.stop();
            tomcat.destroy();
        }
    }

    /** A client with its own cookies: one browser, one HTTP session. */
    static HttpClient browser() {
        return HttpClient.newBuilder().cookieHandler(new CookieManager()).connectTimeout(Duration.ofSeconds(10))
                .build();
    }

    /** GET {@code path} on {@code port}, asserting 200 (the body says why not). */
    static HttpResponse<String> send(int port, HttpClient client, String path) throws Exception {
        HttpResponse<String> r = client.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
                .timeout(Duration.ofSeconds(30)).build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), r.body());
        return r;
    }
}
