/* Replays the shared vectors (the JSON files in tests/vectors) through the C API.
 *
 * tests/c/vectors_to_c.py flattens the JSON into a line-based file (see its
 * docstring for the record format); run.sh generates it under target/ and
 * passes its path as argv[1]. Every record is one replayed case; the file's
 * EXPECT trailer says how many of each there must be. */
#define _POSIX_C_SOURCE 200809L


#include "harness.h"

#define MAX_FIELDS 16
#define MAX_NODES 32

/* ---- parsing helpers --------------------------------------------------------- */

typedef struct {
    char *s;   /* decoded, NUL-terminated */
    size_t n;  /* decoded length (may contain NULs for byte keys) */
} bytes_t;

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes a hex field ("-" is empty). The caller frees .s. */
static bytes_t unhex(const char *h) {
    bytes_t b = {NULL, 0};
    size_t len = strcmp(h, "-") == 0 ? 0 : strlen(h);
    if (len % 2 != 0) {
        h_fail(__FILE__, __LINE__, "odd hex field: %.40s", h);
        len = 0;
    }
    b.s = malloc(len / 2 + 1);
    if (!b.s) abort();
    for (size_t i = 0; i < len / 2; i++) {
        int hi = hexval(h[2 * i]), lo = hexval(h[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            h_fail(__FILE__, __LINE__, "bad hex field: %.40s", h);
            break;
        }
        b.s[b.n++] = (char)(hi << 4 | lo);
    }
    b.s[b.n] = '\0';
    return b;
}

static racaffinity_result code_of(const char *kind) {
    static const struct {
        const char *kind;
        racaffinity_result code;
    } map[] = {
        {"Config", RACAFFINITY_RESULT_CONFIG},
        {"InvalidArgument", RACAFFINITY_RESULT_INVALID_ARGUMENT},
        {"UnknownNode", RACAFFINITY_RESULT_UNKNOWN_NODE},
        {"DuplicateNode", RACAFFINITY_RESULT_DUPLICATE_NODE},
        {"NoNodeAvailable", RACAFFINITY_RESULT_NO_NODE_AVAILABLE},
        {"StrictAffinity", RACAFFINITY_RESULT_STRICT_AFFINITY},
        {"PreparedNodeUnavailable", RACAFFINITY_RESULT_PREPARED_NODE_UNAVAILABLE},
        {"UnknownTransaction", RACAFFINITY_RESULT_UNKNOWN_TRANSACTION},
        {"EventParse", RACAFFINITY_RESULT_EVENT_PARSE},
        {"ForeignEvent", RACAFFINITY_RESULT_FOREIGN_EVENT},
        {"OK", RACAFFINITY_RESULT_OK},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcmp(map[i].kind, kind) == 0) return map[i].code;
    }
    h_fail(__FILE__, __LINE__, "no result code for error kind %s", kind);
    return (racaffinity_result)-1;
}

/* ---- the metrics view of every node ------------------------------------------- */

typedef struct {
    char name[80];
    char state[16];
    long long weight, rlb_percent;
    int aff;
} node_view;

/* Parses the nodes of the metrics JSON (in id order). Returns the count. */
static int views(racaffinity_cluster *c, node_view *v) {
    char *json = metrics_json(c);
    int n = 0;
    const char *p = strstr(json, "\"nodes\":[");
    const char *end = p ? strstr(p, "],\"scopes\"") : NULL;
    while (p && end && n < MAX_NODES && (p = strstr(p, "{\"name\":\"")) != NULL && p < end) {
        node_view *w = &v[n++];
        memset(w, 0, sizeof *w);
        if (sscanf(p, "{\"name\":\"%79[^\"]\",\"state\":\"%15[^\"]\"", w->name, w->state) != 2) {
            h_fail(__FILE__, __LINE__, "unexpected metrics JSON near %.80s", p);
        }
        const char *f;
        w->weight = (f = strstr(p, "\"weight\":")) ? strtoll(f + 9, NULL, 10) : LLONG_MIN;
        w->rlb_percent = (f = strstr(p, "\"rlb_percent\":")) ? strtoll(f + 14, NULL, 10) : LLONG_MIN;
        w->aff = (f = strstr(p, "\"affinity_advised\":")) ? strncmp(f + 19, "true", 4) == 0 : -1;
        p++;
    }
    if (!p && !end) h_fail(__FILE__, __LINE__, "no nodes array in metrics JSON");
    free(json);
    return n;
}

