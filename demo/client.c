/* client.c - the demo's C client: one application process that runs its own
 * branch of global transactions, routed by libracaffinity, with SQL through
 * libpq. The Python (client.py) and Java (DemoClient.java) clients implement
 * the same line protocol (demo/README.md); demo/run.py drives all three.
 *
 *   client_c CONFIG_FILE      commands on stdin, one reply line per command
 *
 * Built by demo/build.sh:
 *   cc -std=c11 -O2 -Iinclude -I$(pg_config --includedir) demo/client.c \
 *      -Ltarget/release -lracaffinity -L$(pg_config --libdir) -lpq -pthread
 */
#define _POSIX_C_SOURCE 200809L

#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <libpq-fe.h>

#include "racaffinity.h"

#define LANG "c"
#define MAX_NODES 16
#define MAX_IDLE 32 /* idle connections kept per node */
#define MAX_OPEN 256 /* branches started and not yet prepared */
#define LINE 4096

static racaffinity_cluster *g_cl;
/* Every query has a deadline (RACAFF_CLIENT_TIMEOUT seconds, default 30): past
 * it the connection's socket is shut down, so a node that stopped answering (a
 * blackhole) fails the call instead of hanging it. New connections:
 * connect_timeout. */
static int g_timeout_ms = 30000;
static bool g_timed_out; /* the last exec_timed passed its deadline: no retry on a fresh connection */
static char g_conninfo[MAX_NODES][256];
static char g_name[MAX_NODES][72];
static uint32_t g_nodes;

struct pool {
    PGconn *idle[MAX_IDLE];
    int n;
};
static struct pool g_pool[MAX_NODES];

/* A branch started (BEGIN; INSERT) and not yet prepared. */
struct branch {
    bool used;
    char gtrid[RACAFFINITY_MAX_GTRID_BYTES + 1];
    uint32_t node;
    PGconn *conn;
    int port;          /* the server's own port: where the row really is */
    const char *kind;  /* how racaffinity routed it */
    bool leased;       /* balanced mode: the pick's lease */
    racaffinity_lease lease;
};
static struct branch g_open[MAX_OPEN];
static int g_open_count;

static const char *const CODES[] = {
    "OK", "NULL_ARGUMENT", "INVALID_HANDLE", "INVALID_UTF8", "INVALID_ARGUMENT", "BUFFER_TOO_SMALL", "PANIC",
    "CONFIG", "UNKNOWN_NODE", "DUPLICATE_NODE", "NO_NODE_AVAILABLE", "STRICT_AFFINITY",
    "PREPARED_NODE_UNAVAILABLE", "UNKNOWN_TRANSACTION", "EVENT_PARSE", "FOREIGN_EVENT", "TOO_MANY_HANDLES",
    "INVALID_LEASE",
};

static const char *code_name(racaffinity_result rc)
{
    return (unsigned)rc < sizeof CODES / sizeof CODES[0] ? CODES[rc] : "?";
}

static const char *kind_name(racaffinity_route_kind k)
{
    static const char *const K[] = {"balanced", "affinity", "placed", "repinned", "fallback", "panic"};
    return (unsigned)k < 6 ? K[k] : "?";
}

/* "CODE(RACAFFINITY_RESULT_CODE)<TAB>message" for the calling thread's last error. */
static void rac_error(racaffinity_result rc, char *out, size_t cap)
{
    char msg[512];
    size_t n = 0;
    msg[0] = '\0';
    if (racaffinity_last_error_message(msg, sizeof msg, &n) != RACAFFINITY_RESULT_OK || msg[0] == '\0')
        racaffinity_result_message((uint32_t)rc, msg, sizeof msg, &n);
    for (char *p = msg; *p; p++)
        if (*p == '\t' || *p == '\n')
            *p = ' ';
    snprintf(out, cap, "%s(RACAFFINITY_RESULT_%s)\t%s", code_name(rc), code_name(rc), msg);
}

static void one_line(char *dst, size_t cap, const char *src)
{
    size_t n = strcspn(src, "\n");
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
    for (char *p = dst; *p; p++)
        if (*p == '\t')
            *p = ' ';
}

