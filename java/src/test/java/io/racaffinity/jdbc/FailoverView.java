package io.racaffinity.jdbc;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.sql.Connection;
import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * What a data source's fast connection failover saw of one node, for the message of a test whose
 * connection was not aborted at a hard Down: it names which side missed it and why (an upkeep that never
 * looked, or looked and found nothing registered). Reads private state by reflection, so the product keeps
 * no accessor only a failing test needs.
 */
public final class FailoverView {
    private FailoverView() {}

    /** The upkeep of {@code ds} and whether {@code c} (its connection) is registered in use on {@code node}. */
    public static String of(AffinityDataSource ds, int node, Connection c) {
        StringBuilder sb = new StringBuilder("AffinityDataSource: ");
        upkeep(sb, (PoolMaintenance) field(ds, "maintenance"), node);
        try {
            Connection physical = c instanceof AffinityConnection ? (Connection) field(c, "delegate") : null;
            NodeFailover f = (NodeFailover) field(ds, "failover");
            sb.append(", connection registered in use on the node: ").append(physical != null && holds(f, node, physical));
        } catch (RuntimeException e) {
            sb.append(", registration unknown: ").append(e);
        }
        return sb.toString();
    }

    /** The upkeep of {@code xads} and whether its router tracks {@code xc} with a session on {@code node}. */
    public static String of(AffinityXADataSource xads, int node, Object xc) {
        StringBuilder sb = new StringBuilder("AffinityXADataSource: ");
        upkeep(sb, (PoolMaintenance) field(xads, "watch"), node);
        try {
            Object router = field(xads, "router");
            Method open = router.getClass().getDeclaredMethod("openConnections");
            open.setAccessible(true);
            Object[] cs = (Object[]) open.invoke(router);
            sb.append(", XAConnection tracked by the router: ").append(Arrays.asList(cs).contains(xc));
            Object[] byNode = (Object[]) field(xc, "byNode");
            Object p = node < byNode.length ? byNode[node] : null;
            sb.append(", its session on the node: ").append(p == null ? "none" : "broken=" + field(p, "broken"));
            Object h = field(xc, "handle");
            sb.append(", handle failedOn: ").append(h == null ? "no handle" : field(h, "failedOn"));
        } catch (ReflectiveOperationException | RuntimeException e) {
            sb.append(", router view unknown: ").append(e);
        }
        return sb.toString();
    }

    private static void upkeep(StringBuilder sb, PoolMaintenance m, int node) {
        if (m == null) {
            sb.append("no upkeep");
            return;
        }
        Object[] last = (Object[]) field(m, "last");
        Thread t = (Thread) field(m, "thread");
        sb.append("upkeep saw the node ").append(last[node]).append(" after ").append(m.rounds()).append(" round(s)")
                .append(", thread ").append(t.getName()).append(' ').append(t.getState());
        if (t.isAlive()) {
            sb.append(" at ").append(Arrays.stream(t.getStackTrace()).limit(12).map(String::valueOf)
                    .collect(Collectors.joining(" < ")));
        }
    }

    private static boolean holds(NodeFailover f, int node, Connection c) {
        Object[] first = (Object[]) field(f, "first");
        for (int i = node * NodeFailover.SEGMENT; i < (node + 1) * NodeFailover.SEGMENT; i++) {
            if (first[i] == c) {
                return true;
            }
        }
        Object[] slots = (Object[]) field(f, "slots");
        for (Object s = field(slots[node], "next"); s != null; s = field(s, "next")) {
            if (Arrays.asList((Object[]) field(s, "cells")).contains(c)) {
                return true;
            }
        }
        return false;
    }

    static Object field(Object o, String name) {
        for (Class<?> k = o.getClass(); k != null; k = k.getSuperclass()) {
            try {
                Field f = k.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(o);
            } catch (NoSuchFieldException e) {
                // a superclass's
            } catch (IllegalAccessException e) {
                throw new IllegalStateException(e);
            }
        }
        throw new IllegalStateException(o.getClass() + " has no field " + name);
    }
}
