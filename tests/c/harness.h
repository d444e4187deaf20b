/* A small test harness for the libracaffinity C tests.
 *
 * - CHECK(cond), CHECK_RC(call, code), CHECK_OK(call), CHECK_EQ_U(a, b),
 *   CHECK_STR(a, b), CHECK_CONTAINS(haystack, needle): on failure they print
 *   file:line, the expression, the values and the calling thread's
 *   racaffinity_last_error_message, and count the failure. They never abort,
 *   so one run reports every failure. They are safe to use from threads.
 * - Every CHECK_RC that sees the code it expected marks that code as seen;
 *   h_require_all_codes_seen() fails unless all 19 result codes were.
 * - A test is a `static void name(void)` listed in a TEST table; h_main runs
 *   them (or only those whose names contain argv[1]) and prints a summary.
 *
 * Header-only on purpose: each test program is one translation unit.
 */
#ifndef RACAFFINITY_TEST_HARNESS_H
#define RACAFFINITY_TEST_HARNESS_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "racaffinity.h"

/* Number of racaffinity_result codes (RACAFFINITY_RESULT_OK .. INVALID_LEASE). */
#define H_RESULT_CODES 19

static atomic_int h_failures;
static atomic_int h_checks;
static atomic_int h_codes_seen[H_RESULT_CODES];
static const char *h_current = "(none)";

static inline const char *h_code_name(int code) {
    static const char *const names[H_RESULT_CODES] = {
        "OK", "NULL_ARGUMENT", "INVALID_HANDLE", "INVALID_UTF8", "INVALID_ARGUMENT", "BUFFER_TOO_SMALL",
        "PANIC", "CONFIG", "UNKNOWN_NODE", "DUPLICATE_NODE", "NO_NODE_AVAILABLE", "STRICT_AFFINITY",
        "PREPARED_NODE_UNAVAILABLE", "UNKNOWN_TRANSACTION", "EVENT_PARSE", "FOREIGN_EVENT",
        "TOO_MANY_HANDLES", "INVALID_LEASE", "FEED_UNAVAILABLE",
    };
    return (code >= 0 && code < H_RESULT_CODES) ? names[code] : "(not a racaffinity_result)";
}

/* The calling thread's last error message (truncated to cap). */
static inline const char *h_last_error(char *buf, size_t cap) {
    size_t need = 0;
    buf[0] = '\0';
    if (racaffinity_last_error_message(buf, cap, &need) != RACAFFINITY_RESULT_OK) {
        snprintf(buf, cap, "(message needs %zu bytes)", need);
    }
    return buf;
}

