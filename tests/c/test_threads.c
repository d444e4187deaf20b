/* libracaffinity from many threads: pins never leak between threads, a shared
 * gtrid gets one node whoever begins it, the last-error message is per thread,
 * freeing a cluster while other threads use it gives them INVALID_HANDLE,
 * never a crash, and pinned routes never outlive a Down while another thread
 * flips node states. Iteration counts are modest so valgrind finishes quickly. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <sched.h>

#include "harness.h"

#define THREADS 8

static pthread_barrier_t barrier;

static void start_threads(pthread_t *t, void *(*fn)(void *), void **args) {
    CHECK(pthread_barrier_init(&barrier, NULL, THREADS) == 0);
    for (intptr_t i = 0; i < THREADS; i++) {
        CHECK(pthread_create(&t[i], NULL, fn, args ? args[i] : (void *)i) == 0);
    }
}

static void join_threads(pthread_t *t) {
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
    CHECK(pthread_barrier_destroy(&barrier) == 0);
}

/* THREADS threads of fn, each given its index, until all have returned. */
static void run_threads(void *(*fn)(void *)) {
    pthread_t t[THREADS];
    start_threads(t, fn, NULL);
    join_threads(t);
}

/* ---- pinned routes under a flipping topology ----------------------------------
 * Pinned threads route without pause while another thread marks nodes down and
 * up. A pinned route is served from the thread's cached pin while the routing
 * epoch holds, so the check is that no route names a node that was Down for the
 * whole call: its Down had completed before the route began and its Up began
 * only after the route returned. Ticks of one shared clock order the two.
 * Afterwards the metrics count every call, exactly. */

#define FLIP_NODES 6
#define FLIPS 300

static racaffinity_cluster *flip_cluster;
static atomic_uint_fast64_t flip_clock;
static atomic_bool flip_done;
/* Per node, written by the flipper only: a sequence number (odd while it
 * writes), the tick after its last Down completed, the tick before its last Up
 * began. */
static atomic_uint_fast64_t flip_seq[FLIP_NODES], down_done[FLIP_NODES], up_begun[FLIP_NODES];
static atomic_ulong flip_calls, flip_stale;

static void flip_record(int n, atomic_uint_fast64_t *field) {
    atomic_fetch_add(&flip_seq[n], 1);
    atomic_store(field, atomic_fetch_add(&flip_clock, 1) + 1);
    atomic_fetch_add(&flip_seq[n], 1);
}

static void *flip_router(void *arg) {
    (void)arg;
    pthread_barrier_wait(&barrier);
    racaffinity_route pin;
    if (!CHECK_OK(racaffinity_thread_pin(flip_cluster, &pin))) return NULL;
    unsigned long calls = 1; /* the pin is a routing decision too */
    while (!atomic_load(&flip_done)) {
        uint64_t t0 = atomic_load(&flip_clock);
        racaffinity_route r = {UINT32_MAX, RACAFFINITY_ROUTE_KIND_BALANCED};
        if (!CHECK_OK(racaffinity_cluster_route(flip_cluster, &r))) break;
        calls++;
        uint64_t t1 = atomic_load(&flip_clock);
        if (r.node >= FLIP_NODES) {
            h_fail(__FILE__, __LINE__, "routed to node %u of %d", r.node, FLIP_NODES);
            break;
        }
        uint64_t s1, s2, down, up;
        do {
            s1 = atomic_load(&flip_seq[r.node]);
            down = atomic_load(&down_done[r.node]);
            up = atomic_load(&up_begun[r.node]);
            s2 = atomic_load(&flip_seq[r.node]);
        } while (s1 != s2 || (s1 & 1));
        if (down != 0 && down <= t0 && (up < down || up > t1)) {
            if (atomic_fetch_add(&flip_stale, 1) == 0) {
                h_fail(__FILE__, __LINE__,
                       "route in ticks %llu..%llu named node %u, Down since tick %llu (last Up begun at %llu)",
                       (unsigned long long)t0, (unsigned long long)t1, r.node, (unsigned long long)down,
                       (unsigned long long)up);
            }
        }
    }
    bool released = false;
    CHECK_OK(racaffinity_thread_unpin(flip_cluster, &released));
    CHECK(released);
    CHECK(calls > 1);
    atomic_fetch_add(&flip_calls, calls);
    return NULL;
}

