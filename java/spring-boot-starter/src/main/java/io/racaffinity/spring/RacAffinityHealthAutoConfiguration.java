package io.racaffinity.spring;

import io.racaffinity.jdbc.AbstractAffinityDataSource;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.context.annotation.Bean;

/**
 * The {@code racaffinity} health indicator, with Actuator's health API on the class path and
 * an {@code AffinityDataSource} or {@code AffinityXADataSource} bean (the starter's or the
 * application's own).
 */
@AutoConfiguration(after = {RacAffinityAutoConfiguration.class, RacAffinityXaAutoConfiguration.class})
@ConditionalOnClass(name = "org.springframework.boot.health.contributor.HealthIndicator")
@ConditionalOnBean(AbstractAffinityDataSource.class)
public class RacAffinityHealthAutoConfiguration {
    @Bean
    @ConditionalOnMissingBean(name = "racaffinityHealthIndicator")
    public RacAffinityHealthIndicator racaffinityHealthIndicator(AbstractAffinityDataSource<?> dataSource) {
        return new RacAffinityHealthIndicator(dataSource);
    }
}