static inline void h_fail(const char *file, int line, const char *fmt, ...) {
    char msg[512];
    char err[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    atomic_fetch_add(&h_failures, 1);
    fprintf(stderr, "%s:%d: FAIL in %s: %s\n    last_error_message: \"%s\"\n", file, line, h_current, msg,
            h_last_error(err, sizeof err));
}

static inline bool h_check_rc(const char *file, int line, const char *expr, racaffinity_result got,
                       racaffinity_result want) {
    atomic_fetch_add(&h_checks, 1);
    if (got == want) {
        if ((int)want >= 0 && (int)want < H_RESULT_CODES) atomic_store(&h_codes_seen[want], 1);
        return true;
    }
    h_fail(file, line, "%s returned %d (%s), expected %d (%s)", expr, (int)got, h_code_name((int)got), (int)want,
           h_code_name((int)want));
    return false;
}

#define CHECK(cond)                                                 \
    do {                                                            \
        atomic_fetch_add(&h_checks, 1);                             \
        if (!(cond)) h_fail(__FILE__, __LINE__, "CHECK(%s)", #cond); \
    } while (0)

#define CHECK_RC(call, want) h_check_rc(__FILE__, __LINE__, #call, (call), (want))
#define CHECK_OK(call) CHECK_RC(call, RACAFFINITY_RESULT_OK)

#define CHECK_EQ_U(a, b)                                                                                  \
    do {                                                                                                  \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);                    \
        atomic_fetch_add(&h_checks, 1);                                                                   \
        if (a_ != b_) h_fail(__FILE__, __LINE__, "%s == %s: %llu != %llu", #a, #b, a_, b_);               \
    } while (0)

#define CHECK_NE_U(a, b)                                                                                  \
    do {                                                                                                  \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);                    \
        atomic_fetch_add(&h_checks, 1);                                                                   \
        if (a_ == b_) h_fail(__FILE__, __LINE__, "%s != %s: both %llu", #a, #b, a_);                      \
    } while (0)

#define CHECK_STR(a, b)                                                                                   \
    do {                                                                                                  \
        const char *a_ = (a), *b_ = (b);                                                                  \
        atomic_fetch_add(&h_checks, 1);                                                                   \
        if (strcmp(a_, b_) != 0) h_fail(__FILE__, __LINE__, "%s == %s:\n    got  \"%s\"\n    want \"%s\"", \
                                        #a, #b, a_, b_);                                                  \
    } while (0)

#define CHECK_CONTAINS(hay, needle)                                                                       \
    do {                                                                                                  \
        const char *h_ = (hay), *n_ = (needle);                                                           \
        atomic_fetch_add(&h_checks, 1);                                                                   \
        if (strstr(h_, n_) == NULL) h_fail(__FILE__, __LINE__, "\"%.300s\" does not contain \"%s\"", h_, n_); \
    } while (0)

/* The last error message must mention `needle` (e.g. the config key at fault). */
#define CHECK_LAST_ERROR_CONTAINS(needle)                                                                 \
    do {                                                                                                  \
        char e_[1024];                                                                                    \
        CHECK_CONTAINS(h_last_error(e_, sizeof e_), (needle));                                            \
    } while (0)

typedef struct {
    const char *name;
    void (*fn)(void);
} h_test;

#define TEST(fn) { #fn, fn }

/* Fails unless every result code was returned (and expected) at least once. */
static inline void h_require_all_codes_seen(void) {
    int seen = 0;
    for (int i = 0; i < H_RESULT_CODES; i++) {
        if (atomic_load(&h_codes_seen[i])) {
            seen++;
        } else {
            atomic_fetch_add(&h_failures, 1);
            fprintf(stderr, "FAIL: result code %d (%s) was never exercised\n", i, h_code_name(i));
        }
    }
    printf("result codes exercised: %d/%d\n", seen, H_RESULT_CODES);
}

/* Runs the table; argv[1], if given, selects tests whose name contains it. */
static inline int h_main(const char *program, const h_test *tests, size_t n, int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    int ran = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        int before = atomic_load(&h_failures);
        h_current = tests[i].name;
        tests[i].fn();
        h_current = "(none)";
        ran++;
        bool ok = atomic_load(&h_failures) == before;
        failed += !ok;
        printf("%s %s\n", ok ? "ok  " : "FAIL", tests[i].name);
        fflush(stdout);
    }
    printf("%s: %d tests, %d failed, %d checks\n", program, ran, failed, atomic_load(&h_checks));
    if (atomic_load(&h_failures) != 0) return 1;
    /* No tests at all is a failure, unless a filter selected none here. */
    return ran > 0 || filter ? 0 : 1;
}

/* ---- helpers shared by the test programs (static inline: unused ones do not warn) ---- */

/* A byte-string argument: pointer and length of a C string. */
#define B(s) (const uint8_t *)(s), strlen(s)


static inline racaffinity_cluster *new_cluster(const char *config) {
    racaffinity_cluster *c = NULL;
    if (!CHECK_OK(racaffinity_cluster_new(config, &c))) {
        fprintf(stderr, "    config was: %s\n", config);
    }
    return c;
}

static inline void free_cluster(racaffinity_cluster *c) {
    CHECK_OK(racaffinity_cluster_free(c));
}

static inline uint32_t find(racaffinity_cluster *c, const char *name) {
    uint32_t id = UINT32_MAX;
    CHECK_OK(racaffinity_node_find(c, name, &id));
    return id;
}

static inline const char *name_of(racaffinity_cluster *c, uint32_t id, char *buf, size_t cap) {
    buf[0] = '\0';
    CHECK_OK(racaffinity_node_name(c, id, buf, cap, NULL));
    return buf;
}

static inline racaffinity_node_state state_of(racaffinity_cluster *c, uint32_t id) {
    racaffinity_node_state s = (racaffinity_node_state)99;
    CHECK_OK(racaffinity_node_get_state(c, id, &s));
    return s;
}

static inline racaffinity_route route(racaffinity_cluster *c) {
    racaffinity_route r = {UINT32_MAX, (racaffinity_route_kind)99};
    CHECK_OK(racaffinity_cluster_route(c, &r));
    return r;
}

/* Reads a text output with the size-query protocol: a 1-byte buffer gives
 * BUFFER_TOO_SMALL and the size, then the retry with that size (plus slack,
 * as the header advises for metrics) succeeds. The caller frees. */
typedef racaffinity_result (*text_fn)(const racaffinity_cluster *, char *, size_t, size_t *);

static inline char *read_text(text_fn fn, racaffinity_cluster *c) {
    char one[1];
    size_t need = 0;
    CHECK_RC(fn(c, one, sizeof one, &need), RACAFFINITY_RESULT_BUFFER_TOO_SMALL);
    CHECK(need > 1);
    size_t cap = need + 4096;
    char *buf = malloc(cap);
    if (!buf) abort();
    size_t got = 0;
    buf[0] = '\0';
    CHECK_OK(fn(c, buf, cap, &got));
    CHECK_EQ_U(got, strlen(buf) + 1);
    return buf;
}

static inline char *metrics_json(racaffinity_cluster *c) { return read_text(racaffinity_metrics_json, c); }

/* The value of `"field":` (a number, true = 1, false = 0) inside the flat JSON object that starts at
 * `obj` (NULL: not found); LLONG_MIN when the object or the field is missing. */
static inline long long json_field(const char *obj, const char *field) {
    char key[128];
    if (!obj) return LLONG_MIN;
    snprintf(key, sizeof key, "\"%s\":", field);
    const char *f = strstr(obj, key);
    if (!f || f >= strchr(obj, '}')) return LLONG_MIN;
    f += strlen(key);
    if (strncmp(f, "true", 4) == 0) return 1;
    if (strncmp(f, "false", 5) == 0) return 0;
    return strtoll(f, NULL, 10);
}

/* The value of `"field":` in the metrics JSON object that starts at `key`;
 * `what` and `name` say which object in the failure message. */
static inline long long metric_at(racaffinity_cluster *c, const char *key, const char *what, const char *name,
                                  const char *field) {
    char *json = metrics_json(c);
    long long v = json_field(strstr(json, key), field);
    if (v == LLONG_MIN) h_fail(__FILE__, __LINE__, "no field %s of %s %s in %.200s", field, what, name, json);
    free(json);
    return v;
}

/* The value of `"field":` in the JSON object of node `name` in the metrics. */
static inline long long node_metric(racaffinity_cluster *c, const char *name, const char *field) {
    char key[128];
    snprintf(key, sizeof key, "{\"name\":\"%s\",", name);
    return metric_at(c, key, "node", name, field);
}

/* The value of `"field":` in scope `scope` of the metrics JSON. */
static inline long long scope_metric(racaffinity_cluster *c, const char *scope, const char *field) {
    char key[128];
    snprintf(key, sizeof key, "\"%s\":{", scope);
    return metric_at(c, key, "scope", scope, field);
}

#endif /* RACAFFINITY_TEST_HARNESS_H */
