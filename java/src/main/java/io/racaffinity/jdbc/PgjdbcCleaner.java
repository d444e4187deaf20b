package io.racaffinity.jdbc;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandleProxies;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.reflect.Method;
import java.util.concurrent.Callable;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.TimeUnit;

/**
 * Starts pgjdbc's {@code PostgreSQL-JDBC-Cleaner} thread so that it holds no web
 * application's class loader, and keeps it running while the data source is open.
 *
 * <p>pgjdbc starts that thread (one per driver) with the first connection it watches and
 * ends it 30 s after the last one is closed. Before Java 24 a thread inherits the
 * protection domains of every class on its creator's stack, each naming its class loader.
 * With racaffinity (and HikariCP) in {@code WEB-INF/lib} and pgjdbc in Tomcat's {@code lib/},
 * the thread is started under the library's frames and so holds that deployment's loader;
 * the next deployment's connections keep the thread alive, so after a redeploy the old
 * application stays loaded for as long as the new one has a connection open (Tomcat's
 * {@code findleaks} names it). {@link NodeConnect}'s privileged block does not help there:
 * it cuts the stack at the library, whose own domain is the application's.
 *
 * <p>So before any node pool connects, the data source registers an object of its own with
 * pgjdbc's cleaner from a stack that holds no application class: a method handle proxy
 * (a JDK class) run on a fresh {@link ForkJoinPool} worker, which the JDK creates with a
 * context of its own. If the thread was not running, it starts there, clean; it then keeps
 * running while that object is registered, so the pools' threads never start it.
 * {@link #close()} (the data source's close) withdraws the object. Nothing to do when
 * pgjdbc is absent, or from Java 24 on.
 */
final class PgjdbcCleaner implements AutoCloseable {
    private static final boolean INHERITS_CONTEXT = Runtime.version().feature() < 24;
    private static final String LAZY_CLEANER = "org.postgresql.util.LazyCleaner";

    private final Object registration;
    private final Method clean;
    // Registered with pgjdbc's cleaner (a phantom reference): strongly held until close.
    @SuppressWarnings({"unused", "FieldCanBeLocal"})
    private final Object sentinel;

    private PgjdbcCleaner(Object sentinel, Object registration, Method clean) {
        this.sentinel = sentinel;
        this.registration = registration;
        this.clean = clean;
    }

    /**
     * @param loaders where to look for pgjdbc, in order (nulls skipped)
     * @return the registration to close with the data source, or null (no pgjdbc, Java 24+,
     *     or pgjdbc without this cleaner)
     */
    static PgjdbcCleaner hold(ClassLoader... loaders) {
        if (!INHERITS_CONTEXT) {
            return null;
        }
        Class<?> cls = null;
        for (ClassLoader l : loaders) {
            if (l == null) {
                continue;
            }
            try {
                cls = Class.forName(LAZY_CLEANER, true, l);
                break;
            } catch (ClassNotFoundException | LinkageError e) {
                // not visible from this loader
            }
        }
        if (cls == null) {
            return null;
        }
        try {
            Object cleaner = cls.getMethod("getInstance").invoke(null);
            Method register = null;
            for (Method m : cls.getMethods()) {
                if (m.getName().equals("register") && m.getParameterCount() == 2
                        && m.getParameterTypes()[0] == Object.class) {
                    register = m;
                }
            }
            if (register == null) {
                return null;
            }
            Object sentinel = new Object();
            MethodHandle call = MethodHandles.publicLookup().unreflect(register).bindTo(cleaner);
            call = MethodHandles.insertArguments(call, 0, sentinel, null).asType(MethodType.methodType(Object.class));
            @SuppressWarnings("unchecked")
            Callable<Object> task = MethodHandleProxies.asInterfaceInstance(Callable.class, call);
            ForkJoinPool pool = new ForkJoinPool(1);
            Object registration;
            try {
                registration = pool.submit(task).get(10, TimeUnit.SECONDS);
            } finally {
                pool.shutdown();
            }
            // Through the public interface register returns (its implementation is private).
            Method clean = register.getReturnType().getMethod("clean");
            return new PgjdbcCleaner(sentinel, registration, clean);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return null;
        } catch (Exception | LinkageError e) {
            // Best effort: without it the driver starts its thread as before.
            System.getLogger(PgjdbcCleaner.class.getName()).log(System.Logger.Level.DEBUG,
                    "pgjdbc's cleaner thread could not be started cleanly", e);
            return null;
        }
    }

    @Override
    public void close() {
        try {
            clean.invoke(registration);
        } catch (ReflectiveOperationException | RuntimeException e) {
            // the registration goes when the sentinel is collected
        }
    }
}