static const node_view *view_of(const node_view *v, int n, const char *name) {
    for (int i = 0; i < n; i++) {
        if (strcmp(v[i].name, name) == 0) return &v[i];
    }
    h_fail(__FILE__, __LINE__, "node %s not in the metrics", name);
    return NULL;
}

static const char *state_name(racaffinity_node_state s) {
    switch (s) {
    case RACAFFINITY_NODE_STATE_UP: return "up";
    case RACAFFINITY_NODE_STATE_DRAINING: return "draining";
    case RACAFFINITY_NODE_STATE_DOWN: return "down";
    }
    return "?";
}

/* ---- the replay ----------------------------------------------------------------- */

static const char *ctx_file = "";
static long ctx_line;
static char ctx_name[128];

/* Fails with the record's context. */
#define VFAIL(...)                                                                   \
    do {                                                                             \
        fprintf(stderr, "%s:%ld (%s): ", ctx_file, ctx_line, ctx_name);              \
        h_fail(__FILE__, __LINE__, __VA_ARGS__);                                     \
    } while (0)

#define VCHECK_RC(call, want)                                                        \
    do {                                                                             \
        if (!CHECK_RC(call, want)) fprintf(stderr, "    at %s:%ld (%s)\n", ctx_file, ctx_line, ctx_name); \
    } while (0)

/* The route must name `owner` with `kind`. */
static void check_route(racaffinity_cluster *c, racaffinity_result rc, racaffinity_route r, const char *what,
                        const char *owner, racaffinity_route_kind kind) {
    if (rc != RACAFFINITY_RESULT_OK) {
        VFAIL("%s returned %d (%s)", what, (int)rc, h_code_name((int)rc));
        return;
    }
    char got[80] = "";
    atomic_fetch_add(&h_checks, 1);
    if (racaffinity_node_name(c, r.node, got, sizeof got, NULL) != RACAFFINITY_RESULT_OK || strcmp(got, owner) != 0 ||
        r.kind != kind) {
        VFAIL("%s routed to %s (kind %d), want %s (kind %d)", what, got, (int)r.kind, owner, (int)kind);
    }
}

typedef racaffinity_result (*bytes_route_fn)(const racaffinity_cluster *, const uint8_t *, size_t,
                                             racaffinity_route *);

/* Routes byte key `key` with `fn`; the route must name the hex-encoded `hex_owner` with `kind`. */
static void check_bytes_route(racaffinity_cluster *c, bytes_route_fn fn, const char *what, bytes_t key,
                              const char *hex_owner, racaffinity_route_kind kind) {
    bytes_t owner = unhex(hex_owner);
    racaffinity_route r;
    racaffinity_result rc = fn(c, (const uint8_t *)key.s, key.n, &r);
    check_route(c, rc, r, what, owner.s, kind);
    free(owner.s);
}

static void le64(int64_t v, uint8_t out[8]) {
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)v >> (8 * i));
}

static void check_partition(racaffinity_cluster *c, const uint8_t *key, size_t len, unsigned long want) {
    uint32_t p = UINT32_MAX;
    racaffinity_result rc = racaffinity_key_partition(c, key, len, &p);
    atomic_fetch_add(&h_checks, 1);
    if (rc != RACAFFINITY_RESULT_OK || p != want) VFAIL("key_partition gave %u (rc %d), want %lu", p, (int)rc, want);
}

typedef struct {
    char kind[16];
    long want, got;
} tally;

static tally tallies[64];
static int n_tallies;

static tally *tally_of(const char *kind) {
    for (int i = 0; i < n_tallies; i++) {
        if (strcmp(tallies[i].kind, kind) == 0) return &tallies[i];
    }
    if (n_tallies == 64) abort();
    tally *t = &tallies[n_tallies++];
    snprintf(t->kind, sizeof t->kind, "%s", kind);
    return t;
}

static racaffinity_cluster *make(const char *config) {
    racaffinity_cluster *c = NULL;
    racaffinity_result rc = racaffinity_cluster_new(config, &c);
    if (!CHECK_RC(rc, RACAFFINITY_RESULT_OK)) fprintf(stderr, "    at %s:%ld: config %s\n", ctx_file, ctx_line, config);
    return c;
}

