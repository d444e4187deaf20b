package io.racaffinity;

import java.util.Objects;

/**
 * Request replay's decisions, the core's (docs/continuity.md): whether an error is
 * recoverable, what a {@code pg_xact_status} answer means, and the step after a failure
 * ({@link Cluster#replayStep}). {@code AffinityDataSource} with {@code replay=true} walks
 * them; any JDBC host can too.
 */
public final class Continuity {
    private Continuity() {}

    /** How an error that ended a request bears on replaying it. */
    public enum ErrorClass {
        /** A lost connection or node: replayable once the commit outcome is known. */
        RECOVERABLE,
        /** Anything else: the application's to handle, never replayed. */
        NOT_RECOVERABLE
    }

    /** What the outcome checks of a commit in flight found. */
    public enum CommitOutcome {
        /** It committed. */
        COMMITTED(1),
        /** It was rolled back, or never got there. */
        ABORTED(2),
        /** It still runs behind the failed connection. */
        IN_PROGRESS(3),
        /** No one can tell. */
        UNKNOWN(4);

        private final int code;

        CommitOutcome(int code) {
            this.code = code;
        }

        int code() {
            return code;
        }

        static CommitOutcome of(int code) {
            for (CommitOutcome o : values()) {
                if (o.code == code) {
                    return o;
                }
            }
            throw new IllegalStateException("the library answered commit outcome " + code);
        }
    }

    /**
     * What SQL text a request sends does to its transaction: the strongest control of any of its
     * statements, read by the core (comments, quoted text and dollar-quoted bodies skipped), the
     * same reading every binding uses.
     */
    public enum TransactionControl {
        /** No statement controls a transaction. */
        NONE,
        /** {@code SAVEPOINT}, {@code RELEASE}, {@code ROLLBACK TO}: the transaction goes on. */
        SAVEPOINT,
        /** {@code BEGIN}, {@code START TRANSACTION}. */
        BEGIN,
        /** {@code ROLLBACK}, {@code ABORT}, {@code ROLLBACK PREPARED}. */
        ROLLBACK,
        /** {@code COMMIT}, {@code END}, {@code PREPARE TRANSACTION}, {@code COMMIT PREPARED}. */
        COMMIT;

        /** @return whether a request that sent it may still be replayed */
        public boolean replayable() {
            return this == NONE || this == SAVEPOINT;
        }

        /** @return whether it commits the transaction (or hands it to two-phase commit) */
        public boolean commits() {
            return this == COMMIT;
        }

        /** @return whether it ends the transaction, committed or not */
        public boolean ends() {
            return this == COMMIT || this == ROLLBACK;
        }
    }

    /** What to do next with a failed request. */
    public enum Action {
        /** The commit in flight committed: the request succeeded; nothing is replayed. */
        SUCCEEDED,
        /** Ask {@link Step#node()} for the outcome ({@code pg_xact_status(xid)}), then ask again. */
        CHECK_OUTCOME,
        /** End the old transaction's backend through {@link Step#node()}, then check again. */
        FORCE_OUTCOME,
        /** Replay the request once on {@link Step#node()}. */
        REPLAY,
        /** No replay: the original error, with {@link Step#refusal()} as its cause. */
        GIVE_UP
    }

    /** Why a failed request is not replayed. */
    public enum Refusal {
        /** Not a refusal (the action is not {@link Action#GIVE_UP}). */
        NONE,
        /** The error is not a connection or node failure. */
        NOT_RECOVERABLE,
        /** The request used something that cannot be replayed, or replay is off. */
        NOT_REPLAYABLE,
        /** The request was replayed already (once at most). */
        REPLAYED_ALREADY,
        /** The commit in flight has no established outcome. */
        OUTCOME_UNKNOWN,
        /** No node can take the replay. */
        NO_NODE,
        /** Decided by the binding, not the core: the replay's results differ from those the application read. */
        RESULTS_DIFFER
    }

    /**
     * Classifies a SQLState: class {@code 08}, {@code 57P01}, {@code 57P02} and {@code 57P03} are
     * recoverable; anything else (null and malformed text included) is not.
     *
     * @param sqlState the SQLState, or null
     * @return its class
     */
    public static ErrorClass classifySqlState(String sqlState) {
        if (sqlState == null) {
            return ErrorClass.NOT_RECOVERABLE;
        }
        return Native.sqlstateClassify(sqlState) == 0 ? ErrorClass.RECOVERABLE : ErrorClass.NOT_RECOVERABLE;
    }

    /**
     * Reads the transaction control in SQL text (one statement or several).
     *
     * @param sql the text a statement sends or prepares
     * @return the strongest control of any of its statements
     * @throws NullPointerException if {@code sql} is null
     */
    public static TransactionControl transactionControl(String sql) {
        Objects.requireNonNull(sql, "sql");
        int c = Native.sqlTransactionControl(sql);
        TransactionControl[] all = TransactionControl.values();
        if (c < 0 || c >= all.length) {
            throw new IllegalStateException("the library answered transaction control " + c);
        }
        return all[c]; // declared in the order of racaffinity_transaction_control's values
    }

