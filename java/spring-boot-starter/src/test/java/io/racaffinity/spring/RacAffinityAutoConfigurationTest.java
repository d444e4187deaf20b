package io.racaffinity.spring;

import static org.assertj.core.api.Assertions.assertThat;

import io.racaffinity.jdbc.AffinityDataSource;
import org.junit.jupiter.api.Test;
import org.springframework.boot.health.contributor.CompositeHealthContributor;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.HealthContributor;
import org.springframework.boot.health.contributor.HealthIndicator;
import org.springframework.boot.health.contributor.Status;
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

    /** Oracle's thin URLs may carry the credentials ({@code user/password@}), as may any URL's parameters. */
    @Test
    void noCredentialOfTheUrlTemplateIsInThePropertiesText() {
        RacAffinityProperties p = new RacAffinityProperties();
        p.setUrlTemplate("jdbc:oracle:thin:scott/S3cret-value@//dbhost:1521/MYDB/{instance}");
        assertThat(p.toString()).doesNotContain("S3cret-value");
        p.setUrlTemplate("jdbc:postgresql://dbhost/{instance}?user=app&password=S3cret-value");
        assertThat(p.toString()).doesNotContain("S3cret-value");
    }

    /** An application's own data source of one database (never connected here: no heartbeat). */
    static AffinityDataSource applicationDataSource(String name) {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = " + name + "; nodes = A, B");
        ds.setUrlTemplate("jdbc:postgresql://127.0.0.1:1/{instance}");
        ds.setDataSourceClassName("org.postgresql.ds.PGSimpleDataSource");
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        return ds;
    }

    /**
     * An application of two databases declares two affinity data sources: the health indicator's one data
     * source parameter failed the start (NoUniqueBeanDefinitionException) only because Actuator was there.
     * Spring Boot's own {@code db} indicator is a composite of one component per DataSource bean.
     */
    @Test
    void twoApplicationDataSourcesGetOneHealthComponentEach() {
        runner.withBean("orders", AffinityDataSource.class, () -> applicationDataSource("orders"))
                .withBean("billing", AffinityDataSource.class, () -> applicationDataSource("billing"))
                .run(ctx -> {
                    assertThat(ctx).hasNotFailed();
                    HealthContributor c = ctx.getBean("racaffinityHealthIndicator", HealthContributor.class);
                    assertThat(c).isInstanceOf(CompositeHealthContributor.class);
                    CompositeHealthContributor composite = (CompositeHealthContributor) c;
                    for (String name : new String[] {"orders", "billing"}) {
                        Health h = ((HealthIndicator) composite.getContributor(name)).health();
                        assertThat(h.getStatus()).isEqualTo(Status.UP);
                        assertThat(h.getDetails()).containsEntry("cluster", name);
                    }
                });
    }

    /** One data source keeps its one component: the indicator itself, as before. */
    @Test
    void oneApplicationDataSourceIsOneIndicator() {
        runner.withBean("orders", AffinityDataSource.class, () -> applicationDataSource("orders"))
                .run(ctx -> assertThat(ctx).hasNotFailed().getBean("racaffinityHealthIndicator")
                        .isInstanceOf(RacAffinityHealthIndicator.class));
    }

    /** Spring Boot's switch of every health indicator, {@code management.health.<name>.enabled}, was ignored. */
    @Test
    void theHealthIndicatorCanBeTurnedOffLikeSpringBootsOwn() {
        runner.withBean("orders", AffinityDataSource.class, () -> applicationDataSource("orders"))
                .withPropertyValues("management.health.racaffinity.enabled=false")
                .run(ctx -> assertThat(ctx).hasNotFailed().doesNotHaveBean("racaffinityHealthIndicator"));
        runner.withBean("orders", AffinityDataSource.class, () -> applicationDataSource("orders"))
                .withPropertyValues("management.health.defaults.enabled=false")
                .run(ctx -> assertThat(ctx).hasNotFailed().doesNotHaveBean("racaffinityHealthIndicator"));
    }
}