static void drop(racaffinity_cluster **c) {
    if (*c) CHECK_OK(racaffinity_cluster_free(*c));
    *c = NULL;
}

static void replay(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        h_fail(__FILE__, __LINE__, "cannot open %s (run tests/c/vectors_to_c.py)", path);
        return;
    }
    ctx_file = path;
    char *line = NULL;
    size_t cap = 0;
    racaffinity_cluster *cur = NULL, *errc = NULL, *parsec = NULL;
    char *topo_config = NULL;
    int node_idx = 0, nodes_checked = 1, step = 0;
    long long cases = 0;

    while (getline(&line, &cap, f) != -1) {
        ctx_line++;
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0') continue;
        char *fld[MAX_FIELDS];
        int nf = 0;
        for (char *tok = strtok(line, " "); tok && nf < MAX_FIELDS; tok = strtok(NULL, " ")) fld[nf++] = tok;
        const char *rec = fld[0];
        if (strcmp(rec, "EXPECT") == 0) {
            tally_of(fld[1])->want = strtol(fld[2], NULL, 10);
            continue;
        }
        tally_of(rec)->got++;

        /* The node list of a topology is complete at its first other record. */
        if (!nodes_checked && strcmp(rec, "NODE") != 0) {
            uint32_t n = 0;
            CHECK_OK(racaffinity_cluster_node_count(cur, &n));
            if (n != (uint32_t)node_idx) VFAIL("cluster has %u nodes, the vectors list %d", n, node_idx);
            nodes_checked = 1;
        }

        if (strcmp(rec, "SKIP") == 0 && nf == 5) {
            bytes_t why = unhex(fld[4]);
            printf("  not replayable through the C ABI: %s %s (%s cases): %s\n", fld[1], fld[2], fld[3], why.s);
            free(why.s);
        } else if (strcmp(rec, "TOPO") == 0 && nf == 4) {
            bytes_t name = unhex(fld[1]);
            snprintf(ctx_name, sizeof ctx_name, "topology %s", name.s);
            free(name.s);
            free(topo_config);
            topo_config = unhex(fld[2]).s;
            drop(&cur);
            cur = make(topo_config);
            node_idx = 0;
            nodes_checked = 0;
            cases++;
        } else if ((strcmp(rec, "NODE") == 0 || strcmp(rec, "CFGNODE") == 0) && nf == 3) {
            /* NODE of a topology, CFGNODE of a parsed config (no cluster when the config failed) */
            bytes_t name = unhex(fld[1]);
            char got[80] = "";
            if (cur) CHECK_OK(racaffinity_node_name(cur, (uint32_t)node_idx, got, sizeof got, NULL));
            if (strcmp(got, name.s) != 0) VFAIL("node %d is %s, want %s", node_idx, got, name.s);
            if (cur) {
                node_view v[MAX_NODES];
                int n = views(cur, v);
                const node_view *w = view_of(v, n, name.s);
                if (w && w->weight != strtoll(fld[2], NULL, 10)) VFAIL("weight of %s is %lld, want %s", name.s, w->weight, fld[2]);
            }
            node_idx++;
            free(name.s);
            cases++;
        } else if (strcmp(rec, "TX") == 0 && nf == 3) {
            bytes_t g = unhex(fld[1]);
            check_bytes_route(cur, racaffinity_tx_begin, "tx_begin", g, fld[2], RACAFFINITY_ROUTE_KIND_PLACED);
            free(g.s);
            cases++;
        } else if (strcmp(rec, "SESS") == 0 && nf == 3) {
            bytes_t k = unhex(fld[1]);
            check_bytes_route(cur, racaffinity_session_route, "session_route", k, fld[2], RACAFFINITY_ROUTE_KIND_AFFINITY);
            free(k.s);
            cases++;
        } else if (strcmp(rec, "DATA") == 0 && nf == 4) {
            bytes_t k = unhex(fld[1]);
            check_partition(cur, (const uint8_t *)k.s, k.n, strtoul(fld[2], NULL, 10));
            check_bytes_route(cur, racaffinity_key_route, "key_route", k, fld[3], RACAFFINITY_ROUTE_KIND_AFFINITY);
            free(k.s);
            cases += 2;
        } else if ((strcmp(rec, "DATA64") == 0 || strcmp(rec, "POWNER") == 0) && nf == 4) {
            /* DATA64 <i64> <partition> <owner>; POWNER <partition> <witness i64> <owner> */
            bool powner = rec[0] == 'P';
            int64_t key = strtoll(powner ? fld[2] : fld[1], NULL, 10);
            unsigned long part = strtoul(powner ? fld[1] : fld[2], NULL, 10);
            bytes_t owner = unhex(fld[3]);
            uint8_t le[8];
            le64(key, le);
            check_partition(cur, le, 8, part); /* an i64 is hashed as its 8 LE bytes */
            racaffinity_route r;
            racaffinity_result rc = racaffinity_key_route_i64(cur, key, &r);
            check_route(cur, rc, r, powner ? "partition owner (key_route_i64 of a witness)" : "key_route_i64", owner.s,
                        RACAFFINITY_ROUTE_KIND_AFFINITY);
            free(owner.s);
            cases += 2;
        } else if (strcmp(rec, "REMOVAL") == 0 && nf == 3) {
            bytes_t rm = unhex(fld[1]), removed = unhex(fld[2]);
            char *slash = strstr(ctx_name, " without ");
            if (slash) *slash = '\0';
            size_t used = strlen(ctx_name);
            snprintf(ctx_name + used, sizeof ctx_name - used, " without %s", rm.s);
            /* A fresh cluster: the first one's registries hold the keys routed above. */
            drop(&cur);
            cur = make(topo_config);
            uint32_t before = 0, after = 0, id = UINT32_MAX;
            char got[80] = "";
            CHECK_OK(racaffinity_cluster_node_count(cur, &before));
            CHECK_OK(racaffinity_node_find(cur, rm.s, &id));
            CHECK_OK(racaffinity_node_name(cur, id, got, sizeof got, NULL));
            if (strcmp(got, removed.s) != 0) VFAIL("removing %s would remove %s, want %s", rm.s, got, removed.s);
            VCHECK_RC(racaffinity_node_remove(cur, rm.s), RACAFFINITY_RESULT_OK);
            CHECK_OK(racaffinity_cluster_node_count(cur, &after));
            CHECK_EQ_U(after + 1, before);
            VCHECK_RC(racaffinity_node_find(cur, removed.s, &id), RACAFFINITY_RESULT_UNKNOWN_NODE);
            free(rm.s), free(removed.s);
            cases++;
        } else if (strcmp(rec, "ENDTOPO") == 0) {
            drop(&cur);
        } else if (strcmp(rec, "ERRTOPO") == 0 && nf == 2) {
            bytes_t cfg = unhex(fld[1]);
            snprintf(ctx_name, sizeof ctx_name, "rendezvous errors");
            errc = make(cfg.s);
            free(cfg.s);
        } else if (strcmp(rec, "RERR") == 0 && nf == 4) {
            bytes_t arg = unhex(fld[2]);
            racaffinity_result want = code_of(fld[3]), rc;
            racaffinity_route r;
            uint32_t p;
            const uint8_t *a = (const uint8_t *)arg.s;
            if (strcmp(fld[1], "tx_begin") == 0) rc = racaffinity_tx_begin(errc, a, arg.n, &r);
            else if (strcmp(fld[1], "session_route") == 0) rc = racaffinity_session_route(errc, a, arg.n, &r);
            else if (strcmp(fld[1], "route_key") == 0) rc = racaffinity_key_route(errc, a, arg.n, &r);
            else if (strcmp(fld[1], "partition_of") == 0) rc = racaffinity_key_partition(errc, a, arg.n, &p);
            else if (strcmp(fld[1], "remove_node") == 0) rc = racaffinity_node_remove(errc, arg.s);
            else {
                VFAIL("no C call for op %s", fld[1]);
                rc = want;
            }
            if (rc != want) VFAIL("%s(%zu bytes) returned %d, want %s", fld[1], arg.n, (int)rc, fld[3]);
            atomic_fetch_add(&h_checks, 1);
            free(arg.s);
            cases++;
        } else if (strcmp(rec, "PARSEERR") == 0 && nf == 3) {
            if (!parsec) parsec = make("nodes = i1, a, b, c, orcl1");
            bytes_t ln = unhex(fld[1]);
            snprintf(ctx_name, sizeof ctx_name, "parse_errors");
            uint32_t changes = 77;
            racaffinity_result rc = racaffinity_event_apply(parsec, ln.s, &changes);
            atomic_fetch_add(&h_checks, 1);
            if (rc != code_of(fld[2]) || changes != 77) VFAIL("event_apply(%s) returned %d", fld[1], (int)rc);
            free(ln.s);
            cases++;
        } else if (strcmp(rec, "APPLY") == 0 && nf == 3) {
            bytes_t name = unhex(fld[1]), cfg = unhex(fld[2]);
            snprintf(ctx_name, sizeof ctx_name, "apply %s", name.s);
            drop(&cur);
            cur = make(cfg.s);
            step = 0;
            free(name.s), free(cfg.s);
        } else if (strcmp(rec, "STEP") == 0 && nf == 7) {
            /* STEP <line> <kind|OK> <nchanges> <node:from:to,...|-> <revoked,...|-> <advised,...|-> */
            step++;
            bytes_t ln = unhex(fld[1]);
            node_view before[MAX_NODES], after[MAX_NODES];
            int nb = views(cur, before);
            uint32_t changes = 9999;
            racaffinity_result rc = racaffinity_event_apply(cur, ln.s, &changes);
            int na = views(cur, after);
            racaffinity_result want = code_of(fld[2]);
            atomic_fetch_add(&h_checks, 1);
            if (rc != want) {
                char e[512];
                VFAIL("step %d: event_apply(\"%s\") returned %d (%s), want %s; message: %s", step, ln.s, (int)rc,
                      h_code_name((int)rc), fld[2], h_last_error(e, sizeof e));
            }
            CHECK_EQ_U(na, nb);
            if (want != RACAFFINITY_RESULT_OK) {
                /* A failed line changes nothing. */
                if (changes != 9999) VFAIL("step %d: out_changes written on failure", step);
                for (int i = 0; i < nb && i < na; i++) {
                    if (strcmp(before[i].state, after[i].state) || before[i].rlb_percent != after[i].rlb_percent ||
                        before[i].aff != after[i].aff) {
                        VFAIL("step %d: failed line changed node %s", step, before[i].name);
                    }
                }
            } else {
                if (changes != strtoul(fld[3], NULL, 10)) VFAIL("step %d: %u changes, want %s", step, changes, fld[3]);
                /* Listed changes happened; every other node kept its state. */
                bool changed[MAX_NODES] = {false};
                if (strcmp(fld[4], "-") != 0) {
                    for (char *save = NULL, *ch = strtok_r(fld[4], ",", &save); ch; ch = strtok_r(NULL, ",", &save)) {
                        char *from = strchr(ch, ':');
                        char *to = from ? strchr(from + 1, ':') : NULL;
                        if (!to) {
                            VFAIL("bad change %s", ch);
                            continue;
                        }
                        *from++ = '\0';
                        *to++ = '\0';
                        bytes_t node = unhex(ch);
                        for (int i = 0; i < nb && i < na; i++) {
                            if (strcmp(before[i].name, node.s) != 0) continue;
                            changed[i] = true;
                            if (strcmp(before[i].state, from) || strcmp(after[i].state, to)) {
                                VFAIL("step %d: %s went %s -> %s, want %s -> %s", step, node.s, before[i].state,
                                      after[i].state, from, to);
                            }
                        }
                        free(node.s);
                    }
                }
                for (int i = 0; i < nb && i < na; i++) {
                    if (!changed[i] && strcmp(before[i].state, after[i].state) != 0) {
                        VFAIL("step %d: unlisted change of %s: %s -> %s", step, before[i].name, before[i].state,
                              after[i].state);
                    }
                }
                /* Revoked nodes no longer advise affinity; advised ones carry RLB advice. */
                for (int which = 5; which <= 6; which++) {
                    if (strcmp(fld[which], "-") == 0) continue;
                    for (char *save = NULL, *nm = strtok_r(fld[which], ",", &save); nm; nm = strtok_r(NULL, ",", &save)) {
                        bytes_t node = unhex(nm);
                        const node_view *w = view_of(after, na, node.s);
                        if (w && which == 5 && w->aff != 0) VFAIL("step %d: %s still advises affinity", step, node.s);
                        if (w && which == 6 && w->rlb_percent < 0) VFAIL("step %d: %s has no RLB advice", step, node.s);
                        free(node.s);
                    }
                }
            }
            free(ln.s);
            cases++;
        } else if (strcmp(rec, "VIEW") == 0 && nf == 5) {
            bytes_t name = unhex(fld[1]);
            node_view v[MAX_NODES];
            int n = views(cur, v);
            const node_view *w = view_of(v, n, name.s);
            uint32_t id = UINT32_MAX;
            racaffinity_node_state st = (racaffinity_node_state)99;
            CHECK_OK(racaffinity_node_find(cur, name.s, &id));
            CHECK_OK(racaffinity_node_get_state(cur, id, &st));
            atomic_fetch_add(&h_checks, 1);
            if (strcmp(state_name(st), fld[2]) != 0) VFAIL("%s is %s, want %s", name.s, state_name(st), fld[2]);
            if (w && (strcmp(w->state, fld[2]) || w->rlb_percent != strtoll(fld[3], NULL, 10) ||
                      w->aff != atoi(fld[4]))) {
                VFAIL("%s: metrics say state %s, rlb_percent %lld, aff %d; want %s %s %s", name.s, w->state,
                      w->rlb_percent, w->aff, fld[2], fld[3], fld[4]);
            }
            free(name.s);
            cases++;
        } else if (strcmp(rec, "ENDAPPLY") == 0) {
            drop(&cur);
        } else if ((strcmp(rec, "BUILD") == 0 && nf == 9) || (strcmp(rec, "BUILDERR") == 0 && nf == 6)) {
            bool ok = rec[5] == '\0';
            bytes_t host = unhex(fld[1]), svc = unhex(fld[3]), inst = unhex(fld[4]);
            long port = strtol(fld[2], NULL, 10);
            snprintf(ctx_name, sizeof ctx_name, "connect %s:%ld/%s/%s", host.s, port, svc.s, inst.s);
            for (uint32_t form = 0; form < 4; form++) {
                char buf[1024] = "";
                racaffinity_result rc =
                    racaffinity_connect_string(form, host.s, (uint16_t)port, svc.s, inst.s, buf, sizeof buf, NULL);
                atomic_fetch_add(&h_checks, 1);
                if (ok) {
                    bytes_t want = unhex(fld[5 + form]);
                    if (rc != RACAFFINITY_RESULT_OK || strcmp(buf, want.s) != 0) {
                        VFAIL("form %u gave %d \"%s\", want \"%s\"", form, (int)rc, buf, want.s);
                    }
                    free(want.s);
                } else if (rc != code_of(fld[5])) {
                    VFAIL("form %u returned %d, want %s", form, (int)rc, fld[5]);
                }
                cases++;
            }
            free(host.s), free(svc.s), free(inst.s);
        } else if (strcmp(rec, "CFGOK") == 0 && nf == 2) {
            bytes_t text = unhex(fld[1]);
            snprintf(ctx_name, sizeof ctx_name, "config %.80s", text.s);
            drop(&cur);
            cur = make(text.s);
            free(text.s);
            cases++;
        } else if ((strcmp(rec, "CFGNAME") == 0 || strcmp(rec, "CFGPOLICY") == 0) && nf == 2) {
            bytes_t want = unhex(fld[1]);
            char needle[160];
            snprintf(needle, sizeof needle, "\"%s\":\"%s\"", rec[3] == 'N' ? "cluster" : "policy", want.s);
            char *json = cur ? metrics_json(cur) : NULL;
            atomic_fetch_add(&h_checks, 1);
            if (json && !strstr(json, needle)) VFAIL("metrics lack %s", needle);
            free(json), free(want.s);
            cases++;
        } else if (strcmp(rec, "CFGNODES") == 0 && nf == 2) {
            uint32_t n = 0;
            if (cur) CHECK_OK(racaffinity_cluster_node_count(cur, &n));
            if (n != strtoul(fld[1], NULL, 10)) VFAIL("%u nodes, want %s", n, fld[1]);
            node_idx = 0;
            cases++;
        } else if (strcmp(rec, "CFGSTRICT") == 0 && nf == 3) {
            if (cur && scope_metric(cur, fld[1], "strict") != atoi(fld[2])) VFAIL("%s.strict is not %s", fld[1], fld[2]);
            cases++;
        } else if (strcmp(rec, "ENDCFG") == 0) {
            drop(&cur);
        } else if (strcmp(rec, "CFGERR") == 0 && nf == 4) {
            bytes_t text = unhex(fld[1]), key = unhex(fld[3]);
            snprintf(ctx_name, sizeof ctx_name, "config error %.80s", text.s);
            racaffinity_cluster *c = NULL;
            racaffinity_result rc = racaffinity_cluster_new(text.s, &c);
            char e[1024], needle[256];
            h_last_error(e, sizeof e);
            snprintf(needle, sizeof needle, "`%s`", key.s);
            atomic_fetch_add(&h_checks, 1);
            if (rc != code_of(fld[2]) || c != NULL || !strstr(e, needle)) {
                VFAIL("cluster_new returned %d with message \"%s\"; want %s naming %s", (int)rc, e, fld[2], needle);
            }
            if (c) racaffinity_cluster_free(c);
            free(text.s), free(key.s);
            cases++;
        } else if ((strcmp(rec, "NAMEOK") == 0 || strcmp(rec, "NAMEBAD") == 0) && nf == 2) {
            bytes_t name = unhex(fld[1]);
            snprintf(ctx_name, sizeof ctx_name, "node name \"%.70s\"", name.s);
            racaffinity_cluster *c = make("nodes = BASE_NODE");
            racaffinity_result want = rec[4] == 'O' ? RACAFFINITY_RESULT_OK : RACAFFINITY_RESULT_INVALID_ARGUMENT;
            VCHECK_RC(racaffinity_node_add(c, name.s, NULL, 1, NULL), want);
            drop(&c);
            free(name.s);
            cases++;
        } else if (strcmp(rec, "XAKEY") == 0 && nf == 4) {
            bytes_t g = unhex(fld[2]), want = unhex(fld[3]);
            snprintf(ctx_name, sizeof ctx_name, "xa_transaction_key(%s, %.60s)", fld[1], fld[2]);
            /* A gtrid the core refuses comes back whole: room for it too. */
            size_t cap = g.n > RACAFFINITY_MAX_XA_TRANSACTION_KEY_BYTES ? g.n : RACAFFINITY_MAX_XA_TRANSACTION_KEY_BYTES;
            uint8_t *key = malloc(cap);
            if (!key) abort();
            size_t len = 0;
            VCHECK_RC(racaffinity_xa_transaction_key((int32_t)strtol(fld[1], NULL, 10), (const uint8_t *)g.s, g.n, key,
                                                     cap, &len),
                      RACAFFINITY_RESULT_OK);
            atomic_fetch_add(&h_checks, 1);
            if (len != want.n || memcmp(key, want.s, len) != 0) VFAIL("key of %zu bytes differs from the vector", len);
            free(key), free(g.s), free(want.s);
            cases++;
        } else {
            VFAIL("unknown or malformed record %s (%d fields)", rec, nf);
        }
    }
    free(line);
    fclose(f);
    drop(&cur);
    drop(&errc);
    drop(&parsec);
    free(topo_config);

    /* Every record type replayed exactly as often as the converter wrote it. */
    long records = 0;
    for (int i = 0; i < n_tallies; i++) {
        atomic_fetch_add(&h_checks, 1);
        records += tallies[i].got;
        if (tallies[i].want != tallies[i].got) {
            h_fail(__FILE__, __LINE__, "%s: replayed %ld records, the file promises %ld", tallies[i].kind,
                   tallies[i].got, tallies[i].want);
        }
    }
    printf("  replayed %ld records, %lld vector cases:", records, cases);
    for (int i = 0; i < n_tallies; i++) printf(" %s %ld", tallies[i].kind, tallies[i].got);
    printf("\n");
    CHECK(cases > 400);
}

static const char *vectors_path;

static void shared_vectors_replay_through_the_c_api(void) { replay(vectors_path); }

static const h_test tests[] = {
    TEST(shared_vectors_replay_through_the_c_api),
};

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s VECTORS.txt (from tests/c/vectors_to_c.py)\n", argv[0]);
        return 2;
    }
    vectors_path = argv[1];
    return h_main("test_vectors", tests, 1, 1, argv);
}
