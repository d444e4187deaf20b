/* example_replay.c - request replay from C with libpq, guarded by the
 * commit outcome (docs/continuity.md), over the three local PostgreSQL nodes
 * (RAC1..RAC3, independent databases: recovery.scope = node).
 *
 * Run it through tests/c/run_example.sh (it exports RACAFF_NODE<i>_DSN and
 * runs it under valgrind).
 *
 * A request is: BEGIN; INSERT its id; SELECT pg_current_xact_id_if_assigned(),
 * pg_backend_pid(); COMMIT. The host keeps the xid and pid (no xid: the
 * transaction wrote nothing, so no commit is in flight), and when the
 * request fails it asks racaffinity_replay_decide what to do, step by step:
 * check the outcome (pg_xact_status on the node the core names), force it
 * (pg_terminate_backend there, waiting until the backend is gone), replay
 * once on the node the core names, or give up with the core's refusal.
 * Requests, each with a real fault:
 *
 *   killed   its backend is terminated (by another session) before COMMIT:
 *            COMMIT fails with 57P01, the outcome check says "aborted", the
 *            request is replayed on another node and commits there once;
 *   lost     COMMIT runs and commits, and the host treats its reply as lost:
 *            the outcome check says "committed", the request succeeded and
 *            nothing is replayed;
 *   inflight COMMIT runs and commits locally, then waits for a synchronous
 *            standby that does not exist (node 0 is set so), and its reply
 *            does not come within the host's call deadline: the check says
 *            "in progress" (its backend still holds it), the force ends that
 *            backend and waits until it is gone, the check then says
 *            "committed": the request succeeded, nothing is replayed;
 *   bytext   the application's own text commits (INSERT, then "COMMIT"),
 *            then its backend is terminated: the host read the text
 *            (racaffinity_sql_transaction_control), so the request is not
 *            replayable and is not committed a second time elsewhere;
 *   session  the application sets session state by text before BEGIN
 *            ("SET search_path", read by racaffinity_sql_sets_session_state),
 *            then its backend is terminated before COMMIT: checked
 *            ("aborted"), not replayed (a new connection lacks the setting);
 *   unique   a constraint violation (23505): not recoverable, never replayed;
 *   readonly a request that only reads (a SELECT instead of the INSERT): its
 *            COMMIT reply is lost and its node stays down (connections to
 *            it refused). It wrote nothing, so it has no xid and no outcome
 *            to guard: no check, replayed on another node.
 *
 * Checks: every request id is on exactly one node (session's on none); the
 * steps taken are the expected ones; no PGconn/PGresult leaks (valgrind). */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "racaffinity.h"

#define NODES 3
/* The host's deadline for one call: a COMMIT with no reply by then is lost. */
#define CALL_DEADLINE_MS 300
/* How long a force waits for the ended backend to be gone (the bindings
 * wait their check's bound: 5 s in Java, 10 s in Python by default). */
#define FORCE_WAIT_MS 10000

static char *dsn[NODES];
static int failures;
/* Node 0 refuses connections while set: the node is down. */
static bool node0_down;

#define EXPECT(cond, ...)                                      \
    do {                                                       \
        if (!(cond)) {                                         \
            failures++;                                        \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                      \
            fputc('\n', stderr);                               \
        }                                                      \
    } while (0)

static PGconn *connect_node(uint32_t node) {
    if (node == 0 && node0_down) return NULL;
    PGconn *c = PQconnectdb(dsn[node]);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "cannot connect to node %u: %s", node, PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* Runs one statement; returns its SQLSTATE ("00000" on success) in `state`. */
static PGresult *run(PGconn *c, const char *sql, int n, const char *const *params, char state[6]) {
    PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        strcpy(state, "00000");
    } else {
        const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        /* A connection that died without a word has no SQLSTATE: 08006. */
        snprintf(state, 6, "%s", s ? s : (PQstatus(c) == CONNECTION_BAD ? "08006" : "XX000"));
    }
    return r;
}

static void exec_or_die(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
        exit(2);
    }
    PQclear(r);
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Whether the backend `pid` of node `node` waits for the synchronous standby
 * (its COMMIT is written locally and held), within `ms`. */
