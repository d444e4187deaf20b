package io.racaffinity.spring;

import io.racaffinity.jdbc.AbstractAffinityDataSource;
import org.springframework.beans.factory.config.ConfigurableListableBeanFactory;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.health.autoconfigure.contributor.CompositeHealthContributorConfiguration;
import org.springframework.boot.health.autoconfigure.contributor.ConditionalOnEnabledHealthIndicator;
import org.springframework.boot.health.contributor.HealthContributor;
import org.springframework.context.annotation.Bean;

/**
 * The {@code racaffinity} health component, with Actuator's health API on the class path and
 * an {@code AffinityDataSource} or {@code AffinityXADataSource} bean (the starter's or the
 * application's own): one {@link RacAffinityHealthIndicator}, or with several data sources
 * (an application of several databases) one child per data source, named by its bean, as
 * Spring Boot's own {@code db} component. {@code management.health.racaffinity.enabled=false}
 * turns it off, as any of Spring Boot's own.
 */
@AutoConfiguration(after = {RacAffinityAutoConfiguration.class, RacAffinityXaAutoConfiguration.class})
@ConditionalOnClass(name = "org.springframework.boot.health.contributor.HealthIndicator")
@ConditionalOnBean(AbstractAffinityDataSource.class)
@ConditionalOnEnabledHealthIndicator("racaffinity")
public class RacAffinityHealthAutoConfiguration
        extends CompositeHealthContributorConfiguration<RacAffinityHealthIndicator, AbstractAffinityDataSource<?>> {
    public RacAffinityHealthAutoConfiguration() {
        super(RacAffinityHealthIndicator::new);
    }

    @Bean
    @ConditionalOnMissingBean(name = {"racaffinityHealthIndicator", "racaffinityHealthContributor"})
    public HealthContributor racaffinityHealthIndicator(ConfigurableListableBeanFactory beanFactory) {
        @SuppressWarnings("unchecked")
        Class<AbstractAffinityDataSource<?>> type = (Class<AbstractAffinityDataSource<?>>) (Class<?>) AbstractAffinityDataSource.class;
        return createContributor(beanFactory, type);
    }
}