static const uint8_t *gb(const char *g) { return (const uint8_t *)g; }

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (buf)
        n = fread(buf, 1, cap - 1, f);
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* ---- connections: a tiny per-node pool -------------------------------------- */

static PGconn *checkout(uint32_t node, bool *pooled)
{
    struct pool *p = &g_pool[node];
    if (p->n > 0) {
        *pooled = true;
        return p->idle[--p->n];
    }
    *pooled = false;
    return PQconnectdb(g_conninfo[node]);
}

static void checkin(uint32_t node, PGconn *c)
{
    struct pool *p = &g_pool[node];
    if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) == PQTRANS_IDLE && p->n < MAX_IDLE)
        p->idle[p->n++] = c;
    else
        PQfinish(c);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* PQexec with a deadline: the last result, or the first failed one. */
static PGresult *exec_timed(PGconn *c, const char *sql, int timeout_ms)
{
    g_timed_out = false;
    if (!PQsendQuery(c, sql))
        return NULL;
    long deadline = now_ms() + timeout_ms;
    bool cut = false;
    PGresult *keep = NULL, *r;
    for (;;) {
        while (PQisBusy(c)) {
            long left = deadline - now_ms();
            if (left <= 0) {
                if (cut) /* shut down and still busy: give up on it */
                    return keep;
                shutdown(PQsocket(c), SHUT_RDWR);
                cut = g_timed_out = true;
                deadline = now_ms() + 2000;
                left = 2000;
            }
            struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
            poll(&p, 1, (int)left);
            if (!PQconsumeInput(c))
                break;
        }
        r = PQgetResult(c);
        if (r == NULL)
            break;
        ExecStatusType st = PQresultStatus(r);
        bool failed = st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK;
        if (keep == NULL || (failed && (PQresultStatus(keep) == PGRES_COMMAND_OK ||
                                        PQresultStatus(keep) == PGRES_TUPLES_OK))) {
            PQclear(keep);
            keep = r;
        } else if (!failed && (PQresultStatus(keep) == PGRES_COMMAND_OK || PQresultStatus(keep) == PGRES_TUPLES_OK)) {
            PQclear(keep);
            keep = r;
        } else {
            PQclear(r);
        }
        if (PQstatus(c) == CONNECTION_BAD)
            break;
    }
    return keep;
}

/* Runs a command; on failure copies the error's first line into err. */
static bool exec_ok(PGconn *c, const char *sql, char *err, size_t cap, char **value)
{
    PGresult *r = exec_timed(c, sql, g_timeout_ms);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (ok && value && PQntuples(r) == 1)
        *value = strdup(PQgetvalue(r, 0, 0));
    if (!ok) {
        const char *primary = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        one_line(err, cap, primary ? primary : PQerrorMessage(c));
    }
    PQclear(r);
    return ok;
}

/* BEGIN; INSERT on `node`. A pooled connection that turns out dead (its
 * server restarted) is replaced once by a fresh one. NULL on failure. */
static PGconn *work(const char *gtrid, uint32_t node, int *port, char *err, size_t cap)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "BEGIN; INSERT INTO demo_xa VALUES ('%s', '" LANG "', current_setting('port')::int) RETURNING port",
             gtrid);
    for (int attempt = 0; attempt < 2; attempt++) {
        bool pooled;
        PGconn *c = checkout(node, &pooled);
        if (c == NULL) {
            snprintf(err, cap, "out of memory");
            return NULL;
        }
        if (PQstatus(c) != CONNECTION_OK) {
            one_line(err, cap, PQerrorMessage(c));
            PQfinish(c);
            return NULL;
        }
        char *value = NULL;
        if (exec_ok(c, sql, err, cap, &value)) {
            *port = value ? atoi(value) : -1;
            free(value);
            return c;
        }
        bool lost = PQstatus(c) == CONNECTION_BAD && !g_timed_out;
        PQfinish(c);
        if (!(pooled && lost))
            return NULL;
    }
    return NULL;
}

