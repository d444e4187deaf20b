package io.racaffinity.spring;

import io.racaffinity.jdbc.AffinityDataSource;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.context.annotation.Bean;

/**
 * The {@code racaffinity} health indicator, with Actuator's health API on the class path and
 * an {@code AffinityDataSource} bean (the starter's or the application's own).
 */
@AutoConfiguration(after = RacAffinityAutoConfiguration.class)
@ConditionalOnClass(name = "org.springframework.boot.health.contributor.HealthIndicator")
@ConditionalOnBean(AffinityDataSource.class)
public class RacAffinityHealthAutoConfiguration {
    @Bean
    @ConditionalOnMissingBean(name = "racaffinityHealthIndicator")
    public RacAffinityHealthIndicator racaffinityHealthIndicator(AffinityDataSource dataSource) {
        return new RacAffinityHealthIndicator(dataSource);
    }
}