/* The sum of one Prometheus counter over every node. */
static unsigned long long prometheus_sum(const char *text, const char *metric) {
    unsigned long long sum = 0;
    size_t len = strlen(metric);
    for (const char *p = text; (p = strstr(p, metric)) != NULL; p += len) {
        if ((p != text && p[-1] != '\n') || p[len] != '{') continue;
        const char *v = strchr(p, ' ');
        if (v) sum += strtoull(v + 1, NULL, 10);
    }
    return sum;
}

static void pinned_routes_never_name_a_node_down_for_the_whole_call_and_all_count(void) {
    CHECK_OK(racaffinity_cluster_new("name = flip\nnodes = n0, n1, n2, n3, n4, n5", &flip_cluster));
    atomic_store(&flip_done, false);
    pthread_t t[THREADS];
    start_threads(t, flip_router, NULL);
    bool down[FLIP_NODES] = {false};
    unsigned seed = 7;
    for (int i = 0; i < FLIPS; i++) {
        /* n0 never changes: a soft re-pin always has somewhere to go. */
        seed = seed * 1103515245u + 12345u;
        int n = 1 + (int)((seed >> 16) % (FLIP_NODES - 1));
        char name[4] = {'n', (char)('0' + n), 0, 0};
        if (down[n]) {
            flip_record(n, &up_begun[n]);
            CHECK_OK(racaffinity_node_set_state(flip_cluster, name, RACAFFINITY_NODE_STATE_UP));
        } else {
            CHECK_OK(racaffinity_node_set_state(flip_cluster, name, RACAFFINITY_NODE_STATE_DOWN));
            flip_record(n, &down_done[n]);
        }
        down[n] = !down[n];
        if (i % 16 == 0) sched_yield();
    }
    atomic_store(&flip_done, true);
    join_threads(t);
    CHECK_EQ_U(atomic_load(&flip_stale), 0);

    static char text[1 << 16];
    size_t len = 0;
    if (CHECK_OK(racaffinity_metrics_prometheus(flip_cluster, text, sizeof text, &len))) {
        CHECK_EQ_U(prometheus_sum(text, "racaffinity_node_picks_total"), atomic_load(&flip_calls));
    }
    racaffinity_cluster_free(flip_cluster);
}

/* ---- pins ------------------------------------------------------------------- */

static racaffinity_cluster *pin_cluster;
static atomic_int pin_nodes_seen;

static void *pin_worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&barrier);
    for (int round = 0; round < 10; round++) {
        racaffinity_route pin;
        if (!CHECK_OK(racaffinity_thread_pin(pin_cluster, &pin))) return NULL;
        CHECK(pin.kind == RACAFFINITY_ROUTE_KIND_PLACED);
        atomic_fetch_or(&pin_nodes_seen, 1 << pin.node);
        for (int i = 0; i < 40; i++) {
            racaffinity_route r = {UINT32_MAX, RACAFFINITY_ROUTE_KIND_BALANCED};
            CHECK_OK(racaffinity_cluster_route(pin_cluster, &r));
            if (r.node != pin.node || r.kind != RACAFFINITY_ROUTE_KIND_AFFINITY) {
                h_fail(__FILE__, __LINE__, "pinned to %u but routed to %u (kind %d)", pin.node, r.node, (int)r.kind);
                break;
            }
            if (i % 8 == 0) {
                racaffinity_lease l;
                CHECK_OK(racaffinity_cluster_pick(pin_cluster, &l));
                CHECK_EQ_U(l.node, pin.node);
                CHECK_OK(racaffinity_lease_release(pin_cluster, &l, RACAFFINITY_OUTCOME_OK));
            }
        }
        /* A nested pin on this thread joins its own pin. */
        racaffinity_route inner;
        CHECK_OK(racaffinity_thread_pin(pin_cluster, &inner));
        CHECK_EQ_U(inner.node, pin.node);
        bool released = true;
        CHECK_OK(racaffinity_thread_unpin(pin_cluster, &released));
        CHECK(!released);
        CHECK_OK(racaffinity_thread_unpin(pin_cluster, &released));
        CHECK(released);
        racaffinity_route after;
        CHECK_OK(racaffinity_cluster_route(pin_cluster, &after));
        CHECK(after.kind == RACAFFINITY_ROUTE_KIND_BALANCED);
    }
    return NULL;
}

