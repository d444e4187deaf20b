/* bench.c - what a call into libracaffinity costs from C, next to baselines
 * measured in the same run (read the ratios, not the absolute times: the
 * machine is a shared VM).
 *
 *   tls_read        a bare `__thread` variable read (the floor for anything
 *                   that looks up per-thread state)
 *   noop_crossing   racaffinity_version(): a call into the shared library
 *                   that only returns a static pointer, i.e. the price of the
 *                   crossing itself (PLT call + return)
 *   pinned_route    racaffinity_cluster_route() on a thread pinned with
 *                   racaffinity_thread_pin (3 nodes); the same work as the
 *                   criterion bench `pinned_pick/pick`
 *   key_route       racaffinity_key_route() of "customer:NNNNNNNN" keys over 8
 *                   nodes; the same keys and cluster as `key_route/route_key`
 *   key_route_i64   racaffinity_key_route_i64() over 8 nodes; the same keys as
 *                   `key_route/route_key_i64`
 *   handle_floor    racaffinity_test_cluster_touch(): resolve the cluster
 *                   handle and return. Paired with noop_crossing, it is what
 *                   every call on a cluster pays before any work: the floor of
 *                   C - Rust
 *   rust_*          the same three loops written in Rust, run inside the
 *                   library (racaffinity_test_route_loop, testing build): the
 *                   C ABI's own cost is C - Rust within one process, each
 *                   round timing both, so machine load hits both alike
 *
 * Each benchmark is timed with CLOCK_THREAD_CPUTIME_ID over N iterations (N is
 * calibrated to ~TARGET_NS per run), after a warm-up. RUNS rounds are taken,
 * each round timing every benchmark once in turn, so load changes on the
 * machine hit all of them alike; the result is the median per benchmark.
 *
 * Output: a markdown table, then `CBENCH <name> <ns_per_op>` lines,
 * `CBENCH_RATIO <name> <value>` lines and, per C/Rust pair, `CBENCH_PAIR
 * <name> <C ns> <Rust ns> <diff median> <diff min> <diff max> <ratio median>
 * <ratio min> <ratio max>` (per-round differences) for machine parsing.
 * Build and run with tests/c/bench.sh.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "racaffinity.h"

/* Test-only export of the testing build (rust/ffi/src/capi/testing.rs). */
racaffinity_result racaffinity_test_route_loop(const racaffinity_cluster *cluster, uint32_t kind, const uint8_t *keys,
                                               size_t stride, const size_t *lens, const int64_t *ints, size_t nkeys,
                                               uint64_t n, uint64_t *out_sum);
racaffinity_result racaffinity_test_cluster_touch(const racaffinity_cluster *cluster);

#define RUNS 101
#define TARGET_NS 2000000ull /* ~2 ms per timed run: short rounds, many of them, so a pair sees the same load */
#define KEYS 4096             /* inputs cycled through a power-of-two table, as in routing.rs */

/* Keeps results alive and loads un-hoisted. */
#define BARRIER() __asm__ __volatile__("" ::: "memory")
static volatile uint64_t g_sink;

/* Written at startup (from a volatile), so the compiler cannot fold it to a constant. */
static __thread uint64_t t_value;

static racaffinity_cluster *g_pinned; /* 3 nodes, this thread pinned */
static racaffinity_cluster *g_keys;   /* 8 nodes */
static uint8_t g_key_bytes[KEYS][24];
static size_t g_key_len[KEYS];
static int64_t g_ints[KEYS];
static unsigned g_failures;

/* The thread's CPU time, not wall time: on a shared VM a round that loses the
 * CPU to another process would otherwise count the other process's work. */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* SplitMix64, as in rust/core/benches/routing.rs, so both benches route the same inputs. */
static uint64_t mix_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- the measured loops (noinline: one call per run, the loop inside) ------ */

static __attribute__((noinline)) void run_tls_read(uint64_t n)
{
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n; i++) {
        BARRIER(); /* the compiler must reload t_value every iteration */
        acc += t_value;
    }
    g_sink = acc;
}

static __attribute__((noinline)) void run_noop(uint64_t n)
{
    uintptr_t acc = 0;
    for (uint64_t i = 0; i < n; i++)
        acc ^= (uintptr_t)racaffinity_version();
    g_sink = acc;
}

/* One measured loop per C routing call: `call` routes input i into `r`; its
 * result codes are OR-ed into g_failures, the nodes summed into g_sink. */
#define ROUTE_LOOP(name, call)                              \
    static __attribute__((noinline)) void name(uint64_t n)  \
    {                                                       \
        racaffinity_route r;                                \
        uint64_t acc = 0;                                   \
        unsigned bad = 0;                                   \
        for (uint64_t i = 0; i < n; i++) {                  \
            bad |= (unsigned)(call);                        \
            acc += r.node;                                  \
        }                                                   \
        g_sink = acc;                                       \
        g_failures |= bad;                                  \
    }