static bool waits_for_standby(uint32_t node, const char *pid, long ms) {
    PGconn *c = connect_node(node);
    if (!c) return false;
    const char *p[1] = {pid};
    bool waits = false;
    for (long waited = 0; !waits && waited < ms; waited += 10) {
        char st[6];
        PGresult *r = run(c, "SELECT 1 FROM pg_stat_activity WHERE pid = $1::int AND wait_event = 'SyncRep'", 1, p, st);
        waits = strcmp(st, "00000") == 0 && PQntuples(r) == 1;
        PQclear(r);
        if (!waits) sleep_ms(10);
    }
    PQfinish(c);
    return waits;
}

/* Node `node`'s commits wait for a synchronous standby that does not exist
 * (`on`), or no longer (`!on`: the server lets the held ones go). The
 * setting reaches the server's commits a moment after the reload, so a
 * probe's commit shows when it does. */
static void commits_wait_for_standby(uint32_t node, bool on) {
    PGconn *c = connect_node(node);
    if (!c) exit(2);
    exec_or_die(c, on ? "ALTER SYSTEM SET synchronous_standby_names = 'racaffinity_no_standby'"
                      : "ALTER SYSTEM RESET synchronous_standby_names");
    exec_or_die(c, "SELECT pg_reload_conf()");
    PQfinish(c);
    if (!on) return;
    for (int attempt = 0; attempt < 50; attempt++) {
        PGconn *probe = connect_node(node);
        if (!probe) exit(2);
        char pid[16];
        snprintf(pid, sizeof pid, "%d", PQbackendPID(probe));
        /* It writes, so its auto-commit waits (not a temporary table: the
         * ended backend would drop it and wait again). */
        PQsendQuery(probe, "INSERT INTO replay_probe VALUES (1)");
        bool waits = waits_for_standby(node, pid, 1000);
        if (waits) {
            PGconn *k = connect_node(node);
            const char *kp[1] = {pid};
            char ks[6];
            PQclear(run(k, "SELECT pg_terminate_backend($1::int, 10000)", 1, kp, ks));
            PQfinish(k);
        }
        PQfinish(probe);
        if (waits) return;
    }
    fprintf(stderr, "node %u: commits never waited for the synchronous standby\n", node);
    exit(2);
}

/* Whether a reply to what `c` sent comes within `ms`. */
static bool reply_within(PGconn *c, int ms) {
    struct pollfd fd = {.fd = PQsocket(c), .events = POLLIN};
    return poll(&fd, 1, ms) > 0;
}

enum fault { KILLED, LOST, INFLIGHT, BYTEXT, SESSION, UNIQUE, READONLY };

struct attempt {
    bool commit_in_flight;
    bool replayable;
    char sqlstate[6];
    char xid[32];
    char pid[16];
};

/* Runs a text the application sends in its request, read first by the
 * core's rules (docs/continuity.md): transaction control stronger than a
 * savepoint leaves the request not replayable (what ran before it may be
 * committed: a replay would commit it again), and so does session state
 * set by text outside the request's transaction (a replay on a new
 * connection would run without it; inside the transaction it is replayed
 * with it). Each request here opens its own connection, so only its own
 * texts count; a host that reuses connections keeps the session-state
 * answer per connection. */
static PGresult *send_text(PGconn *c, const char *sql, int n, const char *const *params, char state[6],
                           struct attempt *a) {
    racaffinity_transaction_control control;
    bool sets;
    if (racaffinity_sql_transaction_control(sql, strlen(sql), &control) != RACAFFINITY_RESULT_OK ||
        control > RACAFFINITY_TRANSACTION_CONTROL_SAVEPOINT)
        a->replayable = false;
    if (racaffinity_sql_sets_session_state(sql, strlen(sql), &sets) != RACAFFINITY_RESULT_OK ||
        (sets && PQtransactionStatus(c) == PQTRANS_IDLE))
        a->replayable = false;
    return run(c, sql, n, params, state);
}

/* One run of the request on `node`; true if COMMIT answered OK and the host
 * believes it (the `lost` fault disbelieves it). */