static void eight_threads_pin_and_pick_without_pins_leaking_between_them(void) {
    /* Eight nodes, round robin: concurrent pins land on different nodes, so
     * a pin leaking into another thread would show as a wrong node. */
    pin_cluster = new_cluster("nodes = N0, N1, N2, N3, N4, N5, N6, N7\npolicy = round_robin");
    atomic_store(&pin_nodes_seen, 0);
    run_threads(pin_worker);
    CHECK(atomic_load(&pin_nodes_seen) != 1 && atomic_load(&pin_nodes_seen) != 0); /* more than one node */
    CHECK_EQ_U(scope_metric(pin_cluster, "thread", "live"), 0);
    /* The main thread was never pinned. */
    CHECK(route(pin_cluster).kind == RACAFFINITY_ROUTE_KIND_BALANCED);
    free_cluster(pin_cluster);
}

static void *pin_and_exit_worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&barrier);
    CHECK_OK(racaffinity_thread_pin(pin_cluster, NULL));
    CHECK_OK(racaffinity_thread_pin(pin_cluster, NULL));
    return NULL; /* exits still pinned (twice) */
}

static void a_thread_exiting_while_pinned_releases_its_pin(void) {
    pin_cluster = new_cluster("nodes = N0, N1, N2");
    run_threads(pin_and_exit_worker);
    CHECK_EQ_U(scope_metric(pin_cluster, "thread", "live"), 0);
    free_cluster(pin_cluster);
}

/* ---- contexts are not threads ----------------------------------------------- */

static racaffinity_cluster *ctx_cluster;
static uint64_t shared_ctx;
static racaffinity_route ctx_pin;

static void *context_worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < 50; i++) {
        racaffinity_lease l;
        CHECK_OK(racaffinity_context_pick(ctx_cluster, shared_ctx, &l));
        CHECK_EQ_U(l.node, ctx_pin.node);
        CHECK_OK(racaffinity_lease_release(ctx_cluster, &l, RACAFFINITY_OUTCOME_OK));
    }
    /* Each thread gets its own fresh context keys. */
    uint64_t mine = 0;
    CHECK_OK(racaffinity_context_new(ctx_cluster, &mine));
    CHECK(mine != shared_ctx);
    return NULL;
}

static void a_context_pin_is_shared_by_every_thread_that_uses_its_key(void) {
    ctx_cluster = new_cluster("nodes = N0, N1, N2, N3\npolicy = random");
    CHECK_OK(racaffinity_context_new(ctx_cluster, &shared_ctx));
    CHECK_OK(racaffinity_context_pin(ctx_cluster, shared_ctx, &ctx_pin));
    run_threads(context_worker);
    bool released = false;
    CHECK_OK(racaffinity_context_unpin(ctx_cluster, shared_ctx, &released));
    CHECK(released);
    free_cluster(ctx_cluster);
}

/* ---- one gtrid, many branches at once ----------------------------------------- */

#define TX_ROUNDS 25
static racaffinity_cluster *tx_cluster;
static racaffinity_route tx_routes[TX_ROUNDS][THREADS];

static void *tx_worker(void *arg) {
    intptr_t me = (intptr_t)arg;
    for (int round = 0; round < TX_ROUNDS; round++) {
        char gtrid[32];
        snprintf(gtrid, sizeof gtrid, "shared-gtrid-%d", round);
        pthread_barrier_wait(&barrier); /* every branch begins at once */
        CHECK_OK(racaffinity_tx_begin(tx_cluster, B(gtrid), &tx_routes[round][me]));
        racaffinity_route r;
        CHECK_OK(racaffinity_tx_route(tx_cluster, B(gtrid), &r));
        CHECK_EQ_U(r.node, tx_routes[round][me].node);
        pthread_barrier_wait(&barrier); /* every branch has begun */
        CHECK_OK(racaffinity_tx_end(tx_cluster, B(gtrid)));
    }
    return NULL;
}

