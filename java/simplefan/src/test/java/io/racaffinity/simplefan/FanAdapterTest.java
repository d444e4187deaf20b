package io.racaffinity.simplefan;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import io.racaffinity.jdbc.AffinityDataSource;
import java.util.ArrayList;
import java.util.Date;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import javax.sql.DataSource;
import oracle.simplefan.LoadAdvisoryEvent;
import oracle.simplefan.NodeDownEvent;
import oracle.simplefan.NodeUpEvent;
import oracle.simplefan.ServiceDownEvent;
import oracle.simplefan.ServiceUpEvent;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * simplefan's own event classes (its abstract public types, subclassed here as its
 * implementation does: no ONS server is reachable here) through the adapter into a real
 * core cluster, whose node states and load-balancing shares are then read back.
 */
class FanAdapterTest {
    static final String CONFIG = "name = fan; database = orcl; service = svc; nodes = RAC1, RAC2, RAC3;"
            + " node.RAC1.address = host1:1521; node.RAC2.address = host2:1521; node.RAC3.address = host3:1521";
    Cluster cluster;
    List<String> lines = new ArrayList<>();
    FanAdapter fan;

    @BeforeEach
    void start() {
        cluster = Cluster.fromConfig(CONFIG);
        fan = new FanAdapter(line -> {
            lines.add(line);
            return cluster.applyEvent(line);
        });
    }

    @AfterEach
    void stop() {
        cluster.close();
    }

    static ServiceDownEvent serviceDown(String instance, String host, ServiceDownEvent.Reason reason, int drain,
            ServiceDownEvent.EventKind kind, String service) {
        return serviceDown(instance, host, reason, drain, kind, service, new Date(0));
    }

    static ServiceDownEvent serviceDown(String instance, String host, ServiceDownEvent.Reason reason, int drain,
            ServiceDownEvent.EventKind kind, String service, Date at) {
        ServiceDownEvent.ServiceMemberEvent member = instance == null ? null
                : new ServiceDownEvent.ServiceMemberEvent() {
                    private static final long serialVersionUID = 1L;

                    @Override
                    public String getInstanceName() {
                        return instance;
                    }

                    @Override
                    public String getNodeName() {
                        return host;
                    }
                };
        return new ServiceDownEvent("ons", at) {
            private static final long serialVersionUID = 1L;

            @Override
            public EventKind getKind() {
                return kind;
            }

            @Override
            public String getServiceName() {
                return service;
            }

            @Override
            public String getDatabaseUniqueName() {
                return "orcl";
            }

            @Override
            public Reason getReason() {
                return reason;
            }

            @Override
            public int getDrainTimeout() {
                return drain;
            }

            @Override
            public ServiceMemberEvent getServiceMemberEvent() {
                return member;
            }
        };
    }

    static ServiceUpEvent serviceUp(String instance, String host) {
        ServiceUpEvent.ServiceMemberEvent member = new ServiceUpEvent.ServiceMemberEvent() {
            private static final long serialVersionUID = 1L;

            @Override
            public String getInstanceName() {
                return instance;
            }

            @Override
            public String getNodeName() {
                return host;
            }
        };
        return new ServiceUpEvent("ons", new Date(1_000)) {
            private static final long serialVersionUID = 1L;

            @Override
            public EventKind getKind() {
                return EventKind.MEMBER;
            }

            @Override
            public String getServiceName() {
                return "svc";
            }

            @Override
            public String getDatabaseUniqueName() {
                return "orcl";
            }

            @Override
            public Reason getReason() {
                return Reason.USER;
            }

            @Override
            public int getCardinality() {
                return 3;
            }

            @Override
            public ServiceMemberEvent getServiceMemberEvent() {
                return member;
            }
        };
    }

    static NodeDownEvent nodeDown(String host) {
        return new NodeDownEvent("ons", new Date(0)) {
            private static final long serialVersionUID = 1L;

            @Override
            public String getNodeName() {
                return host;
            }

            @Override
            public int getIncarnation() {
                return 7;
            }
        };
    }

    static NodeUpEvent nodeUp(String host) {
        return new NodeUpEvent("ons", new Date(1_000)) {
            private static final long serialVersionUID = 1L;

            @Override
            public String getNodeName() {
                return host;
            }

            @Override
            public int getIncarnation() {
                return 8;
            }
        };
    }

    static LoadAdvisoryEvent advice(String instance, int percent, LoadAdvisoryEvent.LoadStatus status) {
        return new LoadAdvisoryEvent("ons", new Date(0)) {
            private static final long serialVersionUID = 1L;

            @Override
            public String getServiceName() {
                return "svc";
            }

            @Override
            public String getDatabaseUniqueName() {
                return "orcl";
            }

            @Override
            public String getInstanceName() {
                return instance;
            }

            @Override
            public int getPercent() {
                return percent;
            }

            @Override
            public int getServiceQuality() {
                return 100;
            }

            @Override
            public LoadStatus getLoadStatus() {
                return status;
            }
        };
    }

