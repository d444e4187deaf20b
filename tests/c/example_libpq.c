/* example_libpq.c - racaffinity from C, routing real two-phase-commit
 * transactions over three local PostgreSQL nodes (stand-ins for RAC
 * instances RAC1..RAC3) through libpq, across a real crash of RAC2.
 *
 * Run it through tests/c/run_example.sh, which builds it, starts the nodes
 * with tests/cluster/pgnodes, exports RACAFF_NODE<i>_DSN and runs it under
 * valgrind.
 *
 * What it does:
 *   phase 1   30 global transactions, all nodes up. Each has two branches;
 *             each branch runs on its own thread with its own PGconn, asks
 *             racaffinity_tx_begin where to go, then BEGIN; INSERT;
 *             PREPARE TRANSACTION '<gtrid>.<b>' and racaffinity_tx_prepared.
 *             Phase two (the "TM", the main thread) asks racaffinity_tx_route
 *             where to send COMMIT PREPARED, then racaffinity_tx_end.
 *   crash     12 transactions run concurrently and are caught in flight by
 *             `pgnodes kill 2` (SIGKILL of RAC2's postmaster):
 *               "open"    branch 0 prepared, branch 1 still inside BEGIN..INSERT
 *                         when the node dies -> the TM decides ABORT;
 *               "decided" both branches prepared, the TM logged COMMIT and
 *                         committed branch 0; branch 1's COMMIT comes after.
 *             Connection failures feed racaffinity (lease released FAILED,
 *             racaffinity_outcome_report(node, false)).
 *   phase 2   6 transactions after the crash, before the FAN event.
 *   FAN       SERVICEMEMBER ... instance=RAC2 status=down reason=FAILURE
 *             applied with racaffinity_event_apply; 2PC for branches
 *             prepared on RAC2 is now refused cleanly (PREPARED_NODE_UNAVAILABLE)
 *             instead of being sent anywhere else.
 *   phase 3   the remaining transactions: none may touch RAC2.
 *   recovery  `pgnodes restart 2`, FAN status=up, then a recovery scan of
 *             pg_prepared_xacts on every node: racaffinity_tx_recovered for
 *             each gid, racaffinity_tx_route for its COMMIT/ROLLBACK PREPARED
 *             (the decision comes from the TM's log; no decision = abort).
 *   checks    nothing in doubt anywhere, every committed transaction has both
 *             rows on one node, every failed one has no row anywhere, no
 *             leaked PGconn/PGresult (counted here; valgrind checks memory),
 *             no leftover server session, lease or transaction entry.
 *
 * A branch that fails makes its transaction rollback-only, as a TM does. A
 * "split" is two branches of one transaction that did work on different
 * nodes; two branches merely routed apart because one found its node dead
 * before doing anything are counted separately (soft transaction affinity
 * re-places an unprepared transaction whose node is down, as documented).
 *
 * RACAFF_EXAMPLE_CONTRAST=1 routes every connection by plain load balancing
 * instead (no transaction affinity): that run must fail with split
 * transactions and misrouted 2PC commands, which shows the checks can fail.
 *
 * Exit status: 0 when every check passes, 1 otherwise, 2 on setup errors.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include <libpq-fe.h>

#include "racaffinity.h"

#define NNODES 3
#define NTX 60
#define PHASE1_COUNT 30
#define CRASH_FIRST 30
#define CRASH_COUNT 12
#define PRE_FAN_FIRST (CRASH_FIRST + CRASH_COUNT) /* 42: after the kill, before the FAN */
#define PRE_FAN_COUNT 6
#define POST_FAN_FIRST (PRE_FAN_FIRST + PRE_FAN_COUNT) /* 48..59 */
#define DEAD 1                                         /* node id of RAC2 */
#define GID_PREFIX "cx-"
#define APP_NAME "racaff_c_example"
#define TABLE "racaff_c_example"
#define WAIT_SECONDS 120 /* generous: valgrind is slow */

#define FAN_DOWN                                                                                   \
    "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=RAC2 host=127.0.0.1 status=down " \
    "reason=FAILURE card=1"
#define FAN_UP                                                                                   \
    "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=RAC2 host=127.0.0.1 status=up " \
    "reason=BOOT card=2"

/* ------------------------------------------------------------------------ */
/* bookkeeping                                                               */

enum bstate { B_NONE, B_REFUSED, B_FAILED, B_PREPARED, B_COMMITTED, B_ROLLED_BACK };
enum decision { D_NONE, D_COMMIT, D_ABORT };
enum variant { V_NORMAL, V_OPEN, V_DECIDED };
enum phase { P_BEFORE, P_CRASH, P_AFTER_KILL, P_AFTER_FAN };

struct gtx;

struct branch {
    struct gtx *tx;
    int idx;
    bool hold;     /* stop after INSERT until the crash, then PREPARE */
    bool arrived;  /* reached the crash checkpoint */
    int node;      /* routed node, -1 if never routed */
    enum bstate state;
    bool in_doubt; /* prepared, but phase two could not reach its node (yet) */
    bool recovered;
    bool live;     /* did work on its node (BEGIN/INSERT succeeded) */
    racaffinity_route_kind kind;
    char note[512];
};

struct gtx {
    char gtrid[16];
    enum variant variant;
    enum phase phase;
    enum decision decision; /* the TM's log */
    struct branch br[2];
    pthread_t thr[2];
    atomic_bool rollback_only;
};

static racaffinity_cluster *g_cl;
static char g_conninfo[NNODES][512];
static char g_name[NNODES][16];
static int g_port[NNODES];
static struct gtx g_tx[NTX];
static PGconn *g_tm[NNODES]; /* the TM's 2PC connections, one per node */

static atomic_int g_open_conns;
static atomic_int g_open_results;

