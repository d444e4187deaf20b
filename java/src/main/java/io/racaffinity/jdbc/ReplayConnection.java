package io.racaffinity.jdbc;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.Continuity;
import io.racaffinity.Continuity.Action;
import io.racaffinity.Continuity.CommitOutcome;
import io.racaffinity.Continuity.ErrorClass;
import io.racaffinity.Continuity.Refusal;
import io.racaffinity.Continuity.ReplayRefusedException;
import io.racaffinity.Continuity.Step;
import io.racaffinity.Continuity.SqlReading;
import io.racaffinity.Continuity.TransactionControl;
import io.racaffinity.ReplayCounts;
import java.io.InputStream;
import java.io.Reader;
import java.lang.System.Logger.Level;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.sql.Array;
import java.sql.Blob;
import java.sql.CallableStatement;
import java.sql.Clob;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.Ref;
import java.sql.ResultSet;
import java.sql.RowId;
import java.sql.SQLXML;
import java.sql.SQLException;
import java.sql.SQLNonTransientConnectionException;
import java.sql.Statement;
import java.sql.Struct;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import javax.sql.DataSource;

/**
 * Request replay for one connection of an {@link AffinityDataSource} with {@code replay=true}
 * (docs/continuity.md, "Java"). The application gets a proxy of {@link Connection}; every call on
 * it and on the statements and result sets it returns goes through here, is run on the current
 * node's connection and recorded, with a digest of what it answered, since the transaction began.
 * On a recoverable failure the core decides, step by step ({@link Cluster#replayStep}), whether
 * the COMMIT in flight is checked (and forced) on a node, whether the recorded calls are run again
 * on another node (once), or the original error surfaces with a {@link ReplayRefusedException}
 * cause. A replay whose answers differ from those the application read is abandoned. The
 * application's statements and result sets follow the replay: their proxies point at the new
 * node's objects afterwards.
 *
 * <p>Not replayed (the core's {@code not_replayable}): a request that reached the driver's
 * connection ({@code unwrap}, {@code getMetaData}, large objects, arrays, streams,
 * {@code setSavepoint}) or sent transaction control other than savepoints as SQL text
 * ({@code COMMIT}, {@code END}, {@code ROLLBACK}, {@code BEGIN}...; a failure of a committing one is
 * {@code outcome_unknown}), a connection that set session state by SQL text once the transaction
 * that did it ended ({@code SET search_path}, {@code PREPARE}, session advisory locks...: the state is
 * in no record), and a statement that failed in auto-commit mode (it is its own
 * commit, whose xid is unknown: {@code outcome_unknown}). {@code setAutoCommit(true)} inside a
 * transaction commits it as {@code commit()} does, outcome guarded. The request boundaries are JDBC 4.3's: {@code beginRequest()} when
 * the connection is handed out, {@code endRequest()} when it is closed.
 */
final class ReplayConnection {
    private static final System.Logger LOG = System.getLogger("io.racaffinity.jdbc.AffinityDataSource");
    /** Steps of one recovery at most: check, force, check, replay (the core bounds replays to one). */
    private static final int MAX_STEPS = 8;
    /** Texts whose transaction control is kept, and the longest text kept (as Python's _continuity). */
    static final int CONTROLS_MAX = 1024;
    static final int CONTROL_TEXT_MAX = 4096;
    /**
     * Requests send the same texts again and again: the transaction control of a short one is kept (a
     * long one is read anew, not held in memory), and the whole map is dropped when full, which a
     * workload of more distinct texts than that pays with one JNI call per text, as before.
     */
    private static final ConcurrentHashMap<String, SqlReading> CONTROLS = new ConcurrentHashMap<>();
    /**
     * The node pools' physical connections on which a replay connection ran SQL text that set
     * session state: the pool hands them to later checkouts with that state, which no record holds
     * (weak: the pools own them; identity, as drivers' connections compare).
     */
    private static final Map<Object, Boolean> SESSION_SET = java.util.Collections.synchronizedMap(
            new java.util.WeakHashMap<>());
    /** Reads of a text's transaction control from the library, for tests. */
    private static final LongAdder CONTROL_READS = new LongAdder();

    /** What a result set's calls write to the database (the update* calls only fill its row). */
    private static final Set<String> WRITES_THROUGH_RESULT_SET = Set.of("updateRow", "insertRow", "deleteRow");

    /** One recorded call: on object {@code target}, creating object {@code created} or answering {@code hash}. */
    private record Call(int target, Method method, Object[] args, int created, long hash) {}

    private final AffinityDataSource owner;
    /** The credentials of {@code getConnection(user, password)}, for the replay's connection (null: the data source's). */
    private final String user;
    private final String password;
    private final Connection proxy;
    /** Volatile: {@code abort} reads it without the lock a hung call holds. */
    private volatile AffinityConnection current;
    /** Object id → the current node's object (0: the connection). */
    private final List<Object> targets = new ArrayList<>();
    /** Object id → whether it is a result set (never kept across a transaction's end). */
    private final List<Boolean> resultSets = new ArrayList<>();
    /** The calls since the transaction began, and what sets the session and the open statements up. */
    private final List<Call> log = new ArrayList<>();
    /** Object ids whose calls are no longer recorded (result sets of a finished transaction). */
    private final List<Boolean> stale = new ArrayList<>();
    /** Object id → the proxy the application holds, so that asking for an object again answers the same proxy. */
    private final List<Object> proxies = new ArrayList<>();
    /** Object id → the id of the object whose call created it (-1: none recorded). */
    private final List<Integer> creators = new ArrayList<>();
    /** Digests what calls answered (under this connection's lock, as every call is). */
    private MessageDigest md;
    /** The current node's object → its id. */
    private final Map<Object, Integer> ids = new IdentityHashMap<>();
    /** Statements prepared with SQL that commits the transaction (their execution's outcome is a COMMIT's). */
    private final Set<Integer> committingStatements = new HashSet<>();
    /** Statements prepared (or batched) with SQL text that sets session state. */
    private final Set<Integer> sessionStatements = new HashSet<>();
    /**
     * SQL text that sets session state ran in the transaction under way: it is replayed in order
     * with it, but once the transaction ends the state is the session's and in no record.
     */
    private boolean sessionTextRan;
    /** Where the calls of the transaction under way begin in {@link #log} (what compaction kept comes before). */
    private int txStart;
    private boolean replayable = true;
    private String why;
    /**
     * A statement's error left the transaction under way aborted (PostgreSQL: every later statement
     * fails 25P02, its COMMIT rolls back), with no statement run since (a ROLLBACK TO SAVEPOINT, the
     * only kind that runs there). Its end can only be a rollback, which a replay of the statements
     * that succeeded, and its COMMIT, would not be.
     */
    private boolean aborted;
    private boolean autoCommit = true;
    private int replays;
    /**
     * Recovery walks running on this connection: a replay's own failure begins one inside the first.
     * Written under the lock only; volatile for {@code isClosed}, which reads it without.
     */
    private volatile int depth;
    private volatile boolean closed;
    /**
     * A COMMIT found committed, or a rollback whose connection failed, left no node connection (no
     * node took the session then): the next call takes one. The transaction ended as the call asked,
     * so the call answers so, whatever becomes of the session.
     */
    private volatile boolean detached;
    /**
     * The session holds state set by SQL text that no record holds (set on it, or on its physical
     * connection by an earlier checkout): it cannot go on on another connection.
     */
    private boolean sessionState;
    /** Why the connection closed by itself (its session could not go on), or null. */
    private volatile String endedBecause;
    /**
     * Held by the call that runs: the record, the targets and the node connection are one
     * application thread's at a time. Not a monitor: {@code isValid} waits for it within its timeout.
     */
    private final java.util.concurrent.locks.ReentrantLock lock = new java.util.concurrent.locks.ReentrantLock();