static void concurrent_branches_of_one_gtrid_all_get_one_node(void) {
    /* Balanced placement with random choice: only the registry keeps the
     * branches together, so a race would show up as two nodes. */
    tx_cluster = new_cluster("nodes = N0, N1, N2, N3, N4\ntransaction.placement = balanced\npolicy = random");
    run_threads(tx_worker);
    unsigned nodes_used = 0;
    for (int round = 0; round < TX_ROUNDS; round++) {
        int placed = 0;
        for (int i = 0; i < THREADS; i++) {
            CHECK_EQ_U(tx_routes[round][i].node, tx_routes[round][0].node);
            placed += tx_routes[round][i].kind == RACAFFINITY_ROUTE_KIND_PLACED;
            CHECK(tx_routes[round][i].kind == RACAFFINITY_ROUTE_KIND_PLACED ||
                  tx_routes[round][i].kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
        }
        CHECK_EQ_U(placed, 1);
        nodes_used |= 1u << tx_routes[round][0].node;
        char gtrid[32];
        racaffinity_route r;
        snprintf(gtrid, sizeof gtrid, "shared-gtrid-%d", round);
        /* Every branch ended: the entry went with the last. */
        CHECK_RC(racaffinity_tx_route(tx_cluster, B(gtrid), &r), RACAFFINITY_RESULT_UNKNOWN_TRANSACTION);
    }
    CHECK(nodes_used != 1 && nodes_used != 2 && nodes_used != 4 && nodes_used != 8 && nodes_used != 16);
    CHECK_EQ_U(scope_metric(tx_cluster, "transaction", "live"), 0);
    free_cluster(tx_cluster);
}

/* ---- last error per thread -------------------------------------------------- */

static racaffinity_cluster *err_cluster;

static void *error_worker(void *arg) {
    intptr_t me = (intptr_t)arg;
    char buf[256];
    /* A new thread has no last error. */
    CHECK_OK(racaffinity_last_error_message(buf, sizeof buf, NULL));
    CHECK_STR(buf, "");
    char name[32];
    snprintf(name, sizeof name, "NO_SUCH_NODE_%d", (int)me);
    uint32_t id;
    CHECK_RC(racaffinity_node_find(err_cluster, name, &id), RACAFFINITY_RESULT_UNKNOWN_NODE);
    pthread_barrier_wait(&barrier); /* every thread has failed once */
    pthread_barrier_wait(&barrier);
    CHECK_OK(racaffinity_last_error_message(buf, sizeof buf, NULL));
    CHECK_CONTAINS(buf, name);
    /* Success does not clear it... */
    CHECK_OK(racaffinity_node_find(err_cluster, "A", &id));
    CHECK_OK(racaffinity_last_error_message(buf, sizeof buf, NULL));
    CHECK_CONTAINS(buf, name);
    return NULL;
}

static void last_error_message_is_per_thread(void) {
    err_cluster = new_cluster("nodes = A, B");
    run_threads(error_worker);
    free_cluster(err_cluster);
}

/* ---- freeing a cluster other threads are using ------------------------------------ */

static racaffinity_cluster *victim;
static atomic_int victim_freed;
static atomic_long calls_before_free;
static atomic_int invalid_seen;
static atomic_int victim_pinned;

/* One call of a rotating mix; returns its result. */
static racaffinity_result victim_call(int i, intptr_t me) {
    racaffinity_route r;
    racaffinity_lease l;
    char buf[64];
    char g[32];
    switch (i % 9) {
    case 0: return racaffinity_cluster_route(victim, &r);
    case 1: {
        racaffinity_result rc = racaffinity_cluster_pick(victim, &l);
        if (rc != RACAFFINITY_RESULT_OK) return rc;
        return racaffinity_lease_release(victim, &l, RACAFFINITY_OUTCOME_OK);
    }
    case 2:
        snprintf(g, sizeof g, "g-%d-%d", (int)me, i);
        return racaffinity_tx_begin(victim, B(g), &r);
    case 3: return racaffinity_key_route(victim, B("customer:42"), &r);
    case 4: return racaffinity_session_route(victim, B("JSESSIONID=1"), &r);
    case 5: {
        racaffinity_result rc = racaffinity_metrics_json(victim, buf, sizeof buf, NULL);
        return rc == RACAFFINITY_RESULT_BUFFER_TOO_SMALL ? RACAFFINITY_RESULT_OK : rc;
    }
    case 6: return racaffinity_event_apply(victim, "INSTANCE VERSION=1.0 instance=N1 status=up", NULL);
    case 7: return racaffinity_node_name(victim, 0, buf, sizeof buf, NULL);
    default: return racaffinity_probe_report(victim, 2, true);
    }
}

static void *victim_worker(void *arg) {
    intptr_t me = (intptr_t)arg;
    pthread_barrier_wait(&barrier);
    /* Pinned while the cluster goes away: the pin must not outlive it badly. */
    CHECK_OK(racaffinity_thread_pin(victim, NULL));
    atomic_fetch_add(&victim_pinned, 1);
    int invalid = 0;
    /* Runs until the free is seen: under valgrind one thread can otherwise use
     * up a fixed budget of calls before the main thread gets to free. */
    for (int i = 0; i < 100000000 && invalid < 20; i++) {
        int freed_before = atomic_load(&victim_freed);
        racaffinity_result rc = victim_call(i, me);
        if (rc == RACAFFINITY_RESULT_OK) {
            if (freed_before) {
                h_fail(__FILE__, __LINE__, "call %d (kind %d) succeeded after the free returned", i, i % 9);
                break;
            }
            atomic_fetch_add(&calls_before_free, 1);
        } else if (rc == RACAFFINITY_RESULT_INVALID_HANDLE) {
            invalid++;
        } else {
            h_fail(__FILE__, __LINE__, "call kind %d returned %d (%s) while the cluster was being freed", i % 9,
                   (int)rc, h_code_name((int)rc));
            break;
        }
    }
    if (invalid > 0) atomic_fetch_add(&invalid_seen, 1);
    bool released = false;
    CHECK_RC(racaffinity_thread_unpin(victim, &released), RACAFFINITY_RESULT_INVALID_HANDLE);
    return NULL; /* the thread exits with its (now orphaned) pin */
}

static void freeing_a_cluster_in_use_gives_other_threads_invalid_handle(void) {
    for (int rep = 0; rep < 3; rep++) {
        victim = new_cluster("nodes = N0, N1, N2");
        atomic_store(&victim_freed, 0);
        atomic_store(&calls_before_free, 0);
        atomic_store(&invalid_seen, 0);
        atomic_store(&victim_pinned, 0);
        pthread_t t[THREADS];
        start_threads(t, victim_worker, NULL);
        /* Let the workers get going, then pull the cluster out from under them. */
        struct timespec pause = {0, 1000000};
        for (int spin = 0; spin < 20000 && (atomic_load(&victim_pinned) < THREADS ||
                                       atomic_load(&calls_before_free) < 300 * (rep + 1));
             spin++) {
            nanosleep(&pause, NULL);
        }
        CHECK_OK(racaffinity_cluster_free(victim));
        atomic_store(&victim_freed, 1);
        join_threads(t);
        CHECK(atomic_load(&calls_before_free) > 0);
        CHECK_EQ_U(atomic_load(&invalid_seen), THREADS);
        CHECK_RC(racaffinity_cluster_free(victim), RACAFFINITY_RESULT_INVALID_HANDLE);
    }
}

static atomic_int double_free_ok;
static atomic_int double_free_invalid;

static void *double_free_worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&barrier);
    racaffinity_result rc = racaffinity_cluster_free(victim);
    if (rc == RACAFFINITY_RESULT_OK) atomic_fetch_add(&double_free_ok, 1);
    else if (rc == RACAFFINITY_RESULT_INVALID_HANDLE) atomic_fetch_add(&double_free_invalid, 1);
    else h_fail(__FILE__, __LINE__, "racing free returned %d", (int)rc);
    return NULL;
}