static int g_misrouted;
static int g_split;
static int g_routed_apart; /* routed apart after a branch failed before doing work */
static int g_unexpected;     /* unexpected library or SQL errors */
static int g_recovered_gids; /* gids resolved by the recovery scan */

/* crash checkpoint */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_arrived;
static bool g_crashed;

static void fatal(const char *what)
{
    fprintf(stderr, "example_libpq: %s\n", what);
    exit(2);
}

static void unexpected(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void unexpected(const char *fmt, ...)
{
    va_list ap;
    g_unexpected++;
    fprintf(stderr, "UNEXPECTED: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Detail of this thread's last failed racaffinity call. */
static const char *rac_err(racaffinity_result rc, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    if (racaffinity_last_error_message(buf, cap, &n) != RACAFFINITY_RESULT_OK || buf[0] == '\0')
        racaffinity_result_message((uint32_t)rc, buf, cap, &n);
    return buf;
}

static const char *rc_name(racaffinity_result rc)
{
    switch (rc) {
    case RACAFFINITY_RESULT_OK: return "OK";
    case RACAFFINITY_RESULT_PREPARED_NODE_UNAVAILABLE: return "PREPARED_NODE_UNAVAILABLE";
    case RACAFFINITY_RESULT_STRICT_AFFINITY: return "STRICT_AFFINITY";
    case RACAFFINITY_RESULT_UNKNOWN_TRANSACTION: return "UNKNOWN_TRANSACTION";
    case RACAFFINITY_RESULT_NO_NODE_AVAILABLE: return "NO_NODE_AVAILABLE";
    case RACAFFINITY_RESULT_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    default: return "error";
    }
}

static const char *kind_name(racaffinity_route_kind k)
{
    switch (k) {
    case RACAFFINITY_ROUTE_KIND_BALANCED: return "balanced";
    case RACAFFINITY_ROUTE_KIND_AFFINITY: return "affinity";
    case RACAFFINITY_ROUTE_KIND_PLACED: return "placed";
    case RACAFFINITY_ROUTE_KIND_REPINNED: return "repinned";
    case RACAFFINITY_ROUTE_KIND_FALLBACK: return "fallback";
    case RACAFFINITY_ROUTE_KIND_PANIC: return "panic";
    }
    return "?";
}

static void first_line(char *dst, size_t cap, const char *src)
{
    size_t n = strcspn(src, "\n");
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static size_t glen(const struct gtx *t) { return strlen(t->gtrid); }
static const uint8_t *gbytes(const struct gtx *t) { return (const uint8_t *)t->gtrid; }

/* Transaction routing. With RACAFF_EXAMPLE_CONTRAST=1 every connection is
 * load-balanced instead, as a plain pool would do it: the run must then fail
 * its split and misroute checks, which proves they can fail. */
static bool g_contrast;

static racaffinity_result route_branch(const struct gtx *t, racaffinity_route *r)
{
    return g_contrast ? racaffinity_cluster_route(g_cl, r) : racaffinity_tx_begin(g_cl, gbytes(t), glen(t), r);
}

static racaffinity_result route_2pc(const struct gtx *t, racaffinity_route *r)
{
    return g_contrast ? racaffinity_cluster_route(g_cl, r) : racaffinity_tx_route(g_cl, gbytes(t), glen(t), r);
}

static racaffinity_result tx_prepared(const struct gtx *t)
{
    return g_contrast ? RACAFFINITY_RESULT_OK : racaffinity_tx_prepared(g_cl, gbytes(t), glen(t));
}

static racaffinity_result tx_end(const struct gtx *t)
{
    return g_contrast ? RACAFFINITY_RESULT_OK : racaffinity_tx_end(g_cl, gbytes(t), glen(t));
}

/* ------------------------------------------------------------------------ */
/* libpq with counted resources                                              */

enum sql_rc { SQL_OK, SQL_ERROR, SQL_CONN_LOST };

/* NULL when the node cannot be reached; err gets libpq's message. */
static PGconn *db_connect(int node, char *err, size_t cap)
{
    PGconn *c = PQconnectdb(g_conninfo[node]);
    if (c == NULL)
        fatal("PQconnectdb: out of memory");
    atomic_fetch_add(&g_open_conns, 1);
    if (PQstatus(c) != CONNECTION_OK) {
        first_line(err, cap, PQerrorMessage(c));
        PQfinish(c);
        atomic_fetch_sub(&g_open_conns, 1);
        return NULL;
    }
    return c;
}

static void db_close(PGconn *c)
{
    if (c != NULL) {
        PQfinish(c);
        atomic_fetch_sub(&g_open_conns, 1);
    }
}

static PGresult *db_query(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (r != NULL)
        atomic_fetch_add(&g_open_results, 1);
    return r;
}

static void db_clear(PGresult *r)
{
    if (r != NULL) {
        PQclear(r);
        atomic_fetch_sub(&g_open_results, 1);
    }
}

/* Runs a command. `sqlstate` (may be NULL) gets the 5-char SQLSTATE. */
static enum sql_rc db_exec(PGconn *c, const char *sql, char *err, size_t cap, char *sqlstate)
{
    PGresult *r = db_query(c, sql);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (sqlstate)
        sqlstate[0] = '\0';
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        db_clear(r);
        return SQL_OK;
    }
    first_line(err, cap, r ? PQresultErrorMessage(r) : PQerrorMessage(c));
    if (err[0] == '\0')
        first_line(err, cap, PQerrorMessage(c));
    if (sqlstate && r && PQresultErrorField(r, PG_DIAG_SQLSTATE)) {
        strncpy(sqlstate, PQresultErrorField(r, PG_DIAG_SQLSTATE), 5);
        sqlstate[5] = '\0';
    }
    db_clear(r);
    return PQstatus(c) == CONNECTION_BAD ? SQL_CONN_LOST : SQL_ERROR;
}

/* One integer from a one-row query; -1 on failure. */
static long db_scalar(PGconn *c, const char *sql)
{
    PGresult *r = db_query(c, sql);
    long v = -1;
    if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
        v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    db_clear(r);
    return v;
}

/* A 2PC command on the TM's connection to `node` (reconnecting as needed). */
static enum sql_rc tm_exec(int node, const char *sql, char *err, size_t cap, char *sqlstate)
{
    if (g_tm[node] == NULL) {
        g_tm[node] = db_connect(node, err, cap);
        if (g_tm[node] == NULL)
            return SQL_CONN_LOST;
    }
    enum sql_rc rc = db_exec(g_tm[node], sql, err, cap, sqlstate);
    if (rc == SQL_CONN_LOST) {
        db_close(g_tm[node]);
        g_tm[node] = NULL;
    }
    return rc;
}

static void tm_disconnect_all(void)
{
    for (int i = 0; i < NNODES; i++) {
        db_close(g_tm[i]);
        g_tm[i] = NULL;
    }
}

/* ------------------------------------------------------------------------ */
/* the crash checkpoint                                                      */

static void arrive(struct branch *b)
{
    if (b->tx->phase != P_CRASH || b->arrived)
        return;
    b->arrived = true;
    pthread_mutex_lock(&g_mu);
    g_arrived++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static void deadline_in(struct timespec *ts, int seconds)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += seconds;
}

static void wait_crashed(void)
{
    struct timespec dl;
    deadline_in(&dl, WAIT_SECONDS);
    pthread_mutex_lock(&g_mu);
    while (!g_crashed)
        if (pthread_cond_timedwait(&g_cv, &g_mu, &dl) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&g_mu);
}

/* ------------------------------------------------------------------------ */
/* a branch: what one application thread does                                */

/* A branch that fails makes the transaction rollback-only (as a TM does):
 * a branch that has not started yet does not start, and one that has not
 * prepared rolls back instead. */
static void mark_rollback_only(struct gtx *t) { atomic_store(&t->rollback_only, true); }

static void *branch_main(void *arg)
{
    struct branch *b = arg;
    struct gtx *t = b->tx;
    char err[256], sql[256], gid[32];
    racaffinity_route route;
    racaffinity_lease lease;
    snprintf(gid, sizeof gid, "%s.%d", t->gtrid, b->idx);

    if (atomic_load(&t->rollback_only)) {
        b->state = B_FAILED;
        snprintf(b->note, sizeof b->note, "not started: the transaction is rollback-only");
        arrive(b);
        return NULL;
    }
    racaffinity_result rc = route_branch(t, &route);
    if (rc != RACAFFINITY_RESULT_OK) {
        b->state = B_REFUSED;
        snprintf(b->note, sizeof b->note, "tx_begin refused: %s", rac_err(rc, err, sizeof err));
        mark_rollback_only(t);
        arrive(b);
        return NULL;
    }
    b->node = (int)route.node;
    b->kind = route.kind;
    /* Lease the routed node so this branch's outcome feeds balancing and health. */
    rc = racaffinity_lease_begin(g_cl, route.node, &lease);
    if (rc != RACAFFINITY_RESULT_OK) {
        snprintf(b->note, sizeof b->note, "lease_begin: %s", rac_err(rc, err, sizeof err));
        b->state = B_FAILED;
        mark_rollback_only(t);
        tx_end(t);
        arrive(b);
        return NULL;
    }

    uint32_t outcome = RACAFFINITY_OUTCOME_OK;
    PGconn *c = db_connect(b->node, err, sizeof err);
    enum sql_rc s = SQL_CONN_LOST;
    const char *step = "connect";
    bool abandoned = false;
    if (c != NULL) {
        snprintf(sql, sizeof sql,
                 "BEGIN; INSERT INTO " TABLE " VALUES ('%s', %d, current_setting('port')::int)",
                 t->gtrid, b->idx);
        step = "BEGIN/INSERT";
        s = db_exec(c, sql, err, sizeof err, NULL);
        b->live = s == SQL_OK;
        if (s == SQL_OK && b->hold) {
            arrive(b);
            wait_crashed();
        }
        if (s == SQL_OK && atomic_load(&t->rollback_only)) {
            abandoned = true;
            step = "ROLLBACK";
            s = db_exec(c, "ROLLBACK", err, sizeof err, NULL);
        } else if (s == SQL_OK) {
            snprintf(sql, sizeof sql, "PREPARE TRANSACTION '%s'", gid);
            step = "PREPARE";
            s = db_exec(c, sql, err, sizeof err, NULL);
        }
    }
    if (s == SQL_OK && !abandoned) {
        rc = tx_prepared(t);
        if (rc != RACAFFINITY_RESULT_OK)
            snprintf(b->note, sizeof b->note, "tx_prepared: %s", rac_err(rc, err, sizeof err));
        b->state = B_PREPARED;
    } else {
        /* The branch is gone: a lost connection means the server rolled it
         * back (or never began it); an SQL error is rolled back here. */
        b->state = B_FAILED;
        if (abandoned && s == SQL_OK) {
            outcome = RACAFFINITY_OUTCOME_NEUTRAL;
            snprintf(b->note, sizeof b->note, "rolled back on %s: another branch failed", g_name[b->node]);
        } else {
            if (s == SQL_CONN_LOST) {
                outcome = RACAFFINITY_OUTCOME_FAILED;
            } else {
                char e2[128];
                db_exec(c, "ROLLBACK", e2, sizeof e2, NULL);
                outcome = RACAFFINITY_OUTCOME_NEUTRAL;
            }
            snprintf(b->note, sizeof b->note, "%s failed on %s: %s", step, g_name[b->node], err);
        }
        mark_rollback_only(t);
        tx_end(t); /* this branch ended */
    }
    rc = racaffinity_lease_release(g_cl, &lease, outcome);
    if (rc != RACAFFINITY_RESULT_OK)
        snprintf(b->note, sizeof b->note, "lease_release: %s", rac_err(rc, err, sizeof err));
    db_close(c);
    arrive(b);
    return NULL;
}

static void tx_init(int i, enum phase ph, enum variant v)
{
    struct gtx *t = &g_tx[i];
    memset(t, 0, sizeof *t);
    atomic_init(&t->rollback_only, false);
    snprintf(t->gtrid, sizeof t->gtrid, GID_PREFIX "%03d", i);
    t->phase = ph;
    t->variant = v;
    for (int b = 0; b < 2; b++) {
        t->br[b].tx = t;
        t->br[b].idx = b;
        t->br[b].node = -1;
        t->br[b].hold = (v == V_OPEN && b == 1);
    }
}

static void tx_start(struct gtx *t)
{
    for (int b = 0; b < 2; b++)
        if (pthread_create(&t->thr[b], NULL, branch_main, &t->br[b]) != 0)
            fatal("pthread_create failed");
}

/* A split is two branches of one transaction doing work on different
 * nodes. A branch whose node was already dead never did any work; when the
 * joiner is then placed elsewhere (the soft re-pin the README documents, or a
 * fresh placement after the failed branch's tx_end) that is counted apart. */
static void tx_join(struct gtx *t)
{
    for (int b = 0; b < 2; b++)
        pthread_join(t->thr[b], NULL);
    const struct branch *b0 = &t->br[0], *b1 = &t->br[1];
    if (b0->node >= 0 && b1->node >= 0 && b0->node != b1->node) {
        if (b0->live && b1->live) {
            g_split++;
            printf("  SPLIT: %s branches did work on %s and %s\n", t->gtrid, g_name[b0->node], g_name[b1->node]);
        } else {
            g_routed_apart++;
            const struct branch *ran = b0->live ? b0 : b1;
            printf("  %s: branches routed to %s (%s) and %s (%s); only %s did work, the other's node was dead\n",
                   t->gtrid, g_name[b0->node], kind_name(b0->kind), g_name[b1->node], kind_name(b1->kind),
                   ran->live ? g_name[ran->node] : "neither");
        }
    }
}

/* ------------------------------------------------------------------------ */
/* the TM: phase two, routed by racaffinity                                  */

static bool both_prepared(const struct gtx *t)
{
    for (int b = 0; b < 2; b++)
        if (t->br[b].state != B_PREPARED && t->br[b].state != B_COMMITTED)
            return false;
    return true;
}

static void log_decision(struct gtx *t)
{
    if (t->decision == D_NONE)
        t->decision = both_prepared(t) ? D_COMMIT : D_ABORT;
}

static bool is_missing_gid(const char *sqlstate, const char *err)
{
    return strcmp(sqlstate, "42704") == 0 || strstr(err, "does not exist") != NULL;
}

/* COMMIT/ROLLBACK PREPARED of one prepared branch, sent where
 * racaffinity_tx_route says. `holder` is the node known to hold it (for
 * cleaning up after a misroute). Returns true when the branch is resolved. */
static bool resolve_branch(struct gtx *t, struct branch *b, int holder, bool quiet)
{
    char err[256], sql[96], st[6];
    racaffinity_route r;
    bool commit = t->decision == D_COMMIT;
    const char *verb = commit ? "COMMIT PREPARED" : "ROLLBACK PREPARED";

    racaffinity_result rc = route_2pc(t, &r);
    if (rc != RACAFFINITY_RESULT_OK) {
        b->in_doubt = true;
        snprintf(b->note, sizeof b->note, "tx_route -> %s (%s)", rc_name(rc), rac_err(rc, err, sizeof err));
        if (!quiet)
            printf("  %s.%d: %s refused by racaffinity: %s\n", t->gtrid, b->idx, verb, b->note);
        return false;
    }
    snprintf(sql, sizeof sql, "%s '%s.%d'", verb, t->gtrid, b->idx);
    enum sql_rc s = tm_exec((int)r.node, sql, err, sizeof err, st);
    if (s == SQL_CONN_LOST) {
        racaffinity_outcome_report(g_cl, r.node, false);
        b->in_doubt = true;
        snprintf(b->note, sizeof b->note, "%s on %s: connection failed (%s)", verb, g_name[r.node], err);
        if (!quiet)
            printf("  %s.%d: %s\n", t->gtrid, b->idx, b->note);
        return false;
    }
    if (s == SQL_ERROR) {
        if (is_missing_gid(st, err)) {
            /* The ORA-24756 analogue: the command reached a node without the branch. */
            g_misrouted++;
            printf("  MISROUTED: %s sent to %s: %s\n", sql, g_name[r.node], err);
            if (holder >= 0 && holder != (int)r.node && tm_exec(holder, sql, err, sizeof err, st) == SQL_OK) {
                b->state = commit ? B_COMMITTED : B_ROLLED_BACK;
                b->in_doubt = false;
                tx_end(t);
                return true;
            }
        } else {
            unexpected("%s: %s", sql, err);
        }
        b->in_doubt = true;
        return false;
    }
    b->state = commit ? B_COMMITTED : B_ROLLED_BACK;
    b->in_doubt = false;
    rc = tx_end(t);
    if (rc != RACAFFINITY_RESULT_OK)
        unexpected("tx_end %s: %s", t->gtrid, rac_err(rc, err, sizeof err));
    return true;
}

static void phase_two(struct gtx *t, bool quiet)
{
    log_decision(t);
    for (int b = 0; b < 2; b++)
        if (t->br[b].state == B_PREPARED)
            resolve_branch(t, &t->br[b], t->br[b].node, quiet);
}

static void run_one(int i, enum phase ph)
{
    tx_init(i, ph, V_NORMAL);
    tx_start(&g_tx[i]);
    tx_join(&g_tx[i]);
    phase_two(&g_tx[i], false);
}

/* ------------------------------------------------------------------------ */
/* reporting                                                                 */

static bool tx_committed(const struct gtx *t)
{
    return t->decision == D_COMMIT && t->br[0].state == B_COMMITTED && t->br[1].state == B_COMMITTED;
}

static bool tx_failed_cleanly(const struct gtx *t)
{
    return t->decision == D_ABORT && t->br[0].state != B_COMMITTED && t->br[1].state != B_COMMITTED &&
           t->br[0].state != B_PREPARED && t->br[1].state != B_PREPARED;
}

static void print_phase(const char *title, int first, int count)
{
    int per[NNODES] = {0}, committed = 0, failed = 0, pending = 0;
    for (int i = first; i < first + count; i++) {
        const struct gtx *t = &g_tx[i];
        for (int b = 0; b < 2; b++)
            if (t->br[b].node >= 0 && t->br[b].state != B_REFUSED)
                per[t->br[b].node]++;
        if (tx_committed(t))
            committed++;
        else if (tx_failed_cleanly(t))
            failed++;
        else
            pending++;
    }
    printf("%s\n", title);
    printf("  %-34s committed %d, failed cleanly %d, in doubt %d\n", "transactions", committed, failed, pending);
    printf("  %-34s", "branches routed per node");
    for (int n = 0; n < NNODES; n++)
        printf("%s=%d  ", g_name[n], per[n]);
    printf("\n");
}

static void print_notes(int first, int count)
{
    for (int i = first; i < first + count; i++)
        for (int b = 0; b < 2; b++)
            if (g_tx[i].br[b].note[0])
                printf("    %s.%d [%s]: %s\n", g_tx[i].gtrid, b,
                       g_tx[i].br[b].node >= 0 ? g_name[g_tx[i].br[b].node] : "-", g_tx[i].br[b].note);
}

/* ------------------------------------------------------------------------ */
/* harness and setup                                                         */

static int harness(const char *args)
{
    const char *pg = getenv("RACAFF_PGNODES");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s %s", pg && *pg ? pg : "tests/cluster/pgnodes", args);
    fflush(stdout);
    fflush(stderr);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "example_libpq: `%s` failed (status %d)\n", cmd, st);
        return -1;
    }
    return 0;
}

static void apply_event(const char *line)
{
    uint32_t changes = 0;
    char err[256];
    racaffinity_result rc = racaffinity_event_apply(g_cl, line, &changes);
    printf("  FAN: %s\n", line);
    if (rc != RACAFFINITY_RESULT_OK) {
        unexpected("event_apply: %s", rac_err(rc, err, sizeof err));
        return;
    }
    racaffinity_node_state state;
    racaffinity_node_get_state(g_cl, DEAD, &state);
    printf("    -> %u state change(s); RAC2 is now %s\n", changes,
           state == RACAFFINITY_NODE_STATE_UP ? "UP" : state == RACAFFINITY_NODE_STATE_DOWN ? "DOWN" : "DRAINING");
}

static void setup(void)
{
    char config[1024], err[256];
    int off = snprintf(config, sizeof config, "name = c_example\ndatabase = orcl\nservice = svc\nnodes = RAC1, RAC2, RAC3\n");
    for (int i = 0; i < NNODES; i++) {
        char var[32];
        snprintf(var, sizeof var, "RACAFF_NODE%d_DSN", i + 1);
        const char *dsn = getenv(var);
        if (dsn == NULL || *dsn == '\0') {
            fprintf(stderr, "%s is not set: run tests/c/run_example.sh, which starts the nodes\n", var);
            exit(2);
        }
        snprintf(var, sizeof var, "RACAFF_NODE%d_PORT", i + 1);
        const char *port = getenv(var);
        g_port[i] = port ? atoi(port) : 55431 + i;
        snprintf(g_conninfo[i], sizeof g_conninfo[i],
                 "%s application_name=" APP_NAME " connect_timeout=5 sslmode=disable gssencmode=disable", dsn);
        off += snprintf(config + off, sizeof config - (size_t)off, "node.RAC%d.address = 127.0.0.1:%d\n", i + 1,
                        g_port[i]);
    }
    racaffinity_result rc = racaffinity_cluster_new(config, &g_cl);
    if (rc != RACAFFINITY_RESULT_OK) {
        fprintf(stderr, "racaffinity_cluster_new: %s\n", rac_err(rc, err, sizeof err));
        exit(2);
    }
    uint32_t n = 0, rac2 = 99;
    racaffinity_cluster_node_count(g_cl, &n);
    racaffinity_node_find(g_cl, "rac2", &rac2);
    if (n != NNODES || rac2 != DEAD)
        fatal("unexpected topology");
    for (uint32_t i = 0; i < NNODES; i++) {
        size_t len;
        if (racaffinity_node_name(g_cl, i, g_name[i], sizeof g_name[i], &len) != RACAFFINITY_RESULT_OK)
            fatal("racaffinity_node_name failed");
    }
    if (!PQisthreadsafe())
        fatal("this libpq is not thread-safe");

    /* A clean slate on every node: the table, and nothing left prepared by an earlier, aborted run. */
    for (int i = 0; i < NNODES; i++) {
        PGconn *c = db_connect(i, err, sizeof err);
        if (c == NULL) {
            fprintf(stderr, "node %s is not reachable: %s\n", g_name[i], err);
            exit(2);
        }
        if (db_exec(c, "SET client_min_messages = warning; CREATE TABLE IF NOT EXISTS " TABLE
                       " (gtrid text NOT NULL, branch int NOT NULL, port int NOT NULL); TRUNCATE " TABLE,
                    err, sizeof err, NULL) != SQL_OK) {
            fprintf(stderr, "setup on %s: %s\n", g_name[i], err);
            exit(2);
        }
        PGresult *r = db_query(c, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE '" GID_PREFIX "%'");
        for (int k = 0; r && PQresultStatus(r) == PGRES_TUPLES_OK && k < PQntuples(r); k++) {
            char sql[96];
            snprintf(sql, sizeof sql, "ROLLBACK PREPARED '%s'", PQgetvalue(r, k, 0));
            db_exec(c, sql, err, sizeof err, NULL);
            printf("  (rolled back %s, left prepared on %s by an earlier run)\n", PQgetvalue(r, k, 0), g_name[i]);
        }
        db_clear(r);
        db_close(c);
    }
}

/* ------------------------------------------------------------------------ */
/* the crash batch                                                           */

static void crash_batch(void)
{
    for (int i = CRASH_FIRST; i < CRASH_FIRST + CRASH_COUNT; i++)
        tx_init(i, P_CRASH, (i % 2 == 0) ? V_OPEN : V_DECIDED);
    g_arrived = 0;
    g_crashed = false;
    for (int i = CRASH_FIRST; i < CRASH_FIRST + CRASH_COUNT; i++)
        tx_start(&g_tx[i]);

    /* Wait until every branch is prepared, or (the "open" branch 1s) inside BEGIN..INSERT. */
    struct timespec dl;
    deadline_in(&dl, WAIT_SECONDS);
    pthread_mutex_lock(&g_mu);
    while (g_arrived < 2 * CRASH_COUNT)
        if (pthread_cond_timedwait(&g_cv, &g_mu, &dl) == ETIMEDOUT)
            fatal("crash batch: branches did not reach the checkpoint");
    pthread_mutex_unlock(&g_mu);

    /* "decided": both branches prepared -> the TM logs COMMIT and commits branch 0 now. */
    int open_on_dead = 0, decided_on_dead = 0;
    for (int i = CRASH_FIRST; i < CRASH_FIRST + CRASH_COUNT; i++) {
        struct gtx *t = &g_tx[i];
        bool dead = t->br[0].node == DEAD;
        if (t->variant == V_OPEN) {
            open_on_dead += dead;
            continue;
        }
        decided_on_dead += dead;
        log_decision(t);
        if (t->decision == D_COMMIT)
            resolve_branch(t, &t->br[0], t->br[0].node, false);
    }
    printf("  in flight at the crash: %d transactions; on RAC2: %d \"open\" (branch 1 inside BEGIN..INSERT), "
           "%d \"decided\" (COMMIT logged, branch 0 committed)\n",
           CRASH_COUNT, open_on_dead, decided_on_dead);
    if (open_on_dead == 0 || decided_on_dead == 0) {
        unexpected("the crash batch did not put both kinds of in-flight transaction on RAC2");
    }

    printf("  pgnodes kill 2 (SIGKILL of RAC2's postmaster):\n");
    if (harness("kill 2") != 0)
        fatal("could not kill node 2");
    /* Give RAC2's orphaned backends a moment to notice their postmaster is gone. */
    nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 300 * 1000 * 1000}, NULL);

    pthread_mutex_lock(&g_mu);
    g_crashed = true;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    for (int i = CRASH_FIRST; i < CRASH_FIRST + CRASH_COUNT; i++)
        tx_join(&g_tx[i]);

    /* Phase two of everything in flight; RAC2's is not reachable (yet). */
    for (int i = CRASH_FIRST; i < CRASH_FIRST + CRASH_COUNT; i++)
        phase_two(&g_tx[i], true);
}