/* ---- open branches ------------------------------------------------------------ */

static struct branch *find_open(const char *gtrid)
{
    for (int i = 0; i < MAX_OPEN; i++)
        if (g_open[i].used && strcmp(g_open[i].gtrid, gtrid) == 0)
            return &g_open[i];
    return NULL;
}

static struct branch *new_open(void)
{
    for (int i = 0; i < MAX_OPEN; i++)
        if (!g_open[i].used) {
            memset(&g_open[i], 0, sizeof g_open[i]);
            g_open[i].used = true;
            g_open_count++;
            return &g_open[i];
        }
    return NULL;
}

static void close_open(struct branch *b)
{
    b->used = false;
    g_open_count--;
}

static void forget(const char *gtrid)
{
    racaffinity_tx_complete(g_cl, gb(gtrid), strlen(gtrid)); /* UNKNOWN_TRANSACTION is fine */
}

/* ---- commands --------------------------------------------------------------- */

static void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void reply(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static int node_by_name(const char *name)
{
    for (uint32_t i = 0; i < g_nodes; i++)
        if (strcasecmp(g_name[i], name) == 0)
            return (int)i;
    return -1;
}

static bool cmd_start(const char *gtrid, bool affinity, bool quiet, const char *preferred)
{
    racaffinity_route route;
    racaffinity_lease lease;
    racaffinity_result rc;
    char err[768];
    if (strlen(gtrid) > RACAFFINITY_MAX_GTRID_BYTES) {
        reply("ERR\tPROTOCOL\tgtrid too long");
        return false;
    }
    if (affinity && preferred && preferred[0]) {
        /* The TM placed the transaction and enlists this branch there; in
         * strict mode the core refuses it if this process sees that node
         * unable to take new work (elsewhere would split the transaction). */
        int want = node_by_name(preferred);
        rc = racaffinity_tx_begin_on(g_cl, gb(gtrid), strlen(gtrid), want < 0 ? UINT32_MAX : (uint32_t)want, &route);
    } else if (affinity) {
        rc = racaffinity_tx_begin(g_cl, gb(gtrid), strlen(gtrid), &route);
    } else { /* a plain pool: every connection request load-balanced */
        rc = racaffinity_cluster_pick(g_cl, &lease);
        route.node = lease.node;
        route.kind = lease.kind;
    }
    if (rc != RACAFFINITY_RESULT_OK) {
        rac_error(rc, err, sizeof err);
        reply("REFUSED\t%s\t-\t%s", gtrid, err);
        return false;
    }
    int port = -1;
    PGconn *c = work(gtrid, route.node, &port, err, sizeof err);
    if (c == NULL) {
        racaffinity_outcome_report(g_cl, route.node, false);
        if (!affinity)
            racaffinity_lease_release(g_cl, &lease, RACAFFINITY_OUTCOME_FAILED);
        forget(gtrid);
        reply("FAIL\t%s\t%s\tSQL\t%s", gtrid, g_name[route.node], err);
        return false;
    }
    struct branch *b = new_open();
    if (b == NULL) {
        PQfinish(c);
        reply("ERR\tPROTOCOL\ttoo many open branches");
        return false;
    }
    snprintf(b->gtrid, sizeof b->gtrid, "%s", gtrid);
    b->node = route.node;
    b->conn = c;
    b->port = port;
    b->kind = kind_name(route.kind);
    b->leased = !affinity;
    if (!affinity)
        b->lease = lease;
    if (!quiet)
        reply("STARTED\t%s\t%s\t%s\t%d", gtrid, g_name[route.node], b->kind, port);
    return true;
}

static void cmd_prepare(const char *gtrid, bool affinity)
{
    struct branch *b = find_open(gtrid);
    char err[768], sql[160];
    if (b == NULL) {
        reply("ERR\tPROTOCOL\tno open branch %s", gtrid);
        return;
    }
    if (affinity) {
        racaffinity_route route;
        racaffinity_node_state state = RACAFFINITY_NODE_STATE_UP;
        racaffinity_result rc = racaffinity_node_get_state(g_cl, b->node, &state);
        if (rc == RACAFFINITY_RESULT_OK && state == RACAFFINITY_NODE_STATE_DOWN) {
            /* Its node went down before the branch was prepared: the branch
             * is lost with its connection. Join again: soft affinity
             * re-places the transaction (rendezvous over the nodes that are
             * left, so every process agrees), strict refuses. */
            PQfinish(b->conn);
            b->conn = NULL;
            rc = racaffinity_tx_begin(g_cl, gb(gtrid), strlen(gtrid), &route);
            if (rc != RACAFFINITY_RESULT_OK) {
                rac_error(rc, err, sizeof err);
                reply("REFUSED\t%s\t%s\t%s", gtrid, g_name[b->node], err);
                forget(gtrid);
                close_open(b);
                return;
            }
            b->node = route.node;
            b->kind = kind_name(route.kind);
            b->conn = work(gtrid, route.node, &b->port, err, sizeof err);
            if (b->conn == NULL) {
                reply("FAIL\t%s\t%s\tSQL\t%s", gtrid, g_name[route.node], err);
                forget(gtrid);
                close_open(b);
                return;
            }
        } else if (rc != RACAFFINITY_RESULT_OK) {
            rac_error(rc, err, sizeof err);
            reply("FAIL\t%s\t%s\t%s", gtrid, g_name[b->node], err);
            PQfinish(b->conn);
            forget(gtrid);
            close_open(b);
            return;
        }
    }
    snprintf(sql, sizeof sql, "PREPARE TRANSACTION '%s." LANG "'", gtrid);
    if (!exec_ok(b->conn, sql, err, sizeof err, NULL)) {
        PQfinish(b->conn);
        racaffinity_outcome_report(g_cl, b->node, false);
        if (b->leased)
            racaffinity_lease_release(g_cl, &b->lease, RACAFFINITY_OUTCOME_FAILED);
        forget(gtrid);
        reply("FAIL\t%s\t%s\tSQL\t%s", gtrid, g_name[b->node], err);
        close_open(b);
        return;
    }
    if (affinity)
        racaffinity_tx_prepared(g_cl, gb(gtrid), strlen(gtrid)); /* from now on it never moves */
    if (b->leased)
        racaffinity_lease_release(g_cl, &b->lease, RACAFFINITY_OUTCOME_OK);
    checkin(b->node, b->conn);
    reply("PREPARED\t%s\t%s\t%s\t%d", gtrid, g_name[b->node], b->kind, b->port);
    close_open(b);
}

static void cmd_rollback(const char *gtrid)
{
    struct branch *b = find_open(gtrid);
    if (b != NULL) {
        char err[256];
        if (exec_ok(b->conn, "ROLLBACK", err, sizeof err, NULL))
            checkin(b->node, b->conn);
        else
            PQfinish(b->conn);
        if (b->leased)
            racaffinity_lease_release(g_cl, &b->lease, RACAFFINITY_OUTCOME_NEUTRAL);
        close_open(b);
    }
    forget(gtrid);
    reply("OK");
}

/* ---- soak commands (demo/soak.py): sessions, data keys, pinned work, heartbeats */

/* One request on `node`: the server's port, or -1 (err filled). */
static int select_port(uint32_t node, char *err, size_t cap)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        bool pooled;
        PGconn *c = checkout(node, &pooled);
        if (c == NULL) {
            snprintf(err, cap, "out of memory");
            return -1;
        }
        if (PQstatus(c) != CONNECTION_OK) {
            one_line(err, cap, PQerrorMessage(c));
            PQfinish(c);
            return -1;
        }
        char *value = NULL;
        if (exec_ok(c, "SELECT current_setting('port')", err, cap, &value)) {
            int port = value ? atoi(value) : -1;
            free(value);
            checkin(node, c);
            return port;
        }
        bool lost = PQstatus(c) == CONNECTION_BAD && !g_timed_out;
        PQfinish(c);
        if (!(pooled && lost))
            return -1;
    }
    return -1;
}