    @Test
    void aFailedMemberIsDownAndItsServiceUpRestoresIt() {
        fan.handleEvent(serviceDown("RAC2", "host2", ServiceDownEvent.Reason.FAILURE, 0,
                ServiceDownEvent.EventKind.MEMBER, "svc"));
        assertEquals(NodeState.DOWN, cluster.nodeState("RAC2"), lines.toString());
        assertEquals(NodeState.UP, cluster.nodeState("RAC1"));
        assertEquals("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=RAC2 host=host2 status=down"
                + " reason=FAILURE timestamp=1970-01-01 00:00:00", lines.get(0));
        fan.handleEvent(serviceUp("RAC2", "host2"));
        assertEquals(NodeState.UP, cluster.nodeState("RAC2"), lines.toString());
    }

    @Test
    void aPlannedStopWithADrainTimeoutDrains() {
        // Dated now: the core ends a FAN drain at the event's timestamp plus its
        // drain_timeout (docs/semantics.md), so one dated 1970 would end at once.
        fan.handleEvent(serviceDown("RAC3", "host3", ServiceDownEvent.Reason.USER, 60,
                ServiceDownEvent.EventKind.MEMBER, "svc", new Date()));
        assertEquals(NodeState.DRAINING, cluster.nodeState("RAC3"), lines.toString());
        assertTrue(lines.get(0).contains(" reason=USER drain_timeout=60 "), lines.get(0));
    }

    @Test
    void aNodeDownEventTakesDownTheNodesOnThatHostAndNodeUpRestoresThem() {
        fan.handleEvent(nodeDown("host1"));
        assertEquals(NodeState.DOWN, cluster.nodeState("RAC1"), lines.toString());
        assertEquals(NodeState.UP, cluster.nodeState("RAC2"));
        fan.handleEvent(nodeUp("host1"));
        assertEquals(NodeState.UP, cluster.nodeState("RAC1"), lines.toString());
    }

    @Test
    void aCompositeServiceDownTakesDownEveryNode() {
        fan.handleEvent(serviceDown(null, null, ServiceDownEvent.Reason.FAILURE, 0,
                ServiceDownEvent.EventKind.COMPOSITE, "svc"));
        for (String n : List.of("RAC1", "RAC2", "RAC3")) {
            assertEquals(NodeState.DOWN, cluster.nodeState(n), n + ": " + lines);
        }
    }

    @Test
    void loadAdvisoriesOfEachInstanceAddUpToOneAdvisory() {
        fan.handleEvent(advice("RAC1", 60, LoadAdvisoryEvent.LoadStatus.GOOD));
        fan.handleEvent(advice("RAC2", 30, LoadAdvisoryEvent.LoadStatus.GOOD));
        fan.handleEvent(advice("RAC3", 10, LoadAdvisoryEvent.LoadStatus.VIOLATING));
        Map<String, Integer> percent = cluster.nodeMetrics().stream()
                .collect(Collectors.toMap(NodeMetrics::name, NodeMetrics::rlbPercent));
        assertEquals(Map.of("RAC1", 60, "RAC2", 30, "RAC3", 10), percent, lines.toString());
        assertTrue(lines.get(2).contains("{instance=RAC1 percent=60 flag=GOOD} {instance=RAC2 percent=30 flag=GOOD}"
                + " {instance=RAC3 percent=10 flag=VIOLATING}"), lines.get(2));
        // A later advice for one instance replaces only its entry.
        fan.handleEvent(advice("RAC1", 20, LoadAdvisoryEvent.LoadStatus.GOOD));
        assertEquals(20, cluster.nodeMetrics().get(0).rlbPercent());
        assertEquals(30, cluster.nodeMetrics().get(1).rlbPercent());
    }

    @Test
    void aForeignOrUnknownEventIsDroppedWithoutThrowing() {
        fan.handleEvent(serviceDown("RAC2", "host2", ServiceDownEvent.Reason.FAILURE, 0,
                ServiceDownEvent.EventKind.MEMBER, "othersvc"));
        fan.handleEvent(serviceDown("RAC9", "host9", ServiceDownEvent.Reason.FAILURE, 0,
                ServiceDownEvent.EventKind.MEMBER, "svc"));
        fan.handleEvent(nodeDown("nohost"));
        for (String n : List.of("RAC1", "RAC2", "RAC3")) {
            assertEquals(NodeState.UP, cluster.nodeState(n), n);
        }
        assertEquals(3, lines.size());
    }

    @Test
    void theDataSourceConstructorFeedsTheDataSourcesCluster() throws Exception {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig(CONFIG.replace("name = fan", "name = fan-ds"));
        Map<String, DataSource> nodes = new java.util.LinkedHashMap<>();
        for (String n : List.of("RAC1", "RAC2", "RAC3")) {
            // Never connected: the test reads node states only.
            nodes.put(n, new PGSimpleDataSource());
        }
        ds.setNodeDataSources(nodes);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        try {
            new FanAdapter(ds).handleEvent(nodeDown("host2"));
            assertEquals(NodeState.DOWN, ds.getCluster().nodeState("RAC2"));
        } finally {
            ds.close();
        }
    }
}
