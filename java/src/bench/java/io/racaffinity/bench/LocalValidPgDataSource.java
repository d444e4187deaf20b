package io.racaffinity.bench;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * pgjdbc's data source for Oracle UCP's connection factory, with
 * {@code Connection.isValid} answered without a round trip: UCP calls it on
 * every borrow of a non-Oracle connection, whatever its settings, so this
 * isolates UCP's own pool work from that round trip (benchmarks only).
 */
public class LocalValidPgDataSource extends PGSimpleDataSource {
    private static final long serialVersionUID = 1L;

    @Override
    public Connection getConnection() throws SQLException {
        return locallyValid(super.getConnection());
    }

    @Override
    public Connection getConnection(String user, String password) throws SQLException {
        return locallyValid(super.getConnection(user, password));
    }

    private static Connection locallyValid(Connection c) {
        return (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(), new Class<?>[] {Connection.class},
                (p, m, a) -> {
                    if (m.getName().equals("isValid")) {
                        return !c.isClosed();
                    }
                    try {
                        return m.invoke(c, a);
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
    }
}
