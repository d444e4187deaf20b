package io.racaffinity.jmx;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import java.lang.management.ManagementFactory;
import javax.management.Attribute;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import org.junit.jupiter.api.Test;

/**
 * The MXBean of a cluster closed while it is still registered (a cluster given to a data source and
 * closed first, or registered by the application): every read and operation fails with a JDK
 * exception, as the class promises, so that a remote JMX client needs no racaffinity classes.
 */
class ClosedClusterMBeanTest {
    private static final MBeanServer MBS = ManagementFactory.getPlatformMBeanServer();
    private static final String[] STRING = {String.class.getName()};

    /** The first racaffinity class in {@code e}'s cause chain, or null. */
    private static String racaffinityClass(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t.getClass().getName().startsWith("io.racaffinity.")) {
                return t.getClass().getName() + ": " + t.getMessage();
            }
        }
        return null;
    }

    private static Throwable rootOf(Throwable e) {
        Throwable t = e;
        while (t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    @Test
    void aClosedClustersMBeanThrowsOnlyJdkExceptions() throws Exception {
        Cluster c = Cluster.fromConfig("name = jmx-closed; nodes = A, B");
        ObjectName on = ClusterMonitor.register(c);
        try {
            assertEquals("A", ((String[]) MBS.getAttribute(on, "NodeNames"))[0]);
            c.close();
            for (String attribute : new String[] {"NodeNames", "NodeStates", "NodePicks", "TotalPicks",
                    "MetricsJson", "FeedUrl", "UseStrictXAAffinity"}) {
                Exception e = assertThrows(Exception.class, () -> MBS.getAttribute(on, attribute), attribute);
                assertEquals(null, racaffinityClass(e), attribute + ": " + e);
                assertTrue(rootOf(e) instanceof IllegalStateException, attribute + ": " + rootOf(e));
            }
            Exception set = assertThrows(Exception.class,
                    () -> MBS.setAttribute(on, new Attribute("UseStrictXAAffinity", true)));
            assertEquals(null, racaffinityClass(set), String.valueOf(set));
            for (String op : new String[] {"markDown", "applyEvent"}) {
                Exception e = assertThrows(Exception.class, () -> MBS.invoke(on, op, new Object[] {"A"}, STRING), op);
                assertEquals(null, racaffinityClass(e), op + ": " + e);
                // Not the caller's argument: the cluster is gone.
                assertTrue(rootOf(e) instanceof IllegalStateException, op + ": " + rootOf(e));
            }
        } finally {
            ClusterMonitor.unregister(on);
            c.close();
        }
    }

    /**
     * Registering the MXBean of a cluster already closed would show a bean whose every attribute throws: it is
     * refused with the JDK exception the bean's attributes would throw, and nothing is registered.
     */
    @Test
    void registeringAClosedClusterIsRefusedAndRegistersNothing() throws Exception {
        Cluster c = Cluster.fromConfig("name = jmx-closed-first; nodes = A");
        c.close();
        ObjectName on = ClusterMonitor.objectName("jmx-closed-first");
        try {
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> ClusterMonitor.register(c));
            assertTrue(e.getMessage().contains("closed"), e.getMessage());
            assertFalse(MBS.isRegistered(on), "a closed cluster's MXBean was registered");
        } finally {
            ClusterMonitor.unregister(on);
        }
    }
}
