package example;

import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.micrometer.AffinityMetrics;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Map;
import javax.sql.DataSource;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.context.ConfigurableApplicationContext;

/** The three artifacts a user depends on, each used as its docs say, against one local node. */
public class Main {
    public static void main(String[] args) throws Exception {
        String url = System.getenv("RACAFF_NODE1_URL");
        if (url == null) {
            throw new IllegalStateException("RACAFF_NODE1_URL is not set (tests/cluster/with-nodes sets it)");
        }
        core(url);
        micrometer(url);
        springBoot(url);
    }

    static int selectOne(DataSource ds) throws SQLException {
        try (Connection c = ds.getConnection(); ResultSet rs = c.createStatement().executeQuery("SELECT 1")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
        System.out.println("ok " + what);
    }

    static AffinityDataSource dataSource(String name, String url) {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = " + name + "; nodes = RAC1");
        ds.setNodeUrls(Map.of("RAC1", url));
        ds.setUser("postgres");
        return ds;
    }

    static void core(String url) throws SQLException {
        try (AffinityDataSource ds = dataSource("dist-core", url)) {
            check(selectOne(ds) == 1, "racaffinity: AffinityDataSource SELECT 1");
        }
    }

    static void micrometer(String url) throws SQLException {
        try (AffinityDataSource ds = dataSource("dist-metrics", url)) {
            SimpleMeterRegistry registry = new SimpleMeterRegistry();
            new AffinityMetrics(ds).bindTo(registry);
            selectOne(ds);
            double picks = registry.get("racaffinity.node.picks").tag("racaffinity.node", "RAC1").functionCounter().count();
            check(picks >= 1, "racaffinity-micrometer: racaffinity.node.picks{RAC1} = " + picks);
        }
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class App {}

    static void springBoot(String url) throws SQLException {
        SpringApplication app = new SpringApplication(App.class);
        app.setWebApplicationType(WebApplicationType.NONE);
        app.setDefaultProperties(Map.<String, Object>of(
                "racaffinity.config", "name = dist-boot; nodes = RAC1",
                "racaffinity.node-urls.RAC1", url,
                "racaffinity.username", "postgres",
                "spring.main.banner-mode", "off",
                "logging.level.root", "warn"));
        try (ConfigurableApplicationContext ctx = app.run()) {
            DataSource ds = ctx.getBean(DataSource.class);
            check(ds instanceof AffinityDataSource && selectOne(ds) == 1,
                    "racaffinity-spring-boot-starter: the DataSource bean is " + ds.getClass().getSimpleName() + ", SELECT 1");
        }
    }
}
