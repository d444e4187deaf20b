package io.racaffinity.jdbc;

import java.io.PrintWriter;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.util.Map;
import java.util.Properties;
import java.util.logging.Logger;
import javax.sql.DataSource;

/**
 * An unpooled node DataSource over {@link DriverManager}, used when node URLs
 * are given without a {@code dataSourceClassName}. Fine for tools and tests;
 * in production name a pool (e.g. {@code com.zaxxer.hikari.HikariDataSource}).
 */
final class DriverDataSource implements DataSource {
    private final String url;
    private final String user;
    private final String password;
    private final Redactor redactor;
    private final Map<String, String> driverProperties;
    private int loginTimeout;

    DriverDataSource(String url, String user, String password) {
        this(url, user, password, Map.of());
    }

    /** @param driverProperties connection properties given to the driver with the credentials */
    DriverDataSource(String url, String user, String password, Map<String, String> driverProperties) {
        this.url = url;
        this.user = user;
        this.password = password;
        this.driverProperties = Map.copyOf(driverProperties);
        this.redactor = new Redactor(password);
    }

    @Override
    public Connection getConnection() throws SQLException {
        return getConnection(user, password);
    }

    @Override
    public Connection getConnection(String username, String pass) throws SQLException {
        Properties p = new Properties();
        p.putAll(driverProperties);
        if (username != null) {
            p.setProperty("user", username);
        }
        if (pass != null) {
            p.setProperty("password", pass);
        }
        return DriverManager.getConnection(url, p);
    }

    @Override
    public PrintWriter getLogWriter() {
        return null;
    }

    @Override
    public void setLogWriter(PrintWriter out) {}

    @Override
    public void setLoginTimeout(int seconds) {
        loginTimeout = seconds;
    }

    @Override
    public int getLoginTimeout() {
        return loginTimeout;
    }

    @Override
    public Logger getParentLogger() throws SQLFeatureNotSupportedException {
        throw new SQLFeatureNotSupportedException();
    }

    @Override
    public <T> T unwrap(Class<T> iface) throws SQLException {
        if (iface.isInstance(this)) {
            return iface.cast(this);
        }
        throw new SQLException("not a wrapper for " + iface.getName());
    }

    @Override
    public boolean isWrapperFor(Class<?> iface) {
        return iface.isInstance(this);
    }

    @Override
    public String toString() {
        return "DriverDataSource[" + redactor.redact(url) + "]";
    }
}