    private ReplayConnection(AffinityDataSource owner, AffinityConnection first, String user, String password) {
        this.owner = owner;
        this.user = user;
        this.password = password;
        this.current = first;
        targets.add(first);
        ids.put(first, 0);
        creators.add(-1);
        resultSets.add(false);
        stale.add(false);
        this.proxy = (Connection) Proxy.newProxyInstance(ReplayConnection.class.getClassLoader(),
                new Class<?>[] {Connection.class}, new ObjectHandler(this, 0, Connection.class, first));
        proxies.add(proxy);
    }

    static Connection open(AffinityDataSource owner, AffinityConnection first, String user, String password)
            throws SQLException {
        ReplayConnection r = new ReplayConnection(owner, first, user, password);
        try {
            first.beginRequest();
            r.autoCommit = first.getAutoCommit();
            if (sessionSet(first)) {
                // An earlier checkout left session state set by SQL text on this physical
                // connection: this one runs with it, and a replay's new connection would not.
                r.sessionStateHeld(SESSION_STATE + " (by an earlier checkout of its connection)");
            }
        } catch (SQLException | RuntimeException | Error e) {
            // Whatever a driver or pool throws here, the application gets no connection to close:
            // the pooled connection, its lease and its failover slot go back now.
            try {
                first.close();
            } catch (SQLException | RuntimeException closing) {
                e.addSuppressed(closing);
            }
            throw e;
        }
        return r.proxy;
    }

    /** A proxy's handler: its object's id and interface. */
    private static final class ObjectHandler implements InvocationHandler {
        final ReplayConnection owner;
        final int id;
        final Class<?> iface;
        /**
         * The current node's object, for {@code Statement.cancel}, which another thread calls while a
         * statement runs and holds the connection's lock (set under that lock, read without it).
         */
        volatile Object target;

        ObjectHandler(ReplayConnection owner, int id, Class<?> iface, Object target) {
            this.owner = owner;
            this.id = id;
            this.iface = iface;
            this.target = target;
        }

        @Override
        public Object invoke(Object p, Method method, Object[] args) throws Throwable {
            if (method.getDeclaringClass() == Object.class) {
                switch (method.getName()) {
                    case "equals":
                        return p == args[0];
                    case "hashCode":
                        return System.identityHashCode(p);
                    default:
                        return iface.getSimpleName() + "[replay, " + owner.current + "]";
                }
            }
            if (id == 0 && method.getName().equals("abort")) {
                if (args[0] == null) {
                    // Refused before the connection counts as closed: close() would then skip it.
                    throw new SQLException("abort: executor is null", "HY009");
                }
                // From another thread, to end a call that hangs: it must not wait for that call.
                owner.closed = true;
                owner.current.abort((java.util.concurrent.Executor) args[0]);
                return null;
            }
            if (id != 0 && args == null && method.getName().equals("cancel") && !owner.closed
                    && target instanceof Statement s) {
                // JDBC: another thread ends a statement that runs with cancel(), so it must not wait
                // for that statement's lock. Not recorded: a replay never cancels what it runs again
                // (a cancel that comes while a replay runs reaches the failed node's statement only).
                s.cancel();
                return null;
            }
            if (args == null && method.getName().equals("isClosed")) {
                // A watchdog's question while a call runs on another thread: what is known already.
                if (id == 0 || owner.depth == 0) {
                    return owner.isClosed(id, target);
                }
                // A statement's while a recovery runs: its driver's object is the dropped connection's
                // until the recovery points it at the new one; the answer comes then.
                owner.lock.lock();
                try {
                    return owner.isClosed(id, target);
                } finally {
                    owner.lock.unlock();
                }
            }
            if (id != 0 && args == null && method.getName().equals("close") && !owner.closed
                    && target instanceof Statement s && owner.lock.isLocked() && !owner.lock.isHeldByCurrentThread()) {
                // JDBC: another thread closes a statement to stop it. A call runs on the connection
                // (this statement's, most likely): cancelled first, as cancel() does (a no-op for a
                // statement that is not executing), then closed once that call has ended. The close is
                // what the application asked for: a cancel the driver refuses leaves it to the wait.
                try {
                    s.cancel();
                } catch (SQLException | RuntimeException refused) {
                    // closed all the same, once the statement ends by itself
                }
            }
            if (id == 0 && method.getName().equals("isValid") && args[0] instanceof Integer t && t > 0) {
                return owner.isValid(p, method, t);
            }
            owner.lock.lock();
            try {
                return owner.call(p, id, method, args);
            } finally {
                owner.lock.unlock();
            }
        }
    }