/* SESSION / KEY: route, then one request; PINNED: `count` requests in one
 * thread pin. OK <key> <node> <kind> <port> <distinct nodes>. */
static void cmd_request(const char *what, const char *key, int count)
{
    racaffinity_route route;
    racaffinity_result rc;
    char err[768];
    uint32_t seen = 0; /* bit per node */
    int port = -1;
    if (strcmp(what, "SESSION") == 0)
        rc = racaffinity_session_route(g_cl, gb(key), strlen(key), &route);
    else if (strcmp(what, "KEY") == 0)
        rc = racaffinity_key_route(g_cl, gb(key), strlen(key), &route);
    else
        rc = racaffinity_thread_pin(g_cl, &route);
    if (rc != RACAFFINITY_RESULT_OK) {
        rac_error(rc, err, sizeof err);
        reply("REFUSED\t%s\t-\t%s", key, err);
        return;
    }
    bool pinned = strcmp(what, "PINNED") == 0;
    for (int i = 0; i < (pinned ? (count < 1 ? 1 : count) : 1); i++) {
        if (pinned && (rc = racaffinity_cluster_route(g_cl, &route)) != RACAFFINITY_RESULT_OK) {
            rac_error(rc, err, sizeof err);
            racaffinity_thread_unpin(g_cl, NULL);
            reply("REFUSED\t%s\t-\t%s", key, err);
            return;
        }
        seen |= 1u << (route.node % 32);
        port = select_port(route.node, err, sizeof err);
        racaffinity_outcome_report(g_cl, route.node, port >= 0);
        if (port < 0) {
            if (pinned)
                racaffinity_thread_unpin(g_cl, NULL);
            reply("FAIL\t%s\t%s\tSQL\t%s", key, g_name[route.node], err);
            return;
        }
    }
    if (pinned)
        racaffinity_thread_unpin(g_cl, NULL);
    reply("OK\t%s\t%s\t%s\t%d\t%d", key, g_name[route.node], kind_name(route.kind), port,
          __builtin_popcount(seen));
}

