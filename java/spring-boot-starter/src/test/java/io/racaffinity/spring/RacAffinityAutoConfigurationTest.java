package io.racaffinity.spring;

import static org.assertj.core.api.Assertions.assertThat;

import io.racaffinity.jdbc.AffinityDataSource;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/** The auto-configuration's conditions and start-up failures (no database needed). */
class RacAffinityAutoConfigurationTest {
    final ApplicationContextRunner runner = new ApplicationContextRunner()
            .withConfiguration(AutoConfigurations.of(RacAffinityAutoConfiguration.class,
                    RacAffinityHealthAutoConfiguration.class));

    @Test
    void withoutRacaffinityConfigThereIsNoBean() {
        runner.run(ctx -> assertThat(ctx).hasNotFailed().doesNotHaveBean(AffinityDataSource.class)
                .doesNotHaveBean(RacAffinityHealthIndicator.class));
    }

    @Test
    void aBadCoreKeyFailsTheStartWithTheCoresMessage() {
        runner.withPropertyValues("racaffinity.config=nodes = A, B", "racaffinity.settings.transaction.stric=true",
                "racaffinity.url-template=jdbc:postgresql://127.0.0.1:1/{instance}")
                .run(ctx -> assertThat(ctx).hasFailed().getFailure().rootCause()
                        .hasMessageContaining("transaction.stric"));
    }

    @Test
    void aSettingValueCannotInjectKeys() {
        // name = x is valid on its own: only the injected key would take effect.
        runner.withPropertyValues("racaffinity.config=nodes = A, B",
                "racaffinity.settings.name=x; transaction.strict = true",
                "racaffinity.url-template=jdbc:postgresql://127.0.0.1:1/{instance}")
                .run(ctx -> assertThat(ctx).hasFailed().getFailure().rootCause()
                        .hasMessageContaining("`name`").hasMessageContaining("must not contain a newline or `;`"));
        runner.withPropertyValues("racaffinity.config=nodes = A, B",
                "racaffinity.settings.name=x\ntransaction.strict = true",
                "racaffinity.url-template=jdbc:postgresql://127.0.0.1:1/{instance}")
                .run(ctx -> assertThat(ctx).hasFailed().getFailure().rootCause()
                        .hasMessageContaining("must not contain a newline or `;`"));
    }

    @Test
    void anEmptyNodeUrlFailsTheStartNamingTheNode() {
        // `racaffinity.node-urls.RAC1=` binds an empty string: HikariCP said "jdbcUrl is required" only at first use
        runner.withPropertyValues("racaffinity.config=nodes = RAC1, RAC2", "racaffinity.node-urls.RAC1=",
                "racaffinity.node-urls.RAC2=jdbc:postgresql://127.0.0.1:1/x",
                "racaffinity.heartbeat-interval-millis=0", "racaffinity.register-mbean=false")
                .run(ctx -> assertThat(ctx).hasFailed().getFailure().rootCause()
                        .hasMessageContaining("RAC1").hasMessageContaining("empty URL"));
    }

    @Test
    void anApplicationDataSourceWins() {
        runner.withPropertyValues("racaffinity.config=nodes = A, B")
                .withBean("mine", javax.sql.DataSource.class, org.postgresql.ds.PGSimpleDataSource::new)
                .run(ctx -> assertThat(ctx).hasNotFailed().doesNotHaveBean(AffinityDataSource.class)
                        .doesNotHaveBean(RacAffinityHealthIndicator.class));
    }

    @Test
    void thePasswordIsNotInThePropertiesText() {
        RacAffinityProperties p = new RacAffinityProperties();
        p.setPassword("S3cret-value");
        assertThat(p.toString()).doesNotContain("S3cret-value");
    }
}
