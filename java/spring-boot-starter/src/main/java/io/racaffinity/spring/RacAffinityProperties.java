package io.racaffinity.spring;

import java.util.LinkedHashMap;
import java.util.Map;
import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * {@code racaffinity.*}: the {@code AffinityDataSource} the starter creates.
 *
 * <pre>
 * racaffinity.config=name = orcl; nodes = RAC1, RAC2, RAC3; policy = least_outstanding
 * racaffinity.settings.transaction.strict=true          # any core config key, appended to config
 * racaffinity.node-urls.RAC1=jdbc:oracle:thin:@//h1:1521/svc   # or racaffinity.url-template
 * racaffinity.username=scott
 * racaffinity.password=tiger
 * racaffinity.data-source-class-name=com.zaxxer.hikari.HikariDataSource
 * racaffinity.data-source-properties.maximumPoolSize=10
 * racaffinity.xa-data-source-class-name=oracle.jdbc.xa.client.OracleXADataSource  # XA, under JTA
 * </pre>
 */
@ConfigurationProperties("racaffinity")
public class RacAffinityProperties {
    /** Core config text ({@code key = value} entries separated by newlines or {@code ;}). */
    private String config;
    /**
     * Core config keys added to {@link #config}, e.g. {@code transaction.strict=true}: one
     * entry each (a {@code ;} or newline in a key or value fails the start).
     */
    private Map<String, String> settings = new LinkedHashMap<>();
    /** Each node's JDBC URL, by node name. */
    private Map<String, String> nodeUrls = new LinkedHashMap<>();
    /** A URL with {@code {instance}} for the node name, instead of {@link #nodeUrls}. */
    private String urlTemplate;
    /** Each node's pool (or plain DataSource) class. */
    private String dataSourceClassName = "com.zaxxer.hikari.HikariDataSource";
    /**
     * Each node's XADataSource class: set, and with a JTA transaction manager's
     * {@code XADataSourceWrapper} bean (Narayana's Spring Boot integration), the starter makes
     * an {@code AffinityXADataSource} and the application's DataSource enlists in JTA.
     */
    private String xaDataSourceClassName;
    /** Bean properties of each node's pool (or XA data source), e.g. {@code maximumPoolSize=10}. */
    private Map<String, String> dataSourceProperties = new LinkedHashMap<>();
    private String username;
    private String password;
    /** Heartbeat period in milliseconds (0: none); unset: the data source's default. */
    private Long heartbeatIntervalMillis;
    /** Register the cluster MXBean (unset: the data source's default). */
    private Boolean registerMbean;

    public String getConfig() {
        return config;
    }

    public void setConfig(String config) {
        this.config = config;
    }

    public Map<String, String> getSettings() {
        return settings;
    }

    public void setSettings(Map<String, String> settings) {
        this.settings = settings;
    }

    public Map<String, String> getNodeUrls() {
        return nodeUrls;
    }

    public void setNodeUrls(Map<String, String> nodeUrls) {
        this.nodeUrls = nodeUrls;
    }

    public String getUrlTemplate() {
        return urlTemplate;
    }

    public void setUrlTemplate(String urlTemplate) {
        this.urlTemplate = urlTemplate;
    }

    public String getDataSourceClassName() {
        return dataSourceClassName;
    }

    public void setDataSourceClassName(String dataSourceClassName) {
        this.dataSourceClassName = dataSourceClassName;
    }

    public String getXaDataSourceClassName() {
        return xaDataSourceClassName;
    }

    public void setXaDataSourceClassName(String xaDataSourceClassName) {
        this.xaDataSourceClassName = xaDataSourceClassName;
    }

    public Map<String, String> getDataSourceProperties() {
        return dataSourceProperties;
    }

    public void setDataSourceProperties(Map<String, String> dataSourceProperties) {
        this.dataSourceProperties = dataSourceProperties;
    }

    public String getUsername() {
        return username;
    }

    public void setUsername(String username) {
        this.username = username;
    }

    public String getPassword() {
        return password;
    }

    public void setPassword(String password) {
        this.password = password;
    }

    public Long getHeartbeatIntervalMillis() {
        return heartbeatIntervalMillis;
    }

    public void setHeartbeatIntervalMillis(Long heartbeatIntervalMillis) {
        this.heartbeatIntervalMillis = heartbeatIntervalMillis;
    }

    public Boolean getRegisterMbean() {
        return registerMbean;
    }

    public void setRegisterMbean(Boolean registerMbean) {
        this.registerMbean = registerMbean;
    }

    @Override
    public String toString() {
        // Never the password, nor a URL: Oracle's carry it inline (user/password@), others as a parameter.
        // The data source's own toString() shows its URLs redacted.
        return "RacAffinityProperties[config=" + config + ", settings=" + settings + ", nodes=" + nodeUrls.keySet()
                + ", urlTemplate=" + (urlTemplate == null ? null : "(set)") + ", dataSourceClassName=" + dataSourceClassName
                + ", xaDataSourceClassName=" + xaDataSourceClassName + "]";
    }
}
