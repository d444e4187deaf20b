package io.racaffinity.test;

import java.util.Hashtable;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import javax.naming.Context;
import javax.naming.NameNotFoundException;
import javax.naming.spi.InitialContextFactory;

/** A JNDI provider over a static map, standing in for an app server's naming tree (one pool per instance). */
public final class MemoryContextFactory implements InitialContextFactory {
    public static final Map<String, Object> BINDINGS = new ConcurrentHashMap<>();
    public static final AtomicInteger LOOKUPS = new AtomicInteger();

    @Override
    public Context getInitialContext(Hashtable<?, ?> environment) {
        return Stubs.proxy(Context.class, "MemoryContext", (proxy, m, args) -> {
            switch (m.getName()) {
                case "lookup":
                    LOOKUPS.incrementAndGet();
                    String name = String.valueOf(args[0]);
                    Object o = BINDINGS.get(name);
                    if (o == null) {
                        throw new NameNotFoundException(name + " is not bound");
                    }
                    return o;
                case "close":
                    return null;
                default:
                    throw new UnsupportedOperationException(m.getName());
            }
        });
    }
}