/* ------------------------------------------------------------------------ */
/* recovery and final checks                                                 */

static struct gtx *tx_by_gtrid(const char *gtrid)
{
    for (int i = 0; i < NTX; i++)
        if (strcmp(g_tx[i].gtrid, gtrid) == 0)
            return &g_tx[i];
    return NULL;
}

/* A recovery scan as a restarted TM does it: every node's in-doubt gids,
 * registered with racaffinity_tx_recovered, resolved where tx_route says. */
static void recovery_scan(void)
{
    char err[256];
    for (int n = 0; n < NNODES; n++) {
        PGconn *c = db_connect(n, err, sizeof err);
        if (c == NULL) {
            unexpected("recovery: %s unreachable: %s", g_name[n], err);
            continue;
        }
        PGresult *r = db_query(c, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE '" GID_PREFIX "%' ORDER BY gid");
        int rows = (r && PQresultStatus(r) == PGRES_TUPLES_OK) ? PQntuples(r) : 0;
        for (int k = 0; k < rows; k++) {
            char gid[64], gtrid[64];
            snprintf(gid, sizeof gid, "%s", PQgetvalue(r, k, 0));
            snprintf(gtrid, sizeof gtrid, "%s", gid);
            char *dot = strrchr(gtrid, '.');
            int bidx = dot ? atoi(dot + 1) : -1;
            if (dot)
                *dot = '\0';
            struct gtx *t = tx_by_gtrid(gtrid);
            racaffinity_result rc =
                racaffinity_tx_recovered(g_cl, (const uint8_t *)gtrid, strlen(gtrid), (uint32_t)n);
            if (rc != RACAFFINITY_RESULT_OK) {
                /* Another node owns this gtrid: its branches are split. */
                g_split++;
                printf("  SPLIT found by recovery: %s on %s: %s\n", gid, g_name[n], rac_err(rc, err, sizeof err));
                continue;
            }
            if (t == NULL || bidx < 0 || bidx > 1) {
                unexpected("recovery: unknown gid %s on %s", gid, g_name[n]);
                continue;
            }
            struct branch *b = &t->br[bidx];
            if (t->decision == D_NONE)
                t->decision = D_ABORT; /* no decision logged: presumed abort */
            b->recovered = true;
            if (resolve_branch(t, b, n, false)) {
                g_recovered_gids++;
                printf("  recovered %s on %s -> %s\n", gid, g_name[n],
                       t->decision == D_COMMIT ? "COMMIT PREPARED (decision logged)" : "ROLLBACK PREPARED (presumed abort)");
            }
        }
        db_clear(r);
        db_close(c);
    }
}

/* Leftover prepared transactions and rows on every node. */
static long final_checks(int rows[NTX][NNODES])
{
    char err[256];
    long in_doubt = 0;
    memset(rows, 0, sizeof(int) * NTX * NNODES);
    for (int n = 0; n < NNODES; n++) {
        PGconn *c = db_connect(n, err, sizeof err);
        if (c == NULL) {
            unexpected("final check: %s unreachable: %s", g_name[n], err);
            in_doubt++;
            continue;
        }
        long k = db_scalar(c, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE '" GID_PREFIX "%'");
        in_doubt += k < 0 ? 1 : k;
        PGresult *r = db_query(c, "SELECT gtrid FROM " TABLE);
        for (int j = 0; r && PQresultStatus(r) == PGRES_TUPLES_OK && j < PQntuples(r); j++) {
            const char *g = PQgetvalue(r, j, 0);
            int idx = atoi(g + strlen(GID_PREFIX));
            if (idx >= 0 && idx < NTX)
                rows[idx][n]++;
        }
        db_clear(r);
        db_close(c);
    }
    return in_doubt;
}

/* Sessions of this program still open on the servers (PQfinish'd backends
 * exit asynchronously, so allow them a moment). */
static long server_sessions_left(void)
{
    char err[256];
    long left = 0;
    for (int attempt = 0; attempt < 50; attempt++) {
        left = 0;
        for (int n = 0; n < NNODES; n++) {
            PGconn *c = db_connect(n, err, sizeof err);
            if (c == NULL) {
                left++;
                continue;
            }
            long k = db_scalar(c, "SELECT count(*) FROM pg_stat_activity WHERE application_name = '" APP_NAME
                                  "' AND pid <> pg_backend_pid()");
            left += k < 0 ? 1 : k;
            db_close(c);
        }
        if (left == 0)
            break;
        nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000}, NULL);
    }
    return left;
}