static void racing_frees_of_one_handle_succeed_exactly_once(void) {
    for (int rep = 0; rep < 20; rep++) {
        victim = new_cluster("nodes = N0");
        atomic_store(&double_free_ok, 0);
        atomic_store(&double_free_invalid, 0);
        run_threads(double_free_worker);
        CHECK_EQ_U(atomic_load(&double_free_ok), 1);
        CHECK_EQ_U(atomic_load(&double_free_invalid), THREADS - 1);
    }
}

/* ---- clusters created and freed from many threads ------------------------------- */

static void *churn_worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < 50; i++) {
        racaffinity_cluster *c = NULL;
        if (!CHECK_OK(racaffinity_cluster_new("nodes = A, B", &c))) break;
        racaffinity_route r;
        CHECK_OK(racaffinity_tx_begin(c, B("g"), &r));
        CHECK_OK(racaffinity_cluster_free(c));
        CHECK_RC(racaffinity_tx_end(c, B("g")), RACAFFINITY_RESULT_INVALID_HANDLE);
    }
    return NULL;
}

static void clusters_created_and_freed_concurrently_stay_distinct(void) {
    run_threads(churn_worker);
}

/* ---- calls from a thread's exit cleanup ---------------------------------------- */

/* A pthread key destructor runs after the thread's own thread-locals are
 * gone: a host that unpins there must get typed answers, never PANIC. */