    /**
     * Both readings of SQL text, from one pass of the core's scanner.
     *
     * @param control what the text does to its transaction
     * @param setsSessionState whether it sets session state a replay record does not hold
     *     ({@link #setsSessionState})
     */
    public record SqlReading(TransactionControl control, boolean setsSessionState) {}

    /**
     * Reads SQL text's transaction control and whether it sets session state, in one call.
     *
     * @param sql the text a statement sends or prepares
     * @return both readings
     * @throws NullPointerException if {@code sql} is null
     */
    public static SqlReading read(String sql) {
        Objects.requireNonNull(sql, "sql");
        int r = Native.sqlReading(sql);
        int c = r & 0xff;
        TransactionControl[] all = TransactionControl.values();
        if (c >= all.length || (r & ~0x1ff) != 0) {
            throw new IllegalStateException("the library answered the SQL reading " + r);
        }
        return new SqlReading(all[c], (r & 0x100) != 0);
    }

    /**
     * Whether SQL text sets session state a replay's new connection would not have ({@code SET} but
     * not {@code SET LOCAL}, {@code SET TRANSACTION}, {@code SET CONSTRAINTS}; {@code RESET},
     * {@code DISCARD}, {@code LISTEN}, {@code PREPARE name AS}, {@code DEALLOCATE}, {@code CREATE
     * TEMP TABLE}, {@code DECLARE ... WITH HOLD}, {@code LOAD}, {@code set_config(..., false)},
     * session advisory locks). A replay connection that ran such text outside the request's
     * recorded transaction is not replayed afterwards (docs/continuity.md).
     *
     * @param sql the text a statement sends or prepares
     * @return whether it sets session state
     * @throws NullPointerException if {@code sql} is null
     */
    public static boolean setsSessionState(String sql) {
        return read(sql).setsSessionState();
    }

    /**
     * {@code pg_xact_status(xid8)}'s answer as an outcome.
     *
     * @param status the answer, null for SQL NULL
     * @return {@code committed}, {@code aborted}, {@code in progress}; anything else unknown
     */
    public static CommitOutcome fromPgXactStatus(String status) {
        return CommitOutcome.of(Native.pgXactStatusOutcome(status));
    }

    /**
     * One failed request, as the host saw it.
     *
     * @param node the node id it failed on
     * @param errorClass the error's class ({@link #classifySqlState})
     * @param commitInFlight a COMMIT was sent and its answer never came
     * @param outcome what the checks so far found (null: none made)
     * @param forced the old transaction was ended already ({@link Action#FORCE_OUTCOME} done)
     * @param replays replays already made of this request
     * @param replayable the request may be replayed (replay on, nothing non-replayable used)
     */
    public record Failure(int node, ErrorClass errorClass, boolean commitInFlight, CommitOutcome outcome,
            boolean forced, int replays, boolean replayable) {
        public Failure {
            Objects.requireNonNull(errorClass, "errorClass");
        }

        /** @return this failure with what a check found */
        public Failure withOutcome(CommitOutcome o) {
            return new Failure(node, errorClass, commitInFlight, o, forced, replays, replayable);
        }

        /** @return this failure after the old transaction was ended (its outcome to check again) */
        public Failure forcedNow() {
            return new Failure(node, errorClass, commitInFlight, null, true, replays, replayable);
        }
    }

    /**
     * The next step.
     *
     * @param action what to do
     * @param node where ({@link Action#CHECK_OUTCOME}, {@link Action#FORCE_OUTCOME}, {@link Action#REPLAY}; else 0)
     * @param refusal why not ({@link Action#GIVE_UP}; else {@link Refusal#NONE})
     */
    public record Step(Action action, int node, Refusal refusal) {
        static Step unpack(long r) {
            Action[] actions = Action.values();
            Refusal[] refusals = Refusal.values();
            int a = (int) (r & 0xff);
            int f = (int) ((r >>> 8) & 0xff);
            if (a >= actions.length || f >= Refusal.RESULTS_DIFFER.ordinal()) {
                throw new IllegalStateException("the library answered replay step " + r);
            }
            return new Step(actions[a], (int) (r >>> 32), refusals[f]);
        }
    }

    /**
     * The cause of a request's original error when it was not replayed: why not.
     */
    public static final class ReplayRefusedException extends Exception {
        private static final long serialVersionUID = 1L;
        private final Refusal refusal;

        /**
         * @param refusal why the request was not replayed
         * @param detail what happened, or null
         */
        public ReplayRefusedException(Refusal refusal, String detail) {
            super("not replayed: " + refusal.name().toLowerCase(java.util.Locale.ROOT)
                    + (detail == null ? "" : " (" + detail + ")"));
            this.refusal = refusal;
        }

        /** @return why the request was not replayed */
        public Refusal refusal() {
            return refusal;
        }
    }
}
