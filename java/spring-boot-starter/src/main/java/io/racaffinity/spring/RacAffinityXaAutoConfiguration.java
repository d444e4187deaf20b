package io.racaffinity.spring;

import io.racaffinity.jdbc.AffinityXADataSource;
import java.sql.SQLException;
import javax.sql.DataSource;
import javax.sql.XADataSource;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.jdbc.XADataSourceWrapper;
import org.springframework.context.annotation.Bean;

/**
 * The XA data source under the application's JTA transaction manager: with
 * {@code racaffinity.xa-data-source-class-name} set and an {@link XADataSourceWrapper} bean
 * (Narayana's Spring Boot integration provides one), an {@link AffinityXADataSource} from
 * {@code racaffinity.*}, and the application's {@code DataSource} is that wrapper's
 * enlisting view of it. The wrapper also registers it for the transaction manager's
 * recovery, whose scans the XA data source routes to every node. Spring Boot's own
 * {@code spring.datasource.xa.*} works the same way.
 */
@AutoConfiguration(
        before = RacAffinityAutoConfiguration.class,
        beforeName = "org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration",
        afterName = "dev.snowdrop.boot.narayana.autoconfigure.NarayanaAutoConfiguration")
@ConditionalOnClass(name = "org.springframework.boot.jdbc.XADataSourceWrapper", value = AffinityXADataSource.class)
@ConditionalOnBean(XADataSourceWrapper.class)
@ConditionalOnProperty(prefix = "racaffinity", name = {"config", "xa-data-source-class-name"})
@EnableConfigurationProperties(RacAffinityProperties.class)
public class RacAffinityXaAutoConfiguration {
    /** Started here, so a bad configuration fails the application's start. */
    @Bean(destroyMethod = "close")
    @ConditionalOnMissingBean(XADataSource.class)
    public AffinityXADataSource affinityXADataSource(RacAffinityProperties p) throws SQLException {
        return RacAffinityAutoConfiguration.configure(new AffinityXADataSource(), p, p.getXaDataSourceClassName());
    }

    @Bean
    @ConditionalOnMissingBean(DataSource.class)
    public DataSource dataSource(XADataSourceWrapper wrapper, AffinityXADataSource xa) throws Exception {
        return wrapper.wrapDataSource(xa);
    }
}