/* Sum of a numeric JSON field over every occurrence after `from`. */
static long json_sum(const char *json, const char *from, const char *field, bool first_only)
{
    const char *p = from ? strstr(json, from) : json;
    long sum = 0;
    size_t fl = strlen(field);
    while (p && (p = strstr(p, field)) != NULL) {
        p += fl;
        sum += strtol(p, NULL, 10);
        if (first_only)
            break;
    }
    return sum;
}

/* The metrics snapshot as JSON; free() it. */
static char *metrics_json(void)
{
    size_t cap = 16384, need = 0;
    char *buf = malloc(cap);
    if (buf == NULL)
        fatal("out of memory");
    racaffinity_result rc = racaffinity_metrics_json(g_cl, buf, cap, &need);
    if (rc == RACAFFINITY_RESULT_BUFFER_TOO_SMALL) {
        cap = need + 4096;
        char *nb = realloc(buf, cap);
        if (nb == NULL) {
            free(buf);
            fatal("out of memory");
        }
        buf = nb;
        rc = racaffinity_metrics_json(g_cl, buf, cap, &need);
    }
    if (rc != RACAFFINITY_RESULT_OK) {
        free(buf);
        fatal("racaffinity_metrics_json failed");
    }
    return buf;
}

/* Copies the JSON string field `field` ("\"state\":\"") found after `from`. */
static void json_str(const char *json, const char *from, const char *field, char *out, size_t cap)
{
    const char *p = strstr(json, from);
    out[0] = '\0';
    if (p && (p = strstr(p, field)) != NULL) {
        p += strlen(field);
        size_t n = strcspn(p, "\"");
        if (n >= cap)
            n = cap - 1;
        memcpy(out, p, n);
        out[n] = '\0';
    }
}

