package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.test.Stubs;
import java.sql.SQLTransientConnectionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

/** The bounded connect of a replay's outcome check, over a DataSource that is not HikariCP. */
class NodeConnectTest {
    /**
     * Its thread may outlive the check (a pool that ignores the interrupt), so a leak check at an application's
     * undeploy must tell which data source it belongs to: it is named after the cluster, as the library's other
     * threads are (racaffinity-probe-&lt;cluster&gt;-N).
     */
    @Test
    void theBoundedConnectThreadIsNamedAfterTheCluster() throws Exception {
        AtomicReference<String> name = new AtomicReference<>();
        CountDownLatch asked = new CountDownLatch(1);
        DataSource waits = Stubs.proxy(DataSource.class, "WaitingPool", (p, m, a) -> {
            if (!m.getName().equals("getConnection")) {
                return null;
            }
            name.set(Thread.currentThread().getName());
            asked.countDown();
            Thread.sleep(60_000); // the pool's wait, given up on the interrupt at the deadline
            return null;
        });
        assertThrows(SQLTransientConnectionException.class, () -> NodeConnect.within(waits, "connect-named", 1));
        assertTrue(asked.await(30, TimeUnit.SECONDS), "the pool was never asked");
        assertTrue(name.get().matches("racaffinity-bounded-connect-connect-named-\\d+"), name.get());
    }
}
