package io.racaffinity.jmx;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.NodeState;
import io.racaffinity.Route;
import io.racaffinity.RouteKind;
import io.racaffinity.Scope;
import io.racaffinity.StrictAffinityException;
import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.test.LogCapture;
import io.racaffinity.test.Stubs;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import javax.management.Attribute;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import javax.management.openmbean.CompositeData;
import javax.management.openmbean.TabularData;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

class JmxTest {
    private static final MBeanServer MBS = ManagementFactory.getPlatformMBeanServer();
    private static final String[] STRING = {String.class.getName()};

    private static AffinityDataSource ds(String name) {
        Map<String, DataSource> stubs = new LinkedHashMap<>();
        for (String n : new String[] {"MYDB1", "MYDB2", "MYDB3"}) {
            stubs.put(n, Stubs.dataSource(n, Map.of(), new AtomicInteger()));
        }
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = " + name + "; nodes = MYDB1, MYDB2, MYDB3");
        ds.setNodeDataSources(stubs);
        ds.setHeartbeatIntervalMillis(0);
        return ds;
    }

    private static Map<String, Object> table(Object attr) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (Object row : ((TabularData) attr).values()) {
            CompositeData d = (CompositeData) row;
            m.put((String) d.get("key"), d.get("value"));
        }
        return m;
    }

    @Test
    void oneMBeanPerClusterIsRegisteredOnInitAndUnregisteredOnClose() throws Exception {
        ObjectName on = new ObjectName("io.racaffinity:type=Cluster,name=jmx-life");
        AffinityDataSource ds = ds("jmx-life");
        assertFalse(MBS.isRegistered(on), "nothing before initialisation");
        ds.init();
        assertEquals(on, ds.getObjectName());
        assertTrue(MBS.isRegistered(on));
        ds.close();
        assertFalse(MBS.isRegistered(on));
    }

    @Test
    void attributesAreReadableThroughThePlatformMBeanServer() throws Exception {
        try (AffinityDataSource ds = ds("jmx-read")) {
            ObjectName on = ds.getObjectName();
            Cluster c = ds.getCluster();
            c.pick().close();
            assertEquals("jmx-read", MBS.getAttribute(on, "Name"));
            assertArrayEquals(new String[] {"MYDB1", "MYDB2", "MYDB3"}, (String[]) MBS.getAttribute(on, "NodeNames"));
            assertEquals(Map.of("MYDB1", "UP", "MYDB2", "UP", "MYDB3", "UP"),
                    table(MBS.getAttribute(on, "NodeStates")));
            assertEquals(1L, MBS.getAttribute(on, "TotalPicks"));
            assertEquals(1L, table(MBS.getAttribute(on, "NodePicks")).values().stream()
                    .mapToLong(v -> (Long) v).sum());
            assertTrue(((String) MBS.getAttribute(on, "MetricsJson")).contains("\"cluster\":\"jmx-read\""));
            assertTrue(((String) MBS.getAttribute(on, "MetricsPrometheus")).contains("cluster=\"jmx-read\""));
            for (String a : new String[] {"NodeInFlight", "NodeFailures", "NodeProbeMisses", "NodeDownCauses"}) {
                assertEquals(3, table(MBS.getAttribute(on, a)).size(), a);
            }
            MBeanAttributeInfo[] attrs = MBS.getMBeanInfo(on).getAttributes();
            for (String strict : new String[] {"UseStrictXAAffinity", "UseStrictWebSessionAffinity"}) {
                MBeanAttributeInfo info = Arrays.stream(attrs).filter(a -> a.getName().equals(strict)).findFirst()
                        .orElseThrow();
                assertTrue(info.isReadable() && info.isWritable(), strict + " is read-write");
            }
        }
    }

    @Test
    void strictSwitchesAreWritableAtRuntime() throws Exception {
        try (AffinityDataSource ds = ds("jmx-strict")) {
            ObjectName on = ds.getObjectName();
            Cluster c = ds.getCluster();
            byte[] g = "gtrid-jmx".getBytes(StandardCharsets.UTF_8);
            assertEquals(false, MBS.getAttribute(on, "UseStrictXAAffinity"));
            MBS.setAttribute(on, new Attribute("UseStrictXAAffinity", true));
            assertTrue(c.isStrict(Scope.TRANSACTION));
            assertEquals(true, MBS.getAttribute(on, "UseStrictXAAffinity"));

            Route r = c.txBegin(g);
            MBS.invoke(on, "markDown", new Object[] {r.nodeName()}, STRING);
            assertEquals(NodeState.DOWN, c.nodeState(r.node()));
            assertThrows(StrictAffinityException.class, () -> c.txBegin(g));
            MBS.setAttribute(on, new Attribute("UseStrictXAAffinity", false));
            assertEquals(RouteKind.REPINNED, c.txBegin(g).kind(), "soft again: the branch re-places");

            MBS.setAttribute(on, new Attribute("UseStrictWebSessionAffinity", true));
            assertTrue(c.isStrict(Scope.SESSION));
            assertEquals(true, MBS.getAttribute(on, "UseStrictWebSessionAffinity"));
            MBS.setAttribute(on, new Attribute("UseStrictWebSessionAffinity", false));
            assertFalse(c.isStrict(Scope.SESSION));
            MBS.setAttribute(on, new Attribute("UseStrictDataAffinity", true));
            assertTrue(c.isStrict(Scope.DATA));
        }
    }

    @Test
    void operationsChangeNodeStates() throws Exception {
        try (AffinityDataSource ds = ds("jmx-ops")) {
            ObjectName on = ds.getObjectName();
            Cluster c = ds.getCluster();
            MBS.invoke(on, "drain", new Object[] {"MYDB2"}, STRING);
            assertEquals(NodeState.DRAINING, c.nodeState("MYDB2"));
            MBS.invoke(on, "markDown", new Object[] {"mydb2"}, STRING);
            assertEquals(NodeState.DOWN, c.nodeState("MYDB2"));
            assertEquals("admin", table(MBS.getAttribute(on, "NodeDownCauses")).get("MYDB2"));
            MBS.invoke(on, "markUp", new Object[] {"MYDB2"}, STRING);
            assertEquals(NodeState.UP, c.nodeState("MYDB2"));
            Exception e = assertThrows(Exception.class,
                    () -> MBS.invoke(on, "markDown", new Object[] {"NOPE"}, STRING));
            Throwable t = e;
            while (t != null && !(t instanceof IllegalArgumentException)) {
                t = t.getCause();
            }
            assertTrue(t != null && t.getMessage().contains("NOPE"), String.valueOf(e));
            assertEquals(1, MBS.invoke(on, "applyEvent", new Object[] {"SERVICEMEMBER VERSION=1.0 service=svc"
                    + " database=orcl instance=MYDB3 host=h3 status=down reason=FAILURE card=1"}, STRING));
            assertEquals(NodeState.DOWN, c.nodeState("MYDB3"));
        }
    }

    /**
     * A data source over a cluster the application gives it, whose name another cluster's MXBean holds (another
     * data source's own cluster): its cluster shows in JMX nowhere, a clash to warn about as for a data source's
     * own cluster. Only the application's own registration of that very cluster is expected, and logged at DEBUG.
     */
    @Test
    void aGivenClusterWhoseNameAnotherClusterHoldsIsWarnedAbout() throws Exception {
        Map<String, DataSource> stubs = new LinkedHashMap<>();
        for (String n : new String[] {"MYDB1", "MYDB2", "MYDB3"}) {
            stubs.put(n, Stubs.dataSource(n, Map.of(), new AtomicInteger()));
        }
        try (AffinityDataSource own = ds("jmx-given-clash");
                Cluster given = Cluster.fromConfig("name = jmx-given-clash; nodes = MYDB1, MYDB2, MYDB3");
                LogCapture log = new LogCapture()) {
            own.init();
            try (AffinityDataSource shared = new AffinityDataSource()) {
                shared.setCluster(given);
                shared.setNodeDataSources(stubs);
                shared.setHeartbeatIntervalMillis(0);
                shared.init();
                assertEquals(null, shared.getObjectName());
                assertTrue(log.at(java.util.logging.Level.WARNING).stream()
                        .anyMatch(m -> m.contains("jmx-given-clash") && m.contains("already registered")), log.all());
            }
        }
        try (Cluster mine = Cluster.fromConfig("name = jmx-given-own; nodes = MYDB1, MYDB2, MYDB3");
                LogCapture log = new LogCapture()) {
            ObjectName on = ClusterMonitor.register(mine);
            try (AffinityDataSource shared = new AffinityDataSource()) {
                shared.setCluster(mine);
                shared.setNodeDataSources(stubs);
                shared.setHeartbeatIntervalMillis(0);
                shared.init();
                assertEquals(List.of(), log.at(java.util.logging.Level.WARNING), "the application registered it");
            } finally {
                ClusterMonitor.unregister(on);
            }
        }
    }

    /**
     * The application unregisters a cluster's MXBean through the MBean server, not ClusterMonitor.unregister, and
     * registers another cluster's under the name: isRegistered answers for the MXBean that is there, not for
     * what register() once put there (a data source over the first cluster would take the name's holder for
     * its own MXBean and log the clash at DEBUG).
     */
    @Test
    void isRegisteredFollowsAnMXBeanUnregisteredThroughTheMBeanServer() throws Exception {
        try (Cluster first = Cluster.fromConfig("name = jmx-direct; nodes = MYDB1, MYDB2");
                Cluster second = Cluster.fromConfig("name = jmx-direct; nodes = MYDB1, MYDB2")) {
            ObjectName on = ClusterMonitor.register(first);
            try {
                assertTrue(ClusterMonitor.isRegistered(first));
                MBS.unregisterMBean(on);
                assertFalse(ClusterMonitor.isRegistered(first), "unregistered through the MBean server");
                MBS.registerMBean(new ClusterMonitor(second), on);
                assertFalse(ClusterMonitor.isRegistered(first), "another cluster's MXBean holds the name");
                assertTrue(ClusterMonitor.isRegistered(second), "the application registered it itself");
                ClusterMonitor.unregister(on);
                assertFalse(ClusterMonitor.isRegistered(second));
                assertEquals(on, ClusterMonitor.register(first), "the name is free again");
                assertTrue(ClusterMonitor.isRegistered(first));
                assertFalse(ClusterMonitor.isRegistered(second));
            } finally {
                ClusterMonitor.unregister(on);
            }
        }
    }

    /**
     * Decided, as HikariCP does for a pool name already registered: the second data source logs a WARNING and
     * runs without an MXBean rather than failing its start. Its close leaves the first one's MXBean, the
     * first one's close removes it, and a data source of that name started later registers again.
     */
    @Test
    void aSecondDataSourceOfTheSameClusterNameRegistersNone() throws Exception {
        ObjectName on = ClusterMonitor.objectName("jmx-twice");
        try (AffinityDataSource a = ds("jmx-twice"); AffinityDataSource b = ds("jmx-twice")) {
            assertEquals(on, a.getObjectName());
            assertEquals(null, b.getObjectName());
            b.close();
            assertTrue(MBS.isRegistered(on), "the second one's close took the first one's MXBean");
            assertEquals(a.getCluster().name(), MBS.getAttribute(on, "Name"));
        }
        assertFalse(MBS.isRegistered(on));
        try (AffinityDataSource again = ds("jmx-twice")) {
            assertEquals(on, again.getObjectName(), "the name is free again");
            assertTrue(MBS.isRegistered(on));
        }
        assertFalse(MBS.isRegistered(on));
        assertEquals(new ObjectName("io.racaffinity:type=Cluster,name=\"a,b\""), ClusterMonitor.objectName("a,b"));
    }
}