ROUTE_LOOP(run_pinned_route, racaffinity_cluster_route(g_pinned, &r))
ROUTE_LOOP(run_key_route, racaffinity_key_route(g_keys, g_key_bytes[i & (KEYS - 1)], g_key_len[i & (KEYS - 1)], &r))
ROUTE_LOOP(run_key_route_i64, racaffinity_key_route_i64(g_keys, g_ints[i & (KEYS - 1)], &r))

static __attribute__((noinline)) void run_handle_floor(uint64_t n)
{
    unsigned bad = 0;
    for (uint64_t i = 0; i < n; i++)
        bad |= (unsigned)racaffinity_test_cluster_touch(g_keys);
    g_failures |= bad;
}

static void rust_loop(racaffinity_cluster *c, uint32_t kind, uint64_t n)
{
    uint64_t sum = 0;
    if (racaffinity_test_route_loop(c, kind, &g_key_bytes[0][0], sizeof g_key_bytes[0], g_key_len, g_ints, KEYS, n,
                                    &sum) != RACAFFINITY_RESULT_OK)
        g_failures |= 1;
    g_sink = sum;
}

static __attribute__((noinline)) void run_rust_pinned_route(uint64_t n) { rust_loop(g_pinned, 2, n); }
static __attribute__((noinline)) void run_rust_key_route(uint64_t n) { rust_loop(g_keys, 0, n); }
static __attribute__((noinline)) void run_rust_key_route_i64(uint64_t n) { rust_loop(g_keys, 1, n); }

struct bench {
    const char *name;
    const char *what;
    void (*run)(uint64_t);
    uint64_t n;
    double samples[RUNS];
    double median;
};

static struct bench g_bench[] = {
    {"tls_read", "bare `__thread` read", run_tls_read, 0, {0}, 0},
    {"noop_crossing", "`racaffinity_version()` (call + return)", run_noop, 0, {0}, 0},
    {"pinned_route", "`racaffinity_cluster_route`, pinned thread, 3 nodes", run_pinned_route, 0, {0}, 0},
    {"key_route", "`racaffinity_key_route`, 17-byte keys, 8 nodes", run_key_route, 0, {0}, 0},
    {"key_route_i64", "`racaffinity_key_route_i64`, 8 nodes", run_key_route_i64, 0, {0}, 0},
    {"rust_pinned_route", "`Cluster::pick` in Rust inside the library, pinned, 3 nodes", run_rust_pinned_route, 0,
     {0}, 0},
    {"rust_key_route", "`Cluster::route_key` in Rust inside the library, 8 nodes", run_rust_key_route, 0, {0}, 0},
    {"rust_key_route_i64", "`Cluster::route_key_i64` in Rust inside the library, 8 nodes", run_rust_key_route_i64, 0,
     {0}, 0},
    {"handle_floor", "`racaffinity_test_cluster_touch`: resolve the handle, nothing else", run_handle_floor, 0, {0}, 0},
};
/* (C, Rust) pairs: indices into g_bench. */
static const size_t g_pairs[][2] = {{2, 5}, {3, 6}, {4, 7}, {8, 1}};
#define NPAIRS (sizeof g_pairs / sizeof g_pairs[0])
#define NBENCH (sizeof g_bench / sizeof g_bench[0])

static double time_run(struct bench *b)
{
    uint64_t t0 = now_ns();
    b->run(b->n);
    uint64_t t1 = now_ns();
    return (double)(t1 - t0) / (double)b->n;
}