static bool run_request(uint32_t node, const char *id, enum fault fault, bool inject, struct attempt *a) {
    memset(a, 0, sizeof *a);
    PGconn *c = connect_node(node);
    if (!c) {
        strcpy(a->sqlstate, "08001");
        return false;
    }
    bool ok = false;
    a->replayable = true;
    char st[6];
    PGresult *r;
    if (fault == SESSION) PQclear(send_text(c, "SET search_path TO public", 0, NULL, st, a));
    r = run(c, "BEGIN", 0, NULL, st);
    PQclear(r);
    const char *p[1] = {id};
    r = send_text(c, fault == READONLY ? "SELECT count(*) FROM replay_demo WHERE request_id = $1"
                                       : "INSERT INTO replay_demo(request_id) VALUES ($1)",
                  1, p, st, a);
    PQclear(r);
    if (strcmp(st, "00000") == 0 && fault == BYTEXT) PQclear(send_text(c, "COMMIT", 0, NULL, st, a));
    if (strcmp(st, "00000") != 0) {
        memcpy(a->sqlstate, st, 6);
        goto done;
    }
    /* The _if_assigned form gives no xid to a transaction that has none:
     * pg_current_xact_id() would make a read-only COMMIT write a commit record
     * and burn an xid. NULL: it wrote nothing, no outcome to guard. */
    bool wrote = true;
    r = run(c, "SELECT pg_current_xact_id_if_assigned()::text, pg_backend_pid()::text", 0, NULL, st);
    if (strcmp(st, "00000") == 0) {
        wrote = !PQgetisnull(r, 0, 0);
        snprintf(a->xid, sizeof a->xid, "%s", PQgetvalue(r, 0, 0));
        snprintf(a->pid, sizeof a->pid, "%s", PQgetvalue(r, 0, 1));
    }
    PQclear(r);
    if (inject && (fault == KILLED || fault == BYTEXT || fault == SESSION)) {
        /* Another session ends this backend before COMMIT. */
        PGconn *k = connect_node(node);
        const char *kp[1] = {a->pid};
        char ks[6];
        PQclear(run(k, "SELECT pg_terminate_backend($1::int)", 1, kp, ks));
        PQfinish(k);
    }
    a->commit_in_flight = wrote;
    if (inject && fault == INFLIGHT) {
        /* The host sends COMMIT and waits for its reply until the call's
         * deadline; the node holds it (the fault, checked from another
         * session first, so the deadline cannot pass before the COMMIT got
         * there). No reply: the host gives the connection up. */
        PQsendQuery(c, "COMMIT");
        EXPECT(waits_for_standby(node, a->pid, 10000), "inflight: COMMIT never waited for the standby");
        EXPECT(!reply_within(c, CALL_DEADLINE_MS), "inflight: COMMIT answered, the fault did not hold it");
        strcpy(a->sqlstate, "08006");
        goto done;
    }
    r = run(c, "COMMIT", 0, NULL, st);
    PQclear(r);
    memcpy(a->sqlstate, st, 6);
    ok = strcmp(st, "00000") == 0;
    if (ok && inject && (fault == LOST || fault == READONLY)) {
        /* The reply "never came": the connection is lost right after. */
        strcpy(a->sqlstate, "08006");
        ok = false;
        if (fault == READONLY) node0_down = true; /* and the node is gone with it */
    }
done:
    PQfinish(c);
    return ok;
}

/* The sessions that ask a failed request's node about its COMMIT, one per
 * node, kept through the request's recovery (as the bindings force and
 * check over one connection). */
static PGconn *asking[NODES];

static PGconn *asking_session(uint32_t node) {
    if (!asking[node]) asking[node] = connect_node(node);
    return asking[node];
}

static void end_asking(void) {
    for (uint32_t i = 0; i < NODES; i++) {
        if (asking[i]) PQfinish(asking[i]);
        asking[i] = NULL;
    }
}

static racaffinity_commit_outcome check_outcome(uint32_t node, const char *xid) {
    racaffinity_commit_outcome out = RACAFFINITY_COMMIT_OUTCOME_UNKNOWN;
    PGconn *c = asking_session(node);
    if (!c) return out;
    const char *p[1] = {xid};
    char st[6];
    PGresult *r = run(c, "SELECT pg_xact_status($1::xid8)", 1, p, st);
    if (strcmp(st, "00000") == 0) {
        const char *status = PQgetisnull(r, 0, 0) ? NULL : PQgetvalue(r, 0, 0);
        if (racaffinity_pg_xact_status_outcome(status, &out) != RACAFFINITY_RESULT_OK) out = RACAFFINITY_COMMIT_OUTCOME_UNKNOWN;
    }
    PQclear(r);
    return out;
}

/* Ends the backend that still holds the COMMIT, and waits until it is gone
 * (PostgreSQL 14+): without the wait, pg_terminate_backend returns once the
 * signal is sent, and the next check could still find the transaction "in
 * progress" and give up on one that committed. A backend not gone within the
 * wait stays "in progress" to the check: the outcome is unknown. */
