package io.racaffinity.test;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.testsupport.Await;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;
import javax.sql.DataSource;

/** HikariCP pools per node, and small JDBC helpers. */
public final class Pools implements AutoCloseable {
    private final Map<String, HikariDataSource> pools = new LinkedHashMap<>();
    private final List<AffinityDataSource> owned = new ArrayList<>();

    /**
     * One Hikari pool per node: names.get(i) → PostgreSQL node i+1.
     */
    public Pools(List<String> names, Consumer<HikariConfig> tweak) {
        for (int i = 0; i < names.size(); i++) {
            HikariConfig c = new HikariConfig();
            c.setJdbcUrl(PgNodes.url(i + 1));
            c.setUsername("postgres");
            c.setPoolName("test-" + names.get(i));
            c.setMaximumPoolSize(10);
            c.setMinimumIdle(1);
            c.setConnectionTimeout(10_000);
            tweak.accept(c);
            pools.put(names.get(i), new HikariDataSource(c));
        }
    }

    public Pools(List<String> names) {
        this(names, c -> {});
    }

    public Map<String, DataSource> asMap() {
        return new LinkedHashMap<>(pools);
    }

    /**
     * An {@link AffinityDataSource} of {@code config} over these pools, without a heartbeat: the
     * tests set node states themselves. {@link #close()} closes it.
     */
    public AffinityDataSource affinity(String config) {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig(config);
        ds.setNodeDataSources(asMap());
        ds.setHeartbeatIntervalMillis(0);
        return own(ds);
    }

    /**
     * Has {@link #close()} close {@code ds} before the pools, so that nothing it runs (heartbeat,
     * pool maintenance) outlives them; closing it earlier as well is harmless.
     */
    public AffinityDataSource own(AffinityDataSource ds) {
        owned.add(ds);
        return ds;
    }

    public HikariDataSource get(String name) {
        return pools.get(name);
    }

    @Override
    public void close() {
        owned.forEach(AffinityDataSource::close);
        pools.values().forEach(HikariDataSource::close);
    }

    /** The port of the server a connection is on ({@code SELECT inet_server_port()}). */
    public static int serverPort(Connection c) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT inet_server_port()")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    /** Polls {@code condition} until true or the deadline passes (no fixed sleeps as assertions). */
    public static boolean await(Duration timeout, BooleanSupplier condition) throws InterruptedException {
        return Await.until(timeout, Duration.ofMillis(20), condition);
    }
}