/* One line on how racaffinity sees RAC2. */
static void print_dead_node(const char *when)
{
    char *j = metrics_json();
    char state[16], cause[16];
    const char *me = "{\"name\":\"RAC2\"";
    json_str(j, me, "\"state\":\"", state, sizeof state);
    json_str(j, me, "\"down_cause\":\"", cause, sizeof cause);
    printf("  racaffinity's view of RAC2 %s: state=%s cause=%s failures=%ld ejections=%ld\n", when, state, cause,
           json_sum(j, me, "\"failures\":", true), json_sum(j, me, "\"ejections\":", true));
    free(j);
}

static void library_leftovers(long *in_flight, long *tx_live)
{
    char *j = metrics_json();
    *in_flight = json_sum(j, NULL, "\"in_flight\":", false);
    *tx_live = json_sum(j, "\"transaction\":{", "\"live\":", true);
    free(j);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *contrast = getenv("RACAFF_EXAMPLE_CONTRAST");
    g_contrast = contrast != NULL && strcmp(contrast, "1") == 0;
    setup();
    if (g_contrast)
        printf("CONTRAST RUN: no transaction affinity, every connection load-balanced (this run must fail)\n");
    printf("racaffinity %s C/libpq example: 3 PostgreSQL nodes stand in for RAC instances %s, %s, %s\n",
           racaffinity_version(), g_name[0], g_name[1], g_name[2]);
    printf("  each global transaction: 2 branches on 2 threads, each with its own PGconn, placed by "
           "racaffinity_tx_begin; 2PC routed by racaffinity_tx_route\n\n");

    for (int i = 0; i < PHASE1_COUNT; i++)
        run_one(i, P_BEFORE);
    print_phase("1. 30 global transactions, all nodes up", 0, PHASE1_COUNT);

    printf("\n2. 12 transactions in flight when RAC2 crashes\n");
    crash_batch();
    print_notes(CRASH_FIRST, CRASH_COUNT);

    printf("\n3. 6 transactions after the crash, before its FAN event\n");
    for (int i = PRE_FAN_FIRST; i < PRE_FAN_FIRST + PRE_FAN_COUNT; i++)
        run_one(i, P_AFTER_KILL);
    print_phase("  result", PRE_FAN_FIRST, PRE_FAN_COUNT);
    print_notes(PRE_FAN_FIRST, PRE_FAN_COUNT);

    printf("\n4. The FAN event arrives\n");
    print_dead_node("before the FAN (failures fed back by leases and outcome reports)");
    apply_event(FAN_DOWN);
    print_dead_node("after the FAN");
    printf("  the TM retries phase two of what is in doubt on RAC2:\n");
    for (int i = 0; i < POST_FAN_FIRST; i++)
        for (int b = 0; b < 2; b++)
            if (g_tx[i].br[b].state == B_PREPARED)
                resolve_branch(&g_tx[i], &g_tx[i].br[b], g_tx[i].br[b].node, false);

    printf("\n5. %d transactions after the FAN event\n", NTX - POST_FAN_FIRST);
    for (int i = POST_FAN_FIRST; i < NTX; i++)
        run_one(i, P_AFTER_FAN);
    print_phase("  result", POST_FAN_FIRST, NTX - POST_FAN_FIRST);
    int on_dead_after_fan = 0;
    for (int i = POST_FAN_FIRST; i < NTX; i++)
        for (int b = 0; b < 2; b++)
            on_dead_after_fan += g_tx[i].br[b].node == DEAD;

    printf("\n6. RAC2 restarts; a recovery scan resolves what it held prepared\n");
    tm_disconnect_all(); /* a recovering TM starts from fresh connections */
    if (harness("restart 2") != 0)
        fatal("could not restart node 2");
    apply_event(FAN_UP);
    recovery_scan();
    tm_disconnect_all();

    /* ---- checks ---- */
    static int rows[NTX][NNODES];
    long in_doubt = final_checks(rows);
    int committed = 0, committed_by_recovery = 0, failed = 0, unresolved = 0, row_errors = 0, per_node[NNODES] = {0};
    for (int i = 0; i < NTX; i++) {
        struct gtx *t = &g_tx[i];
        int total = 0;
        for (int n = 0; n < NNODES; n++)
            total += rows[i][n];
        bool recovered = t->br[0].recovered || t->br[1].recovered;
        if (tx_committed(t)) {
            committed++;
            committed_by_recovery += recovered;
            for (int b = 0; b < 2; b++)
                per_node[t->br[b].node]++;
            int home = t->br[0].node;
            if (rows[i][home] != 2 || total != 2) {
                row_errors++;
                printf("  ROWS: committed %s has %d rows on its node %s, %d in total\n", t->gtrid, rows[i][home],
                       g_name[home], total);
            }
        } else if (tx_failed_cleanly(t)) {
            failed++;
            if (total != 0) {
                row_errors++;
                printf("  ROWS: failed %s has %d committed rows\n", t->gtrid, total);
            }
        } else {
            unresolved++;
            printf("  UNRESOLVED: %s (states %d/%d)\n", t->gtrid, t->br[0].state, t->br[1].state);
        }
    }
    long sessions_left = server_sessions_left();
    long in_flight = 0, tx_live = 0;
    library_leftovers(&in_flight, &tx_live);

    printf("\nSummary (%d global transactions, 2 branches each)\n", NTX);
    printf("  %-40s%6d\n", "transactions committed", committed);
    printf("  %-40s%6d\n", "  of which completed by recovery", committed_by_recovery);
    printf("  %-40s%6d\n", "transactions failed cleanly", failed);
    printf("  %-40s%6d\n", "transactions unresolved", unresolved);
    printf("  %-40s", "branches committed per node");
    for (int n = 0; n < NNODES; n++)
        printf("%s=%d  ", g_name[n], per_node[n]);
    printf("\n");
    printf("  %-40s%6d\n", "split transactions", g_split);
    printf("  %-40s%6d\n", "  routed apart, one branch never ran", g_routed_apart);
    printf("  %-40s%6d\n", "misrouted 2PC commands", g_misrouted);
    printf("  %-40s%6d\n", "gids resolved by the recovery scan", g_recovered_gids);
    printf("  %-40s%6ld\n", "prepared left in doubt (all nodes)", in_doubt);
    printf("  %-40s%6d\n", "branches on RAC2 after its FAN event", on_dead_after_fan);
    printf("  %-40s%6d\n", "row-count mismatches", row_errors);
    printf("  %-40s%6ld\n", "server sessions left open", sessions_left);
    printf("  %-40s%6ld\n", "leases left in flight", in_flight);
    printf("  %-40s%6ld\n", "transaction entries left", tx_live);
    printf("  %-40s%6d\n", "unexpected errors", g_unexpected);

    racaffinity_result rc = racaffinity_cluster_free(g_cl);
    int conns = atomic_load(&g_open_conns), results = atomic_load(&g_open_results);
    printf("  %-40s%6d\n", "PGconn left open", conns);
    printf("  %-40s%6d\n", "PGresult left uncleared", results);

    bool ok = g_split == 0 && g_misrouted == 0 && in_doubt == 0 && unresolved == 0 && row_errors == 0 &&
              on_dead_after_fan == 0 && sessions_left == 0 && in_flight == 0 && tx_live == 0 &&
              g_unexpected == 0 && conns == 0 && results == 0 && rc == RACAFFINITY_RESULT_OK && committed > 0 &&
              failed > 0;
    if (!ok) {
        printf("\nEXAMPLE FAILED\n");
        return 1;
    }
    printf("\nOK: 0 split transactions, 0 misrouted 2PC commands, 0 in doubt, nothing leaked.\n");
    return 0;
}