static racaffinity_cluster *exit_cluster;
static pthread_key_t exit_key;
static racaffinity_result exit_unpin_rc, exit_route_rc, exit_pin_rc, exit_tx_rc;
static bool exit_released = true;

static void exit_cleanup(void *value) {
    (void)value;
    exit_unpin_rc = racaffinity_thread_unpin(exit_cluster, &exit_released);
    racaffinity_route r;
    exit_route_rc = racaffinity_cluster_route(exit_cluster, &r);
    exit_pin_rc = racaffinity_thread_pin(exit_cluster, &r);
    exit_tx_rc = racaffinity_tx_begin(exit_cluster, (const uint8_t *)"exit-gtrid", 10, &r);
}

static void *pinned_then_exit(void *arg) {
    (void)arg;
    racaffinity_route pin;
    CHECK_OK(racaffinity_thread_pin(exit_cluster, &pin));
    CHECK(pthread_setspecific(exit_key, (void *)1) == 0);
    return NULL;
}

static void calls_from_a_thread_exit_destructor_get_typed_answers(void) {
    exit_cluster = new_cluster("nodes = N0, N1, N2");
    CHECK(pthread_key_create(&exit_key, exit_cleanup) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, pinned_then_exit, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    /* The pin went with the thread's thread-locals: nothing left to release. */
    CHECK_EQ_U(exit_unpin_rc, RACAFFINITY_RESULT_OK);
    CHECK(!exit_released);
    CHECK_EQ_U(exit_route_rc, RACAFFINITY_RESULT_OK);
    /* A new thread pin cannot outlive the thread: a typed refusal. */
    CHECK_EQ_U(exit_pin_rc, RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_EQ_U(exit_tx_rc, RACAFFINITY_RESULT_OK);
    CHECK_EQ_U(scope_metric(exit_cluster, "thread", "live"), 0);
    CHECK_OK(racaffinity_tx_complete(exit_cluster, (const uint8_t *)"exit-gtrid", 10));
    CHECK(pthread_key_delete(exit_key) == 0);
    free_cluster(exit_cluster);
}

static const h_test tests[] = {
    TEST(eight_threads_pin_and_pick_without_pins_leaking_between_them),
    TEST(a_thread_exiting_while_pinned_releases_its_pin),
    TEST(a_context_pin_is_shared_by_every_thread_that_uses_its_key),
    TEST(concurrent_branches_of_one_gtrid_all_get_one_node),
    TEST(last_error_message_is_per_thread),
    TEST(freeing_a_cluster_in_use_gives_other_threads_invalid_handle),
    TEST(racing_frees_of_one_handle_succeed_exactly_once),
    TEST(clusters_created_and_freed_concurrently_stay_distinct),
    TEST(calls_from_a_thread_exit_destructor_get_typed_answers),
    TEST(pinned_routes_never_name_a_node_down_for_the_whole_call_and_all_count),
};

int main(int argc, char **argv) {
    return h_main("test_threads", tests, sizeof tests / sizeof tests[0], argc, argv);
}