/* Probes every node (connect + SELECT 1, 2 s each) and reports it. */
static void cmd_heartbeat(void)
{
    char oks[MAX_NODES + 1];
    for (uint32_t i = 0; i < g_nodes; i++) {
        char conninfo[sizeof g_conninfo[0]];
        memcpy(conninfo, g_conninfo[i], sizeof conninfo);
        char *ct = strstr(conninfo, "connect_timeout=5");
        if (ct)
            ct[16] = '2';
        PGconn *c = PQconnectdb(conninfo);
        bool ok = false;
        if (c && PQstatus(c) == CONNECTION_OK) {
            PGresult *r = exec_timed(c, "SELECT 1", 2000);
            ok = r && PQresultStatus(r) == PGRES_TUPLES_OK;
            PQclear(r);
        }
        PQfinish(c);
        racaffinity_probe_report(g_cl, i, ok);
        oks[i] = ok ? '1' : '0';
    }
    oks[g_nodes] = '\0';
    reply("OK\t%s", oks);
}

/* The soak's feed mode (RACAFF_FEEDLOG_MS): a thread polls this process's
 * metrics and notes when the feed revision or the topology fingerprint
 * changed, so the driver learns when this process applied an event even
 * while the main thread waits on a silent node. FEEDLOG hands the notes over. */
#define FEEDLOG_MAX 4096
static pthread_mutex_t g_feedlog_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_feedlog[FEEDLOG_MAX][48];
static int g_feedlog_n;
static volatile bool g_feedlog_stop;
static pthread_t g_feedlog_thread;
static bool g_feedlog_on;