    /**
     * {@code isValid(seconds)}: JDBC's timeout bounds the whole check, so a call that runs on another
     * thread holds it that long at most; then the connection is not verified: false, as for a check
     * that did not complete in time. What is left of the timeout goes to the node connection's check.
     */
    private boolean isValid(Object p, Method method, int seconds) throws Throwable {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        try {
            if (!lock.tryLock(seconds, TimeUnit.SECONDS)) {
                return false;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
        try {
            long left = deadline - System.nanoTime();
            // Whole seconds, rounded up: 0 would be no limit.
            int rest = (int) Math.max(1, (left + TimeUnit.SECONDS.toNanos(1) - 1) / TimeUnit.SECONDS.toNanos(1));
            return (Boolean) call(p, 0, method, new Object[] {rest});
        } finally {
            lock.unlock();
        }
    }

    /**
     * Whether object {@code id} (driver's object {@code target}) is closed, without the lock a call
     * of another thread holds: the flags a close or an abort sets, and the driver's object's own
     * answer, which needs no round trip (a statement that ran on a connection given back since, with
     * none taken yet, answers as that connection's: closed).
     */
    private boolean isClosed(int id, Object target) throws SQLException {
        if (closed) {
            return true;
        }
        if (id == 0) {
            // While a recovery runs, the node connection is the one it dropped: the application's goes
            // on unless the recovery ends it (closed).
            return depth == 0 && !detached && current.isClosed();
        }
        return target instanceof Statement s ? s.isClosed() : ((ResultSet) target).isClosed();
    }

    private Object call(Object p, int id, Method method, Object[] args) throws Throwable {
        String name = method.getName();
        int argc = args == null ? 0 : args.length;
        if (detached && !closed && !name.equals("close") && !name.equals("isClosed")
                && !(id == 0 && (name.equals("getAutoCommit") || name.equals("isValid")
                        || name.equals("beginRequest") || name.equals("endRequest")))) {
            // Nothing of the request is lost: its COMMIT committed, and what sets the session up is
            // run again on the connection taken now; no node: the error a getConnection() would give.
            reattach(-1);
            detached = false;
        }
        if (id == 0) {
            if (closed && !name.equals("close") && !name.equals("isClosed") && !name.equals("isValid")
                    && !name.equals("unwrap") && !name.equals("isWrapperFor")) {
                // Closed by the application, an abort or a refusal: the node connection's own answer
                // would be a driver's or pool's (HikariCP's has no SQLState, pgjdbc's 08003 reads as a
                // lost connection), and a rollback() would go on on a new connection nothing closes.
                throw closedError();
            }
            switch (name) {
                case "close":
                    close();
                    return null;
                case "commit":
                    commit();
                    return null;
                case "rollback":
                    if (argc == 0) {
                        rollback();
                        return null;
                    }
                    break;
                case "abort":
                    closed = true;
                    current.abort((java.util.concurrent.Executor) args[0]);
                    return null;
                case "beginRequest":
                case "endRequest":
                    // The application's request boundary (JDBC 4.3): outside a transaction, nothing
                    // before it is replayed again. The driver's are the data source's, at borrow and close.
                    if (!inTransaction()) {
                        compact();
                        // A new request: the core's one replay at most is each request's, not the
                        // connection's (a connection kept for many requests is replayed in each).
                        replays = 0;
                    }
                    return null;
                case "unwrap":
                case "isWrapperFor":
                    if (((Class<?>) args[0]).isInstance(p)) {
                        return name.equals("unwrap") ? p : Boolean.TRUE;
                    }
                    notReplayable(name);
                    return invoke(current, method, args);
                case "getAutoCommit":
                    return autoCommit;
                case "setAutoCommit":
                    if (argc == 1 && Boolean.TRUE.equals(args[0]) && inTransaction()) {
                        // JDBC: this commits the transaction. Sent by the driver inside
                        // setAutoCommit, that COMMIT's lost reply would be replayed blind (no xid
                        // read): commit() first, whose outcome is established before any replay;
                        // the driver's setAutoCommit then finds no transaction to commit.
                        commit();
                        if (closed) {
                            // Committed, and the connection ended with its session (its state set by
                            // SQL text could not go on elsewhere) or was aborted meanwhile: nothing to switch.
                            return null;
                        }
                        if (detached) {
                            // Committed, with no node connection since: the next one is set up in
                            // auto-commit mode, as the application asked.
                            log.add(new Call(0, method, kept(args), -1, 0));
                            autoCommit = true;
                            compact();
                            return null;
                        }
                    }
                    break;
                case "isValid":
                    if (detached) {
                        // No node connection since a COMMIT (or rollback) no node could take the session
                        // after: nothing of it is lost and the next call takes one, failing as a
                        // getConnection() would. A check takes none, so that a pool's or a watchdog's
                        // frequent checks hold no node connection.
                        return !closed;
                    }
                    return invoke(current, method, args);
                case "getWarnings":
                case "clearWarnings":
                    return invoke(current, method, args);
                case "getMetaData":
                case "createBlob":
                case "createClob":
                case "createNClob":
                case "createSQLXML":
                case "createArrayOf":
                case "createStruct":
                case "setSavepoint":
                case "releaseSavepoint":
                case "setNetworkTimeout":
                    notReplayable(name);
                    try {
                        return invoke(current, method, args);
                    } catch (SQLException e) {
                        // Not recorded, but a failure of it is the request's like any other's: walked,
                        // so that it surfaces with its typed refusal (a savepoint's SAVEPOINT on a
                        // connection that failed: NOT_REPLAYABLE), not as the driver's bare error.
                        return recover(e, new Call(0, method, args, -1, 0), false);
                    }
                default:
                    break;
            }
            if (name.equals("rollback") || name.equals("prepareCall")) {
                notReplayable(name);
            }
        } else if (closed) {
            // Closed with their connection (JDBC), whose node connection is gone or given back: the
            // driver's 08003 would read as a lost connection, and a statement in auto-commit mode
            // as one whose outcome is unknown.
            switch (name) {
                case "close":
                    return null;
                default:
                    throw closedError();
            }
        } else if (argc == 0 && name.equals("getStatement") && creators.get(id) > 0
                && !resultSets.get(creators.get(id))) {
            // The statement the application ran it on, not another proxy of the driver's (the
            // node connection's wrappers answer a new one each time).
            return proxies.get(creators.get(id));
        } else if (stale.get(id)) {
            // A result set of a finished transaction: read in memory, not recorded.
            if (!WRITES_THROUGH_RESULT_SET.contains(name)) {
                return wrapUnrecorded(invoke(targets.get(id), method, args));
            }
            // But its updateRow (insertRow, deleteRow) writes in the transaction under way, and a
            // replay without it would commit that transaction without the write: not replayable. In
            // auto-commit mode the write is its own transaction, whose failure has an unknown outcome.
            if (!autoCommit) {
                notReplayable(name + " (a result set of an ended transaction)");
            }
            try {
                return invoke(targets.get(id), method, args);
            } catch (SQLException e) {
                if (autoCommit) {
                    xid = null;
                }
                return recover(e, new Call(id, method, args, -1, 0), autoCommit);
            }
        } else if (argc == 0 && name.equals("getConnection")) {
            return proxy;
        } else if (argc == 1 && (name.equals("unwrap") || name.equals("isWrapperFor"))) {
            if (((Class<?>) args[0]).isInstance(p)) {
                return name.equals("unwrap") ? p : Boolean.TRUE;
            }
            notReplayable(name);
        }
        if (readOnce(args)) {
            // A stream or reader parameter is read as it is sent: a replay would send what is left
            // of it, nothing.
            notReplayable(name + " (a stream parameter)");
        }
        boolean execute = name.startsWith("execute");
        String sql = sqlText(id, name, args);
        SqlReading reading = sql == null ? null : reading(sql);
        TransactionControl control = reading == null ? TransactionControl.NONE : reading.control();
        boolean setsSession = (reading != null && reading.setsSessionState())
                || (execute && id != 0 && sessionStatements.contains(id));
        if (!control.replayable()) {
            // The request's boundaries and the outcome guard follow the JDBC calls (commit,
            // rollback, setAutoCommit); SQL text that ends or begins the transaction bypasses
            // them, and its effect cannot be told reliably (a COMMIT inside a multi-statement
            // string, a statement prepared now and run later). Savepoints keep the transaction
            // and are replayed in order with the rest.
            notReplayable("transaction control SQL (" + control.name() + ")");
        }
        boolean commits = control.commits()
                || (execute && id != 0 && committingStatements.contains(id));
        Object target = targets.get(id);
        Object result;
        try {
            result = invoke(target, method, args);
        } catch (SQLException e) {
            if (id != 0 && execute && (autoCommit || commits)) {
                // The statement was its own transaction, or committed one by SQL text: its commit
                // may have happened, with no xid to ask (not the last COMMIT's, which did commit).
                xid = null;
                return recover(e, new Call(id, method, args, -1, 0), true);
            }
            return recover(e, new Call(id, method, args, -1, 0), false);
        }
        if (execute) {
            aborted = false; // none runs in an aborted transaction but a ROLLBACK (TO SAVEPOINT)
        }
        int before = targets.size();
        Object out = record(id, method, args, result);
        if (id == 0 && commits && targets.size() > before) {
            committingStatements.add(targets.size() - 1);
        } else if (id != 0 && commits && name.equals("addBatch")) {
            committingStatements.add(id);
        }
        if (id == 0 && setsSession && targets.size() > before) {
            sessionStatements.add(targets.size() - 1);
        } else if (id != 0 && setsSession && name.equals("addBatch")) {
            sessionStatements.add(id);
        } else if (execute && id != 0 && setsSession) {
            sessionTextRan = true;
        }
        if (execute && id != 0 && (commits || control.ends())) {
            // Ended by the SQL (not replayable from now on): what it ran is not kept either.
            compact();
        }
        if (id == 0 && name.equals("setAutoCommit")) {
            boolean was = autoCommit;
            autoCommit = (Boolean) args[0];
            if (autoCommit && !was) {
                compact(); // JDBC: switching auto-commit on commits the transaction
            } else if (!autoCommit && was) {
                txStart = log.size(); // what auto-commit mode set is the session's, never rolled back
            }
        }
        if (id != 0 && autoCommit && name.startsWith("execute")) {
            // Committed by itself: nothing of it is replayed again.
            compact();
        }
        return out;
    }

    /** The SQL text a call sends or prepares, or null. */
    private static String sqlText(int id, String name, Object[] args) {
        if (args == null || args.length == 0 || !(args[0] instanceof String text)) {
            return null;
        }
        boolean sends = id == 0 ? name.startsWith("prepare") : name.startsWith("execute") || name.equals("addBatch");
        return sends ? text : null;
    }

    private static Object invoke(Object target, Method method, Object[] args) throws Throwable {
        try {
            return method.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    /** Whether an argument is a stream or reader, which a driver reads once. */
    private static boolean readOnce(Object[] args) {
        if (args != null) {
            for (Object a : args) {
                if (a instanceof InputStream || a instanceof Reader) {
                    return true;
                }
            }
        }
        return false;
    }

    /**
     * The arguments as the call got them: the application may reuse a buffer, an array or a date
     * once the call returned, and a replay must send what was sent then.
     */
    private static Object[] kept(Object[] args) {
        if (args == null) {
            return null;
        }
        Object[] kept = args.clone();
        for (int i = 0; i < kept.length; i++) {
            Object a = kept[i];
            if (a instanceof java.util.Date d) {
                kept[i] = d.clone();
            } else if (a instanceof java.util.Calendar c) {
                kept[i] = c.clone();
            } else if (a != null && a.getClass().isArray()) {
                int n = java.lang.reflect.Array.getLength(a);
                Object copy = java.lang.reflect.Array.newInstance(a.getClass().getComponentType(), n);
                System.arraycopy(a, 0, copy, 0, n);
                kept[i] = copy;
            }
        }
        return kept;
    }

    /** Records a call that answered {@code result}; returns what the application gets. */
    private Object record(int id, Method method, Object[] args, Object result) {
        Object[] kept = kept(args);
        Class<?> rt = method.getReturnType();
        if (method.getName().equals("unwrap")) {
            // The driver's own object, asked for by its class (the request is not replayable).
            log.add(new Call(id, method, kept, -1, hash(result)));
            return result;
        }
        if (result instanceof Statement || result instanceof ResultSet) {
            Object known = proxyOfTarget(result);
            if (known != null) {
                return known; // rs.getStatement(): the statement the application holds
            }
            // Also when declared as Object (getObject of a refcursor: the driver's result set, whose
            // statement and connection would let writes escape the record).
            int created = newObject(result, result instanceof ResultSet);
            creators.set(created, id);
            log.add(new Call(id, method, kept, created, 0));
            return proxyOf(created, declaredOf(rt, result), result);
        }
        if (result instanceof Connection) {
            return proxy;
        }
        if (unchecked(result)) {
            // Read through the driver's object, not compared on a replay (docs: not replayable).
            notReplayable(method.getName() + " (" + result.getClass().getSimpleName() + ")");
        }
        log.add(new Call(id, method, kept, -1, hash(result)));
        return result;
    }

    /** Objects whose content a replay cannot compare: LOBs, arrays, streams, structs. */
    private static boolean unchecked(Object v) {
        return v instanceof Array || v instanceof Blob || v instanceof Clob
                || v instanceof SQLXML || v instanceof Struct || v instanceof Ref
                || v instanceof RowId || v instanceof Reader || v instanceof InputStream;
    }

    private static Class<?> declaredOf(Class<?> rt, Object result) {
        if (result instanceof ResultSet) {
            return ResultSet.class;
        }
        return Statement.class.isAssignableFrom(rt) ? rt : Statement.class;
    }

    /** The proxy the application holds of the driver's object {@code target}, or null. */
    private Object proxyOfTarget(Object target) {
        Integer id = ids.get(target);
        return id == null ? null : proxies.get(id);
    }

    private void setTarget(int id, Object target) {
        ids.remove(targets.get(id));
        targets.set(id, target);
        ids.put(target, id);
        Object p = proxies.get(id);
        if (p != null) {
            ((ObjectHandler) Proxy.getInvocationHandler(p)).target = target;
        }
    }

    private Object wrapUnrecorded(Object result) {
        if (result instanceof Connection) {
            return proxy;
        }
        if (result instanceof Statement || result instanceof ResultSet) {
            Object known = proxyOfTarget(result);
            if (known != null) {
                return known;
            }
            // One the application never had (a refcursor's, from a finished transaction's rows).
            // A result set's reads stay unrecorded; a statement is recorded from now on without
            // its creation, so a replay that needs it is abandoned rather than run without it.
            boolean resultSet = result instanceof ResultSet;
            int created = newObject(result, resultSet);
            stale.set(created, resultSet);
            return proxyOf(created, declaredOf(Object.class, result), result);
        }
        return result;
    }

    private int newObject(Object target, boolean resultSet) {
        targets.add(target);
        resultSets.add(resultSet);
        stale.add(false);
        proxies.add(null);
        creators.add(-1);
        ids.put(target, targets.size() - 1);
        return targets.size() - 1;
    }

    private Object proxyOf(int id, Class<?> declared, Object target) {
        Class<?> iface = declared;
        if (target instanceof CallableStatement) {
            iface = CallableStatement.class;
        } else if (target instanceof PreparedStatement && declared.isAssignableFrom(PreparedStatement.class)) {
            iface = PreparedStatement.class;
        }
        Object p = Proxy.newProxyInstance(ReplayConnection.class.getClassLoader(), new Class<?>[] {iface},
                new ObjectHandler(this, id, iface, target));
        proxies.set(id, p);
        return p;
    }

    /**
     * What a call answered, as compared on a replay: 64 bits of a SHA-256 of the value's type and
     * canonical form, so that values that differ (0 and -1, "Aa" and "BB": one Java hashCode)
     * differ here too. 0 is a call that answered nothing (compaction tells setters by it).
     */
    private long hash(Object v) {
        if (v == null) {
            return 0;
        }
        if (md == null) {
            try {
                md = MessageDigest.getInstance("SHA-256");
            } catch (NoSuchAlgorithmException e) {
                throw new IllegalStateException("every Java platform has SHA-256", e);
            }
        }
        md.reset();
        digest(md, v);
        long h = ByteBuffer.wrap(md.digest()).getLong();
        return h == 0 ? 1 : h;
    }

    private static void digest(MessageDigest md, Object v) {
        if (v == null) {
            md.update((byte) 0);
            return;
        }
        md.update((byte) 1);
        field(md, v.getClass().getName().getBytes(StandardCharsets.UTF_8));
        if (v instanceof byte[] b) {
            field(md, b);
        } else if (v.getClass().isArray()) {
            int n = java.lang.reflect.Array.getLength(v);
            field(md, ByteBuffer.allocate(4).putInt(n).array());
            for (int i = 0; i < n; i++) {
                digest(md, java.lang.reflect.Array.get(v, i));
            }
        } else if (!describesItself(v)) {
            // No text of its own (a result set's metadata): nothing to compare, its class only.
        } else {
            String text = String.valueOf(v);
            if (v instanceof java.util.Date d) {
                // toString of java.sql.Time and java.util.Date drops the milliseconds.
                text = d.getTime() + "/" + (v instanceof java.sql.Timestamp t ? t.getNanos() : 0) + "/" + text;
            }
            // Numbers, strings, temporals, UUIDs; the driver's objects by their text (pgjdbc's
            // PGobject, a jsonb or an interval: its value). An object whose text is not its
            // content differs on a replay: abandoned, never accepted wrongly.
            field(md, text.getBytes(StandardCharsets.UTF_8));
        }
    }

    /** Whether {@code v}'s class has a toString of its own (Object's names the instance, which differs on a replay). */
    private static boolean describesItself(Object v) {
        try {
            return v.getClass().getMethod("toString").getDeclaringClass() != Object.class;
        } catch (NoSuchMethodException e) {
            return false;
        }
    }

    private static void field(MessageDigest md, byte[] bytes) {
        md.update(ByteBuffer.allocate(4).putInt(bytes.length).array());
        md.update(bytes);
    }

    /** The session holds state set by SQL text ({@link #sessionState}): not replayable, nor moved. */
    private void sessionStateHeld(String what) {
        sessionState = true;
        notReplayable(what);
    }

    /**
     * The session's node connection is gone after its transaction ended as asked (a COMMIT found
     * committed, a rollback whose connection failed), and the state SQL text set on it with it: a
     * connection taken now would run the next calls without it (a search_path, a role), so the
     * connection ends here instead, and its next call says why.
     */
    private void endSession() {
        endedBecause = "its node connection failed and its " + SESSION_STATE + " cannot be set up on another";
        closed = true;
    }

    /** What a call on the closed connection (or one of its statements) throws. */
    private SQLException closedError() {
        String because = endedBecause;
        if (because == null) {
            return new SQLNonTransientConnectionException("the connection is closed", "08003");
        }
        return new SQLNonTransientConnectionException("the connection is closed: " + because, "08003",
                new ReplayRefusedException(Refusal.NOT_REPLAYABLE, because));
    }

    private void notReplayable(String what) {
        if (replayable) {
            replayable = false;
            why = what;
        }
    }

    /** Whether statements ran since the transaction began (auto-commit off). */
    private boolean inTransaction() {
        if (autoCommit) {
            return false;
        }
        for (Call c : log) {
            if (c.method.getName().startsWith("execute")) {
                return true;
            }
        }
        return false;
    }

    /**
     * The transaction ended: only what sets the session up and the open statements stay recorded
     * (creation and settings); executions and result sets go, the result sets stay readable
     * (drivers keep their rows in memory) but unrecorded.
     */
    private void compact() {
        aborted = false;
        if (sessionTextRan) {
            // The transaction that ran it ended, committed (in auto-commit mode too) or rolled back
            // (a session advisory lock, a prepared statement, a LOAD outlive a rollback; erring
            // towards refusing): the state is the session's from now on, in no record, and a
            // replay's new connection would run without it (docs/continuity.md).
            sessionStateHeld(SESSION_STATE);
            markSessionSet(current);
        }
        Set<Integer> closedIds = new HashSet<>();
        for (Call c : log) {
            if (c.target != 0 && c.method.getName().equals("close")) {
                closedIds.add(c.target);
            }
        }
        // A statement's parameter set again later replaces the earlier setting: keep the last only,
        // so a statement reused over many transactions keeps a log of its size, not of its uses.
        Set<String> later = new HashSet<>();
        List<Call> kept = new ArrayList<>();
        for (int i = log.size() - 1; i >= 0; i--) {
            Call c = log.get(i);
            String name = c.method.getName();
            boolean onResultSet = resultSets.get(c.target) || (c.created >= 0 && resultSets.get(c.created));
            boolean closedOne = closedIds.contains(c.target) || (c.created >= 0 && closedIds.contains(c.created));
            if (onResultSet || closedOne || name.startsWith("execute") || name.equals("getResultSet")
                    || name.equals("getGeneratedKeys") || name.equals("addBatch") || name.equals("clearBatch")) {
                continue;
            }
            if (c.created < 0 && c.method.getReturnType() != void.class) {
                // A getter (getUpdateCount, getTransactionIsolation, getWarnings...) sets nothing
                // up, and answers of the transaction it ran in: run again alone it answers
                // otherwise (getUpdateCount: -1 without its execute).
                continue;
            }
            if (c.created < 0 && c.hash == 0 && name.startsWith("set") && c.args != null && c.args.length > 0) {
                Object first = c.args[0];
                String slot = c.target + "/" + name + "/"
                        + (first instanceof Integer || first instanceof String ? first : "");
                if (!later.add(slot)) {
                    continue;
                }
            }
            kept.add(c);
        }
        java.util.Collections.reverse(kept);
        log.clear();
        log.addAll(kept);
        txStart = log.size();
        for (int i = 1; i < resultSets.size(); i++) {
            if (resultSets.get(i)) {
                stale.set(i, true);
            }
        }
    }

    // ---- transaction demarcation ---------------------------------------------

    private String xid;
    private int pid;
    private Boolean postgres;

    private void commit() throws Throwable {
        if (autoCommit) {
            current.commit(); // as the driver: an error for auto-commit
            return;
        }
        xid = null;
        // A COMMIT whose answer is lost has an outcome to establish unless the server says the
        // transaction wrote nothing.
        // An aborted transaction's COMMIT is a rollback: no outcome to guard (the xid read would
        // fail 25P02), once the driver says so; a failure of it is not replayed either
        // (noteAborted). Where only the server's rule says so, the xid read tells.
        boolean wrote = !(aborted && Boolean.TRUE.equals(driverSaysAborted()));
        if (wrote && isPostgres()) {
            // Taken in the transaction: what tells its outcome once the COMMIT's answer is lost. The
            // _if_assigned form gives no xid to a transaction that has none: pg_current_xact_id()
            // would make every read-only COMMIT write a commit record (a WAL flush) and burn an xid.
            try (Statement s = current.physical().createStatement();
                    ResultSet rs = s.executeQuery("SELECT pg_current_xact_id_if_assigned()::text, pg_backend_pid()")) {
                rs.next();
                xid = rs.getString(1);
                pid = rs.getInt(2);
                // NULL: it wrote nothing, so there is no outcome to guard; its reads replay harmlessly.
                wrote = xid != null;
            } catch (SQLException e) {
                if (Continuity.classifySqlState(e.getSQLState()) == ErrorClass.RECOVERABLE) {
                    current.failed(e);
                    recover(e, null, false);
                    return;
                }
                // The server answered (a transaction an error aborted: 25P02): the COMMIT gets the
                // driver's own answer, as without replay; without an xid its loss cannot be settled.
                xid = null;
            }
        }
        try {
            current.commit();
        } catch (SQLException e) {
            recover(e, null, wrote);
            return;
        }
        xid = null; // settled: a later failure never asks about this one
        compact();
    }

    private boolean isPostgres() {
        if (postgres == null) {
            try {
                postgres = current.physical().getMetaData().getDatabaseProductName().toLowerCase(Locale.ROOT)
                        .contains("postgres");
            } catch (SQLException e) {
                postgres = false;
            }
        }
        return postgres;
    }

    private void rollback() throws SQLException {
        try {
            current.rollback();
        } catch (SQLException e) {
            if (Continuity.classifySqlState(e.getSQLState()) != ErrorClass.RECOVERABLE) {
                throw e;
            }
            // The transaction is gone with its connection, which is what a rollback wants: go on
            // elsewhere, with the session's setup only (the record of the transaction would run
            // its statements again on the new connection, and the next commit commit them).
            drop();
            rolledBack();
            compact();
            if (sessionState) {
                endSession(); // rolled back all the same
                return;
            }
            try {
                reattach(-1);
            } catch (SQLException noSession) {
                // Rolled back all the same: the next call takes a node connection, as after a COMMIT
                // found committed. Thrown here, the connection stayed on the one given back.
                detached = true;
            }
        }
        rolledBack();
        compact();
    }

    /**
     * The transaction under way was rolled back. PostgreSQL rolls back the {@code SET} pgjdbc sends
     * for {@code setSchema} (with a BEGIN first when none is open), so a replay must not make it: it
     * would run the next transactions in a schema the session no longer has. The setting made before
     * the transaction, if any, stays recorded, which is what the session went back to. Not
     * {@code setClientInfo}: pgjdbc sends its {@code SET application_name} without a BEGIN, so a
     * rollback undoes it only when a transaction was open already, which the record cannot tell.
     */
    private void rolledBack() {
        if (!isPostgres()) {
            return;
        }
        for (int i = log.size() - 1; i >= txStart; i--) {
            Call c = log.get(i);
            String name = c.method.getName();
            if (c.target == 0 && name.equals("setSchema")) {
                log.remove(i);
            }
        }
    }

    private void close() throws SQLException {
        if (closed) {
            return;
        }
        closed = true;
        AffinityConnection c = current;
        try {
            c.endRequest();
        } catch (SQLException e) {
            // the connection is closed next either way
        } finally {
            c.close();
        }
    }

    // ---- recovery -------------------------------------------------------------

    /**
     * Walks the core's steps after {@code original}; returns what the failed call ({@code then},
     * null for a COMMIT) answers on the replayed connection, or throws {@code original} with why it
     * was not replayed.
     */
    private Object recover(SQLException original, Call then, boolean commitInFlight) throws Throwable {
        noteAborted(original);
        depth++;
        try {
            return walk(original, then, commitInFlight);
        } finally {
            depth--;
        }
    }

    /**
     * A call failed with {@code e}: a transaction an earlier error aborted is not replayed (its end
     * is a rollback), and {@code e} may have aborted it. An error that is not recoverable is not
     * replayed anyway, and a ROLLBACK TO SAVEPOINT after it makes the transaction whole again.
     */
    private void noteAborted(SQLException e) {
        ErrorClass cls = Continuity.classifySqlState(e.getSQLState());
        if (aborted && cls == ErrorClass.RECOVERABLE) {
            notReplayable(ABORTED);
        }
        aborted = cls == ErrorClass.NOT_RECOVERABLE && !autoCommit && leftAborted();
    }

    /**
     * Whether the node connection's transaction is aborted now: pgjdbc's answer, else whether the
     * server is PostgreSQL, which aborts a transaction at any error (erring towards refusing: a
     * driver's automatic savepoint, as pgjdbc's {@code autosave}, would keep it whole).
     */
    private boolean leftAborted() {
        Boolean driver = driverSaysAborted();
        return driver != null ? driver : isPostgres();
    }

    /**
     * The node connection's transaction state as pgjdbc tracks it ({@code getTransactionState()}:
     * {@code FAILED}, with no round trip), or null when the driver is not pgjdbc or cannot tell.
     */
    private Boolean driverSaysAborted() {
        try {
            Connection pooled = current.physical();
            Object driver = pooled.isWrapperFor(Connection.class) ? pooled.unwrap(Connection.class) : pooled;
            for (Class<?> k = driver.getClass(); k != null; k = k.getSuperclass()) {
                if (k.getName().equals("org.postgresql.jdbc.PgConnection")) {
                    return String.valueOf(k.getMethod("getTransactionState").invoke(driver)).equals("FAILED");
                }
            }
        } catch (SQLException | ReflectiveOperationException | RuntimeException ex) {
            // It cannot tell.
        }
        return null;
    }

    /** Why a transaction an error aborted is not replayed (docs/continuity.md). */
    static final String ABORTED = "a transaction an error aborted, with no ROLLBACK TO SAVEPOINT since";

    /**
     * Whether the walk running is the request's own, not one a replay's COMMIT or replayed call
     * began inside it: only that one is counted ({@link ReplayCounts}), so that a recovery is
     * counted once, by the end the application sees.
     */
    private boolean outermost() {
        return depth == 1;
    }

    private Object walk(SQLException original, Call then, boolean commitInFlight) throws Throwable {
        Cluster cluster = owner.clusterOf();
        ReplayCounts counts = ReplayCounts.of(cluster);
        SQLException e = original;
        while (true) {
            ErrorClass cls = Continuity.classifySqlState(e.getSQLState());
            Continuity.Failure f = new Continuity.Failure(current.node(), cls, commitInFlight, null, false, replays,
                    replayable && !closed);
            if (cls == ErrorClass.NOT_RECOVERABLE && e == original) {
                // The server answered (a constraint, a syntax error, a serialization failure): the
                // application's error, and the connection goes on. A COMMIT that failed so ended
                // the transaction (rolled back): nothing of it is replayed later.
                if (then == null) {
                    rolledBack();
                    compact();
                }
                throw refused(original, Refusal.NOT_RECOVERABLE, null);
            }
            drop();
            Step step = settle(cluster, f);
            if (step.action() == Action.SUCCEEDED) {
                if (outermost()) {
                    counts.countCommittedAlready();
                }
                xid = null;
                LOG.log(Level.DEBUG, () -> "AffinityDataSource " + cluster.name() + ": the COMMIT in flight committed;"
                        + " not replayed");
                compact();
                if (sessionState) {
                    endSession();
                    return null;
                }
                try {
                    reattach(-1);
                } catch (SQLException noSession) {
                    // The request succeeded: an error here would have the application run it again.
                    detached = true;
                    LOG.log(Level.DEBUG, () -> "AffinityDataSource " + cluster.name() + ": no connection after"
                            + " the COMMIT found committed (" + noSession.getMessage() + "); the next call takes one");
                }
                return null;
            }
            if (step.action() == Action.GIVE_UP) {
                SQLException thrown = refused(original, step.refusal(),
                        step.refusal() == Refusal.NOT_REPLAYABLE && why != null ? "used " + why : null);
                if (e != original) {
                    thrown.addSuppressed(e);
                }
                closed = true;
                if (outermost()) {
                    counts.countRefused(step.refusal());
                }
                throw thrown;
            }
            AffinityConnection fresh;
            try {
                fresh = owner.connectForReplay(step.node(), user, password);
            } catch (SQLException noConnection) {
                // Nothing of the request ran again: counted as a replay, the core would answer
                // REPLAYED_ALREADY, and an operator would read that it ran twice. The node the core
                // named was its best; the application may run the request again itself.
                SQLException thrown = refused(original, Refusal.NO_NODE,
                        "no node could take the replay: " + noConnection.getMessage());
                thrown.addSuppressed(noConnection);
                closed = true;
                if (outermost()) {
                    counts.countRefused(Refusal.NO_NODE);
                }
                throw thrown;
            }
            replays++;
            commitInFlight = false;
            try {
                Object answer = replayOn(fresh, then);
                if (outermost()) {
                    counts.countReplayed();
                }
                return answer;
            } catch (ResultsDiffer d) {
                drop();
                closed = true;
                if (outermost()) {
                    counts.countRefused(Refusal.RESULTS_DIFFER);
                }
                throw refused(original, Refusal.RESULTS_DIFFER, d.getMessage());
            } catch (SessionStateOnReplay s) {
                drop();
                closed = true;
                if (outermost()) {
                    counts.countRefused(Refusal.NOT_REPLAYABLE);
                }
                throw refused(original, Refusal.NOT_REPLAYABLE, "the replay's connection: " + SESSION_STATE
                        + " by an earlier checkout");
            } catch (SQLException again) {
                Refusal inner = closed ? refusalOf(again) : null;
                if (inner != null) {
                    // A walk inside this one (the replay's own COMMIT or call failed) decided already,
                    // OUTCOME_UNKNOWN for a replay's COMMIT that may have committed: that is the answer,
                    // not the NOT_REPLAYABLE a closed connection would give here.
                    SQLException thrown = refused(original, inner, "the replay: " + again.getMessage());
                    thrown.addSuppressed(again);
                    if (outermost()) {
                        counts.countRefused(inner);
                    }
                    throw thrown;
                }
                e = again;
            }
        }
    }

    /** The refusal an error carries already (a walk's, as a cause or a suppressed one), or null; the replay tests read it too. */
    static Refusal refusalOf(SQLException e) {
        // Its own first: a driver may chain an earlier error, with that error's refusal, as the
        // cause (pgjdbc: under an error in an aborted transaction, the one that aborted it).
        if (e.getCause() instanceof ReplayRefusedException r) {
            return r.refusal();
        }
        for (Throwable t : e.getSuppressed()) {
            if (t instanceof ReplayRefusedException r) {
                return r.refusal();
            }
        }
        for (Throwable t = e.getCause(); t != null; t = t.getCause()) {
            if (t instanceof ReplayRefusedException r) {
                return r.refusal();
            }
        }
        return null;
    }

    private static SQLException refused(SQLException original, Refusal refusal, String detail) {
        ReplayRefusedException cause = new ReplayRefusedException(refusal, detail);
        if (original.getCause() == null) {
            try {
                original.initCause(cause);
                return original;
            } catch (IllegalStateException causeSet) {
                // Made with an explicit null cause (new SQLException(reason, state, null), as drivers
                // write it when they have none): that counts as set, and initCause refuses.
            }
        }
        original.addSuppressed(cause);
        return original;
    }

    /** Walks the outcome checks until the core says succeed, replay or give up. */
    private Step settle(Cluster cluster, Continuity.Failure f) throws SQLException {
        for (int i = 0; i < MAX_STEPS; i++) {
            Step step;
            try {
                step = cluster.replayStep(f);
            } catch (AffinityException ex) {
                throw SqlErrors.routing(ex);
            }
            if (step.action() == Action.CHECK_OUTCOME) {
                f = f.withOutcome(ask(cluster, step.node(), false));
            } else if (step.action() == Action.FORCE_OUTCOME) {
                ask(cluster, step.node(), true);
                f = f.forcedNow();
            } else {
                return step;
            }
        }
        return new Step(Action.GIVE_UP, 0, Refusal.OUTCOME_UNKNOWN);
    }

    /**
     * On {@code node}, over a connection of its own: the outcome of the COMMIT in flight, after
     * ending its backend first when {@code force}. Any failure is an unknown outcome.
     */
    private CommitOutcome ask(Cluster cluster, int node, boolean force) {
        if (xid == null) {
            return CommitOutcome.UNKNOWN;
        }
        int bound = owner.checkTimeoutSeconds();
        ReplayCounts.of(cluster).countCheck(force);
        try {
            DataSource ds = owner.getNodeDataSource(cluster.nodeName(node));
            try (Connection c = checkedConnection(ds, cluster.name(), bound)) {
                if (c == null) {
                    return CommitOutcome.UNKNOWN;
                }
                c.setAutoCommit(true);
                if (force) {
                    try (PreparedStatement s = c.prepareStatement("SELECT pg_terminate_backend(?, ?)")) {
                        s.setQueryTimeout(bound);
                        s.setInt(1, pid);
                        s.setLong(2, bound * 1000L);
                        s.execute();
                    }
                }
                try (PreparedStatement s = c.prepareStatement("SELECT pg_xact_status(?::xid8)")) {
                    s.setQueryTimeout(bound);
                    s.setString(1, xid);
                    try (ResultSet rs = s.executeQuery()) {
                        return Continuity.fromPgXactStatus(rs.next() ? rs.getString(1) : null);
                    }
                }
            }
        } catch (SQLException | RuntimeException e) {
            return CommitOutcome.UNKNOWN;
        }
    }

    /** Stale pooled connections an outcome check throws away before it gives up. */
    private static final int MAX_STALE_CHECKS = 64;

    /**
     * A connection of {@code ds} that answers, within {@code bound} seconds in all: the node of a
     * COMMIT in flight has just failed, so the pool may hold connections to its old server that it
     * will not check (HikariCP skips its alive check for a connection used within the last 500 ms,
     * and the heartbeat uses one every probe). Each is checked and evicted when dead. The wait for
     * a new connection (for the node to come back) ends at the check's deadline, not at the pool's
     * {@code connectionTimeout}: a node that stays down costs the request {@code bound}, then
     * {@code outcome_unknown}. Null when no live connection came in time.
     */
    private static Connection checkedConnection(DataSource ds, String cluster, int bound) throws SQLException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(bound);
        for (int i = 0; i < MAX_STALE_CHECKS; i++) {
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                return null;
            }
            Connection c = NodeConnect.within(ds, cluster, TimeUnit.NANOSECONDS.toMillis(left));
            boolean ok;
            try {
                // isValid counts whole seconds, and 0 is no limit.
                ok = c.isValid((int) Math.max(1, TimeUnit.NANOSECONDS.toSeconds(deadline - System.nanoTime())));
            } catch (SQLException e) {
                ok = false;
            } catch (RuntimeException | Error e) {
                // A driver's bug, as AffinityDataSource's suspect check treats it: the connection goes, the
                // error with it (an unknown outcome), but the pool gets its connection back.
                PoolMaintenance.Hikari.evict(ds, c);
                throw e;
            }
            if (ok) {
                return c;
            }
            PoolMaintenance.Hikari.evict(ds, c);
        }
        return null;
    }

    /** Gives the failed connection back (its lease was released FAILED when the failure was seen). */
    private void drop() {
        AffinityConnection c = current;
        try {
            c.physical().abort(Runnable::run);
        } catch (SQLException | RuntimeException e) {
            // gone already
        }
        try {
            c.close();
        } catch (SQLException | RuntimeException e) {
            // gone already
        }
    }

    /** A replay's answer differs from the original's. */
    private static final class ResultsDiffer extends Exception {
        private static final long serialVersionUID = 1L;

        ResultsDiffer(String message) {
            super(message);
        }
    }

    /** After a COMMIT found committed: a connection routed anew, set up as the session was. */
    private void reattach(int node) throws SQLException {
        if (closed) {
            // Aborted meanwhile (abort() takes no lock): nothing goes on, and close() would never
            // give a new connection back.
            return;
        }
        AffinityConnection fresh = owner.connectForReplay(node, user, password);
        try {
            rerun(fresh);
        } catch (ResultsDiffer | RuntimeException e) {
            fresh.close();
            throw new SQLException("the session could not be set up again: " + e.getMessage(), "08006", e);
        } catch (SQLException e) {
            fresh.close();
            throw e;
        }
        if (sessionSet(fresh)) {
            // The session goes on where an earlier checkout left session state set by SQL text: its
            // next transactions run with it, as a checkout of that connection would, and a replay's
            // new connection would not.
            sessionStateHeld(SESSION_STATE + " (by an earlier checkout of the connection the session moved to)");
        }
        if (closed) {
            // An abort that came as it was set up may have ended the old connection, not this one.
            try {
                fresh.close();
            } catch (SQLException e) {
                // closed either way
            }
        }
    }

    /** Runs the recorded calls on {@code fresh}; the proxies point at its objects once all answered alike. */
    private void rerun(AffinityConnection fresh) throws SQLException, ResultsDiffer {
        Map<Integer, Object> now = new HashMap<>();
        now.put(0, fresh);
        fresh.beginRequest();
        for (Call c : log) {
            Object t = now.get(c.target);
            if (t == null) {
                throw new ResultsDiffer("object " + c.target + " of " + c.method.getName() + " was not created again");
            }
            Object r;
            try {
                r = invoke(t, c.method, c.args);
            } catch (SQLException e) {
                throw e;
            } catch (Throwable e) {
                throw new SQLException(e);
            }
            if (c.created >= 0) {
                now.put(c.created, r);
            } else if (hash(r) != c.hash) {
                throw new ResultsDiffer(c.method.getName() + " answered otherwise");
            }
        }
        current = fresh;
        now.forEach(this::setTarget);
    }

    private Object replayOn(AffinityConnection fresh, Call then) throws Throwable {
        if (sessionSet(fresh)) {
            // An earlier checkout left session state set by SQL text on it: the replay would run
            // under state the request never had (a search_path writing elsewhere).
            try {
                fresh.close();
            } catch (SQLException ignored) {
                // the refusal is the one to report
            }
            throw new SessionStateOnReplay();
        }
        try {
            rerun(fresh);
        } catch (ResultsDiffer | SQLException | RuntimeException e) {
            if (current != fresh) {
                try {
                    fresh.close();
                } catch (SQLException ignored) {
                    // the replay's error is the one to report
                }
            }
            throw e;
        }
        if (closed) {
            // Aborted as it was set up (abort() takes no lock): the abort ended the old connection, not this one,
            // and close() will never see it. The application ended the request: nothing of it runs again, its
            // COMMIT least of all.
            drop();
            throw new SQLNonTransientConnectionException("the connection was aborted during its replay", "08003");
        }
        String name = cluster().name();
        LOG.log(Level.DEBUG, () -> "AffinityDataSource " + name + ": request replayed on node " + fresh.nodeName());
        if (then == null) {
            commit();
            return null;
        }
        return call(null, then.target, then.method, then.args);
    }

    private Cluster cluster() throws SQLException {
        return owner.clusterOf();
    }

    /** @return the calls a replay connection has recorded now (for tests), or -1 if it is not one */
    /** The replay's connection carries session state an earlier checkout set by SQL text. */
    private static final class SessionStateOnReplay extends Exception {
        private static final long serialVersionUID = 1L;

        SessionStateOnReplay() {
            super(SESSION_STATE, null, false, false);
        }
    }

    /** Why a connection that set session state by SQL text is not replayed (docs/continuity.md). */
    static final String SESSION_STATE = "session state set by SQL text";

    /**
     * The physical connection under a node pool's (a pool's proxy, new at each checkout, unwraps to
     * the driver's connection it lends again), else the pool's connection itself.
     */
    private static Object sessionKey(AffinityConnection c) {
        Connection pooled = c.physical();
        try {
            if (pooled.isClosed()) {
                // Given back or dropped (a failure's): never lent again with its state, and a closed
                // pool proxy refuses even hashCode (HikariCP's throws, which a WeakHashMap would pass on).
                return null;
            }
            return pooled.isWrapperFor(Connection.class) ? pooled.unwrap(Connection.class) : pooled;
        } catch (SQLException | RuntimeException e) {
            return null;
        }
    }

    /** Marks {@code c}'s physical connection as carrying session state set by SQL text, if it is still open. */
    private static void markSessionSet(AffinityConnection c) {
        Object key = sessionKey(c);
        if (key != null) {
            SESSION_SET.put(key, Boolean.TRUE);
        }
    }

    /** Whether an earlier checkout marked {@code c}'s physical connection ({@link #markSessionSet}). */
    private static boolean sessionSet(AffinityConnection c) {
        Object key = sessionKey(c);
        return key != null && SESSION_SET.containsKey(key);
    }

    /** {@link Continuity#transactionControl}, kept per text ({@link #CONTROLS}). */
    static TransactionControl transactionControl(String sql) {
        return reading(sql).control();
    }

    /**
     * {@link Continuity#read}: the transaction control and whether the text sets session state, kept
     * per text ({@link #CONTROLS}), one crossing for both.
     */
    static SqlReading reading(String sql) {
        SqlReading control = CONTROLS.get(sql);
        if (control != null) {
            return control;
        }
        CONTROL_READS.increment();
        control = Continuity.read(sql);
        if (sql.length() <= CONTROL_TEXT_MAX) {
            // Misses only: the check and the insert together, so that the bound holds under concurrency.
            synchronized (CONTROLS) {
                if (CONTROLS.size() >= CONTROLS_MAX) {
                    CONTROLS.clear();
                }
                CONTROLS.put(sql, control);
            }
        }
        return control;
    }

    /** @return the library's transaction-control reads so far */
    static long controlReads() {
        return CONTROL_READS.sum();
    }

    /** @return texts whose transaction control is kept */
    static int cachedControls() {
        return CONTROLS.size();
    }

    static int recordedCalls(Connection c) {
        if (!Proxy.isProxyClass(c.getClass()) || !(Proxy.getInvocationHandler(c) instanceof ObjectHandler h)) {
            return -1;
        }
        h.owner.lock.lock();
        try {
            return h.owner.log.size();
        } finally {
            h.owner.lock.unlock();
        }
    }

    @Override
    public String toString() {
        return "ReplayConnection[" + current + ", replays=" + replays + "]";
    }
}