/* Grow N until one run takes ~TARGET_NS (this also warms caches and TLS). */
static void calibrate(struct bench *b)
{
    uint64_t n = 1000;
    for (;;) {
        uint64_t t0 = now_ns();
        b->run(n);
        uint64_t dt = now_ns() - t0;
        if (dt >= TARGET_NS / 4 || n >= (1ull << 34)) {
            double per = (double)dt / (double)n;
            b->n = (uint64_t)((double)TARGET_NS / (per > 0.01 ? per : 0.01));
            if (b->n < 1000)
                b->n = 1000;
            return;
        }
        n *= 4;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static racaffinity_cluster *make_cluster(int nodes)
{
    char config[256];
    int off = snprintf(config, sizeof config, "nodes = ");
    for (int i = 1; i <= nodes; i++)
        off += snprintf(config + off, sizeof config - (size_t)off, "%sMYDB%d", i > 1 ? ", " : "", i);
    snprintf(config + off, sizeof config - (size_t)off, "\n");
    racaffinity_cluster *c = NULL;
    if (racaffinity_cluster_new(config, &c) != RACAFFINITY_RESULT_OK) {
        fprintf(stderr, "bench: racaffinity_cluster_new failed\n");
        exit(2);
    }
    return c;
}

int main(void)
{
    /* Inputs: the same as routing.rs's data_keys() and int_keys(). */
    uint64_t s = 0xda7a;
    for (int i = 0; i < KEYS; i++) {
        int len = snprintf((char *)g_key_bytes[i], sizeof g_key_bytes[i], "customer:%08" PRIu64,
                           mix_next(&s) % UINT64_C(100000000));
        g_key_len[i] = (size_t)len;
    }
    s = 0x1264;
    for (int i = 0; i < KEYS; i++)
        g_ints[i] = (int64_t)(mix_next(&s) >> 1);

    g_sink = 0x2a;
    t_value = g_sink;

    g_pinned = make_cluster(3);
    g_keys = make_cluster(8);
    racaffinity_route pin, r;
    if (racaffinity_thread_pin(g_pinned, &pin) != RACAFFINITY_RESULT_OK) {
        fprintf(stderr, "bench: racaffinity_thread_pin failed\n");
        return 2;
    }

    for (size_t b = 0; b < NBENCH; b++)
        calibrate(&g_bench[b]);
    for (size_t b = 0; b < NBENCH; b++) /* warm-up at full length */
        g_bench[b].run(g_bench[b].n);
    /* Odd rounds run the list backwards, so neither side of a pair always
     * runs first. */
    for (int run = 0; run < RUNS; run++)
        for (size_t i = 0; i < NBENCH; i++) {
            size_t b = run % 2 ? NBENCH - 1 - i : i;
            g_bench[b].samples[run] = time_run(&g_bench[b]);
        }

    /* The pin must have held, and no call may have failed. */
    if (racaffinity_cluster_route(g_pinned, &r) != RACAFFINITY_RESULT_OK || r.node != pin.node ||
        r.kind != RACAFFINITY_ROUTE_KIND_AFFINITY || g_failures != 0) {
        fprintf(stderr, "bench: a routing call failed or the thread lost its pin\n");
        return 1;
    }
    bool released = false;
    racaffinity_thread_unpin(g_pinned, &released);
    racaffinity_cluster_free(g_pinned);
    racaffinity_cluster_free(g_keys);

    for (size_t b = 0; b < NBENCH; b++) {
        double sorted[RUNS];
        memcpy(sorted, g_bench[b].samples, sizeof sorted);
        qsort(sorted, RUNS, sizeof sorted[0], cmp_double);
        g_bench[b].median = sorted[RUNS / 2];
    }
    double tls = g_bench[0].median, noop = g_bench[1].median, pinned = g_bench[2].median;

    printf("libracaffinity %s from C: median of %d runs, ~%llu ms each (thread CPU time)\n\n", racaffinity_version(),
           RUNS, (unsigned long long)(TARGET_NS / 1000000));
    printf("| benchmark | what | iterations/run | ns/op (median) | min | max |\n");
    printf("|---|---|---:|---:|---:|---:|\n");
    for (size_t b = 0; b < NBENCH; b++) {
        double mn = g_bench[b].samples[0], mx = g_bench[b].samples[0];
        for (int i = 1; i < RUNS; i++) {
            mn = g_bench[b].samples[i] < mn ? g_bench[b].samples[i] : mn;
            mx = g_bench[b].samples[i] > mx ? g_bench[b].samples[i] : mx;
        }
        printf("| %s | %s | %" PRIu64 " | %.2f | %.2f | %.2f |\n", g_bench[b].name, g_bench[b].what, g_bench[b].n,
               g_bench[b].median, mn, mx);
    }
    printf("\n| ratio | value |\n|---|---:|\n");
    printf("| pinned_route / tls_read | %.1f |\n", pinned / tls);
    printf("| pinned_route / noop_crossing | %.1f |\n", pinned / noop);
    printf("\n");
    for (size_t b = 0; b < NBENCH; b++)
        printf("CBENCH %s %.3f\n", g_bench[b].name, g_bench[b].median);
    printf("CBENCH_RATIO pinned_route/tls_read %.2f\n", pinned / tls);
    printf("CBENCH_RATIO pinned_route/noop_crossing %.2f\n", pinned / noop);

    printf("\n| C ABI call | C ns | Rust in the library ns | C - Rust (median of rounds) | min | max | C / Rust |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (size_t p = 0; p < NPAIRS; p++) {
        const struct bench *c = &g_bench[g_pairs[p][0]], *r = &g_bench[g_pairs[p][1]];
        double diff[RUNS], ratio[RUNS];
        for (int i = 0; i < RUNS; i++) {
            diff[i] = c->samples[i] - r->samples[i];
            ratio[i] = c->samples[i] / r->samples[i];
        }
        qsort(diff, RUNS, sizeof diff[0], cmp_double);
        qsort(ratio, RUNS, sizeof ratio[0], cmp_double);
        printf("| %s | %.2f | %.2f | %+.2f | %+.2f | %+.2f | %.3f (%.3f-%.3f) |\n", c->name, c->median, r->median,
               diff[RUNS / 2], diff[0], diff[RUNS - 1], ratio[RUNS / 2], ratio[0], ratio[RUNS - 1]);
        printf("CBENCH_PAIR %s %.3f %.3f %.3f %.3f %.3f %.4f %.4f %.4f\n", c->name, c->median, r->median, diff[RUNS / 2],
               diff[0], diff[RUNS - 1], ratio[RUNS / 2], ratio[0], ratio[RUNS - 1]);
    }
    return 0;
}
