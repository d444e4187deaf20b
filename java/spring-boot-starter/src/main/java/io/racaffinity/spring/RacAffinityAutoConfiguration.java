package io.racaffinity.spring;

import io.racaffinity.Cluster;
import io.racaffinity.jdbc.AbstractAffinityDataSource;
import io.racaffinity.jdbc.AffinityDataSource;
import java.sql.SQLException;
import java.util.Map;
import java.util.Properties;
import javax.sql.DataSource;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;

/**
 * The {@code AffinityDataSource} bean from {@code racaffinity.*} (when
 * {@code racaffinity.config} is set and the application declares no DataSource), ahead of
 * Spring Boot's own DataSource auto-configuration, which then steps aside. The health
 * indicator is {@link RacAffinityHealthAutoConfiguration}'s.
 */
@AutoConfiguration(beforeName = "org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration")
@ConditionalOnClass(AffinityDataSource.class)
@ConditionalOnProperty(prefix = "racaffinity", name = "config")
@EnableConfigurationProperties(RacAffinityProperties.class)
public class RacAffinityAutoConfiguration {
    /**
     * Initialised here, so a bad configuration fails the application's start with the
     * core's message (naming the key) rather than its first request.
     */
    @Bean(destroyMethod = "close")
    @ConditionalOnMissingBean(DataSource.class)
    public AffinityDataSource dataSource(RacAffinityProperties p) throws SQLException {
        AffinityDataSource ds = new AffinityDataSource();
        configure(ds, p, p.getDataSourceClassName());
        return ds;
    }

    /**
     * Applies {@code racaffinity.*} to either data source and starts it; the node class
     * is each node's pool ({@code data-source-class-name}) or XA data source
     * ({@code xa-data-source-class-name}).
     */
    static <D extends AbstractAffinityDataSource<?>> D configure(D ds, RacAffinityProperties p, String nodeClass)
            throws SQLException {
        // Each setting through the builder, which refuses a ';' or newline in a key or
        // value: pasted as text, one property could add keys of its own.
        Cluster.Builder settings = Cluster.builder();
        for (Map.Entry<String, String> e : p.getSettings().entrySet()) {
            settings.set(e.getKey(), e.getValue());
        }
        ds.setConfig(p.getConfig() + "\n" + settings.toConfig());
        if (!p.getNodeUrls().isEmpty()) {
            ds.setNodeUrls(p.getNodeUrls());
        }
        if (p.getUrlTemplate() != null) {
            ds.setUrlTemplate(p.getUrlTemplate());
        }
        ds.setDataSourceClassName(nodeClass);
        if (!p.getDataSourceProperties().isEmpty()) {
            Properties props = new Properties();
            props.putAll(p.getDataSourceProperties());
            ds.setDataSourceProperties(props);
        }
        if (p.getUsername() != null) {
            ds.setUser(p.getUsername());
        }
        if (p.getPassword() != null) {
            ds.setPassword(p.getPassword());
        }
        if (p.getHeartbeatIntervalMillis() != null) {
            ds.setHeartbeatIntervalMillis(p.getHeartbeatIntervalMillis());
        }
        if (p.getRegisterMbean() != null) {
            ds.setRegisterMBean(p.getRegisterMbean());
        }
        try {
            ds.init();
        } catch (SQLException | RuntimeException e) {
            ds.close();
            throw e;
        }
        return ds;
    }
}