static void force_outcome(uint32_t node, const char *pid) {
    PGconn *c = asking_session(node);
    if (!c) return;
    char wait[16];
    snprintf(wait, sizeof wait, "%d", FORCE_WAIT_MS);
    const char *p[2] = {pid, wait};
    char st[6];
    PQclear(run(c, "SELECT pg_terminate_backend($1::int, $2::bigint)", 2, p, st));
}

static void walk(racaffinity_cluster *cl, const char *id, enum fault fault, char *trace, size_t cap) {
    struct attempt a;
    uint32_t node = 0;
    trace[0] = '\0';
    if (run_request(node, id, fault, true, &a)) {
        snprintf(trace, cap, "ok");
        return;
    }
    racaffinity_request_failure f = {.node = node, .commit_in_flight = a.commit_in_flight,
                                     .outcome = RACAFFINITY_COMMIT_OUTCOME_NOT_CHECKED, .replayable = a.replayable};
    racaffinity_error_class cls;
    if (racaffinity_sqlstate_classify(a.sqlstate, &cls) != RACAFFINITY_RESULT_OK) cls = RACAFFINITY_ERROR_CLASS_NOT_RECOVERABLE;
    f.error_class = cls;
    for (int steps = 0; steps < 8; steps++) {
        racaffinity_replay_step s;
        if (racaffinity_replay_decide(cl, &f, &s) != RACAFFINITY_RESULT_OK) {
            strncat(trace, "E", cap - strlen(trace) - 1);
            return;
        }
        switch (s.action) {
        case RACAFFINITY_REPLAY_ACTION_CHECK_OUTCOME:
            strncat(trace, "C", cap - strlen(trace) - 1);
            f.outcome = check_outcome(s.node, a.xid);
            break;
        case RACAFFINITY_REPLAY_ACTION_FORCE_OUTCOME:
            strncat(trace, "F", cap - strlen(trace) - 1);
            force_outcome(s.node, a.pid);
            f.forced = 1;
            f.outcome = RACAFFINITY_COMMIT_OUTCOME_NOT_CHECKED;
            break;
        case RACAFFINITY_REPLAY_ACTION_REPLAY:
            strncat(trace, "R", cap - strlen(trace) - 1);
            f.replays++;
            if (run_request(s.node, id, fault, false, &a)) {
                strncat(trace, "ok", cap - strlen(trace) - 1);
                return;
            }
            f.node = s.node;
            f.commit_in_flight = a.commit_in_flight;
            f.outcome = RACAFFINITY_COMMIT_OUTCOME_NOT_CHECKED;
            f.forced = 0;
            f.replayable = a.replayable;
            if (racaffinity_sqlstate_classify(a.sqlstate, &cls) != RACAFFINITY_RESULT_OK) cls = RACAFFINITY_ERROR_CLASS_NOT_RECOVERABLE;
            f.error_class = cls;
            break;
        case RACAFFINITY_REPLAY_ACTION_SUCCEEDED:
            strncat(trace, "S", cap - strlen(trace) - 1);
            return;
        case RACAFFINITY_REPLAY_ACTION_GIVE_UP: {
            char g[8];
            snprintf(g, sizeof g, "G%d", (int)s.refusal);
            strncat(trace, g, cap - strlen(trace) - 1);
            return;
        }
        }
    }
}

/* Runs a request with replay; writes the steps taken ("C" check, "F" force,
 * "R" replay, "S" succeeded, "G<refusal>" give up, "ok") into `trace`. */
static void request(racaffinity_cluster *cl, const char *id, enum fault fault, char *trace, size_t cap) {
    walk(cl, id, fault, trace, cap);
    end_asking();
}

static int copies(const char *id) {
    int n = 0;
    for (uint32_t i = 0; i < NODES; i++) {
        PGconn *c = connect_node(i);
        if (!c) exit(2);
        const char *p[1] = {id};
        char st[6];
        PGresult *r = run(c, "SELECT count(*) FROM replay_demo WHERE request_id = $1", 1, p, st);
        n += atoi(PQgetvalue(r, 0, 0));
        PQclear(r);
        PQfinish(c);
    }
    return n;
}