static void *feedlog_run(void *arg)
{
    long every_ms = *(long *)arg;
    static char buf[1 << 16];
    char last[40] = "";
    struct timespec pause = {every_ms / 1000, (every_ms % 1000) * 1000000L};
    while (!g_feedlog_stop) {
        nanosleep(&pause, NULL);
        size_t n = 0;
        if (racaffinity_metrics_json(g_cl, buf, sizeof buf, &n) != RACAFFINITY_RESULT_OK)
            continue;
        const char *feed = strstr(buf, "\"feed\":{");
        const char *rev = feed ? strstr(feed, "\"revision\":") : NULL;
        const char *fp = strstr(buf, "\"fingerprint\":\"");
        char cur[40];
        snprintf(cur, sizeof cur, "%lld,%.8s", rev ? strtoll(rev + 11, NULL, 10) : 0LL, fp ? fp + 15 : "-");
        char *q = strchr(cur, '"');
        if (q)
            *q = '\0';
        if (strcmp(cur, last) == 0)
            continue;
        strcpy(last, cur);
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        pthread_mutex_lock(&g_feedlog_lock);
        if (g_feedlog_n < FEEDLOG_MAX)
            snprintf(g_feedlog[g_feedlog_n++], sizeof g_feedlog[0], "%lld,%s",
                     (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000, cur);
        pthread_mutex_unlock(&g_feedlog_lock);
    }
    return NULL;
}

static void cmd_feedlog(void)
{
    pthread_mutex_lock(&g_feedlog_lock);
    fputs("FEEDLOG\t", stdout);
    for (int i = 0; i < g_feedlog_n; i++)
        printf(i ? " %s" : "%s", g_feedlog[i]);
    g_feedlog_n = 0;
    pthread_mutex_unlock(&g_feedlog_lock);
    putchar('\n');
    fflush(stdout);
}

static long tx_live(void)
{
    char buf[16384];
    size_t n = 0;
    if (racaffinity_metrics_json(g_cl, buf, sizeof buf, &n) != RACAFFINITY_RESULT_OK)
        return -1;
    const char *t = strstr(buf, "\"transaction\":{");
    const char *l = t ? strstr(t, "\"live\":") : NULL;
    return l ? strtol(l + 7, NULL, 10) : -1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CONFIG_FILE\n", argv[0]);
        return 2;
    }
    const char *t = getenv("RACAFF_CLIENT_TIMEOUT");
    if (t != NULL && atof(t) > 0)
        g_timeout_ms = (int)(atof(t) * 1000);
    char *config = read_file(argv[1]);
    if (config == NULL) {
        perror(argv[1]);
        return 2;
    }
    racaffinity_result rc = racaffinity_cluster_new(config, &g_cl);
    if (rc != RACAFFINITY_RESULT_OK) {
        char err[768];
        rac_error(rc, err, sizeof err);
        fprintf(stderr, "client_c: %s\n", err);
        return 2;
    }
    racaffinity_cluster_node_count(g_cl, &g_nodes);
    if (g_nodes > MAX_NODES)
        g_nodes = MAX_NODES;
    for (uint32_t i = 0; i < g_nodes; i++) {
        char addr[128];
        racaffinity_node_name(g_cl, i, g_name[i], sizeof g_name[i], NULL);
        /* The node's listener, as the core parsed it from node.<NAME>.address. */
        if (racaffinity_node_address(g_cl, i, addr, sizeof addr, NULL) != RACAFFINITY_RESULT_OK || addr[0] == '\0') {
            fprintf(stderr, "client_c: node %s has no address in %s\n", g_name[i], argv[1]);
            return 2;
        }
        char *colon = strrchr(addr, ':');
        if (colon == NULL) {
            fprintf(stderr, "client_c: node %s: %s is not host:port\n", g_name[i], addr);
            return 2;
        }
        *colon = '\0';
        snprintf(g_conninfo[i], sizeof g_conninfo[i],
                 "host=%s port=%s user=postgres dbname=postgres connect_timeout=5", addr, colon + 1);
    }
    free(config);
    static long feedlog_ms;
    const char *fl = getenv("RACAFF_FEEDLOG_MS");
    feedlog_ms = fl ? atol(fl) : 0;
    if (feedlog_ms > 0 && pthread_create(&g_feedlog_thread, NULL, feedlog_run, &feedlog_ms) == 0)
        g_feedlog_on = true;
    reply("READY\t" LANG "\tracaffinity %s (C, libpq %d)", racaffinity_version(), PQlibVersion());

    char line[LINE];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = '\0';
        /* fields are tab-separated: COMMAND [ARG [ARG]] (an EVENT line has spaces, no tabs) */
        char *f[4] = {NULL, NULL, NULL, NULL}, *s = line;
        for (int nf = 0; nf < 4;) {
            f[nf++] = s;
            char *t = strchr(s, '\t');
            if (t == NULL)
                break;
            *t = '\0';
            s = t + 1;
        }
        const char *cmd = f[0], *const *args = (const char *const *)&f[1];
        bool affinity = args[1] && strcmp(args[1], "affinity") == 0;
        if (strcmp(cmd, "BRANCH") == 0 && args[1]) {
            if (cmd_start(args[0], affinity, true, args[2]))
                cmd_prepare(args[0], affinity);
        } else if (strcmp(cmd, "START") == 0 && args[1]) {
            cmd_start(args[0], affinity, false, NULL);
        } else if ((strcmp(cmd, "SESSION") == 0 || strcmp(cmd, "KEY") == 0) && args[0]) {
            cmd_request(cmd, args[0], 1);
        } else if (strcmp(cmd, "PINNED") == 0 && args[0]) {
            cmd_request(cmd, args[0], args[1] ? atoi(args[1]) : 1);
        } else if (strcmp(cmd, "ENDSESSION") == 0 && args[0]) {
            racaffinity_session_end(g_cl, gb(args[0]), strlen(args[0]), NULL);
            reply("OK");
        } else if (strcmp(cmd, "HEARTBEAT") == 0) {
            cmd_heartbeat();
        } else if (strcmp(cmd, "METRICS") == 0) {
            static char buf[1 << 16];
            size_t n = 0;
            if (racaffinity_metrics_json(g_cl, buf, sizeof buf, &n) == RACAFFINITY_RESULT_OK)
                reply("METRICS\t%s", buf);
            else
                reply("ERR\tPROTOCOL\tmetrics failed");
        } else if (strcmp(cmd, "FEEDLOG") == 0) {
            cmd_feedlog();
        } else if (strcmp(cmd, "PREPARE") == 0 && args[1]) {
            cmd_prepare(args[0], affinity);
        } else if (strcmp(cmd, "ROLLBACK") == 0 && args[0]) {
            cmd_rollback(args[0]);
        } else if (strcmp(cmd, "DONE") == 0 && args[0]) {
            forget(args[0]);
            reply("OK");
        } else if (strcmp(cmd, "EVENT") == 0 && args[0]) {
            uint32_t changes = 0;
            rc = racaffinity_event_apply(g_cl, args[0], &changes);
            if (rc == RACAFFINITY_RESULT_OK) {
                reply("OK\t%u", changes);
            } else {
                char err[768];
                rac_error(rc, err, sizeof err);
                reply("ERR\t%s", err);
            }
        } else if (strcmp(cmd, "STRICT") == 0 && args[0]) {
            racaffinity_cluster_set_strict(g_cl, RACAFFINITY_SCOPE_TRANSACTION, strcmp(args[0], "1") == 0);
            reply("OK");
        } else if (strcmp(cmd, "QUIT") == 0) {
            reply("BYE\ttx_live=%ld\topen=%d", tx_live(), g_open_count);
            break;
        } else {
            reply("ERR\tPROTOCOL\tunknown command '%s'", cmd);
        }
    }
    for (uint32_t i = 0; i < g_nodes; i++)
        while (g_pool[i].n > 0)
            PQfinish(g_pool[i].idle[--g_pool[i].n]);
    for (int i = 0; i < MAX_OPEN; i++)
        if (g_open[i].used && g_open[i].conn)
            PQfinish(g_open[i].conn);
    if (g_feedlog_on) {
        g_feedlog_stop = true;
        pthread_join(g_feedlog_thread, NULL);
    }
    racaffinity_cluster_free(g_cl);
    return 0;
}
