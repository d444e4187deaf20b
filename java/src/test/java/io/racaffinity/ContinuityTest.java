package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.racaffinity.Continuity.Action;
import io.racaffinity.Continuity.CommitOutcome;
import io.racaffinity.Continuity.ErrorClass;
import io.racaffinity.Continuity.Failure;
import io.racaffinity.Continuity.Refusal;
import io.racaffinity.Continuity.Step;
import org.junit.jupiter.api.Test;

/** The core's continuity decisions through JNI, row by row of docs/continuity.md's table. */
class ContinuityTest {
    @Test
    void sqlStatesOfLostConnectionsAreRecoverable() {
        for (String s : new String[] {"08006", "08003", "08S01", "08S02", "57P01", "57P02", "57P03"}) {
            assertEquals(ErrorClass.RECOVERABLE, Continuity.classifySqlState(s), s);
        }
        for (String s : new String[] {"40001", "40P01", "57014", "23505", "", "garbage", "0"}) {
            assertEquals(ErrorClass.NOT_RECOVERABLE, Continuity.classifySqlState(s), s);
        }
        assertEquals(ErrorClass.NOT_RECOVERABLE, Continuity.classifySqlState(null));
    }

    @Test
    void anySqlStateTextIsClassifiedNeverRefused() {
        // A driver's or a wrapper's getSQLState() is free text: malformed is NOT_RECOVERABLE, as
        // documented, also with a lone surrogate or past the library's string limit, rather than an
        // InvalidArgumentException thrown from the error handling in place of the request's error.
        for (String s : new String[] {"08\uD800", "\uDC0006", "08006" + "x".repeat(2000), "0800\u0000",
                "08\uD83D\uDE00"}) {
            assertEquals(ErrorClass.NOT_RECOVERABLE, Continuity.classifySqlState(s), s);
        }
        assertEquals(ErrorClass.RECOVERABLE, Continuity.classifySqlState(" 08006 "));
    }

    @Test
    void pgXactStatusAnswersMapToOutcomes() {
        assertEquals(CommitOutcome.COMMITTED, Continuity.fromPgXactStatus("committed"));
        assertEquals(CommitOutcome.ABORTED, Continuity.fromPgXactStatus("aborted"));
        assertEquals(CommitOutcome.IN_PROGRESS, Continuity.fromPgXactStatus("in progress"));
        assertEquals(CommitOutcome.UNKNOWN, Continuity.fromPgXactStatus(null));
        assertEquals(CommitOutcome.UNKNOWN, Continuity.fromPgXactStatus("COMMITTED?"));
    }

    @Test
    void anyPgXactStatusTextIsAnOutcomeNeverRefused() {
        // "anything else unknown": the replay reads this column from a node it is failing over from, so
        // text the library cannot take as a string (a lone surrogate, past its string limit, a NUL) must
        // still be UNKNOWN, not an InvalidArgumentException thrown in place of the request's own error.
        for (String s : new String[] {"\uD800", "committed\uDC00", "committed" + "x".repeat(2000), "committed\u0000",
                "committed\uD83D\uDE00"}) {
            assertEquals(CommitOutcome.UNKNOWN, Continuity.fromPgXactStatus(s), s);
        }
    }

    @Test
    void eachRowOfTheTable() {
        try (Cluster c = Cluster.fromConfig("nodes = A, B, C")) {
            Failure lost = new Failure(1, ErrorClass.RECOVERABLE, false, null, false, 0, true);
            assertEquals(new Step(Action.GIVE_UP, 0, Refusal.NOT_RECOVERABLE),
                    c.replayStep(new Failure(1, ErrorClass.NOT_RECOVERABLE, false, null, false, 0, true)));
            Step replay = c.replayStep(lost);
            assertEquals(Action.REPLAY, replay.action());
            assertNotEquals(1, replay.node(), "elsewhere");
            Failure committing = new Failure(1, ErrorClass.RECOVERABLE, true, null, false, 0, true);
            // independent databases (recovery.scope = node): the failed node itself is asked
            assertEquals(new Step(Action.CHECK_OUTCOME, 1, Refusal.NONE), c.replayStep(committing));
            assertEquals(Action.SUCCEEDED, c.replayStep(committing.withOutcome(CommitOutcome.COMMITTED)).action());
            assertEquals(Action.REPLAY, c.replayStep(committing.withOutcome(CommitOutcome.ABORTED)).action());
            assertEquals(new Step(Action.FORCE_OUTCOME, 1, Refusal.NONE),
                    c.replayStep(committing.withOutcome(CommitOutcome.IN_PROGRESS)));
            assertEquals(new Step(Action.GIVE_UP, 0, Refusal.OUTCOME_UNKNOWN),
                    c.replayStep(committing.forcedNow().withOutcome(CommitOutcome.IN_PROGRESS)));
            assertEquals(new Step(Action.GIVE_UP, 0, Refusal.OUTCOME_UNKNOWN),
                    c.replayStep(committing.withOutcome(CommitOutcome.UNKNOWN)));
            assertEquals(Refusal.NOT_REPLAYABLE,
                    c.replayStep(new Failure(1, ErrorClass.RECOVERABLE, false, null, false, 0, false)).refusal());
            assertEquals(Refusal.REPLAYED_ALREADY,
                    c.replayStep(new Failure(1, ErrorClass.RECOVERABLE, false, null, false, 1, true)).refusal());
            assertThrows(UnknownNodeException.class,
                    () -> c.replayStep(new Failure(7, ErrorClass.RECOVERABLE, false, null, false, 0, true)));
            assertThrows(UnknownNodeException.class,
                    () -> c.replayStep(new Failure(-1, ErrorClass.RECOVERABLE, false, null, false, 0, true)));
        }
        try (Cluster rac = Cluster.fromConfig("nodes = A, B, C; recovery.scope = database")) {
            Step check = rac.replayStep(new Failure(1, ErrorClass.RECOVERABLE, true, null, false, 0, true));
            assertEquals(Action.CHECK_OUTCOME, check.action());
            assertNotEquals(1, check.node(), "another instance of the database answers");
        }
    }
}