int main(void) {
    for (int i = 0; i < NODES; i++) {
        char var[32];
        snprintf(var, sizeof var, "RACAFF_NODE%d_DSN", i + 1);
        dsn[i] = getenv(var);
        if (!dsn[i]) {
            fprintf(stderr, "%s is not set (run through tests/c/run_example.sh)\n", var);
            return 2;
        }
        /* A run that died in the inflight case left commits waiting. */
        commits_wait_for_standby((uint32_t)i, false);
        PGconn *c = connect_node((uint32_t)i);
        if (!c) return 2;
        exec_or_die(c, "CREATE TABLE IF NOT EXISTS replay_demo (request_id text PRIMARY KEY)");
        exec_or_die(c, "DELETE FROM replay_demo");
        exec_or_die(c, "CREATE TABLE IF NOT EXISTS replay_probe (n int)");
        exec_or_die(c, "DELETE FROM replay_probe");
        PQfinish(c);
    }
    /* The unique case's row is there already, on node 0. */
    PGconn *c0 = connect_node(0);
    exec_or_die(c0, "INSERT INTO replay_demo VALUES ('unique-1')");
    PQfinish(c0);

    racaffinity_cluster *cl = NULL;
    if (racaffinity_cluster_new("nodes = RAC1, RAC2, RAC3\nrecovery.scope = node", &cl) != RACAFFINITY_RESULT_OK) return 2;

    char trace[64];
    request(cl, "killed-1", KILLED, trace, sizeof trace);
    printf("killed: %s\n", trace);
    EXPECT(strcmp(trace, "CRok") == 0, "killed before COMMIT: check (aborted), replay, ok; got %s", trace);
    EXPECT(copies("killed-1") == 1, "killed-1 committed %d times", copies("killed-1"));

    request(cl, "lost-1", LOST, trace, sizeof trace);
    printf("lost: %s\n", trace);
    EXPECT(strcmp(trace, "CS") == 0, "COMMIT reply lost: check (committed), succeeded; got %s", trace);
    EXPECT(copies("lost-1") == 1, "lost-1 committed %d times", copies("lost-1"));

    /* The force step races the ended backend's exit: run it a few times
     * (RACAFF_INFLIGHT_ROUNDS, default 10). */
    const char *rounds_env = getenv("RACAFF_INFLIGHT_ROUNDS");
    int rounds = rounds_env ? atoi(rounds_env) : 10;
    commits_wait_for_standby(0, true);
    for (int i = 1; i <= rounds; i++) {
        char id[32];
        snprintf(id, sizeof id, "inflight-%d", i);
        request(cl, id, INFLIGHT, trace, sizeof trace);
        printf("inflight %d: %s\n", i, trace);
        EXPECT(strcmp(trace, "CFCS") == 0,
               "COMMIT held, no reply: check (in progress), force, check (committed), succeeded; got %s", trace);
        EXPECT(copies(id) == 1, "%s committed %d times", id, copies(id));
    }
    commits_wait_for_standby(0, false);

    request(cl, "bytext-1", BYTEXT, trace, sizeof trace);
    printf("bytext: %s\n", trace);
    EXPECT(strcmp(trace, "G2") == 0, "committed by its own COMMIT text, then killed: give up, not replayable; got %s", trace);
    EXPECT(copies("bytext-1") == 1, "bytext-1 committed %d times", copies("bytext-1"));

    request(cl, "session-1", SESSION, trace, sizeof trace);
    printf("session: %s\n", trace);
    EXPECT(strcmp(trace, "CG2") == 0, "SET before BEGIN, killed: check (aborted), give up, not replayable; got %s", trace);
    EXPECT(copies("session-1") == 0, "session-1 committed %d times", copies("session-1"));

    request(cl, "readonly-1", READONLY, trace, sizeof trace);
    printf("readonly: %s\n", trace);
    EXPECT(strcmp(trace, "Rok") == 0, "read-only, COMMIT reply lost, node down: replay, ok; got %s", trace);
    node0_down = false;

    request(cl, "unique-1", UNIQUE, trace, sizeof trace);
    printf("unique: %s\n", trace);
    EXPECT(strcmp(trace, "G1") == 0, "23505: give up, not recoverable; got %s", trace);
    EXPECT(copies("unique-1") == 1, "unique-1 is there %d times", copies("unique-1"));

    racaffinity_cluster_free(cl);
    if (failures) printf("example_replay: FAILED\n");
    else printf("example_replay: ok (%d requests, each write committed at most once)\n", 6 + rounds);
    return failures ? 1 : 0;
}
