/* libracaffinity C API tests: argument checking, handles, every result code,
 * and the routing semantics seen through C.
 *
 * Linked against the testing build (target/ffi-testing/release), which adds
 * racaffinity_test_panic. Run by tests/c/run.sh under valgrind. An argument
 * selects the tests whose names contain it. */
#define _POSIX_C_SOURCE 200809L

#include <time.h>
#include <unistd.h>

#include "harness.h"

/* Test-only export of the `testing` build; deliberately not in the header. */
racaffinity_result racaffinity_test_panic(void);

#define NUM_NODES_3 "nodes = MYDB1, MYDB2, MYDB3"

/* ---- version and messages ---------------------------------------------- */

static void version_is_a_nonempty_dotted_string(void) {
    const char *v = racaffinity_version();
    CHECK(v != NULL);
    if (!v) return;
    CHECK(strlen(v) > 0);
    CHECK(v[0] >= '0' && v[0] <= '9');
    CHECK(strchr(v, '.') != NULL);
    CHECK(racaffinity_version() == v); /* static: the same pointer every time */
}

/* The header's macros name the library built from the same sources. */
static void version_macros_match_the_library(void) {
    char numbers[32];
    snprintf(numbers, sizeof numbers, "%d.%d.%d", RACAFFINITY_VERSION_MAJOR, RACAFFINITY_VERSION_MINOR,
             RACAFFINITY_VERSION_PATCH);
    CHECK(strcmp(numbers, RACAFFINITY_VERSION) == 0);
    CHECK(strcmp(racaffinity_version(), RACAFFINITY_VERSION) == 0);
}

static void result_message_describes_every_code(void) {
    char buf[256];
    for (uint32_t code = 0; code < H_RESULT_CODES; code++) {
        size_t need = 0;
        buf[0] = '\0';
        CHECK_OK(racaffinity_result_message(code, buf, sizeof buf, &need));
        CHECK(strlen(buf) > 0);
        CHECK_EQ_U(need, strlen(buf) + 1);
    }
    CHECK_OK(racaffinity_result_message(RACAFFINITY_RESULT_OK, buf, sizeof buf, NULL));
    CHECK_STR(buf, "success");
    CHECK_OK(racaffinity_result_message(RACAFFINITY_RESULT_INVALID_LEASE, buf, sizeof buf, NULL));
    CHECK_CONTAINS(buf, "lease");
    CHECK_OK(racaffinity_result_message(RACAFFINITY_RESULT_FEED_UNAVAILABLE, buf, sizeof buf, NULL));
    CHECK_CONTAINS(buf, "feed");
    CHECK_RC(racaffinity_result_message(H_RESULT_CODES, buf, sizeof buf, NULL), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_result_message(99, buf, sizeof buf, NULL), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("99");
    CHECK_RC(racaffinity_result_message(UINT32_MAX, buf, sizeof buf, NULL), RACAFFINITY_RESULT_INVALID_ARGUMENT);
}

static void buffer_too_small_reports_the_needed_size_and_retry_succeeds(void) {
    racaffinity_cluster *c = new_cluster("name = sizes\n" NUM_NODES_3);
    char small[3];
    size_t need = 0;

    /* node_name: "MYDB2" needs 6 bytes. */
    CHECK_RC(racaffinity_node_name(c, 1, small, sizeof small, &need), RACAFFINITY_RESULT_BUFFER_TOO_SMALL);
    CHECK_EQ_U(need, 6);
    {
        char *buf = malloc(need);
        size_t got = 0;
        CHECK_OK(racaffinity_node_name(c, 1, buf, need, &got));
        CHECK_STR(buf, "MYDB2");
        CHECK_EQ_U(got, 6);
        free(buf);
    }
    /* An exact fit minus one (no room for the NUL) is too small. */
    {
        char five[5];
        CHECK_RC(racaffinity_node_name(c, 1, five, sizeof five, &need), RACAFFINITY_RESULT_BUFFER_TOO_SMALL);
        CHECK_EQ_U(need, 6);
    }
    /* cap 0 with a real buffer. */
    CHECK_RC(racaffinity_node_name(c, 0, small, 0, &need), RACAFFINITY_RESULT_BUFFER_TOO_SMALL);
    CHECK_EQ_U(need, 6);

    /* result_message */
    CHECK_RC(racaffinity_result_message(RACAFFINITY_RESULT_PANIC, small, sizeof small, &need),
             RACAFFINITY_RESULT_BUFFER_TOO_SMALL);
    CHECK(need > sizeof small);
    {
        char *buf = malloc(need);
        CHECK_OK(racaffinity_result_message(RACAFFINITY_RESULT_PANIC, buf, need, NULL));
        CHECK_EQ_U(strlen(buf) + 1, need);
        CHECK_CONTAINS(buf, "panic");
        free(buf);
    }

    /* connect_string */
    CHECK_RC(racaffinity_connect_string(RACAFFINITY_CONNECT_FORM_DESCRIPTOR, "MYDBHOST1", 1522, "MYDB", "MYDB1",
                                        small, sizeof small, &need),
             RACAFFINITY_RESULT_BUFFER_TOO_SMALL);
    CHECK_EQ_U(need, strlen("(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=MYDBHOST1)(PORT=1522)))"
                            "(CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB1)))") + 1);
    {
        char *buf = malloc(need);
        CHECK_OK(racaffinity_connect_string(RACAFFINITY_CONNECT_FORM_DESCRIPTOR, "MYDBHOST1", 1522, "MYDB", "MYDB1",
                                            buf, need, NULL));
        CHECK_EQ_U(strlen(buf) + 1, need);
        free(buf);
    }

    /* metrics, JSON and Prometheus (read_text does the query and the retry). */
    free(read_text(racaffinity_metrics_json, c));
    free(read_text(racaffinity_metrics_prometheus, c));

    /* last_error_message: make a long message, then query its size. */
    CHECK_RC(racaffinity_node_find(c, "NO_SUCH_NODE_WITH_A_RATHER_LONG_NAME", &(uint32_t){0}),
             RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_RC(racaffinity_last_error_message(small, sizeof small, &need), RACAFFINITY_RESULT_BUFFER_TOO_SMALL);
    CHECK(need > sizeof small);
    {
        char *buf = malloc(need);
        size_t got = 0;
        /* The BUFFER_TOO_SMALL above did not replace the message. */
        CHECK_OK(racaffinity_last_error_message(buf, need, &got));
        CHECK_EQ_U(got, need);
        CHECK_CONTAINS(buf, "NO_SUCH_NODE_WITH_A_RATHER_LONG_NAME");
        free(buf);
    }
    free_cluster(c);
}

/* ---- NULL arguments ------------------------------------------------------ */

static void cluster_free_of_null_is_ok(void) {
    CHECK_OK(racaffinity_cluster_free(NULL));
}

/* Every function taking a cluster handle answers `want` for handle `c` (NULL, freed, ...). */
static void every_cluster_function_returns(const racaffinity_cluster *c, racaffinity_result want) {
    uint32_t u = 0;
    uint64_t ctx = 0;
    bool b = false;
    size_t len = 0;
    char buf[64];
    racaffinity_route r;
    racaffinity_lease l = {0};
    racaffinity_node_state st;

    CHECK_RC(racaffinity_cluster_node_count(c, &u), want);
    CHECK_RC(racaffinity_cluster_set_strict(c, RACAFFINITY_SCOPE_THREAD, true), want);
    CHECK_RC(racaffinity_node_add(c, "X", NULL, 1, &u), want);
    CHECK_RC(racaffinity_node_remove(c, "X"), want);
    CHECK_RC(racaffinity_node_set_state(c, "X", RACAFFINITY_NODE_STATE_DOWN), want);
    CHECK_RC(racaffinity_node_get_state(c, 0, &st), want);
    CHECK_RC(racaffinity_node_down_is_planned(c, 0, &b), want);
    CHECK_RC(racaffinity_node_find(c, "X", &u), want);
    CHECK_RC(racaffinity_node_name(c, 0, buf, sizeof buf, &len), want);
    CHECK_RC(racaffinity_key_route(c, B("k"), &r), want);
    CHECK_RC(racaffinity_key_route_i64(c, 42, &r), want);
    CHECK_RC(racaffinity_key_partition(c, B("k"), &u), want);
    CHECK_RC(racaffinity_event_apply(c, "SERVICE VERSION=1.0 service=svc status=up", &u), want);
    CHECK_RC(racaffinity_probe_report(c, 0, true), want);
    CHECK_RC(racaffinity_outcome_report(c, 0, true), want);
    CHECK_RC(racaffinity_metrics_json(c, buf, sizeof buf, &len), want);
    CHECK_RC(racaffinity_metrics_prometheus(c, buf, sizeof buf, &len), want);
    CHECK_RC(racaffinity_cluster_route(c, &r), want);
    CHECK_RC(racaffinity_cluster_pick(c, &l), want);
    CHECK_RC(racaffinity_context_pick(c, 1, &l), want);
    CHECK_RC(racaffinity_lease_begin(c, 0, &l), want);
    CHECK_RC(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK), want);
    CHECK_RC(racaffinity_thread_pin(c, &r), want);
    CHECK_RC(racaffinity_thread_unpin(c, &b), want);
    CHECK_RC(racaffinity_context_new(c, &ctx), want);
    CHECK_RC(racaffinity_context_pin(c, 1, &r), want);
    CHECK_RC(racaffinity_context_unpin(c, 1, &b), want);
    CHECK_RC(racaffinity_context_release(c, 1, &b), want);
    CHECK_RC(racaffinity_cluster_auto_pin(c, &b), want);
    CHECK_RC(racaffinity_session_route(c, B("s"), &r), want);
    CHECK_RC(racaffinity_session_end(c, B("s"), &b), want);
    CHECK_RC(racaffinity_tx_begin(c, B("g"), &r), want);
    CHECK_RC(racaffinity_tx_begin_on(c, B("g"), 0, &r), want);
    CHECK_RC(racaffinity_tx_route(c, B("g"), &r), want);
    CHECK_RC(racaffinity_tx_prepared(c, B("g")), want);
    CHECK_RC(racaffinity_tx_end(c, B("g")), want);
    CHECK_RC(racaffinity_tx_complete(c, B("g")), want);
    CHECK_RC(racaffinity_tx_recovered(c, B("g"), 0), want);
    uint64_t u64 = 0;
    uint32_t u2 = 0;
    racaffinity_recovery_scope scope;
    const uint64_t *word = NULL;
    racaffinity_epoch_page *page = NULL;
    racaffinity_route_request req = {0};
    const uint32_t parts[] = {0};
    const char *names[] = {"X"};
    CHECK_RC(racaffinity_cluster_heartbeat(c, &u64, &u), want);
    CHECK_RC(racaffinity_cluster_recovery_scope(c, &scope), want);
    CHECK_RC(racaffinity_node_address(c, 0, buf, sizeof buf, &len), want);
    CHECK_RC(racaffinity_partition_owner(c, 0, &u), want);
    CHECK_RC(racaffinity_cluster_epoch_page(c, &word, &page), want);
    CHECK(word == NULL && page == NULL);
    CHECK_RC(racaffinity_context_route_cacheable(c, 1, &r, &b), want);
    CHECK_RC(racaffinity_cluster_count_host_hits(c, 0, 1), want);
    CHECK_RC(racaffinity_cluster_count_host_hits_for(c, 0, RACAFFINITY_SCOPE_THREAD, 1), want);
    CHECK_RC(racaffinity_context_pick_host_leasable(c, 1, &l, &b), want);
    CHECK_RC(racaffinity_cluster_pick_host_begins(c, &l), want);
    CHECK_RC(racaffinity_context_route(c, 1, &r), want);
    CHECK_RC(racaffinity_request_pick(c, &req, &l), want);
    CHECK_RC(racaffinity_tx_begin_for(c, B("g"), &req, &r), want);
    CHECK_RC(racaffinity_tx_begin_for_token(c, B("g"), &req, "s!ra1.00000000.none", &r), want);
    CHECK_RC(racaffinity_session_routing(c, B("s"), &u, &u2), want);
    CHECK_RC(racaffinity_session_token_new(c, "s", buf, sizeof buf, &len), want);
    CHECK_RC(racaffinity_session_token_route(c, "s!ra1.00000000.none", &r, buf, sizeof buf, &len, &b), want);
    CHECK_RC(racaffinity_session_token_decode(c, "s!ra1.00000000.none", &u, &u2, buf, sizeof buf, &len), want);
    const char *held[] = {"s!ra1.00000000.none"};
    size_t ix = 0;
    CHECK_RC(racaffinity_session_tokens_route(c, held, 1, &ix, &r, buf, sizeof buf, &len, &b), want);
    racaffinity_request_failure failure = {.node = 0, .error_class = RACAFFINITY_ERROR_CLASS_RECOVERABLE,
                                           .outcome = RACAFFINITY_COMMIT_OUTCOME_NOT_CHECKED, .replayable = 1};
    racaffinity_replay_step step;
    CHECK_RC(racaffinity_replay_decide(c, &failure, &step), want);
    CHECK_RC(racaffinity_cluster_host_lease_end(c, 0, RACAFFINITY_OUTCOME_OK), want);
    CHECK_RC(racaffinity_feed_record_apply(c, 1, "node/X/state", "down", &b), want);
    CHECK_RC(racaffinity_feed_event_publish(c, "SERVICE VERSION=1.0 service=svc status=up", &u64), want);
    CHECK_RC(racaffinity_context_pin_for(c, 1, RACAFFINITY_SCOPE_SESSION, &r), want);
    CHECK_RC(racaffinity_partition_map_load_failed(c, "loader", "x"), want);
    CHECK_RC(racaffinity_partition_map_replace(c, parts, names, 1, "loader", &u64), want);
}

static void null_cluster_is_null_argument_for_every_function(void) {
    uint32_t u = 0;
    CHECK_RC(racaffinity_cluster_node_count(NULL, &u), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("cluster");
    every_cluster_function_returns(NULL, RACAFFINITY_RESULT_NULL_ARGUMENT);
}

static void null_pointer_arguments_are_null_argument(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_cluster *out = NULL;
    const racaffinity_result NA = RACAFFINITY_RESULT_NULL_ARGUMENT;
    char buf[256];
    size_t len = 0;
    racaffinity_lease l;
    uint32_t u = 0;

    CHECK_RC(racaffinity_cluster_new(NULL, &out), NA);
    CHECK_LAST_ERROR_CONTAINS("config");
    CHECK(out == NULL);
    CHECK_RC(racaffinity_cluster_new("nodes = A", NULL), NA);
    CHECK_LAST_ERROR_CONTAINS("out");
    CHECK_RC(racaffinity_cluster_node_count(c, NULL), NA);
    CHECK_RC(racaffinity_node_add(c, NULL, NULL, 1, &u), NA);
    CHECK_LAST_ERROR_CONTAINS("name");
    CHECK_RC(racaffinity_node_remove(c, NULL), NA);
    CHECK_RC(racaffinity_node_set_state(c, NULL, RACAFFINITY_NODE_STATE_DOWN), NA);
    CHECK_RC(racaffinity_node_get_state(c, 0, NULL), NA);
    bool planned = true;
    CHECK_RC(racaffinity_node_down_is_planned(c, 0, NULL), NA);
    CHECK_RC(racaffinity_node_down_is_planned(c, 999, &planned), RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_OK(racaffinity_node_down_is_planned(c, 0, &planned));
    CHECK(!planned);
    CHECK_RC(racaffinity_node_find(c, NULL, &u), NA);
    CHECK_RC(racaffinity_node_find(c, "MYDB1", NULL), NA);
    /* A NULL buffer is NULL_ARGUMENT, and the size needed is still reported. */
    len = 0;
    CHECK_RC(racaffinity_node_name(c, 0, NULL, 0, &len), NA);
    CHECK_EQ_U(len, 6);
    CHECK_RC(racaffinity_connect_string(0, NULL, 1522, "MYDB", "MYDB1", buf, sizeof buf, &len), NA);
    CHECK_LAST_ERROR_CONTAINS("host");
    CHECK_RC(racaffinity_connect_string(0, "MYDBHOST1", 1522, NULL, "MYDB1", buf, sizeof buf, &len), NA);
    CHECK_LAST_ERROR_CONTAINS("service");
    CHECK_RC(racaffinity_connect_string(0, "MYDBHOST1", 1522, "MYDB", NULL, buf, sizeof buf, &len), NA);
    CHECK_LAST_ERROR_CONTAINS("instance");
    CHECK_RC(racaffinity_connect_string(0, "MYDBHOST1", 1522, "MYDB", "MYDB1", NULL, 0, &len), NA);
    CHECK_RC(racaffinity_key_route(c, NULL, 3, &(racaffinity_route){0}), NA);
    CHECK_LAST_ERROR_CONTAINS("key");
    CHECK_RC(racaffinity_key_route(c, B("k"), NULL), NA);
    CHECK_RC(racaffinity_key_route_i64(c, 1, NULL), NA);
    CHECK_RC(racaffinity_key_partition(c, NULL, 3, &u), NA);
    CHECK_RC(racaffinity_key_partition(c, B("k"), NULL), NA);
    CHECK_RC(racaffinity_event_apply(c, NULL, &u), NA);
    CHECK_LAST_ERROR_CONTAINS("line");
    CHECK_RC(racaffinity_metrics_json(c, NULL, 0, &len), NA);
    CHECK_RC(racaffinity_metrics_prometheus(c, NULL, 0, &len), NA);
    CHECK_RC(racaffinity_cluster_route(c, NULL), NA);
    CHECK_RC(racaffinity_cluster_pick(c, NULL), NA);
    CHECK_RC(racaffinity_context_pick(c, 1, NULL), NA);
    CHECK_RC(racaffinity_lease_begin(c, 0, NULL), NA);
    CHECK_RC(racaffinity_lease_release(c, NULL, RACAFFINITY_OUTCOME_OK), NA);
    CHECK_LAST_ERROR_CONTAINS("lease");
    CHECK_RC(racaffinity_context_new(c, NULL), NA);
    CHECK_RC(racaffinity_result_message(0, NULL, 0, &len), NA);
    CHECK_RC(racaffinity_last_error_message(NULL, 0, &len), NA);
    CHECK_RC(racaffinity_session_route(c, NULL, 2, &(racaffinity_route){0}), NA);
    CHECK_RC(racaffinity_session_end(c, NULL, 2, NULL), NA);
    CHECK_RC(racaffinity_tx_begin(c, NULL, 2, &(racaffinity_route){0}), NA);
    CHECK_LAST_ERROR_CONTAINS("gtrid");
    CHECK_RC(racaffinity_tx_begin_on(c, NULL, 2, 0, &(racaffinity_route){0}), NA);
    CHECK_RC(racaffinity_tx_route(c, NULL, 2, &(racaffinity_route){0}), NA);
    CHECK_OK(racaffinity_tx_begin(c, B("g"), &(racaffinity_route){0}));
    CHECK_RC(racaffinity_tx_route(c, B("g"), NULL), NA);
    CHECK_OK(racaffinity_tx_complete(c, B("g")));
    CHECK_RC(racaffinity_tx_prepared(c, NULL, 2), NA);
    CHECK_RC(racaffinity_tx_end(c, NULL, 2), NA);
    CHECK_RC(racaffinity_tx_complete(c, NULL, 2), NA);
    CHECK_RC(racaffinity_tx_recovered(c, NULL, 2, 0), NA);
    /* A lease out-pointer of NULL took no lease: nothing is in flight. */
    CHECK_EQ_U(node_metric(c, "MYDB1", "in_flight") + node_metric(c, "MYDB2", "in_flight") +
                   node_metric(c, "MYDB3", "in_flight"),
               0);
    (void)l;
    free_cluster(c);
}

/* A NULL out-pointer is NULL_ARGUMENT whatever the other arguments are, and
 * a call that fails with it must not have done its work: the caller saw a
 * failure and will never end what it began (tx_end, session_end, unpin). */
static void null_out_pointer_is_null_argument_and_changes_nothing(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route r;
    CHECK_RC(racaffinity_tx_begin(c, B("g-null-out"), NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_tx_route(c, B("g-null-out"), &r), RACAFFINITY_RESULT_UNKNOWN_TRANSACTION);
    CHECK_RC(racaffinity_tx_begin_on(c, B("g-null-out-on"), 0, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_tx_route(c, B("g-null-out-on"), &r), RACAFFINITY_RESULT_UNKNOWN_TRANSACTION);
    CHECK_RC(racaffinity_session_route(c, B("s-null-out"), NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    bool existed = true;
    CHECK_OK(racaffinity_session_end(c, B("s-null-out"), &existed));
    CHECK(!existed);
    CHECK_EQ_U(scope_metric(c, "transaction", "live"), 0);
    CHECK_EQ_U(scope_metric(c, "session", "live"), 0);
    /* The code must not depend on the registry: an unknown gtrid with a NULL out. */
    CHECK_RC(racaffinity_tx_route(c, B("never-begun"), NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    free_cluster(c);
    /* With thread.auto_pin a route pins the thread; a failed one must not. */
    racaffinity_cluster *a = new_cluster(NUM_NODES_3 "\nthread.auto_pin = true");
    CHECK_RC(racaffinity_cluster_route(a, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_EQ_U(scope_metric(a, "thread", "live"), 0);
    bool released = false;
    CHECK_OK(racaffinity_thread_unpin(a, &released)); /* clean up if it did pin */
    free_cluster(a);
}

static void documented_nullable_arguments_accept_null(void) {
    racaffinity_cluster *c = new_cluster("database = orcl\n" NUM_NODES_3);
    char buf[256];
    /* node_add: address and out_node may be NULL. */
    CHECK_OK(racaffinity_node_add(c, "MYDB4", NULL, 0, NULL));
    CHECK_EQ_U(find(c, "MYDB4"), 3);
    /* event_apply: out_changes may be NULL. */
    CHECK_OK(racaffinity_event_apply(c, "SERVICEMEMBER VERSION=1.0 database=orcl instance=MYDB4 status=down", NULL));
    CHECK_EQ_U(state_of(c, 3), RACAFFINITY_NODE_STATE_DOWN);
    /* thread_pin / context_pin: the route is optional; unpins: out_released too. */
    CHECK_OK(racaffinity_thread_pin(c, NULL));
    CHECK_OK(racaffinity_thread_unpin(c, NULL));
    uint64_t ctx = 0;
    CHECK_OK(racaffinity_context_new(c, &ctx));
    CHECK_OK(racaffinity_context_pin(c, ctx, NULL));
    CHECK_OK(racaffinity_context_unpin(c, ctx, NULL));
    /* session_end: out_existed may be NULL. */
    CHECK_OK(racaffinity_session_route(c, B("s1"), &(racaffinity_route){0}));
    CHECK_OK(racaffinity_session_end(c, B("s1"), NULL));
    /* Text outputs: out_len may be NULL (the README's quick start does this). */
    CHECK_OK(racaffinity_node_name(c, 0, buf, sizeof buf, NULL));
    CHECK_OK(racaffinity_result_message(0, buf, sizeof buf, NULL));
    CHECK_OK(racaffinity_last_error_message(buf, sizeof buf, NULL));
    CHECK_OK(racaffinity_connect_string(1, "h", 1521, "s", "i", buf, sizeof buf, NULL));
    {
        char *big = malloc(1 << 16);
        CHECK_OK(racaffinity_metrics_json(c, big, 1 << 16, NULL));
        CHECK_CONTAINS(big, "\"cluster\":\"default\"");
        CHECK_OK(racaffinity_metrics_prometheus(c, big, 1 << 16, NULL));
        CHECK_CONTAINS(big, "racaffinity_node_picks_total");
        free(big);
    }
    CHECK_RC(racaffinity_node_name(c, 0, buf, 2, NULL), RACAFFINITY_RESULT_BUFFER_TOO_SMALL);
    /* A zero-length byte argument accepts a NULL pointer (and is then empty). */
    CHECK_RC(racaffinity_tx_begin(c, NULL, 0, &(racaffinity_route){0}), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    free_cluster(c);
}

/* ---- handles -------------------------------------------------------------- */

static void freed_handle_is_invalid_handle_everywhere(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    free_cluster(c);
    CHECK_RC(racaffinity_cluster_free(c), RACAFFINITY_RESULT_INVALID_HANDLE); /* double free */
    CHECK_LAST_ERROR_CONTAINS("invalid cluster handle");
    every_cluster_function_returns(c, RACAFFINITY_RESULT_INVALID_HANDLE);
}

static void stale_handle_stays_invalid_after_its_slot_is_reused(void) {
    racaffinity_cluster *a = new_cluster("nodes = A1");
    free_cluster(a);
    /* The free list hands the same slot out again, with a new generation. */
    racaffinity_cluster *b = new_cluster("nodes = B1, B2");
    CHECK(a != b);
    uint32_t n = 0;
    CHECK_RC(racaffinity_cluster_node_count(a, &n), RACAFFINITY_RESULT_INVALID_HANDLE);
    CHECK_RC(racaffinity_cluster_free(a), RACAFFINITY_RESULT_INVALID_HANDLE);
    CHECK_OK(racaffinity_cluster_node_count(b, &n)); /* the stale free did not free b */
    CHECK_EQ_U(n, 2);
    free_cluster(b);
}

static void foreign_pointers_are_invalid_handle_and_never_dereferenced(void) {
    racaffinity_cluster *real = new_cluster(NUM_NODES_3);
    int local = 0;
    uint64_t forged_bits = 0x7a11000000010001ull; /* the tag, generation 1, slot 0: plausible */
    racaffinity_cluster *foreign[] = {
        (racaffinity_cluster *)&local,
        (racaffinity_cluster *)1,
        (racaffinity_cluster *)(uintptr_t)UINTPTR_MAX,
        (racaffinity_cluster *)(uintptr_t)0x1000,
        (racaffinity_cluster *)((uintptr_t)real ^ ((uintptr_t)1 << 16)), /* another generation */
        (racaffinity_cluster *)((uintptr_t)real | 0xffff),               /* slot out of range */
        (racaffinity_cluster *)((uintptr_t)real & ~(uintptr_t)0xffff),   /* slot "0" = none */
        (racaffinity_cluster *)(uintptr_t)forged_bits,
        (racaffinity_cluster *)malloc(64),
    };
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        racaffinity_cluster *f = foreign[i];
        if (f == real) continue; /* cannot happen, but a forged handle must not alias a live one */
        uint32_t n = 0;
        racaffinity_route r;
        char buf[32];
        CHECK_RC(racaffinity_cluster_node_count(f, &n), RACAFFINITY_RESULT_INVALID_HANDLE);
        CHECK_RC(racaffinity_cluster_route(f, &r), RACAFFINITY_RESULT_INVALID_HANDLE);
        CHECK_RC(racaffinity_tx_begin(f, B("g"), &r), RACAFFINITY_RESULT_INVALID_HANDLE);
        CHECK_RC(racaffinity_metrics_json(f, buf, sizeof buf, NULL), RACAFFINITY_RESULT_INVALID_HANDLE);
        CHECK_RC(racaffinity_cluster_free(f), RACAFFINITY_RESULT_INVALID_HANDLE);
    }
    CHECK_EQ_U(local, 0);
    free(foreign[sizeof foreign / sizeof foreign[0] - 1]);
    /* The real handle survived all of that. */
    uint32_t n = 0;
    CHECK_OK(racaffinity_cluster_node_count(real, &n));
    CHECK_EQ_U(n, 3);
    free_cluster(real);
}

static void too_many_handles_after_4096_live_clusters(void) {
    /* Runs with no other cluster live (every test frees what it creates). */
    enum { N = RACAFFINITY_MAX_CLUSTERS + 1 };
    racaffinity_cluster **all = calloc(N, sizeof *all);
    size_t made = 0;
    racaffinity_result last = RACAFFINITY_RESULT_OK;
    while (made < N) {
        last = racaffinity_cluster_new("nodes = A", &all[made]);
        if (last != RACAFFINITY_RESULT_OK) break;
        made++;
    }
    CHECK_EQ_U(made, RACAFFINITY_MAX_CLUSTERS);
    CHECK_RC(last, RACAFFINITY_RESULT_TOO_MANY_HANDLES);
    CHECK_LAST_ERROR_CONTAINS("4096");
    racaffinity_cluster *extra = NULL;
    CHECK_RC(racaffinity_cluster_new("nodes = A", &extra), RACAFFINITY_RESULT_TOO_MANY_HANDLES);
    CHECK(extra == NULL);
    /* Every handle is distinct and usable. */
    uint32_t n = 0;
    CHECK_OK(racaffinity_cluster_node_count(all[0], &n));
    CHECK_OK(racaffinity_cluster_node_count(all[made - 1], &n));
    size_t freed = 0;
    for (size_t i = 0; i < made; i++) freed += racaffinity_cluster_free(all[i]) == RACAFFINITY_RESULT_OK;
    CHECK_EQ_U(freed, made);
    /* The slots are back. */
    racaffinity_cluster *again = new_cluster("nodes = A");
    free_cluster(again);
    free(all);
}

/* ---- leases ---------------------------------------------------------------- */

static void lease_released_twice_is_invalid_lease(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_lease l;
    CHECK_OK(racaffinity_cluster_pick(c, &l));
    CHECK(l.node < 3);
    CHECK(l.kind == RACAFFINITY_ROUTE_KIND_BALANCED);
    char name[16];
    name_of(c, l.node, name, sizeof name);
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 1);
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 0);
    CHECK_RC(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK), RACAFFINITY_RESULT_INVALID_LEASE);
    CHECK_LAST_ERROR_CONTAINS("already released");
    CHECK_RC(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_FAILED), RACAFFINITY_RESULT_INVALID_LEASE);
    /* The rejected releases changed nothing. */
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 0);
    CHECK_EQ_U(node_metric(c, name, "successes"), 1);
    CHECK_EQ_U(node_metric(c, name, "failures"), 0);
    free_cluster(c);
}

static void a_copied_lease_cannot_be_released_twice(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_lease l;
    CHECK_OK(racaffinity_cluster_pick(c, &l));
    racaffinity_lease copy = l;
    char name[16];
    name_of(c, l.node, name, sizeof name);
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    CHECK_RC(racaffinity_lease_release(c, &copy, RACAFFINITY_OUTCOME_FAILED), RACAFFINITY_RESULT_INVALID_LEASE);
    CHECK_LAST_ERROR_CONTAINS("already released");
    /* The copy's release changed nothing: no negative in-flight, no failure counted. */
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 0);
    CHECK_EQ_U(node_metric(c, name, "failures"), 0);
    free_cluster(c);
}

static void a_request_picks_by_transaction_then_key_then_session_then_pin(void) {
    racaffinity_cluster *c = new_cluster("nodes = A, B, C, D, E, F, G, H\npolicy = round_robin");
    uint64_t ctx = 0;
    CHECK_OK(racaffinity_context_new(c, &ctx));
    racaffinity_route pinned, tx, key, key_i64, session;
    CHECK_OK(racaffinity_context_pin(c, ctx, &pinned));
    CHECK_OK(racaffinity_tx_begin(c, B("g-1"), &tx));
    CHECK_OK(racaffinity_key_route(c, B("customer-9"), &key));
    CHECK_OK(racaffinity_key_route_i64(c, 4711, &key_i64));
    CHECK_OK(racaffinity_session_route(c, B("S-1"), &session));
    racaffinity_route_request req = {
        .gtrid = (const uint8_t *)"g-1", .gtrid_len = 3,
        .key = (const uint8_t *)"customer-9", .key_len = 10,
        .session = (const uint8_t *)"S-1", .session_len = 3,
        .context = ctx,
    };
    racaffinity_lease l;
    CHECK_OK(racaffinity_request_pick(c, &req, &l));
    CHECK_EQ_U(l.node, tx.node);
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    req.gtrid_len = 0;
    CHECK_OK(racaffinity_request_pick(c, &req, &l));
    CHECK_EQ_U(l.node, key.node);
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    req.key_is_i64 = 1;
    req.key_i64 = 4711;
    CHECK_OK(racaffinity_request_pick(c, &req, &l));
    CHECK_EQ_U(l.node, key_i64.node);
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    req.key_is_i64 = 0;
    req.key_len = 0;
    CHECK_OK(racaffinity_request_pick(c, &req, &l));
    CHECK_EQ_U(l.node, session.node);
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    req.session_len = 0;
    CHECK_OK(racaffinity_request_pick(c, &req, &l));
    CHECK_EQ_U(l.node, pinned.node);
    CHECK(l.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    /* Bad input: NULL request or out, a NULL span with a length, an unknown gtrid. */
    CHECK_RC(racaffinity_request_pick(c, NULL, &l), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_request_pick(c, &req, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    racaffinity_route_request bad = {.gtrid = NULL, .gtrid_len = 4};
    CHECK_RC(racaffinity_request_pick(c, &bad, &l), RACAFFINITY_RESULT_NULL_ARGUMENT);
    racaffinity_route_request unknown = {.gtrid = (const uint8_t *)"nope", .gtrid_len = 4};
    CHECK_RC(racaffinity_request_pick(c, &unknown, &l), RACAFFINITY_RESULT_UNKNOWN_TRANSACTION);
    CHECK_EQ_U(node_metric(c, "A", "in_flight"), 0);
    /* A new gtrid follows the request's key, else its session, else its pin. */
    racaffinity_route_request by_key = {.key = (const uint8_t *)"customer-9", .key_len = 10, .context = ctx};
    racaffinity_route placed;
    CHECK_OK(racaffinity_tx_begin_for(c, B("g-key"), &by_key, &placed));
    CHECK_EQ_U(placed.node, key.node);
    racaffinity_route_request by_session = {.session = (const uint8_t *)"S-1", .session_len = 3, .context = ctx};
    CHECK_OK(racaffinity_tx_begin_for(c, B("g-session"), &by_session, &placed));
    CHECK_EQ_U(placed.node, session.node);
    racaffinity_route_request by_pin = {.context = ctx};
    CHECK_OK(racaffinity_tx_begin_for(c, B("g-pin"), &by_pin, &placed));
    CHECK_EQ_U(placed.node, pinned.node);
    /* An existing gtrid joins its owner; a NULL request means "nothing else known". */
    CHECK_OK(racaffinity_tx_begin_for(c, B("g-key"), NULL, &placed));
    CHECK_EQ_U(placed.node, key.node);
    CHECK(placed.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    CHECK_RC(racaffinity_tx_begin_for(c, B("g-pin"), &by_pin, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_tx_begin_for(c, NULL, 3, &by_pin, &placed), RACAFFINITY_RESULT_NULL_ARGUMENT);
    free_cluster(c);
}

static void lease_from_another_cluster_is_invalid_lease(void) {
    racaffinity_cluster *a = new_cluster(NUM_NODES_3);
    racaffinity_cluster *b = new_cluster(NUM_NODES_3);
    racaffinity_lease la;
    CHECK_OK(racaffinity_lease_begin(a, 1, &la));
    CHECK(la.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    CHECK_EQ_U(la.node, 1);
    CHECK_RC(racaffinity_lease_release(b, &la, RACAFFINITY_OUTCOME_OK), RACAFFINITY_RESULT_INVALID_LEASE);
    CHECK_LAST_ERROR_CONTAINS("not from this cluster");
    CHECK_EQ_U(node_metric(b, "MYDB2", "in_flight"), 0);
    /* ...and it is still live on its own cluster. */
    CHECK_OK(racaffinity_lease_release(a, &la, RACAFFINITY_OUTCOME_OK));
    /* A never-filled (zeroed) lease belongs to no cluster. */
    racaffinity_lease zero;
    memset(&zero, 0, sizeof zero);
    CHECK_RC(racaffinity_lease_release(a, &zero, RACAFFINITY_OUTCOME_OK), RACAFFINITY_RESULT_INVALID_LEASE);
    /* A lease of a freed cluster cannot be released on the cluster now in its slot. */
    racaffinity_lease lb;
    CHECK_OK(racaffinity_cluster_pick(b, &lb));
    free_cluster(b);
    racaffinity_cluster *b2 = new_cluster(NUM_NODES_3);
    CHECK_RC(racaffinity_lease_release(b, &lb, RACAFFINITY_OUTCOME_OK), RACAFFINITY_RESULT_INVALID_HANDLE);
    CHECK_RC(racaffinity_lease_release(b2, &lb, RACAFFINITY_OUTCOME_OK), RACAFFINITY_RESULT_INVALID_LEASE);
    free_cluster(b2);
    free_cluster(a);
}

static void lease_release_with_a_bad_outcome_keeps_the_lease_live(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_lease l;
    CHECK_OK(racaffinity_lease_begin(c, 2, &l));
    CHECK_RC(racaffinity_lease_release(c, &l, 7), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("racaffinity_outcome");
    CHECK_RC(racaffinity_lease_release(c, &l, 3), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_EQ_U(node_metric(c, "MYDB3", "in_flight"), 1);
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_NEUTRAL));
    CHECK_EQ_U(node_metric(c, "MYDB3", "in_flight"), 0);
    CHECK_EQ_U(node_metric(c, "MYDB3", "successes"), 0);
    /* The public fields are the caller's to read, not to trust: a lease whose
     * kind was overwritten with a non-enumerator still releases (no UB). */
    racaffinity_lease k;
    CHECK_OK(racaffinity_lease_begin(c, 0, &k));
    memset(&k.kind, 0x7f, sizeof k.kind);
    CHECK_OK(racaffinity_lease_release(c, &k, RACAFFINITY_OUTCOME_OK));
    /* A lease on an unknown or removed node is refused. */
    CHECK_RC(racaffinity_lease_begin(c, 3, &l), RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_OK(racaffinity_node_remove(c, "MYDB3"));
    CHECK_RC(racaffinity_lease_begin(c, 2, &l), RACAFFINITY_RESULT_UNKNOWN_NODE);
    free_cluster(c);
}

/* ---- UTF-8 and argument ranges ---------------------------------------------- */

static void invalid_utf8_is_invalid_utf8(void) {
    racaffinity_cluster *c = new_cluster("database = orcl\n" NUM_NODES_3);
    racaffinity_cluster *out = NULL;
    const racaffinity_result IU = RACAFFINITY_RESULT_INVALID_UTF8;
    char buf[64];
    uint32_t u = 0;
    CHECK_RC(racaffinity_cluster_new("nodes = A\xff", &out), IU);
    CHECK_LAST_ERROR_CONTAINS("UTF-8");
    CHECK(out == NULL);
    CHECK_RC(racaffinity_cluster_new("name = \xc3\x28", &out), IU); /* bad continuation byte */
    CHECK_RC(racaffinity_cluster_new("nodes = A\xed\xa0\x80", &out), IU); /* an encoded surrogate */
    CHECK_RC(racaffinity_node_add(c, "N\xc0\xaf", NULL, 1, &u), IU); /* overlong '/' */
    CHECK_LAST_ERROR_CONTAINS("name");
    CHECK_RC(racaffinity_node_add(c, "MYDB9", "h\xfe:1521", 1, &u), IU);
    CHECK_LAST_ERROR_CONTAINS("address");
    CHECK_RC(racaffinity_node_remove(c, "MYDB1\x80"), IU);
    CHECK_RC(racaffinity_node_set_state(c, "\xff", RACAFFINITY_NODE_STATE_DOWN), IU);
    CHECK_RC(racaffinity_node_find(c, "MYDB\xe2\x82", &u), IU); /* truncated sequence */
    CHECK_RC(racaffinity_event_apply(c, "SERVICEMEMBER VERSION=1.0 database=orcl instance=MYDB1\xff status=down", &u),
             IU);
    CHECK_LAST_ERROR_CONTAINS("line");
    CHECK_RC(racaffinity_connect_string(0, "h\xff", 1, "s", "i", buf, sizeof buf, NULL), IU);
    CHECK_RC(racaffinity_connect_string(0, "h", 1, "s\xff", "i", buf, sizeof buf, NULL), IU);
    CHECK_RC(racaffinity_connect_string(0, "h", 1, "s", "i\xff", buf, sizeof buf, NULL), IU);
    /* Nothing changed. */
    CHECK_OK(racaffinity_cluster_node_count(c, &u));
    CHECK_EQ_U(u, 3);
    CHECK_EQ_U(state_of(c, 0), RACAFFINITY_NODE_STATE_UP);
    /* Byte keys and gtrids are bytes, not text: invalid UTF-8 is fine there. */
    racaffinity_route r;
    CHECK_OK(racaffinity_tx_begin(c, (const uint8_t *)"\xff\xfe", 2, &r));
    CHECK_OK(racaffinity_session_route(c, (const uint8_t *)"\xff\x00\xfe", 3, &r));
    CHECK_OK(racaffinity_key_route(c, (const uint8_t *)"\xc0", 1, &r));
    free_cluster(c);
}

static void unknown_ids_and_unissued_context_keys_are_refused(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route r;
    /* Like tx_recovered and lease_begin for the same id. */
    CHECK_RC(racaffinity_tx_begin_on(c, B("g-unknown"), 9, &r), RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_RC(racaffinity_tx_recovered(c, B("g-unknown"), 9), RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_RC(racaffinity_tx_route(c, B("g-unknown"), &r), RACAFFINITY_RESULT_UNKNOWN_TRANSACTION);
    /* A key context_new never issued could collide with one it issues later. */
    uint64_t issued = 0;
    CHECK_OK(racaffinity_context_new(c, &issued));
    CHECK_RC(racaffinity_context_pin(c, issued + 1000, &r), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("not issued");
    CHECK_OK(racaffinity_context_pin(c, issued, &r));
    uint64_t next = 0;
    CHECK_OK(racaffinity_context_new(c, &next));
    CHECK(next != issued);
    bool released = false;
    CHECK_OK(racaffinity_context_unpin(c, issued, &released));
    CHECK(released);
    free_cluster(c);
}

static void a_planned_drain_keeps_existing_work_until_its_timeout_then_moves_it(void) {
    /* Real time (C clusters use the system clock): a 1 s drain_timeout. */
    racaffinity_cluster *c = new_cluster(NUM_NODES_3 "\npolicy = round_robin");
    uint64_t ctx = 0;
    racaffinity_route pinned, r;
    CHECK_OK(racaffinity_context_new(c, &ctx));
    CHECK_OK(racaffinity_context_pin(c, ctx, &pinned));
    char owner[16], line[256];
    name_of(c, pinned.node, owner, sizeof owner);
    snprintf(line, sizeof line,
             "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=%s status=down reason=USER drain_timeout=1",
             owner);
    CHECK_OK(racaffinity_event_apply(c, line, NULL));
    racaffinity_node_state st = RACAFFINITY_NODE_STATE_UP;
    CHECK_OK(racaffinity_node_get_state(c, pinned.node, &st));
    CHECK_EQ_U(st, RACAFFINITY_NODE_STATE_DRAINING);
    /* Existing work runs on; new work goes elsewhere. */
    CHECK_OK(racaffinity_context_route(c, ctx, &r));
    CHECK_EQ_U(r.node, pinned.node);
    for (int i = 0; i < 12; i++) {
        racaffinity_lease l;
        CHECK_OK(racaffinity_cluster_pick(c, &l));
        CHECK(l.node != pinned.node);
        CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    }
    nanosleep(&(struct timespec){.tv_sec = 1, .tv_nsec = 200 * 1000 * 1000}, NULL);
    /* The timeout ended: a read says Down, and the soft pin moves. */
    CHECK_OK(racaffinity_node_get_state(c, pinned.node, &st));
    CHECK_EQ_U(st, RACAFFINITY_NODE_STATE_DOWN);
    CHECK_OK(racaffinity_context_route(c, ctx, &r));
    CHECK(r.node != pinned.node);
    CHECK_EQ_U(r.kind, RACAFFINITY_ROUTE_KIND_REPINNED);
    bool released = false;
    CHECK_OK(racaffinity_context_unpin(c, ctx, &released));
    free_cluster(c);
}

static void ucp_affinity_contexts_and_the_partition_map_replaced_whole(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3 "\ntransaction.strict = true\ndata.partitions = 4");
    uint64_t ctx = 0;
    racaffinity_route placed, r;
    CHECK_OK(racaffinity_context_new(c, &ctx));
    CHECK_OK(racaffinity_context_pin_for(c, ctx, RACAFFINITY_SCOPE_TRANSACTION, &placed));
    CHECK_RC(racaffinity_context_pin_for(c, ctx, RACAFFINITY_SCOPE_DATA, &r), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_context_pin_for(c, ctx, 9, &r), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    char owner[16];
    name_of(c, placed.node, owner, sizeof owner);
    CHECK_OK(racaffinity_node_set_state(c, owner, RACAFFINITY_NODE_STATE_DOWN));
    racaffinity_lease l;
    /* A transaction-policy context obeys transaction.strict. */
    CHECK_RC(racaffinity_context_pick(c, ctx, &l), RACAFFINITY_RESULT_STRICT_AFFINITY);
    CHECK_OK(racaffinity_node_set_state(c, owner, RACAFFINITY_NODE_STATE_UP));
    bool released = false;
    CHECK_OK(racaffinity_context_unpin(c, ctx, &released));
    CHECK(released);

    const uint32_t parts[] = {0, 1, 2, 3};
    const char *nodes[] = {"MYDB3", "MYDB3", "MYDB1", "MYDB2"};
    uint64_t epoch = 0;
    CHECK_OK(racaffinity_partition_map_replace(c, parts, nodes, 4, "loader:test", &epoch));
    CHECK_EQ_U(epoch, 1);
    uint32_t n = 99;
    CHECK_OK(racaffinity_partition_owner(c, 1, &n));
    CHECK_EQ_U(n, 2);
    const char *bad[] = {"MYDB3", "NOPE", "MYDB1", "MYDB2"};
    CHECK_RC(racaffinity_partition_map_replace(c, parts, bad, 4, "loader:test", &epoch), RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_RC(racaffinity_partition_map_replace(c, parts, nodes, 4, "bad source!", &epoch),
             RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_partition_map_replace(c, NULL, nodes, 4, "loader:test", &epoch),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    /* A bad name is named by its index, as a loader's row would be found. */
    const char *null_name[] = {"MYDB3", NULL, "MYDB1", "MYDB2"};
    CHECK_RC(racaffinity_partition_map_replace(c, parts, null_name, 4, "loader:test", &epoch),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("nodes[1]");
    const char *not_text[] = {"MYDB3", "MYDB3", "MYDB\xff", "MYDB2"};
    CHECK_RC(racaffinity_partition_map_replace(c, parts, not_text, 4, "loader:test", &epoch),
             RACAFFINITY_RESULT_INVALID_UTF8);
    CHECK_LAST_ERROR_CONTAINS("nodes[2]");
    CHECK_OK(racaffinity_partition_owner(c, 1, &n));
    CHECK_EQ_U(n, 2); /* unchanged by the refused maps */
    CHECK_OK(racaffinity_partition_map_replace(c, NULL, NULL, 0, "loader:test", &epoch));
    CHECK_EQ_U(epoch, 2);
    /* A failed load keeps the map and shows in the metrics, message escaped. */
    uint32_t before = 99;
    CHECK_OK(racaffinity_partition_owner(c, 1, &before));
    CHECK_OK(racaffinity_partition_map_load_failed(c, "loader:test", "relation \"pm\" does not exist"));
    CHECK_RC(racaffinity_partition_map_load_failed(c, "bad source!", "x"), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_partition_map_load_failed(c, "loader:test", NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_partition_map_load_failed(c, "loader:test", "\xff"), RACAFFINITY_RESULT_INVALID_UTF8);
    CHECK_RC(racaffinity_partition_map_load_failed(NULL, "loader:test", "x"), RACAFFINITY_RESULT_NULL_ARGUMENT);
    char *json = read_text(racaffinity_metrics_json, c);
    CHECK(strstr(json, "\"load_failures\":1,\"last_error\":\"loader:test: relation \\\"pm\\\" does not exist\"") != NULL);
    free(json);
    CHECK_OK(racaffinity_partition_owner(c, 1, &n));
    CHECK_EQ_U(n, before); /* the map in force stays */
    free_cluster(c);
}

static void session_tokens_carry_primary_and_backup_and_promote_on_failure(void) {
    racaffinity_cluster *c = new_cluster("nodes = S1, S2, S3\nnode.S1.machine = m1\nnode.S2.machine = m2\n"
                                         "node.S3.machine = m3");
    uint32_t primary = 0, backup = 0;
    CHECK_OK(racaffinity_session_routing(c, B("sess"), &primary, &backup));
    CHECK(backup != RACAFFINITY_NO_NODE && backup != primary);
    char token[64], next[64], tiny[8];
    size_t len = 0;
    CHECK_OK(racaffinity_session_token_new(c, "sess", token, sizeof token, &len));
    CHECK_EQ_U(len, strlen(token) + 1);
    CHECK(len <= strlen("sess") + RACAFFINITY_TOKEN_EXTRA_BYTES + 1);
    CHECK(strncmp(token, "sess!ra1.", 9) == 0);
    CHECK_RC(racaffinity_session_token_new(c, "sess", tiny, sizeof tiny, &len), RACAFFINITY_RESULT_BUFFER_TOO_SMALL);
    CHECK_RC(racaffinity_session_token_new(c, "bad id", token, sizeof token, &len), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    racaffinity_route r;
    bool changed = true;
    CHECK_OK(racaffinity_session_token_route(c, token, &r, next, sizeof next, &len, &changed));
    CHECK_EQ_U(r.node, primary);
    CHECK(!changed);
    CHECK(strcmp(next, token) == 0);
    /* The primary dies: the backup is promoted and the token rewritten. */
    char name[16];
    name_of(c, primary, name, sizeof name);
    CHECK_OK(racaffinity_node_set_state(c, name, RACAFFINITY_NODE_STATE_DOWN));
    CHECK_OK(racaffinity_session_token_route(c, token, &r, next, sizeof next, &len, &changed));
    CHECK_EQ_U(r.node, backup);
    CHECK(r.kind == RACAFFINITY_ROUTE_KIND_REPINNED);
    CHECK(changed);
    CHECK(strcmp(next, token) != 0 && strncmp(next, "sess!ra1.", 9) == 0);
    CHECK_RC(racaffinity_session_token_route(c, "sess!ra9.00000000.none", &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("ra9");
    CHECK_RC(racaffinity_session_token_route(c, NULL, &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    /* Decoding names the nodes without routing. */
    uint32_t dp = 0, db = 0;
    char sid[16];
    CHECK_OK(racaffinity_session_token_decode(c, token, &dp, &db, sid, sizeof sid, &len));
    CHECK(strcmp(sid, "sess") == 0);
    CHECK_EQ_U(dp, primary);
    CHECK_EQ_U(db, backup);
    CHECK_OK(racaffinity_session_token_decode(c, "s!ra1.00000000.none", &dp, &db, sid, sizeof sid, &len));
    CHECK_EQ_U(dp, RACAFFINITY_NO_NODE);
    CHECK_EQ_U(db, RACAFFINITY_NO_NODE);
    CHECK_RC(racaffinity_session_token_decode(c, "s!ra1.zz", &dp, &db, sid, sizeof sid, &len),
             RACAFFINITY_RESULT_INVALID_ARGUMENT);
    free_cluster(c);
}

/* Of several tokens (a stale cookie under a longer path first), the core
 * routes the first that names a node of this cluster, else the first
 * well-formed one; the index says which; none well-formed is INVALID_ARGUMENT
 * with the index at `count`; a refusal still gives the index. */
static void of_several_tokens_the_core_chooses_the_one_to_route(void) {
    racaffinity_cluster *c = new_cluster("nodes = S1, S2, S3\nsession.strict = true");
    racaffinity_cluster *other = new_cluster("nodes = X1, X2");
    char current[64], stale[64], next[80];
    size_t len = 0, ix = 99;
    CHECK_OK(racaffinity_session_token_new(c, "current", current, sizeof current, &len));
    CHECK_OK(racaffinity_session_token_new(other, "stale", stale, sizeof stale, &len));
    racaffinity_route r, alone;
    bool changed = true;
    CHECK_OK(racaffinity_session_token_route(c, current, &alone, next, sizeof next, &len, &changed));
    const char bad_utf8[] = {'s', (char)0xff, '!', 'r', 'a', '1', 0};
    const char *held[] = {bad_utf8, "garbage", stale, current};
    CHECK_OK(racaffinity_session_tokens_route(c, held, 4, &ix, &r, next, sizeof next, &len, &changed));
    CHECK_EQ_U(ix, 3);
    CHECK_EQ_U(r.node, alone.node);
    CHECK(!changed);
    CHECK(strcmp(next, current) == 0);
    CHECK_EQ_U(len, strlen(current) + 1);
    /* None well-formed, or none at all: a new session. */
    const char *junk[] = {"garbage", "s!ra9.00000000.none"};
    CHECK_RC(racaffinity_session_tokens_route(c, junk, 2, &ix, &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_EQ_U(ix, 2);
    CHECK_LAST_ERROR_CONTAINS("new session");
    CHECK_RC(racaffinity_session_tokens_route(c, NULL, 0, &ix, &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_EQ_U(ix, 0);
    /* NULL arguments are argument errors, never a choice. */
    const char *with_null[] = {current, NULL};
    CHECK_RC(racaffinity_session_tokens_route(c, with_null, 2, &ix, &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("tokens[1]");
    CHECK_RC(racaffinity_session_tokens_route(c, NULL, 1, &ix, &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_session_tokens_route(c, held, 4, NULL, &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_session_tokens_route(c, held, 4, &ix, &r, NULL, 64, &len, &changed),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    /* Strict, every node down: refused, and the index names the token to keep. */
    const char *pair[] = {stale, current};
    for (int i = 1; i <= 3; i++) {
        char name[4];
        snprintf(name, sizeof name, "S%d", i);
        CHECK_OK(racaffinity_node_set_state(c, name, RACAFFINITY_NODE_STATE_DOWN));
    }
    ix = 99;
    CHECK_RC(racaffinity_session_tokens_route(c, pair, 2, &ix, &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_STRICT_AFFINITY);
    CHECK_EQ_U(ix, 1);
    free_cluster(other);
    free_cluster(c);
}

/* The XA key comes from the core, the bytes Java and Python use for the same
 * Xid; it is a gtrid the tx calls take, and equal gtrids of two formats are
 * two transactions. */
static void the_xa_transaction_key_is_the_cores(void) {
    uint8_t key[RACAFFINITY_MAX_XA_TRANSACTION_KEY_BYTES];
    size_t len = 0;
    CHECK_OK(racaffinity_xa_transaction_key(0x1234, (const uint8_t *)"abc", 3, key, sizeof key, &len));
    static const uint8_t abc[] = {0x00, 0x00, 0x12, 0x34, 'a', 'b', 'c'};
    CHECK_EQ_U(len, sizeof abc);
    CHECK(memcmp(key, abc, sizeof abc) == 0);
    CHECK_OK(racaffinity_xa_transaction_key(-1, (const uint8_t *)"g", 1, key, sizeof key, &len));
    static const uint8_t neg[] = {0xff, 0xff, 0xff, 0xff, 'g'};
    CHECK_EQ_U(len, sizeof neg);
    CHECK(memcmp(key, neg, sizeof neg) == 0);
    /* 61 bytes: the format id, then SHA-256 of the gtrid. */
    uint8_t long_gtrid[65];
    memset(long_gtrid, 'x', sizeof long_gtrid);
    static const uint8_t digest61[] = {0x00, 0x00, 0x00, 0x07, 0xc5, 0x08, 0xe7, 0x5f, 0x24, 0xe2, 0x5d, 0xb9,
                                       0x4d, 0xff, 0x52, 0xc9, 0x56, 0x4a, 0x51, 0x02, 0x5f, 0x69, 0x51, 0x01,
                                       0x91, 0xcc, 0x7d, 0xc2, 0xcf, 0xe1, 0x6a, 0x6c, 0xb4, 0xb2, 0x9f, 0x53};
    CHECK_OK(racaffinity_xa_transaction_key(7, long_gtrid, 61, key, sizeof key, &len));
    CHECK_EQ_U(len, sizeof digest61);
    CHECK(memcmp(key, digest61, sizeof digest61) == 0);
    /* The key routes like any gtrid; another format's key is another transaction. */
    racaffinity_cluster *c = new_cluster("nodes = A, B, C");
    racaffinity_route r;
    size_t one_len = 0, two_len = 0;
    uint8_t one[RACAFFINITY_MAX_XA_TRANSACTION_KEY_BYTES], two[RACAFFINITY_MAX_XA_TRANSACTION_KEY_BYTES];
    CHECK_OK(racaffinity_xa_transaction_key(1, (const uint8_t *)"tx", 2, one, sizeof one, &one_len));
    CHECK_OK(racaffinity_xa_transaction_key(2, (const uint8_t *)"tx", 2, two, sizeof two, &two_len));
    CHECK_OK(racaffinity_tx_begin(c, one, one_len, &r));
    CHECK_OK(racaffinity_tx_begin(c, two, two_len, &r));
    CHECK_OK(racaffinity_tx_end(c, one, one_len));
    CHECK_RC(racaffinity_tx_end(c, one, one_len), RACAFFINITY_RESULT_UNKNOWN_TRANSACTION);
    CHECK_OK(racaffinity_tx_end(c, two, two_len));
    /* Empty or over 64 bytes: written back as it is, for the tx call to refuse. */
    uint8_t big[65];
    CHECK_OK(racaffinity_xa_transaction_key(7, long_gtrid, 65, big, sizeof big, &len));
    CHECK_EQ_U(len, 65);
    CHECK(memcmp(big, long_gtrid, 65) == 0);
    CHECK_RC(racaffinity_tx_begin(c, big, len, &r), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_OK(racaffinity_xa_transaction_key(7, NULL, 0, key, sizeof key, &len));
    CHECK_EQ_U(len, 0);
    /* A buffer too small says what to allocate; NULLs are argument errors. */
    len = 0;
    CHECK_RC(racaffinity_xa_transaction_key(7, long_gtrid, 65, key, sizeof key, &len),
             RACAFFINITY_RESULT_BUFFER_TOO_SMALL);
    CHECK_EQ_U(len, 65);
    CHECK_RC(racaffinity_xa_transaction_key(7, (const uint8_t *)"abc", 3, key, 6, &len),
             RACAFFINITY_RESULT_BUFFER_TOO_SMALL);
    CHECK_EQ_U(len, 7);
    CHECK_RC(racaffinity_xa_transaction_key(7, NULL, 3, key, sizeof key, &len), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("gtrid");
    CHECK_RC(racaffinity_xa_transaction_key(7, (const uint8_t *)"abc", 3, NULL, 64, &len),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_xa_transaction_key(7, (const uint8_t *)"abc", 3, key, sizeof key, NULL),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("out_len");
    free_cluster(c);
}

/* A new gtrid of a request carrying a token goes where the token routes the
 * request, not to the thread's pin; a data key still wins; a token never
 * refuses a new gtrid, and bad input changes nothing. */
static void a_new_gtrid_follows_the_requests_session_token(void) {
    racaffinity_cluster *c = new_cluster("nodes = S1, S2, S3, S4\nsession.strict = true");
    uint64_t ctx = 0;
    racaffinity_route pinned, placed, r;
    CHECK_OK(racaffinity_context_new(c, &ctx));
    CHECK_OK(racaffinity_context_pin(c, ctx, &pinned));
    racaffinity_route_request by_pin = {.context = ctx};
    char token[64], gtrid[32], next[64];
    size_t len = 0;
    bool changed = false;
    int elsewhere = 0;
    for (int i = 0; i < 32; i++) {
        char sid[16];
        snprintf(sid, sizeof sid, "sess%d", i);
        uint32_t primary = 0, backup = 0;
        CHECK_OK(racaffinity_session_token_new(c, sid, token, sizeof token, &len));
        CHECK_OK(racaffinity_session_token_decode(c, token, &primary, &backup, next, sizeof next, &len));
        elsewhere += primary != pinned.node;
        snprintf(gtrid, sizeof gtrid, "g-token-%d", i);
        CHECK_OK(racaffinity_tx_begin_for_token(c, (const uint8_t *)gtrid, strlen(gtrid), &by_pin, token, &placed));
        CHECK_EQ_U(placed.node, primary);
        CHECK_OK(racaffinity_tx_complete(c, (const uint8_t *)gtrid, strlen(gtrid)));
    }
    CHECK(elsewhere > 0);
    /* A data key wins over the token. */
    racaffinity_route key;
    CHECK_OK(racaffinity_key_route_i64(c, 7, &key));
    racaffinity_route_request by_key = {.key_i64 = 7, .key_is_i64 = 1, .context = ctx};
    CHECK_OK(racaffinity_tx_begin_for_token(c, B("g-key"), &by_key, token, &placed));
    CHECK_EQ_U(placed.node, key.node);
    /* The token's primary down in strict session mode: the session's work is
     * refused, a new gtrid is not (no branch exists yet). */
    uint32_t primary = 0, backup = 0;
    CHECK_OK(racaffinity_session_token_decode(c, token, &primary, &backup, next, sizeof next, &len));
    char name[16];
    name_of(c, primary, name, sizeof name);
    CHECK_OK(racaffinity_node_set_state(c, name, RACAFFINITY_NODE_STATE_DOWN));
    CHECK_RC(racaffinity_session_token_route(c, token, &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_STRICT_AFFINITY);
    CHECK_OK(racaffinity_tx_begin_for_token(c, B("g-down"), NULL, token, &placed));
    CHECK(placed.node != primary);
    /* Bad input: refused, and the gtrid is not registered. */
    CHECK_RC(racaffinity_tx_begin_for_token(c, B("g-bad"), NULL, "s!ra9.00000000.none", &placed),
             RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("ra9");
    CHECK_RC(racaffinity_tx_begin_for_token(c, B("g-bad"), NULL, NULL, &placed), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_tx_begin_for_token(c, B("g-bad"), NULL, token, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_tx_complete(c, B("g-bad")), RACAFFINITY_RESULT_UNKNOWN_TRANSACTION);
    free_cluster(c);
}

/* A token with an empty backup slot (`none`, written by a one-node cluster)
 * gets a backup once another node is usable: the rewritten token is 4 bytes
 * longer than the one the client sent. The documented buffer must hold it. */
static void token_route_buffer_from_the_header_fits_a_token_that_gains_a_backup(void) {
    racaffinity_cluster *one = new_cluster("nodes = S1");
    char token[64];
    size_t len = 0;
    CHECK_OK(racaffinity_session_token_new(one, "sess", token, sizeof token, &len));
    CHECK(strlen(token) > 5 && strcmp(token + strlen(token) - 5, ".none") == 0);
    free_cluster(one);
    racaffinity_cluster *c = new_cluster("nodes = S1, S2");
    size_t cap = strlen(token) + 5;
    char *buf = malloc(cap);
    racaffinity_route r;
    bool changed = false;
    CHECK_OK(racaffinity_session_token_route(c, token, &r, buf, cap, &len, &changed));
    CHECK(changed);
    CHECK_EQ_U(len, cap); /* the bound is tight */
    free(buf);
    free_cluster(c);
}

/* Of several tokens, the buffer the header gives (the longest candidate's
 * strlen + 5) holds the worst case: the chosen token is the longest and its
 * empty backup slot (`none`) gains a node. */
static void tokens_route_buffer_from_the_header_fits_a_chosen_token_that_gains_a_backup(void) {
    racaffinity_cluster *one = new_cluster("nodes = S1");
    char token[64];
    size_t len = 0;
    CHECK_OK(racaffinity_session_token_new(one, "sess", token, sizeof token, &len));
    CHECK(strlen(token) > 5 && strcmp(token + strlen(token) - 5, ".none") == 0);
    free_cluster(one);
    racaffinity_cluster *c = new_cluster("nodes = S1, S2");
    const char *held[] = {"garbage", token, "s!ra1.00000000.none"};
    size_t cap = strlen(token) + 5;
    char *buf = malloc(cap);
    size_t ix = 99;
    racaffinity_route r;
    bool changed = false;
    CHECK_OK(racaffinity_session_tokens_route(c, held, 3, &ix, &r, buf, cap, &len, &changed));
    CHECK_EQ_U(ix, 1);
    CHECK(changed);
    CHECK_EQ_U(len, cap); /* the bound is tight */
    CHECK_EQ_U(strlen(buf) + 1, cap);
    CHECK(strncmp(buf, token, strlen(token) - 4) == 0 && strcmp(buf + strlen(buf) - 5, ".none") != 0);
    free(buf);
    free_cluster(c);
}

/* A candidate over RACAFFINITY_MAX_STRING_BYTES (10 MB here) is not a token:
 * malformed, as a non-UTF-8 one is, so the next candidate is chosen; alone,
 * it is "no token" (INVALID_ARGUMENT, index == count). A NULL candidate is an
 * argument error that routes nothing, wherever it stands; so is count 0 with
 * a NULL array. With no node at all (panic = fail) the index still names the
 * token to keep. */
static void tokens_route_takes_an_oversized_candidate_as_malformed_and_routes_nothing_on_a_null_one(void) {
    racaffinity_cluster *c = new_cluster("nodes = S1, S2\npanic = fail");
    char token[64], next[80];
    size_t len = 0, ix = 99;
    CHECK_OK(racaffinity_session_token_new(c, "sess", token, sizeof token, &len));
    size_t big = 10u << 20;
    char *huge = malloc(big + 1);
    CHECK(huge != NULL);
    memset(huge, 'a', big);
    memcpy(huge + big - 20, "!ra1.00000000.none", 18); /* token-shaped, but its id is 10 MB */
    huge[big - 2] = '\0';
    racaffinity_route r;
    bool changed = true;
    const char *held[] = {huge, token};
    CHECK_OK(racaffinity_session_tokens_route(c, held, 2, &ix, &r, next, sizeof next, &len, &changed));
    CHECK_EQ_U(ix, 1);
    CHECK(!changed);
    CHECK_STR(next, token);
    CHECK_RC(racaffinity_session_tokens_route(c, held, 1, &ix, &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_EQ_U(ix, 1);
    free(huge);

    char *before = metrics_json(c);
    const char *null_last[] = {token, "garbage", NULL};
    CHECK_RC(racaffinity_session_tokens_route(c, null_last, 3, &ix, &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("tokens[2]");
    CHECK_RC(racaffinity_session_tokens_route(c, held + 1, 1, &ix, &r, next, sizeof next, &len, NULL),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_session_tokens_route(c, held + 1, 1, &ix, NULL, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    char *after = metrics_json(c);
    CHECK_STR(after, before);
    free(after);
    free(before);
    ix = 99;
    CHECK_RC(racaffinity_session_tokens_route(c, NULL, 0, &ix, &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_EQ_U(ix, 0);

    CHECK_OK(racaffinity_node_set_state(c, "S1", RACAFFINITY_NODE_STATE_DOWN));
    CHECK_OK(racaffinity_node_set_state(c, "S2", RACAFFINITY_NODE_STATE_DOWN));
    const char *pair[] = {"garbage", token};
    ix = 99;
    CHECK_RC(racaffinity_session_tokens_route(c, pair, 2, &ix, &r, next, sizeof next, &len, &changed),
             RACAFFINITY_RESULT_NO_NODE_AVAILABLE);
    CHECK_EQ_U(ix, 1);
    free_cluster(c);
}

/* Routing a cookie in place: the buffer for the token to keep is the one
 * that holds the token sent (sized by the header's bound). The library must
 * not copy a text onto itself with memcpy (undefined behaviour: valgrind
 * reports the overlap), for one token or for one of several. */
static void token_route_in_place_writes_the_token_into_its_own_storage(void) {
    racaffinity_cluster *c = new_cluster("nodes = S1, S2");
    char tok[64], sent[64];
    size_t len = 0, ix = 99;
    racaffinity_route r;
    bool changed = true;
    CHECK_OK(racaffinity_session_token_new(c, "sess", tok, sizeof tok, &len));
    memcpy(sent, tok, sizeof tok);
    CHECK_OK(racaffinity_session_token_route(c, tok, &r, tok, sizeof tok, &len, &changed));
    CHECK(!changed);
    CHECK_STR(tok, sent);
    const char *held[] = {"garbage", tok};
    changed = true;
    CHECK_OK(racaffinity_session_tokens_route(c, held, 2, &ix, &r, tok, sizeof tok, &len, &changed));
    CHECK_EQ_U(ix, 1);
    CHECK(!changed);
    CHECK_STR(tok, sent);
    free_cluster(c);
}

/* NULL_ARGUMENT is an answer about the arguments: a token route without a
 * buffer for the token must not have routed (nor counted a route). */
static void token_route_without_a_buffer_routes_nothing(void) {
    racaffinity_cluster *c = new_cluster("nodes = S1, S2");
    char token[64], before[4096], after[4096];
    size_t len = 0;
    CHECK_OK(racaffinity_session_token_new(c, "sess", token, sizeof token, &len));
    CHECK_OK(racaffinity_metrics_json(c, before, sizeof before, NULL));
    racaffinity_route r;
    bool changed = false;
    CHECK_RC(racaffinity_session_token_route(c, token, &r, NULL, 64, &len, &changed), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_OK(racaffinity_metrics_json(c, after, sizeof after, NULL));
    CHECK(strcmp(before, after) == 0);
    free_cluster(c);
}

static void gtrid_of_65_bytes_or_empty_is_invalid_argument(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    const racaffinity_result IA = RACAFFINITY_RESULT_INVALID_ARGUMENT;
    uint8_t g[RACAFFINITY_MAX_GTRID_BYTES + 1];
    memset(g, 'g', sizeof g);
    racaffinity_route r;
    CHECK_RC(racaffinity_tx_begin(c, g, 65, &r), IA);
    CHECK_LAST_ERROR_CONTAINS("65");
    CHECK_RC(racaffinity_tx_begin_on(c, g, 65, 0, &r), IA);
    CHECK_RC(racaffinity_tx_route(c, g, 65, &r), IA);
    CHECK_RC(racaffinity_tx_prepared(c, g, 65), IA);
    CHECK_RC(racaffinity_tx_end(c, g, 65), IA);
    CHECK_RC(racaffinity_tx_complete(c, g, 65), IA);
    CHECK_RC(racaffinity_tx_recovered(c, g, 65, 0), IA);
    CHECK_RC(racaffinity_tx_begin(c, g, 0, &r), IA);
    CHECK_RC(racaffinity_tx_begin_on(c, g, 0, 0, &r), IA);
    CHECK_RC(racaffinity_tx_route(c, g, 0, &r), IA);
    CHECK_RC(racaffinity_tx_prepared(c, g, 0), IA);
    CHECK_RC(racaffinity_tx_end(c, g, 0), IA);
    CHECK_RC(racaffinity_tx_complete(c, g, 0), IA);
    CHECK_RC(racaffinity_tx_recovered(c, g, 0, 0), IA);
    /* 64 bytes (MAXGTRIDSIZE) is fine, and so is 1. */
    CHECK_OK(racaffinity_tx_begin(c, g, 64, &r));
    CHECK_OK(racaffinity_tx_complete(c, g, 64));
    CHECK_OK(racaffinity_tx_begin(c, g, 1, &r));
    CHECK_OK(racaffinity_tx_end(c, g, 1));
    free_cluster(c);
}

static void key_of_1025_bytes_or_empty_is_invalid_argument(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    const racaffinity_result IA = RACAFFINITY_RESULT_INVALID_ARGUMENT;
    uint8_t k[RACAFFINITY_MAX_KEY_BYTES + 1];
    memset(k, 'k', sizeof k);
    racaffinity_route r;
    uint32_t p;
    bool existed;
    CHECK_RC(racaffinity_session_route(c, k, 1025, &r), IA);
    CHECK_LAST_ERROR_CONTAINS("1025");
    CHECK_RC(racaffinity_session_end(c, k, 1025, &existed), IA);
    CHECK_RC(racaffinity_key_route(c, k, 1025, &r), IA);
    CHECK_RC(racaffinity_key_partition(c, k, 1025, &p), IA);
    CHECK_RC(racaffinity_session_route(c, k, 0, &r), IA);
    CHECK_RC(racaffinity_session_end(c, k, 0, &existed), IA);
    CHECK_RC(racaffinity_key_route(c, k, 0, &r), IA);
    CHECK_RC(racaffinity_key_partition(c, k, 0, &p), IA);
    CHECK_OK(racaffinity_session_route(c, k, 1024, &r));
    CHECK_OK(racaffinity_key_route(c, k, 1024, &r));
    CHECK_OK(racaffinity_key_partition(c, k, 1024, &p));
    CHECK(p < 4096);
    free_cluster(c);
}

static void huge_lengths_are_refused_before_reading(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    uint8_t one = 'x';
    racaffinity_route r;
    uint32_t p;
    /* Only one byte is valid: a length check after reading would be caught by valgrind. */
    CHECK_RC(racaffinity_tx_begin(c, &one, SIZE_MAX, &r), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_session_route(c, &one, SIZE_MAX, &r), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_key_route(c, &one, (size_t)1 << 40, &r), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_key_partition(c, &one, SIZE_MAX, &p), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    /* A config text over RACAFFINITY_MAX_STRING_BYTES is refused by size. */
    size_t n = RACAFFINITY_MAX_STRING_BYTES + 2;
    char *big = malloc(n);
    memset(big, '#', n - 1);
    big[n - 1] = '\0';
    racaffinity_cluster *out = NULL;
    CHECK_RC(racaffinity_cluster_new(big, &out), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("1048576");
    /* Exactly the limit is accepted (a node, then a comment line). */
    big[RACAFFINITY_MAX_STRING_BYTES] = '\0';
    memcpy(big, "nodes=A\n", 8);
    CHECK_OK(racaffinity_cluster_new(big, &out));
    free_cluster(out);
    free(big);
    free_cluster(c);
}

static void out_of_range_enum_values_are_invalid_argument(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    const racaffinity_result IA = RACAFFINITY_RESULT_INVALID_ARGUMENT;
    char buf[256];
    racaffinity_lease l;
    CHECK_OK(racaffinity_cluster_pick(c, &l));
    CHECK_RC(racaffinity_lease_release(c, &l, 7), IA);                       /* outcome */
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    CHECK_RC(racaffinity_cluster_set_strict(c, 9, true), IA);                 /* scope */
    CHECK_LAST_ERROR_CONTAINS("racaffinity_scope");
    CHECK_RC(racaffinity_cluster_set_strict(c, 4, true), IA);
    CHECK_RC(racaffinity_node_set_state(c, "MYDB1", 3), IA);                 /* node state */
    CHECK_LAST_ERROR_CONTAINS("racaffinity_node_state");
    CHECK_EQ_U(state_of(c, 0), RACAFFINITY_NODE_STATE_UP);
    CHECK_RC(racaffinity_result_message(99, buf, sizeof buf, NULL), IA);    /* result code */
    CHECK_RC(racaffinity_connect_string(9, "h", 1521, "s", "i", buf, sizeof buf, NULL), IA); /* form */
    CHECK_LAST_ERROR_CONTAINS("racaffinity_connect_form");
    CHECK_RC(racaffinity_connect_string(4, "h", 1521, "s", "i", buf, sizeof buf, NULL), IA);
    CHECK_RC(racaffinity_connect_string(UINT32_MAX, "h", 1521, "s", "i", buf, sizeof buf, NULL), IA);
    free_cluster(c);
}

static void bad_node_name_weight_or_address_is_invalid_argument(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    const racaffinity_result IA = RACAFFINITY_RESULT_INVALID_ARGUMENT;
    uint32_t u = 77;
    CHECK_RC(racaffinity_node_add(c, "A B", NULL, 1, &u), IA);
    CHECK_RC(racaffinity_node_add(c, "", NULL, 1, &u), IA);
    CHECK_RC(racaffinity_node_add(c, "X(Y)", NULL, 1, &u), IA);
    CHECK_RC(racaffinity_node_add(c, "MYDB9", NULL, 1000001, &u), IA);
    CHECK_LAST_ERROR_CONTAINS("weight");
    CHECK_RC(racaffinity_node_add(c, "MYDB9", "h:0", 1, &u), IA);
    CHECK_EQ_U(u, 77); /* not written on failure */
    CHECK_OK(racaffinity_node_add(c, "MYDB9", "h9:1521", 1000000, &u));
    CHECK_EQ_U(u, 3);
    CHECK_OK(racaffinity_cluster_node_count(c, &u));
    CHECK_EQ_U(u, 4);
    free_cluster(c);
}

/* ---- error codes from the core ------------------------------------------------ */

static void config_errors_are_config_and_name_the_key(void) {
    static const struct {
        const char *text, *key;
    } cases[] = {
        {"nodes = A\nbogus = 1", "bogus"},
        {"nodes = A\nnodes = B", "nodes"},
        {"nodes = A\nnode.A.weight = 0", "node.A.weight"},
        {"nodes = A\npolicy = fastest", "policy"},
        {"nodes = A\npanic = scream", "panic"},
        {"nodes = A\nsession.idle_ttl = 30", "session.idle_ttl"},
        {"nodes = A\ndata.partitions = 0", "data.partitions"},
        {"nodes = A\ntransaction.strict = maybe", "transaction.strict"},
        {"nodes = A; health.eject_backoff = 10s; health.eject_backoff_max = 1s", "health.eject_backoff_max"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        racaffinity_cluster *out = NULL;
        if (!CHECK_RC(racaffinity_cluster_new(cases[i].text, &out), RACAFFINITY_RESULT_CONFIG)) {
            fprintf(stderr, "    config was: %s\n", cases[i].text);
        }
        char want[128];
        snprintf(want, sizeof want, "`%s`", cases[i].key);
        CHECK_LAST_ERROR_CONTAINS(want);
        CHECK(out == NULL);
    }
}

static void unknown_node_names_and_ids_are_unknown_node(void) {
    racaffinity_cluster *c = new_cluster("database = orcl\n" NUM_NODES_3);
    const racaffinity_result UN = RACAFFINITY_RESULT_UNKNOWN_NODE;
    uint32_t u = 0;
    char buf[64];
    racaffinity_node_state st;
    racaffinity_lease l;
    CHECK_RC(racaffinity_node_find(c, "NOPE", &u), UN);
    CHECK_LAST_ERROR_CONTAINS("NOPE");
    CHECK_RC(racaffinity_node_remove(c, "NOPE"), UN);
    CHECK_RC(racaffinity_node_set_state(c, "NOPE", RACAFFINITY_NODE_STATE_DOWN), UN);
    CHECK_RC(racaffinity_node_get_state(c, 3, &st), UN);
    CHECK_RC(racaffinity_node_name(c, 3, buf, sizeof buf, NULL), UN);
    CHECK_RC(racaffinity_node_name(c, UINT32_MAX, buf, sizeof buf, NULL), UN);
    CHECK_RC(racaffinity_probe_report(c, 3, false), UN);
    CHECK_RC(racaffinity_outcome_report(c, 99, false), UN);
    CHECK_RC(racaffinity_lease_begin(c, 3, &l), UN);
    CHECK_RC(racaffinity_tx_recovered(c, B("g-rec"), 3), UN);
    CHECK_RC(racaffinity_event_apply(c, "SERVICEMEMBER VERSION=1.0 database=orcl instance=MYDB9 status=down", &u), UN);
    CHECK_LAST_ERROR_CONTAINS("MYDB9");
    CHECK_RC(racaffinity_event_apply(c, "NODE VERSION=1.0 host=h9 status=nodedown", &u), UN);
    /* A config mapping a partition to an unknown node. */
    racaffinity_cluster *out = NULL;
    racaffinity_result r = racaffinity_cluster_new("nodes = A\ndata.partition.1 = B", &out);
    CHECK(r == RACAFFINITY_RESULT_CONFIG || r == RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK(out == NULL);
    free_cluster(c);
}

static void adding_an_existing_name_is_duplicate_node(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    uint32_t u = 0;
    CHECK_RC(racaffinity_node_add(c, "MYDB2", NULL, 1, &u), RACAFFINITY_RESULT_DUPLICATE_NODE);
    CHECK_LAST_ERROR_CONTAINS("MYDB2");
    CHECK_RC(racaffinity_node_add(c, "mydb2", NULL, 1, &u), RACAFFINITY_RESULT_DUPLICATE_NODE); /* case-insensitive */
    CHECK_OK(racaffinity_cluster_node_count(c, &u));
    CHECK_EQ_U(u, 3);
    free_cluster(c);
}

static void no_node_available_with_panic_fail_and_all_nodes_down(void) {
    racaffinity_cluster *c = new_cluster("panic = fail\n" NUM_NODES_3);
    const racaffinity_result NN = RACAFFINITY_RESULT_NO_NODE_AVAILABLE;
    CHECK_OK(racaffinity_node_set_state(c, "MYDB1", RACAFFINITY_NODE_STATE_DOWN));
    CHECK_OK(racaffinity_node_set_state(c, "mydb2", RACAFFINITY_NODE_STATE_DOWN));
    CHECK_OK(racaffinity_node_set_state(c, "MYDB3", RACAFFINITY_NODE_STATE_DOWN));
    racaffinity_route r;
    racaffinity_lease l;
    CHECK_RC(racaffinity_cluster_route(c, &r), NN);
    CHECK_LAST_ERROR_CONTAINS("no node available");
    CHECK_RC(racaffinity_cluster_pick(c, &l), NN);
    CHECK_RC(racaffinity_thread_pin(c, &r), NN);
    CHECK_RC(racaffinity_tx_begin(c, B("g"), &r), NN);
    CHECK_RC(racaffinity_session_route(c, B("s"), &r), NN);
    CHECK_RC(racaffinity_key_route(c, B("k"), &r), NN);
    /* Nothing was left in flight or registered. */
    CHECK_EQ_U(node_metric(c, "MYDB1", "in_flight"), 0);
    CHECK_RC(racaffinity_tx_route(c, B("g"), &r), RACAFFINITY_RESULT_UNKNOWN_TRANSACTION);
    /* With the default try_all, the same situation is a PANIC-kind route. */
    racaffinity_cluster *t = new_cluster(NUM_NODES_3);
    for (uint32_t i = 0; i < 3; i++) {
        char name[16];
        CHECK_OK(racaffinity_node_set_state(t, name_of(t, i, name, sizeof name), RACAFFINITY_NODE_STATE_DOWN));
    }
    r = route(t);
    CHECK(r.kind == RACAFFINITY_ROUTE_KIND_PANIC);
    free_cluster(t);
    /* A cluster without nodes could only fail every pick: it is refused
     * where it is built, saying why. */
    racaffinity_cluster *e = NULL;
    CHECK_RC(racaffinity_cluster_new("", &e), RACAFFINITY_RESULT_CONFIG);
    CHECK_LAST_ERROR_CONTAINS("at least one node");
    CHECK_RC(racaffinity_cluster_new("nodes = ", &e), RACAFFINITY_RESULT_CONFIG);
    CHECK(e == NULL);
    free_cluster(c);
}

static void strict_transaction_refuses_when_its_node_is_down(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3 "\ntransaction.strict = true");
    racaffinity_route r, r2;
    char owner[16];
    CHECK_OK(racaffinity_tx_begin(c, B("gtrid-strict"), &r));
    CHECK(r.kind == RACAFFINITY_ROUTE_KIND_PLACED);
    name_of(c, r.node, owner, sizeof owner);
    CHECK_OK(racaffinity_node_set_state(c, owner, RACAFFINITY_NODE_STATE_DOWN));
    CHECK_RC(racaffinity_tx_begin(c, B("gtrid-strict"), &r2), RACAFFINITY_RESULT_STRICT_AFFINITY);
    CHECK_LAST_ERROR_CONTAINS(owner);
    CHECK_LAST_ERROR_CONTAINS("transaction");
    /* 2PC (a rollback here) is never refused: it goes to the branch's node. */
    CHECK_OK(racaffinity_tx_route(c, B("gtrid-strict"), &r2));
    CHECK_EQ_U(r2.node, r.node);
    /* Soft at runtime: the unprepared transaction re-pins. */
    CHECK_OK(racaffinity_cluster_set_strict(c, RACAFFINITY_SCOPE_TRANSACTION, false));
    CHECK_OK(racaffinity_tx_begin(c, B("gtrid-strict"), &r2));
    CHECK(r2.kind == RACAFFINITY_ROUTE_KIND_REPINNED);
    CHECK_NE_U(r2.node, r.node);
    CHECK_OK(racaffinity_tx_complete(c, B("gtrid-strict")));
    free_cluster(c);
}

static void prepared_transaction_never_moves(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3); /* soft */
    racaffinity_route r, r2;
    char owner[16];
    CHECK_OK(racaffinity_tx_begin(c, B("gtrid-prep"), &r));
    CHECK_OK(racaffinity_tx_prepared(c, B("gtrid-prep")));
    name_of(c, r.node, owner, sizeof owner);
    CHECK_OK(racaffinity_node_set_state(c, owner, RACAFFINITY_NODE_STATE_DOWN));
    /* Its commit still goes to the owner: only that node holds the branch. */
    CHECK_OK(racaffinity_tx_route(c, B("gtrid-prep"), &r2));
    CHECK_EQ_U(r2.node, r.node);
    CHECK_RC(racaffinity_tx_begin(c, B("gtrid-prep"), &r2), RACAFFINITY_RESULT_PREPARED_NODE_UNAVAILABLE);
    CHECK_LAST_ERROR_CONTAINS(owner);
    CHECK_RC(racaffinity_tx_begin_on(c, B("gtrid-prep"), (r.node + 1) % 3, &r2),
             RACAFFINITY_RESULT_PREPARED_NODE_UNAVAILABLE);
    /* The node returns: the commit goes where the branch is. */
    CHECK_OK(racaffinity_node_set_state(c, owner, RACAFFINITY_NODE_STATE_UP));
    CHECK_OK(racaffinity_tx_route(c, B("gtrid-prep"), &r2));
    CHECK_EQ_U(r2.node, r.node);
    CHECK(r2.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    /* Draining keeps existing work, prepared or not. */
    CHECK_OK(racaffinity_node_set_state(c, owner, RACAFFINITY_NODE_STATE_DRAINING));
    CHECK_OK(racaffinity_tx_route(c, B("gtrid-prep"), &r2));
    CHECK_EQ_U(r2.node, r.node);
    CHECK_OK(racaffinity_tx_end(c, B("gtrid-prep")));
    free_cluster(c);
}

static void unknown_gtrid_is_unknown_transaction(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route r;
    const racaffinity_result UT = RACAFFINITY_RESULT_UNKNOWN_TRANSACTION;
    CHECK_RC(racaffinity_tx_route(c, B("never-begun"), &r), UT);
    CHECK_LAST_ERROR_CONTAINS("6e657665722d626567756e"); /* the gtrid, in hex */
    CHECK_RC(racaffinity_tx_prepared(c, B("never-begun")), UT);
    CHECK_RC(racaffinity_tx_end(c, B("never-begun")), UT);
    CHECK_RC(racaffinity_tx_complete(c, B("never-begun")), UT);
    free_cluster(c);
}

static void malformed_event_is_event_parse_and_changes_nothing(void) {
    racaffinity_cluster *c = new_cluster("database = orcl\n" NUM_NODES_3);
    uint32_t changes = 77;
    const char *bad[] = {
        "garbage",
        "",
        "SERVICEMEMBER VERSION=2.0 database=orcl instance=MYDB2 status=down",
        "SERVICEMEMBER VERSION=1.0 database=orcl instance=MYDB2 status=sideways",
        "SERVICEMEMBER VERSION=1.0 database=orcl instance=MYDB2 status=down bogus",
        "VERSION=1.0 { {instance=MYDB1 percent=70 flag=GOOD}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_RC(racaffinity_event_apply(c, bad[i], &changes), RACAFFINITY_RESULT_EVENT_PARSE);
    }
    CHECK_EQ_U(changes, 77); /* not written on failure */
    for (uint32_t i = 0; i < 3; i++) CHECK_EQ_U(state_of(c, i), RACAFFINITY_NODE_STATE_UP);
    free_cluster(c);
}

static void event_for_another_database_is_foreign_event(void) {
    racaffinity_cluster *c = new_cluster("database = orcl\n" NUM_NODES_3);
    uint32_t changes = 0;
    CHECK_RC(racaffinity_event_apply(
                 c, "SERVICEMEMBER VERSION=1.0 service=svc database=other instance=MYDB2 status=down", &changes),
             RACAFFINITY_RESULT_FOREIGN_EVENT);
    CHECK_LAST_ERROR_CONTAINS("other");
    CHECK_RC(racaffinity_event_apply(c, "DATABASE VERSION=1.0 database=other status=down", &changes),
             RACAFFINITY_RESULT_FOREIGN_EVENT);
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_UP);
    /* The configured database (any case) applies. */
    CHECK_OK(racaffinity_event_apply(
        c, "SERVICEMEMBER VERSION=1.0 service=svc database=ORCL instance=MYDB2 status=down", &changes));
    CHECK_EQ_U(changes, 1);
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_DOWN);
    free_cluster(c);
}

static void panic_inside_the_library_becomes_panic_result(void) {
    CHECK_RC(racaffinity_test_panic(), RACAFFINITY_RESULT_PANIC);
    CHECK_LAST_ERROR_CONTAINS("racaffinity_test_panic was called");
    CHECK_RC(racaffinity_test_panic(), RACAFFINITY_RESULT_PANIC);
    /* The library is still usable afterwards. */
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route r = route(c);
    CHECK(r.node < 3);
    free_cluster(c);
}

static void recovery_on_a_second_node_is_a_split_transaction(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route r;
    CHECK_OK(racaffinity_tx_recovered(c, B("in-doubt-1"), 2));
    CHECK_OK(racaffinity_tx_route(c, B("in-doubt-1"), &r));
    CHECK_EQ_U(r.node, 2);
    CHECK_OK(racaffinity_tx_recovered(c, B("in-doubt-1"), 2)); /* the same node again is fine */
    CHECK_RC(racaffinity_tx_recovered(c, B("in-doubt-1"), 0), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("split transaction");
    /* Recovered ids are prepared: they never move, even off a Down node. */
    CHECK_OK(racaffinity_node_set_state(c, "MYDB3", RACAFFINITY_NODE_STATE_DOWN));
    CHECK_OK(racaffinity_tx_route(c, B("in-doubt-1"), &r));
    CHECK_EQ_U(r.node, 2);
    CHECK_RC(racaffinity_tx_begin(c, B("in-doubt-1"), &r), RACAFFINITY_RESULT_PREPARED_NODE_UNAVAILABLE);
    CHECK_OK(racaffinity_tx_complete(c, B("in-doubt-1")));
    free_cluster(c);
}

/* ---- semantics ------------------------------------------------------------- */

static void thread_pin_keeps_picks_on_one_node_until_unpin(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3 "\npolicy = round_robin");
    racaffinity_route pin;
    CHECK_OK(racaffinity_thread_pin(c, &pin));
    CHECK(pin.kind == RACAFFINITY_ROUTE_KIND_PLACED);
    for (int i = 0; i < 50; i++) {
        racaffinity_route r = route(c);
        CHECK_EQ_U(r.node, pin.node);
        CHECK(r.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
        racaffinity_lease l;
        CHECK_OK(racaffinity_cluster_pick(c, &l));
        CHECK_EQ_U(l.node, pin.node);
        CHECK(l.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
        CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    }
    CHECK_EQ_U(scope_metric(c, "thread", "live"), 1);
    bool released = false;
    CHECK_OK(racaffinity_thread_unpin(c, &released));
    CHECK(released);
    CHECK_EQ_U(scope_metric(c, "thread", "live"), 0);
    /* Unpinned: load balancing again; round robin visits every node. */
    unsigned seen = 0;
    for (int i = 0; i < 6; i++) {
        racaffinity_route r = route(c);
        CHECK(r.kind == RACAFFINITY_ROUTE_KIND_BALANCED);
        seen |= 1u << r.node;
    }
    CHECK_EQ_U(seen, 7);
    /* An unpin without a pin releases nothing. */
    released = true;
    CHECK_OK(racaffinity_thread_unpin(c, &released));
    CHECK(!released);
    /* A pin's node going down re-pins (soft). */
    CHECK_OK(racaffinity_thread_pin(c, &pin));
    char owner[16];
    CHECK_OK(racaffinity_node_set_state(c, name_of(c, pin.node, owner, sizeof owner), RACAFFINITY_NODE_STATE_DOWN));
    racaffinity_route moved = route(c);
    CHECK(moved.kind == RACAFFINITY_ROUTE_KIND_REPINNED);
    CHECK_NE_U(moved.node, pin.node);
    racaffinity_route again = route(c);
    CHECK_EQ_U(again.node, moved.node);
    CHECK(again.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    CHECK_OK(racaffinity_thread_unpin(c, &released));
    CHECK(released);
    free_cluster(c);
}

/* Decided (docs/c.md): a thread pinned to a cluster that is then freed gets
 * INVALID_HANDLE from its next pinned route, never the pinned node. */
static void a_pinned_route_after_the_free_is_invalid_handle(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route pin, r;
    CHECK_OK(racaffinity_thread_pin(c, &pin));
    CHECK_OK(racaffinity_cluster_route(c, &r));
    CHECK_EQ_U(r.node, pin.node);
    free_cluster(c);
    CHECK_RC(racaffinity_cluster_route(c, &r), RACAFFINITY_RESULT_INVALID_HANDLE);
    racaffinity_lease l;
    CHECK_RC(racaffinity_cluster_pick(c, &l), RACAFFINITY_RESULT_INVALID_HANDLE);
    CHECK_RC(racaffinity_thread_unpin(c, NULL), RACAFFINITY_RESULT_INVALID_HANDLE);
}

static void nested_thread_pins_release_at_the_outermost_unpin(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route outer, inner;
    bool released = true;
    CHECK_OK(racaffinity_thread_pin(c, &outer));
    CHECK_OK(racaffinity_thread_pin(c, &inner));
    CHECK_EQ_U(inner.node, outer.node);
    CHECK(inner.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    CHECK_OK(racaffinity_thread_pin(c, NULL));
    CHECK_OK(racaffinity_thread_unpin(c, &released));
    CHECK(!released);
    CHECK_OK(racaffinity_thread_unpin(c, &released));
    CHECK(!released);
    CHECK_EQ_U(route(c).node, outer.node);
    CHECK(route(c).kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    CHECK_OK(racaffinity_thread_unpin(c, &released));
    CHECK(released);
    CHECK(route(c).kind == RACAFFINITY_ROUTE_KIND_BALANCED);
    /* Pins are per cluster: a pin on one does not pin another. */
    racaffinity_cluster *d = new_cluster(NUM_NODES_3);
    CHECK_OK(racaffinity_thread_pin(c, &outer));
    CHECK(route(d).kind == RACAFFINITY_ROUTE_KIND_BALANCED);
    CHECK(route(c).kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    CHECK_OK(racaffinity_thread_unpin(d, &released));
    CHECK(!released);
    CHECK_OK(racaffinity_thread_unpin(c, &released));
    CHECK(released);
    free_cluster(d);
    free_cluster(c);
}

static void context_pins_are_independent_of_thread_pins(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3 "\npolicy = round_robin");
    uint64_t k1 = 0, k2 = 0;
    CHECK_OK(racaffinity_context_new(c, &k1));
    CHECK_OK(racaffinity_context_new(c, &k2));
    CHECK(k1 != k2);
    racaffinity_route p1, p2;
    CHECK_OK(racaffinity_context_pin(c, k1, &p1));
    CHECK(p1.kind == RACAFFINITY_ROUTE_KIND_PLACED);
    CHECK_OK(racaffinity_context_pin(c, k2, &p2));
    CHECK_NE_U(p1.node, p2.node); /* round robin placed them apart */
    for (int i = 0; i < 20; i++) {
        racaffinity_lease l1, l2;
        CHECK_OK(racaffinity_context_pick(c, k1, &l1));
        CHECK_OK(racaffinity_context_pick(c, k2, &l2));
        CHECK_EQ_U(l1.node, p1.node);
        CHECK_EQ_U(l2.node, p2.node);
        CHECK(l1.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
        CHECK_OK(racaffinity_lease_release(c, &l1, RACAFFINITY_OUTCOME_OK));
        CHECK_OK(racaffinity_lease_release(c, &l2, RACAFFINITY_OUTCOME_NEUTRAL));
    }
    /* Routing a context without a lease: its pin, or balancing when unpinned. */
    racaffinity_route cr;
    CHECK_OK(racaffinity_context_route(c, k1, &cr));
    CHECK_EQ_U(cr.node, p1.node);
    CHECK(cr.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    CHECK_RC(racaffinity_context_route(c, k1, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_OK(racaffinity_context_route(c, 987654321, &cr));
    CHECK(cr.kind == RACAFFINITY_ROUTE_KIND_BALANCED);
    /* The calling thread is not pinned by a context pin. */
    CHECK(route(c).kind == RACAFFINITY_ROUTE_KIND_BALANCED);
    /* Nested context pins. */
    racaffinity_route again;
    bool released = true;
    CHECK_OK(racaffinity_context_pin(c, k1, &again));
    CHECK_EQ_U(again.node, p1.node);
    CHECK(again.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    CHECK_OK(racaffinity_context_unpin(c, k1, &released));
    CHECK(!released);
    CHECK_OK(racaffinity_context_unpin(c, k1, &released));
    CHECK(released);
    CHECK_OK(racaffinity_context_unpin(c, k1, &released));
    CHECK(!released);
    racaffinity_lease l;
    CHECK_OK(racaffinity_context_pick(c, k1, &l));
    CHECK(l.kind == RACAFFINITY_ROUTE_KIND_BALANCED);
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    CHECK_OK(racaffinity_context_unpin(c, k2, &released));
    CHECK(released);
    CHECK_EQ_U(scope_metric(c, "thread", "live"), 0);
    free_cluster(c);
}

static void context_release_drops_every_level_and_auto_pin_pins_contexts(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3 "\npolicy = round_robin");
    bool b = true;
    CHECK_OK(racaffinity_cluster_auto_pin(c, &b));
    CHECK(!b);
    CHECK_RC(racaffinity_cluster_auto_pin(c, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    uint64_t k = 0;
    CHECK_OK(racaffinity_context_new(c, &k));
    racaffinity_route r;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(racaffinity_context_pin(c, k, &r));
    }
    CHECK_EQ_U(scope_metric(c, "thread", "live"), 1);
    bool existed = false;
    CHECK_OK(racaffinity_context_release(c, k, &existed)); /* all 3 levels */
    CHECK(existed);
    CHECK_EQ_U(scope_metric(c, "thread", "live"), 0);
    CHECK_OK(racaffinity_context_release(c, k, &existed));
    CHECK(!existed);
    CHECK_OK(racaffinity_context_release(c, k, NULL));
    free_cluster(c);

    /* With thread.auto_pin, a context's first route pins it; release ends it. */
    c = new_cluster(NUM_NODES_3 "\npolicy = round_robin\nthread.auto_pin = true");
    CHECK_OK(racaffinity_cluster_auto_pin(c, &b));
    CHECK(b);
    CHECK_OK(racaffinity_context_new(c, &k));
    CHECK_OK(racaffinity_context_route(c, k, &r));
    CHECK(r.kind == RACAFFINITY_ROUTE_KIND_PLACED);
    racaffinity_route again;
    CHECK_OK(racaffinity_context_route(c, k, &again));
    CHECK_EQ_U(again.node, r.node);
    CHECK(again.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    CHECK_OK(racaffinity_context_release(c, k, &existed));
    CHECK(existed);
    CHECK_EQ_U(scope_metric(c, "thread", "live"), 0);
    free_cluster(c);
}

static void the_epoch_page_lets_a_host_cache_a_pinned_context_route(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    const uint64_t *word = NULL;
    racaffinity_epoch_page *page = NULL;
    CHECK_OK(racaffinity_cluster_epoch_page(c, &word, &page));
    CHECK(word != NULL && page != NULL);
    CHECK_RC(racaffinity_cluster_epoch_page(c, NULL, &page), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_cluster_epoch_page(c, &word, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    uint64_t k = 0;
    CHECK_OK(racaffinity_context_new(c, &k));
    racaffinity_route r, pin;
    bool cacheable = true;
    /* Unpinned: a balanced route, never cacheable. */
    CHECK_OK(racaffinity_context_route_cacheable(c, k, &r, &cacheable));
    CHECK(!cacheable);
    CHECK_RC(racaffinity_context_route_cacheable(c, k, &r, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_OK(racaffinity_context_pin(c, k, &pin));
    uint64_t e = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    CHECK_OK(racaffinity_context_route_cacheable(c, k, &r, &cacheable));
    CHECK(cacheable);
    CHECK_EQ_U(r.node, pin.node);
    /* Routes leave the epoch alone; a state change moves it. */
    CHECK_EQ_U(__atomic_load_n(word, __ATOMIC_ACQUIRE), e);
    char name[32];
    size_t len = 0;
    CHECK_OK(racaffinity_node_name(c, pin.node, name, sizeof name, &len));
    CHECK_OK(racaffinity_node_set_state(c, name, RACAFFINITY_NODE_STATE_DOWN));
    CHECK(__atomic_load_n(word, __ATOMIC_ACQUIRE) > e);
    CHECK_OK(racaffinity_node_set_state(c, name, RACAFFINITY_NODE_STATE_UP));
    /* Hits a host served count like routes the core answered. */
    long long hits = scope_metric(c, "thread", "hits");
    CHECK_OK(racaffinity_cluster_count_host_hits(c, pin.node, 5));
    CHECK_EQ_U(scope_metric(c, "thread", "hits"), hits + 5);
    /* A node id the cluster never had is refused and counts nothing. */
    CHECK_RC(racaffinity_cluster_count_host_hits(c, 77, 5), RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_EQ_U(scope_metric(c, "thread", "hits"), hits + 5);
    /* The word outlives the cluster, and closing moved it once more. */
    e = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    free_cluster(c);
    CHECK(__atomic_load_n(word, __ATOMIC_ACQUIRE) > e);
    racaffinity_epoch_page_free(page);
    racaffinity_epoch_page_free(NULL);
    /* A second free of the same hand-out, or anything never handed out (a
     * word's address, a cluster handle), is a no-op (valgrind checks that
     * nothing is read or freed twice). */
    racaffinity_epoch_page_free(page);
    uint64_t bogus = 0;
    racaffinity_epoch_page_free((racaffinity_epoch_page *)&bogus);
    racaffinity_epoch_page_free((racaffinity_epoch_page *)(uintptr_t)word);
}

/* Two parts of a host map the same cluster's epoch word: each call is its
 * own hand-out, so one part's free leaves the word readable for the other
 * after the cluster is gone (valgrind checks the read), and a second free
 * of a hand-out is a no-op. */
static void each_epoch_page_call_holds_the_word_once(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    const uint64_t *mine = NULL, *theirs = NULL;
    racaffinity_epoch_page *my_page = NULL, *their_page = NULL;
    CHECK_OK(racaffinity_cluster_epoch_page(c, &mine, &my_page));
    CHECK_OK(racaffinity_cluster_epoch_page(c, &theirs, &their_page));
    CHECK(mine == theirs);
    CHECK(my_page != their_page);
    racaffinity_epoch_page_free(my_page);
    free_cluster(c);
    CHECK(__atomic_load_n(theirs, __ATOMIC_ACQUIRE) > 0);
    racaffinity_epoch_page_free(their_page);
    racaffinity_epoch_page_free(their_page);
}

/* Two hosts hold hand-outs of a page at one address: two parts of a
 * program mapping one cluster, or, as the reviewer found it, a page freed
 * with its cluster and a new cluster's page allocated at the same address
 * (natively the allocator hands the address back at once; under valgrind
 * only after its free queue, so this test builds the collision directly).
 * Host 1's stale second free of its own hand-out (a documented no-op) must
 * not release host 2's: host 2 reads its word after the cluster is freed,
 * and valgrind checks the read. */
/* [core-review-3] "Decide and test": a host caching a transaction- or
 * session-scoped context's route names the scope of its hits, and the core
 * credits that scope; the scope-less call stays the thread scope's. */
static void host_hits_are_counted_in_the_scope_the_host_names(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    uint64_t k = 0;
    racaffinity_route pin;
    CHECK_OK(racaffinity_context_new(c, &k));
    CHECK_OK(racaffinity_context_pin_for(c, k, RACAFFINITY_SCOPE_TRANSACTION, &pin));
    char name[32];
    size_t len = 0;
    CHECK_OK(racaffinity_node_name(c, pin.node, name, sizeof name, &len));
    long long thread = scope_metric(c, "thread", "hits"), tx = scope_metric(c, "transaction", "hits");
    long long session = scope_metric(c, "session", "hits"), on_node = node_metric(c, name, "affinity_hits");
    CHECK_OK(racaffinity_cluster_count_host_hits_for(c, pin.node, RACAFFINITY_SCOPE_TRANSACTION, 5));
    CHECK_OK(racaffinity_cluster_count_host_hits_for(c, pin.node, RACAFFINITY_SCOPE_SESSION, 3));
    CHECK_OK(racaffinity_cluster_count_host_hits(c, pin.node, 2));
    CHECK_EQ_U(scope_metric(c, "thread", "hits"), thread + 2);
    CHECK_EQ_U(scope_metric(c, "transaction", "hits"), tx + 5);
    CHECK_EQ_U(scope_metric(c, "session", "hits"), session + 3);
    CHECK_EQ_U(node_metric(c, name, "affinity_hits"), on_node + 10);
    /* No context pin follows the data scope; an out-of-range scope is refused
     * before the handle is looked at; an unknown node is refused. Nothing counts. */
    CHECK_RC(racaffinity_cluster_count_host_hits_for(c, pin.node, RACAFFINITY_SCOPE_DATA, 4),
             RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_cluster_count_host_hits_for(NULL, pin.node, 99, 4), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_cluster_count_host_hits_for(c, 77, RACAFFINITY_SCOPE_SESSION, 4),
             RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_RC(racaffinity_cluster_count_host_hits_for(NULL, pin.node, RACAFFINITY_SCOPE_SESSION, 4),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_EQ_U(scope_metric(c, "data", "hits"), 0);
    CHECK_EQ_U(scope_metric(c, "session", "hits"), session + 3);
    CHECK_EQ_U(node_metric(c, name, "affinity_hits"), on_node + 10);
    CHECK_OK(racaffinity_context_release(c, k, NULL));
    free_cluster(c);
}

static void a_stale_epoch_page_free_never_takes_another_hosts_hand_out(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    const uint64_t *host1 = NULL, *host2 = NULL;
    racaffinity_epoch_page *page1 = NULL, *page2 = NULL;
    CHECK_OK(racaffinity_cluster_epoch_page(c, &host1, &page1));
    racaffinity_epoch_page_free(page1);
    CHECK_OK(racaffinity_cluster_epoch_page(c, &host2, &page2));
    CHECK(host1 == host2);
    CHECK(page1 != page2); /* a hand-out is never reissued */
    racaffinity_epoch_page_free(page1); /* host 1's stale second free */
    uint64_t e = __atomic_load_n(host2, __ATOMIC_ACQUIRE);
    free_cluster(c);
    CHECK(__atomic_load_n(host2, __ATOMIC_ACQUIRE) > e); /* closing moved it */
    racaffinity_epoch_page_free(page2);
}

/* A binding's finalizer reads the thread's last error before its own
 * calls and puts it back after: the error the thread is about to raise
 * keeps the detail of its own failed call. */
static void a_finalizer_puts_the_threads_last_error_back(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    CHECK_RC(racaffinity_tx_end(c, B("no-such-gtrid")), RACAFFINITY_RESULT_UNKNOWN_TRANSACTION);
    char saved[512];
    CHECK_OK(racaffinity_last_error_message(saved, sizeof saved, NULL));
    CHECK_CONTAINS(saved, "unknown transaction");
    /* The finalizer's call fails on a freed cluster... */
    racaffinity_cluster *gone = new_cluster(NUM_NODES_3);
    free_cluster(gone);
    CHECK_RC(racaffinity_context_release(gone, 1, NULL), RACAFFINITY_RESULT_INVALID_HANDLE);
    CHECK_LAST_ERROR_CONTAINS("handle");
    /* ...and it puts the message back. */
    racaffinity_last_error_set(saved);
    CHECK_LAST_ERROR_CONTAINS("unknown transaction");
    racaffinity_last_error_set(NULL);
    char now[16];
    CHECK_OK(racaffinity_last_error_message(now, sizeof now, NULL));
    CHECK_STR(now, "");
    free_cluster(c);
}

/* A C host leases a cached route's node in the page, as the header
 * describes: the core sees the lease in flight, an OK end as a success, and
 * a failed end (reported through racaffinity_cluster_host_lease_end) in the
 * node's health; the page stays writable after the cluster is freed. */
static void a_host_lease_in_the_page_counts_like_a_library_lease(void) {
    racaffinity_cluster *c = new_cluster("nodes = RAC1, RAC2\nhealth.eject_after_failures = 1");
    const uint64_t *word = NULL;
    racaffinity_epoch_page *page = NULL;
    CHECK_OK(racaffinity_cluster_epoch_page(c, &word, &page));
    uint64_t *table = (uint64_t *)((char *)(uintptr_t)word + RACAFFINITY_HOST_LEASE_OFFSET);
    const uint32_t node = 1, stripe = 3;
    uint64_t *lease_word = &table[stripe * RACAFFINITY_HOST_LEASE_NODES + node];
    uint64_t e = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    __atomic_fetch_add(lease_word, RACAFFINITY_HOST_LEASE_BEGIN, __ATOMIC_ACQ_REL);
    __atomic_fetch_add(lease_word, RACAFFINITY_HOST_LEASE_BEGIN, __ATOMIC_ACQ_REL);
    CHECK_EQ_U(node_metric(c, "RAC2", "in_flight"), 2);
    CHECK_EQ_U(__atomic_load_n(word, __ATOMIC_ACQUIRE), e);
    __atomic_fetch_add(lease_word, RACAFFINITY_HOST_LEASE_END_OK, __ATOMIC_ACQ_REL);
    CHECK_EQ_U(node_metric(c, "RAC2", "in_flight"), 1);
    CHECK_EQ_U(node_metric(c, "RAC2", "successes"), 1);
    /* A failure: off the word, then reported; one failure ejects here. */
    __atomic_fetch_add(lease_word, RACAFFINITY_HOST_LEASE_END_NEUTRAL, __ATOMIC_ACQ_REL);
    CHECK_OK(racaffinity_cluster_host_lease_end(c, node, RACAFFINITY_OUTCOME_FAILED));
    CHECK_EQ_U(node_metric(c, "RAC2", "in_flight"), 0);
    CHECK_EQ_U(node_metric(c, "RAC2", "failures"), 1);
    racaffinity_node_state st;
    CHECK_OK(racaffinity_node_get_state(c, node, &st));
    CHECK(st == RACAFFINITY_NODE_STATE_DOWN);
    CHECK_RC(racaffinity_cluster_host_lease_end(c, 77, RACAFFINITY_OUTCOME_OK), RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_RC(racaffinity_cluster_host_lease_end(c, node, 9), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_cluster_host_lease_end(NULL, node, RACAFFINITY_OUTCOME_OK), RACAFFINITY_RESULT_NULL_ARGUMENT);
    free_cluster(c);
    /* A lease held across the free ends on the page, which the host still holds. */
    __atomic_fetch_add(lease_word, RACAFFINITY_HOST_LEASE_BEGIN, __ATOMIC_ACQ_REL);
    __atomic_fetch_add(lease_word, RACAFFINITY_HOST_LEASE_END_NEUTRAL, __ATOMIC_ACQ_REL);
    racaffinity_epoch_page_free(page);
}

/* One call per pinned pick that the host cannot serve from its cache: the
 * library says whether the host may lease the route in the page (and leases
 * nothing then), or leased it itself (a route that may not be cached, as a
 * pin on a draining node): a tracked lease, released exactly once. */
static void a_pick_tells_the_host_whether_it_may_lease_the_route_itself(void) {
    racaffinity_cluster *c = new_cluster("nodes = RAC1, RAC2\nhealth.eject_after_failures = 1");
    uint64_t k = 0;
    CHECK_OK(racaffinity_context_new(c, &k));
    racaffinity_route pin;
    racaffinity_lease l;
    bool host = true;
    /* Unpinned: balanced, leased by the library. */
    CHECK_OK(racaffinity_context_pick_host_leasable(c, k, &l, &host));
    CHECK(!host);
    CHECK(l.kind == RACAFFINITY_ROUTE_KIND_BALANCED);
    char name[32];
    size_t len = 0;
    CHECK_OK(racaffinity_node_name(c, l.node, name, sizeof name, &len));
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 1);
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 0);
    CHECK_EQ_U(node_metric(c, name, "successes"), 1);
    /* The library tracks its lease: a second release is refused, unchanged. */
    CHECK_RC(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK), RACAFFINITY_RESULT_INVALID_LEASE);
    CHECK_EQ_U(node_metric(c, name, "successes"), 1);
    /* Pinned on an Up node: the host leases, the library leased nothing, and
     * the answer is no lease of the library's. */
    CHECK_OK(racaffinity_context_pin(c, k, &pin));
    CHECK_OK(racaffinity_node_name(c, pin.node, name, sizeof name, &len));
    host = false;
    CHECK_OK(racaffinity_context_pick_host_leasable(c, k, &l, &host));
    CHECK(host);
    CHECK_EQ_U(l.node, pin.node);
    CHECK(l.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 0);
    CHECK_RC(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK), RACAFFINITY_RESULT_INVALID_LEASE);
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 0);
    /* Draining: never cacheable, so the library leases the pinned node. */
    CHECK_OK(racaffinity_node_set_state(c, name, RACAFFINITY_NODE_STATE_DRAINING));
    CHECK_OK(racaffinity_context_pick_host_leasable(c, k, &l, &host));
    CHECK(!host);
    CHECK_EQ_U(l.node, pin.node);
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 1);
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_FAILED));
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 0);
    CHECK_EQ_U(node_metric(c, name, "failures"), 1);
    racaffinity_node_state st;
    CHECK_OK(racaffinity_node_get_state(c, pin.node, &st));
    CHECK(st == RACAFFINITY_NODE_STATE_DOWN);
    /* Typed errors; none of them leases anything. */
    CHECK_RC(racaffinity_context_pick_host_leasable(c, k, NULL, &host), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("out");
    CHECK_RC(racaffinity_context_pick_host_leasable(c, k, &l, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("out_host");
    CHECK_EQ_U(node_metric(c, "RAC1", "in_flight") + node_metric(c, "RAC2", "in_flight"), 0);
    free_cluster(c);
}

/* One call per unpinned pick for a host that writes the lease words with
 * plain writes (Python): on an UP node the library leases nothing and writes
 * no word (token 0), the host begins and ends the lease in the page; on a
 * node that is not UP (a panic pick here) the library leases it, tracked and
 * released exactly once, so the node sees its outcome at once. */
static void an_unpinned_pick_leaves_an_up_nodes_lease_to_the_host(void) {
    racaffinity_cluster *c = new_cluster("nodes = RAC1, RAC2\nhealth.eject_after_failures = 1");
    const uint64_t *word = NULL;
    racaffinity_epoch_page *page = NULL;
    CHECK_OK(racaffinity_cluster_epoch_page(c, &word, &page));
    uint64_t *table = (uint64_t *)((char *)(uintptr_t)word + RACAFFINITY_HOST_LEASE_OFFSET);
    racaffinity_lease l;
    char name[32];
    size_t len = 0;
    uint64_t e = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    l.token = 7;
    CHECK_OK(racaffinity_cluster_pick_host_begins(c, &l));
    CHECK_EQ_U(l.token, 0);
    CHECK(l.kind == RACAFFINITY_ROUTE_KIND_BALANCED);
    CHECK_OK(racaffinity_node_name(c, l.node, name, sizeof name, &len));
    for (uint32_t s = 0; s < RACAFFINITY_HOST_LEASE_STRIPES; s++)
        CHECK_EQ_U(__atomic_load_n(&table[s * RACAFFINITY_HOST_LEASE_NODES + l.node], __ATOMIC_ACQUIRE), 0);
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 0);
    CHECK_RC(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK), RACAFFINITY_RESULT_INVALID_LEASE);
    /* The host's lease, begun and ended OK on its word under the epoch read before the pick. */
    uint64_t *lease_word = &table[l.node];
    __atomic_fetch_add(lease_word, RACAFFINITY_HOST_LEASE_BEGIN, __ATOMIC_ACQ_REL);
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 1);
    CHECK_EQ_U(__atomic_load_n(word, __ATOMIC_ACQUIRE), e);
    __atomic_fetch_add(lease_word, RACAFFINITY_HOST_LEASE_END_OK, __ATOMIC_ACQ_REL);
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 0);
    CHECK_EQ_U(node_metric(c, name, "successes"), 1);
    /* Every node DOWN: the pick is a panic pick onto a node that is not UP,
     * which the library leases itself. */
    CHECK_OK(racaffinity_node_set_state(c, "RAC1", RACAFFINITY_NODE_STATE_DOWN));
    CHECK_OK(racaffinity_node_set_state(c, "RAC2", RACAFFINITY_NODE_STATE_DOWN));
    CHECK_OK(racaffinity_cluster_pick_host_begins(c, &l));
    CHECK(l.token != 0);
    CHECK_OK(racaffinity_node_name(c, l.node, name, sizeof name, &len));
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 1);
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_NEUTRAL));
    CHECK_RC(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_NEUTRAL), RACAFFINITY_RESULT_INVALID_LEASE);
    CHECK_EQ_U(node_metric(c, name, "in_flight"), 0);
    /* Typed errors; none of them leases anything. */
    CHECK_RC(racaffinity_cluster_pick_host_begins(c, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_LAST_ERROR_CONTAINS("out");
    CHECK_EQ_U(node_metric(c, "RAC1", "in_flight") + node_metric(c, "RAC2", "in_flight"), 0);
    free_cluster(c);
    racaffinity_epoch_page_free(page);
}

static void tx_branches_share_one_node_and_end_with_the_last(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route first, r;
    CHECK_OK(racaffinity_tx_begin(c, B("gtrid-42"), &first));
    CHECK(first.kind == RACAFFINITY_ROUTE_KIND_PLACED);
    for (int i = 0; i < 4; i++) {
        CHECK_OK(racaffinity_tx_begin(c, B("gtrid-42"), &r));
        CHECK_EQ_U(r.node, first.node);
        CHECK(r.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    }
    CHECK_OK(racaffinity_tx_route(c, B("gtrid-42"), &r));
    CHECK_EQ_U(r.node, first.node);
    CHECK_EQ_U(scope_metric(c, "transaction", "live"), 1);
    for (int i = 0; i < 4; i++) CHECK_OK(racaffinity_tx_end(c, B("gtrid-42")));
    CHECK_OK(racaffinity_tx_route(c, B("gtrid-42"), &r)); /* one branch left */
    CHECK_OK(racaffinity_tx_end(c, B("gtrid-42")));
    CHECK_RC(racaffinity_tx_route(c, B("gtrid-42"), &r), RACAFFINITY_RESULT_UNKNOWN_TRANSACTION);
    CHECK_RC(racaffinity_tx_end(c, B("gtrid-42")), RACAFFINITY_RESULT_UNKNOWN_TRANSACTION);
    /* Rendezvous placement: the same gtrid lands on the same node in another cluster. */
    racaffinity_cluster *d = new_cluster(NUM_NODES_3);
    CHECK_OK(racaffinity_tx_begin(d, B("gtrid-42"), &r));
    CHECK_EQ_U(r.node, first.node);
    /* tx_complete forgets every branch at once. */
    CHECK_OK(racaffinity_tx_begin(d, B("gtrid-42"), &r));
    CHECK_OK(racaffinity_tx_complete(d, B("gtrid-42")));
    CHECK_RC(racaffinity_tx_route(d, B("gtrid-42"), &r), RACAFFINITY_RESULT_UNKNOWN_TRANSACTION);
    free_cluster(d);
    free_cluster(c);
}

static void tx_begin_on_places_a_new_gtrid_on_the_preferred_node(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route home, r;
    /* Where rendezvous would put it... */
    CHECK_OK(racaffinity_tx_begin(c, B("gtrid-pref"), &home));
    CHECK_OK(racaffinity_tx_complete(c, B("gtrid-pref")));
    uint32_t other = (home.node + 1) % 3;
    /* ...and where the caller prefers it. */
    CHECK_OK(racaffinity_tx_begin_on(c, B("gtrid-pref"), other, &r));
    CHECK_EQ_U(r.node, other);
    CHECK(r.kind == RACAFFINITY_ROUTE_KIND_PLACED);
    /* An existing gtrid ignores the preference. */
    CHECK_OK(racaffinity_tx_begin_on(c, B("gtrid-pref"), home.node, &r));
    CHECK_EQ_U(r.node, other);
    CHECK(r.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    CHECK_OK(racaffinity_tx_complete(c, B("gtrid-pref")));
    /* A preferred node that takes no new work is passed over. */
    char name[16];
    CHECK_OK(racaffinity_node_set_state(c, name_of(c, other, name, sizeof name), RACAFFINITY_NODE_STATE_DRAINING));
    CHECK_OK(racaffinity_tx_begin_on(c, B("gtrid-pref"), other, &r));
    CHECK_EQ_U(r.node, home.node);
    CHECK_OK(racaffinity_tx_complete(c, B("gtrid-pref")));
    free_cluster(c);
}

static void soft_transaction_repins_when_its_node_is_down(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route r, r2;
    char owner[16];
    CHECK_OK(racaffinity_tx_begin(c, B("gtrid-soft"), &r));
    CHECK_OK(racaffinity_node_set_state(c, name_of(c, r.node, owner, sizeof owner), RACAFFINITY_NODE_STATE_DOWN));
    CHECK_OK(racaffinity_tx_begin(c, B("gtrid-soft"), &r2));
    CHECK(r2.kind == RACAFFINITY_ROUTE_KIND_REPINNED);
    CHECK_NE_U(r2.node, r.node);
    CHECK_OK(racaffinity_tx_route(c, B("gtrid-soft"), &r));
    CHECK_EQ_U(r.node, r2.node);
    CHECK_OK(racaffinity_tx_complete(c, B("gtrid-soft")));
    free_cluster(c);
}

static void session_sticks_until_ended_and_repins_when_its_node_is_down(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route first, r;
    CHECK_OK(racaffinity_session_route(c, B("JSESSIONID=1f2e"), &first));
    CHECK(first.kind == RACAFFINITY_ROUTE_KIND_PLACED);
    for (int i = 0; i < 10; i++) {
        CHECK_OK(racaffinity_session_route(c, B("JSESSIONID=1f2e"), &r));
        CHECK_EQ_U(r.node, first.node);
        CHECK(r.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    }
    char owner[16];
    name_of(c, first.node, owner, sizeof owner);
    CHECK_OK(racaffinity_node_set_state(c, owner, RACAFFINITY_NODE_STATE_DOWN));
    CHECK_OK(racaffinity_session_route(c, B("JSESSIONID=1f2e"), &r));
    CHECK(r.kind == RACAFFINITY_ROUTE_KIND_REPINNED);
    CHECK_NE_U(r.node, first.node);
    racaffinity_route moved = r;
    CHECK_OK(racaffinity_session_route(c, B("JSESSIONID=1f2e"), &r));
    CHECK_EQ_U(r.node, moved.node);
    CHECK(r.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    /* The old node returns; the session stays where it moved. */
    CHECK_OK(racaffinity_node_set_state(c, owner, RACAFFINITY_NODE_STATE_UP));
    CHECK_OK(racaffinity_session_route(c, B("JSESSIONID=1f2e"), &r));
    CHECK_EQ_U(r.node, moved.node);
    /* Strict sessions refuse instead. */
    CHECK_OK(racaffinity_cluster_set_strict(c, RACAFFINITY_SCOPE_SESSION, true));
    char now[16];
    CHECK_OK(racaffinity_node_set_state(c, name_of(c, moved.node, now, sizeof now), RACAFFINITY_NODE_STATE_DOWN));
    CHECK_RC(racaffinity_session_route(c, B("JSESSIONID=1f2e"), &r), RACAFFINITY_RESULT_STRICT_AFFINITY);
    CHECK_LAST_ERROR_CONTAINS("session");
    bool existed = false;
    CHECK_OK(racaffinity_session_end(c, B("JSESSIONID=1f2e"), &existed));
    CHECK(existed);
    CHECK_OK(racaffinity_session_end(c, B("JSESSIONID=1f2e"), &existed));
    CHECK(!existed);
    free_cluster(c);
}

static void key_routes_are_stable_and_fall_back_when_the_owner_is_down(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route first, r;
    uint32_t p1 = 0, p2 = 1;
    CHECK_OK(racaffinity_key_route(c, B("customer:42"), &first));
    CHECK(first.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    for (int i = 0; i < 10; i++) {
        CHECK_OK(racaffinity_key_route(c, B("customer:42"), &r));
        CHECK_EQ_U(r.node, first.node);
    }
    CHECK_OK(racaffinity_key_partition(c, B("customer:42"), &p1));
    CHECK_OK(racaffinity_key_partition(c, B("customer:42"), &p2));
    CHECK_EQ_U(p1, p2);
    /* The partition's owner is where the key routes while the owner is up. */
    uint32_t owner_id = 99;
    CHECK_OK(racaffinity_partition_owner(c, p1, &owner_id));
    CHECK_EQ_U(owner_id, first.node);
    CHECK_RC(racaffinity_partition_owner(c, 1u << 30, &owner_id), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_partition_owner(c, p1, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK(p1 < 4096);
    char owner[16];
    name_of(c, first.node, owner, sizeof owner);
    CHECK_OK(racaffinity_node_set_state(c, owner, RACAFFINITY_NODE_STATE_DOWN));
    CHECK_OK(racaffinity_key_route(c, B("customer:42"), &r));
    CHECK(r.kind == RACAFFINITY_ROUTE_KIND_FALLBACK);
    CHECK_NE_U(r.node, first.node);
    CHECK_OK(racaffinity_cluster_set_strict(c, RACAFFINITY_SCOPE_DATA, true));
    CHECK_RC(racaffinity_key_route(c, B("customer:42"), &r), RACAFFINITY_RESULT_STRICT_AFFINITY);
    CHECK_LAST_ERROR_CONTAINS("data");
    /* The partition stayed with its owner, for when it returns. */
    CHECK_OK(racaffinity_node_set_state(c, owner, RACAFFINITY_NODE_STATE_UP));
    CHECK_OK(racaffinity_key_route(c, B("customer:42"), &r));
    CHECK_EQ_U(r.node, first.node);
    CHECK(r.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    /* Partitions follow data.partitions. */
    racaffinity_cluster *s = new_cluster(NUM_NODES_3 "\ndata.partitions = 7");
    for (int i = 0; i < 50; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%d", i);
        CHECK_OK(racaffinity_key_partition(s, B(key), &p1));
        CHECK(p1 < 7);
    }
    free_cluster(s);
    free_cluster(c);
}

static void i64_key_routes_like_its_little_endian_bytes(void) {
    racaffinity_cluster *c = new_cluster("nodes = RAC1, RAC2, RAC3, RAC4, RAC5, RAC6, RAC7, RAC8");
    const int64_t keys[] = {0, 1, -1, 42, 4711, INT64_MIN, INT64_MAX, 1234567890123LL};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        uint8_t le[8];
        uint64_t v = (uint64_t)keys[i];
        for (int b = 0; b < 8; b++) le[b] = (uint8_t)(v >> (8 * b));
        racaffinity_route a, b;
        CHECK_OK(racaffinity_key_route_i64(c, keys[i], &a));
        CHECK_OK(racaffinity_key_route(c, le, 8, &b));
        CHECK_EQ_U(a.node, b.node);
        CHECK(a.kind == RACAFFINITY_ROUTE_KIND_AFFINITY);
    }
    free_cluster(c);
}

static void fan_down_removes_a_node_from_picks_and_up_restores_it(void) {
    racaffinity_cluster *c = new_cluster("database = orcl\nservice = svc\n" NUM_NODES_3 "\npolicy = round_robin");
    uint32_t changes = 99;
    CHECK_OK(racaffinity_event_apply(c,
                                     "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=MYDB2 host=h2 "
                                     "status=down reason=FAILURE card=1 timestamp=2026-11-29 08:00:00",
                                     &changes));
    CHECK_EQ_U(changes, 1);
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_DOWN);
    unsigned seen = 0;
    for (int i = 0; i < 60; i++) {
        racaffinity_route r = route(c);
        CHECK_NE_U(r.node, 1);
        seen |= 1u << r.node;
        racaffinity_lease l;
        CHECK_OK(racaffinity_cluster_pick(c, &l));
        CHECK_NE_U(l.node, 1);
        seen |= 1u << l.node;
        CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    }
    CHECK_EQ_U(seen, 5); /* MYDB1 and MYDB3 */
    /* The same event again changes nothing. */
    CHECK_OK(racaffinity_event_apply(
        c, "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=MYDB2 status=down reason=FAILURE", &changes));
    CHECK_EQ_U(changes, 0);
    CHECK_OK(racaffinity_event_apply(c, "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=mydb2 status=up",
                                     &changes));
    CHECK_EQ_U(changes, 1);
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_UP);
    seen = 0;
    for (int i = 0; i < 6; i++) seen |= 1u << route(c).node;
    CHECK_EQ_U(seen, 7);
    /* An operator's down is not lifted by FAN up. */
    CHECK_OK(racaffinity_node_set_state(c, "MYDB3", RACAFFINITY_NODE_STATE_DOWN));
    CHECK_OK(racaffinity_event_apply(c, "INSTANCE VERSION=1.0 database=orcl instance=MYDB3 status=up", &changes));
    CHECK_EQ_U(changes, 0);
    CHECK_EQ_U(state_of(c, 2), RACAFFINITY_NODE_STATE_DOWN);
    free_cluster(c);
}

static void fan_user_down_drains_a_node(void) {
    racaffinity_cluster *c = new_cluster("database = orcl\n" NUM_NODES_3);
    racaffinity_route t;
    uint32_t changes = 0;
    CHECK_OK(racaffinity_tx_begin(c, B("gtrid-drain"), &t));
    char owner[16], line[256];
    name_of(c, t.node, owner, sizeof owner);
    snprintf(line, sizeof line, "SERVICEMEMBER VERSION=1.0 database=orcl instance=%s status=down reason=USER", owner);
    CHECK_OK(racaffinity_event_apply(c, line, &changes));
    CHECK_EQ_U(changes, 1);
    CHECK_EQ_U(state_of(c, t.node), RACAFFINITY_NODE_STATE_DRAINING);
    /* Existing work continues there; new work goes elsewhere. */
    racaffinity_route r;
    CHECK_OK(racaffinity_tx_begin(c, B("gtrid-drain"), &r));
    CHECK_EQ_U(r.node, t.node);
    for (int i = 0; i < 30; i++) CHECK_NE_U(route(c).node, t.node);
    CHECK_OK(racaffinity_tx_complete(c, B("gtrid-drain")));
    free_cluster(c);
}

static void recovery_scope_comes_from_the_config(void) {
    racaffinity_recovery_scope scope = RACAFFINITY_RECOVERY_SCOPE_DATABASE;
    racaffinity_cluster *c = new_cluster("nodes = A, B");
    CHECK_OK(racaffinity_cluster_recovery_scope(c, &scope));
    CHECK_EQ_U(scope, RACAFFINITY_RECOVERY_SCOPE_NODE);
    CHECK_RC(racaffinity_cluster_recovery_scope(c, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    racaffinity_cluster *rac = new_cluster("nodes = A, B\nrecovery.scope = database");
    CHECK_OK(racaffinity_cluster_recovery_scope(rac, &scope));
    CHECK_EQ_U(scope, RACAFFINITY_RECOVERY_SCOPE_DATABASE);
    /* One database: every instance reports the same in-doubt id; not a split. */
    CHECK_OK(racaffinity_tx_recovered(rac, B("gtrid-rac"), 0));
    CHECK_OK(racaffinity_tx_recovered(rac, B("gtrid-rac"), 1));
    CHECK_RC(racaffinity_tx_recovered(c, B("gtrid-ind"), 0), RACAFFINITY_RESULT_OK);
    CHECK_RC(racaffinity_tx_recovered(c, B("gtrid-ind"), 1), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    free_cluster(rac);
    free_cluster(c);
}

static void three_missed_probes_down_a_node_and_a_good_probe_restores_it(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    /* Hosts schedule their probes by the configured heartbeat. */
    uint64_t interval = 0;
    uint32_t misses = 0;
    CHECK_OK(racaffinity_cluster_heartbeat(c, &interval, &misses));
    CHECK_EQ_U(interval, 10000);
    CHECK_EQ_U(misses, 3);
    CHECK_RC(racaffinity_cluster_heartbeat(c, NULL, &misses), RACAFFINITY_RESULT_NULL_ARGUMENT);
    racaffinity_cluster *h = new_cluster("nodes = A\nheartbeat.interval = 250ms\nheartbeat.misses = 5");
    CHECK_OK(racaffinity_cluster_heartbeat(h, &interval, &misses));
    CHECK_EQ_U(interval, 250);
    CHECK_EQ_U(misses, 5);
    free_cluster(h);
    CHECK_OK(racaffinity_probe_report(c, 0, false));
    CHECK_OK(racaffinity_probe_report(c, 0, false));
    CHECK_EQ_U(state_of(c, 0), RACAFFINITY_NODE_STATE_UP);
    CHECK_OK(racaffinity_probe_report(c, 0, false));
    CHECK_EQ_U(state_of(c, 0), RACAFFINITY_NODE_STATE_DOWN);
    CHECK_EQ_U(node_metric(c, "MYDB1", "probe_misses"), 3);
    for (int i = 0; i < 30; i++) CHECK_NE_U(route(c).node, 0);
    CHECK_OK(racaffinity_probe_report(c, 0, true));
    CHECK_EQ_U(state_of(c, 0), RACAFFINITY_NODE_STATE_UP);
    /* A good probe resets the count of misses. */
    CHECK_OK(racaffinity_probe_report(c, 1, false));
    CHECK_OK(racaffinity_probe_report(c, 1, false));
    CHECK_OK(racaffinity_probe_report(c, 1, true));
    CHECK_OK(racaffinity_probe_report(c, 1, false));
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_UP);
    free_cluster(c);
}

static void five_failed_leases_eject_a_node(void) {
    /* Default health.eject_after_failures (5); a long back-off so no
     * half-open trial happens during the test, however slow valgrind is. */
    racaffinity_cluster *c = new_cluster(NUM_NODES_3 "\nhealth.eject_backoff = 1h\nhealth.eject_backoff_max = 1h");
    racaffinity_lease l;
    for (int i = 0; i < 4; i++) {
        CHECK_OK(racaffinity_lease_begin(c, 1, &l));
        CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_FAILED));
    }
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_UP);
    CHECK_OK(racaffinity_lease_begin(c, 1, &l));
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_FAILED));
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_DOWN);
    CHECK_EQ_U(node_metric(c, "MYDB2", "ejections"), 1);
    CHECK_EQ_U(node_metric(c, "MYDB2", "failures"), 5);
    for (int i = 0; i < 30; i++) CHECK_NE_U(route(c).node, 1);
    /* Failures must be consecutive: a success in between resets the count. */
    for (int i = 0; i < 4; i++) {
        CHECK_OK(racaffinity_lease_begin(c, 2, &l));
        CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_FAILED));
    }
    CHECK_OK(racaffinity_lease_begin(c, 2, &l));
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_OK));
    CHECK_OK(racaffinity_lease_begin(c, 2, &l));
    CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_FAILED));
    CHECK_EQ_U(state_of(c, 2), RACAFFINITY_NODE_STATE_UP);
    /* NEUTRAL is no verdict. */
    for (int i = 0; i < 10; i++) {
        CHECK_OK(racaffinity_lease_begin(c, 2, &l));
        CHECK_OK(racaffinity_lease_release(c, &l, RACAFFINITY_OUTCOME_NEUTRAL));
    }
    CHECK_EQ_U(state_of(c, 2), RACAFFINITY_NODE_STATE_UP);
    /* A good probe lifts an ejection. */
    CHECK_OK(racaffinity_probe_report(c, 1, true));
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_UP);
    free_cluster(c);
}

static void five_reported_failures_eject_a_node(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3 "\nhealth.eject_backoff = 1h\nhealth.eject_backoff_max = 1h");
    for (int i = 0; i < 4; i++) CHECK_OK(racaffinity_outcome_report(c, 0, false));
    CHECK_EQ_U(state_of(c, 0), RACAFFINITY_NODE_STATE_UP);
    CHECK_OK(racaffinity_outcome_report(c, 0, false));
    CHECK_EQ_U(state_of(c, 0), RACAFFINITY_NODE_STATE_DOWN);
    CHECK_OK(racaffinity_outcome_report(c, 1, true));
    CHECK_EQ_U(node_metric(c, "MYDB2", "successes"), 1);
    /* With ejection off (0), failures never eject. */
    racaffinity_cluster *off = new_cluster(NUM_NODES_3 "\nhealth.eject_after_failures = 0");
    for (int i = 0; i < 20; i++) CHECK_OK(racaffinity_outcome_report(off, 0, false));
    CHECK_EQ_U(state_of(off, 0), RACAFFINITY_NODE_STATE_UP);
    free_cluster(off);
    free_cluster(c);
}

static void set_strict_switches_the_thread_scope_at_runtime(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    racaffinity_route pin;
    char owner[16];
    CHECK_OK(racaffinity_cluster_set_strict(c, RACAFFINITY_SCOPE_THREAD, true));
    CHECK_EQ_U(scope_metric(c, "thread", "strict"), 1);
    CHECK_OK(racaffinity_thread_pin(c, &pin));
    CHECK_OK(racaffinity_node_set_state(c, name_of(c, pin.node, owner, sizeof owner), RACAFFINITY_NODE_STATE_DOWN));
    racaffinity_route r;
    CHECK_RC(racaffinity_cluster_route(c, &r), RACAFFINITY_RESULT_STRICT_AFFINITY);
    CHECK_LAST_ERROR_CONTAINS(owner);
    CHECK_LAST_ERROR_CONTAINS("thread");
    CHECK_OK(racaffinity_cluster_set_strict(c, RACAFFINITY_SCOPE_THREAD, false));
    CHECK_OK(racaffinity_cluster_route(c, &r));
    CHECK(r.kind == RACAFFINITY_ROUTE_KIND_REPINNED);
    bool released = false;
    CHECK_OK(racaffinity_thread_unpin(c, &released));
    CHECK(released);
    /* Every scope value is accepted. */
    for (uint32_t s = RACAFFINITY_SCOPE_THREAD; s <= RACAFFINITY_SCOPE_DATA; s++) {
        CHECK_OK(racaffinity_cluster_set_strict(c, s, true));
        CHECK_OK(racaffinity_cluster_set_strict(c, s, false));
    }
    free_cluster(c);
}

static void nodes_are_added_and_removed_at_runtime_and_ids_never_reused(void) {
    racaffinity_cluster *c = new_cluster("nodes = A1, B2");
    uint32_t id = 0, n = 0;
    char name[16];
    CHECK_OK(racaffinity_node_add(c, "C3", "hc:1521", 0, &id));
    CHECK_EQ_U(id, 2);
    CHECK_OK(racaffinity_cluster_node_count(c, &n));
    CHECK_EQ_U(n, 3);
    CHECK_EQ_U(find(c, "c3"), 2);
    CHECK_STR(name_of(c, 2, name, sizeof name), "C3");
    CHECK_EQ_U(node_metric(c, "C3", "weight"), 1); /* weight 0 means 1 */
    /* The address comes back as configured; a node without one gives "". */
    char addr[32];
    size_t addr_len = 0;
    CHECK_OK(racaffinity_node_address(c, 2, addr, sizeof addr, &addr_len));
    CHECK_STR(addr, "hc:1521");
    CHECK_EQ_U(addr_len, 8);
    CHECK_OK(racaffinity_node_address(c, 0, addr, sizeof addr, NULL));
    CHECK_STR(addr, "");
    CHECK_RC(racaffinity_node_address(c, 99, addr, sizeof addr, NULL), RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_RC(racaffinity_node_address(c, 2, addr, 4, &addr_len), RACAFFINITY_RESULT_BUFFER_TOO_SMALL);
    CHECK_EQ_U(addr_len, 8);
    /* A NODE event matches the added node by its address' host. */
    uint32_t changes = 0;
    CHECK_OK(racaffinity_event_apply(c, "NODE VERSION=1.0 host=HC status=nodedown", &changes));
    CHECK_EQ_U(changes, 1);
    CHECK_EQ_U(state_of(c, 2), RACAFFINITY_NODE_STATE_DOWN);
    /* Remove B2: it leaves the count and the name lookup, keeps its name by id, reads Down. */
    CHECK_OK(racaffinity_node_remove(c, "b2"));
    CHECK_OK(racaffinity_cluster_node_count(c, &n));
    CHECK_EQ_U(n, 2);
    CHECK_RC(racaffinity_node_find(c, "B2", &id), RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_STR(name_of(c, 1, name, sizeof name), "B2");
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_DOWN);
    CHECK_RC(racaffinity_node_remove(c, "B2"), RACAFFINITY_RESULT_UNKNOWN_NODE);
    /* A late report about it (a probe begun before the removal) is taken and ignored. */
    CHECK_OK(racaffinity_probe_report(c, 1, false));
    CHECK_OK(racaffinity_outcome_report(c, 1, false));
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_DOWN);
    for (int i = 0; i < 20; i++) CHECK_EQ_U(route(c).node, 0); /* C3 down, B2 gone */
    /* Re-adding the name gets a new id. */
    CHECK_OK(racaffinity_node_add(c, "B2", NULL, 5, &id));
    CHECK_EQ_U(id, 3);
    CHECK_EQ_U(find(c, "B2"), 3);
    CHECK_EQ_U(node_metric(c, "B2", "weight"), 5);
    free_cluster(c);
}

/* The topology feed (docs/operations.md, "Topology feed"). etcd unreachable:
 * the cluster starts with its local view, says so in its metrics, and an
 * operator's call that the fleet would not get is refused, changing nothing. */
static void an_unreachable_feed_refuses_operator_calls(void) {
    racaffinity_cluster *c = NULL;
    CHECK_OK(racaffinity_cluster_new("nodes = A, B\ntopology.feed = etcd://127.0.0.1:1/c1\ntopology.feed_timeout = 500ms", &c));
    char *json = metrics_json(c);
    CHECK(strstr(json, "\"feed\":{\"url\":\"etcd://127.0.0.1:1/c1\",\"connected\":false") != NULL);
    free(json);
    CHECK_RC(racaffinity_node_set_state(c, "B", RACAFFINITY_NODE_STATE_DOWN), RACAFFINITY_RESULT_FEED_UNAVAILABLE);
    racaffinity_node_state state = 99;
    CHECK_OK(racaffinity_node_get_state(c, 1, &state));
    CHECK_EQ_U(state, RACAFFINITY_NODE_STATE_UP);
    CHECK_RC(racaffinity_cluster_new("nodes = A\ntopology.feed = http://127.0.0.1:2379/x", &(racaffinity_cluster *){NULL}),
             RACAFFINITY_RESULT_CONFIG);
    uint64_t revision = 7;
    CHECK_RC(racaffinity_feed_event_publish(c, "SERVICEMEMBER VERSION=1.0 service=s instance=B status=down", &revision),
             RACAFFINITY_RESULT_FEED_UNAVAILABLE);
    CHECK_RC(racaffinity_feed_event_publish(c, "not an event", &revision), RACAFFINITY_RESULT_EVENT_PARSE);
    CHECK_EQ_U(revision, 7);
    racaffinity_cluster_free(c);
}

/* Two subscribers of one feed (two processes of a fleet, here two clusters):
 * an operator's call on one reaches the other through etcd. Needs
 * RACAFF_FEED_ENDPOINTS (run.sh starts a 3-member etcd cluster). */
static void operator_calls_reach_another_subscriber_through_etcd(void) {
    const char *eps = getenv("RACAFF_FEED_ENDPOINTS");
    CHECK(eps != NULL && *eps); /* RACAFF_FEED_ENDPOINTS: tests/c/run.sh sets it */
    if (eps == NULL || !*eps) return;
    char config[512];
    snprintf(config, sizeof config, "nodes = A, B, C\ntopology.feed = etcd://%s/c2-%ld\n", eps, (long)getpid());
    racaffinity_cluster *here = NULL, *there = NULL;
    CHECK_OK(racaffinity_cluster_new(config, &here));
    CHECK_OK(racaffinity_cluster_new(config, &there));
    CHECK_OK(racaffinity_node_set_state(here, "C", RACAFFINITY_NODE_STATE_DRAINING));
    racaffinity_node_state state = 99;
    CHECK_OK(racaffinity_node_get_state(here, 2, &state));
    CHECK_EQ_U(state, RACAFFINITY_NODE_STATE_DRAINING);
    /* Asynchronous by nature: poll for up to 60 s (valgrind is slow). */
    for (int i = 0; i < 6000; i++) {
        CHECK_OK(racaffinity_node_get_state(there, 2, &state));
        if (state == RACAFFINITY_NODE_STATE_DRAINING) break;
        nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 10000000}, NULL);
    }
    CHECK_EQ_U(state, RACAFFINITY_NODE_STATE_DRAINING);
    /* An ONS relay: a FAN line published by one reaches the other. */
    uint64_t revision = 0;
    CHECK_OK(racaffinity_feed_event_publish(here, "SERVICEMEMBER VERSION=1.0 service=s instance=B status=down reason=FAILURE", &revision));
    CHECK(revision > 0);
    for (int i = 0; i < 6000; i++) {
        CHECK_OK(racaffinity_node_get_state(there, 1, &state));
        if (state == RACAFFINITY_NODE_STATE_DOWN) break;
        nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 10000000}, NULL);
    }
    CHECK_EQ_U(state, RACAFFINITY_NODE_STATE_DOWN);
    char *json = metrics_json(there);
    CHECK(strstr(json, "\"connected\":true") != NULL);
    free(json);
    racaffinity_cluster_free(here);
    racaffinity_cluster_free(there);
}

/* [continuity]: the replay decisions, walked as a libpq host would. */
static void replay_decisions_walk_the_outcome_state_machine(void) {
    racaffinity_error_class cls = 9;
    CHECK_OK(racaffinity_sqlstate_classify("57P01", &cls));
    CHECK_EQ_U(cls, RACAFFINITY_ERROR_CLASS_RECOVERABLE);
    CHECK_OK(racaffinity_sqlstate_classify("08006", &cls));
    CHECK_EQ_U(cls, RACAFFINITY_ERROR_CLASS_RECOVERABLE);
    CHECK_OK(racaffinity_sqlstate_classify("23505", &cls));
    CHECK_EQ_U(cls, RACAFFINITY_ERROR_CLASS_NOT_RECOVERABLE);
    CHECK_OK(racaffinity_oracle_error_classify(3113, &cls));
    CHECK_EQ_U(cls, RACAFFINITY_ERROR_CLASS_RECOVERABLE);
    CHECK_RC(racaffinity_sqlstate_classify(NULL, &cls), RACAFFINITY_RESULT_NULL_ARGUMENT);
    racaffinity_commit_outcome outcome = 9;
    CHECK_OK(racaffinity_pg_xact_status_outcome("committed", &outcome));
    CHECK_EQ_U(outcome, RACAFFINITY_COMMIT_OUTCOME_COMMITTED);
    CHECK_OK(racaffinity_pg_xact_status_outcome(NULL, &outcome));
    CHECK_EQ_U(outcome, RACAFFINITY_COMMIT_OUTCOME_UNKNOWN);

    /* Transaction control in SQL text: length-delimited, NULs and any length read. */
    racaffinity_transaction_control tc = 9;
    static const char commit_after_nul[] = "SELECT '\0'; COMMIT";
    CHECK_OK(racaffinity_sql_transaction_control(commit_after_nul, sizeof commit_after_nul - 1, &tc));
    CHECK_EQ_U(tc, RACAFFINITY_TRANSACTION_CONTROL_COMMIT);
    CHECK_OK(racaffinity_sql_transaction_control("ROLLBACK TO s; SELECT 'COMMIT'", 30, &tc));
    CHECK_EQ_U(tc, RACAFFINITY_TRANSACTION_CONTROL_SAVEPOINT);
    CHECK_OK(racaffinity_sql_transaction_control("COMMIT", 3, &tc)); /* "COM": only the bytes given */
    CHECK_EQ_U(tc, RACAFFINITY_TRANSACTION_CONTROL_NONE);
    CHECK_OK(racaffinity_sql_transaction_control(NULL, 0, &tc));
    CHECK_EQ_U(tc, RACAFFINITY_TRANSACTION_CONTROL_NONE);
    CHECK_RC(racaffinity_sql_transaction_control(NULL, 6, &tc), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_sql_transaction_control("BEGIN", 5, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    size_t big = 2u << 20; /* past RACAFFINITY_MAX_STRING_BYTES: SQL has no cap here */
    char *long_sql = malloc(big);
    CHECK(long_sql != NULL);
    memset(long_sql, ' ', big);
    memcpy(long_sql + big - 5, "BEGIN", 5);
    CHECK_OK(racaffinity_sql_transaction_control(long_sql, big, &tc));
    CHECK_EQ_U(tc, RACAFFINITY_TRANSACTION_CONTROL_BEGIN);
    free(long_sql);

    /* Session state set by SQL text: a replay's new connection would not have it. */
    bool session = false;
    static const char set_after_nul[] = "SELECT '\0'; SET search_path TO alt";
    CHECK_OK(racaffinity_sql_sets_session_state(set_after_nul, sizeof set_after_nul - 1, &session));
    CHECK(session);
    CHECK_OK(racaffinity_sql_sets_session_state("SELECT pg_advisory_lock(1)", 26, &session));
    CHECK(session);
    CHECK_OK(racaffinity_sql_sets_session_state("SET LOCAL search_path TO alt", 28, &session));
    CHECK(!session);
    CHECK_OK(racaffinity_sql_sets_session_state("SELECT 'SET search_path TO alt'", 31, &session));
    CHECK(!session);
    CHECK_OK(racaffinity_sql_sets_session_state(NULL, 0, &session));
    CHECK(!session);
    CHECK_RC(racaffinity_sql_sets_session_state(NULL, 3, &session), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_sql_sets_session_state("SET a TO b", 10, NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);

    racaffinity_cluster *c = NULL;
    CHECK_OK(racaffinity_cluster_new("nodes = A, B, C\nrecovery.scope = database", &c));
    racaffinity_request_failure f = {.node = 0, .error_class = RACAFFINITY_ERROR_CLASS_RECOVERABLE,
                                     .commit_in_flight = 1, .outcome = RACAFFINITY_COMMIT_OUTCOME_NOT_CHECKED,
                                     .forced = 0, .replays = 0, .replayable = 1};
    racaffinity_replay_step step;
    CHECK_OK(racaffinity_replay_decide(c, &f, &step));
    CHECK_EQ_U(step.action, RACAFFINITY_REPLAY_ACTION_CHECK_OUTCOME);
    CHECK_NE_U(step.node, 0); /* another instance answers on RAC */
    f.outcome = RACAFFINITY_COMMIT_OUTCOME_COMMITTED;
    CHECK_OK(racaffinity_replay_decide(c, &f, &step));
    CHECK_EQ_U(step.action, RACAFFINITY_REPLAY_ACTION_SUCCEEDED);
    f.outcome = RACAFFINITY_COMMIT_OUTCOME_IN_PROGRESS;
    CHECK_OK(racaffinity_replay_decide(c, &f, &step));
    CHECK_EQ_U(step.action, RACAFFINITY_REPLAY_ACTION_FORCE_OUTCOME);
    f.outcome = RACAFFINITY_COMMIT_OUTCOME_ABORTED;
    CHECK_OK(racaffinity_replay_decide(c, &f, &step));
    CHECK_EQ_U(step.action, RACAFFINITY_REPLAY_ACTION_REPLAY);
    CHECK_NE_U(step.node, 0);
    CHECK_EQ_U(step.refusal, RACAFFINITY_REPLAY_REFUSAL_NONE);
    f.replays = 1;
    CHECK_OK(racaffinity_replay_decide(c, &f, &step));
    CHECK_EQ_U(step.action, RACAFFINITY_REPLAY_ACTION_GIVE_UP);
    CHECK_EQ_U(step.refusal, RACAFFINITY_REPLAY_REFUSAL_REPLAYED_ALREADY);
    f.outcome = 77;
    CHECK_RC(racaffinity_replay_decide(c, &f, &step), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    /* An outcome of a COMMIT the host says was never in flight contradicts
       itself (a replay could commit twice): refused, never guessed. */
    f.outcome = RACAFFINITY_COMMIT_OUTCOME_COMMITTED;
    f.commit_in_flight = 0;
    f.replays = 0;
    CHECK_RC(racaffinity_replay_decide(c, &f, &step), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    f.commit_in_flight = 1;
    f.outcome = RACAFFINITY_COMMIT_OUTCOME_ABORTED;
    f.node = 99;
    CHECK_RC(racaffinity_replay_decide(c, &f, &step), RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_RC(racaffinity_replay_decide(c, NULL, &step), RACAFFINITY_RESULT_NULL_ARGUMENT);
    racaffinity_cluster_free(c);
}

static void metrics_json_and_prometheus_name_the_cluster(void) {
    racaffinity_cluster *c = new_cluster("name = c_api_metrics\n" NUM_NODES_3);
    racaffinity_route r;
    for (int i = 0; i < 5; i++) r = route(c);
    (void)r;
    CHECK_OK(racaffinity_tx_begin(c, B("gtrid-m"), &r));
    char *json = read_text(racaffinity_metrics_json, c);
    CHECK_CONTAINS(json, "\"cluster\":\"c_api_metrics\"");
    CHECK_CONTAINS(json, "\"hash_version\":\"racaffinity-hrw-v2\"");
    CHECK_CONTAINS(json, "{\"name\":\"MYDB3\",");
    CHECK(json[0] == '{' && json[strlen(json) - 1] == '}');
    free(json);
    char *prom = read_text(racaffinity_metrics_prometheus, c);
    CHECK_CONTAINS(prom, "racaffinity_node_picks_total");
    CHECK_CONTAINS(prom, "cluster=\"c_api_metrics\"");
    CHECK_CONTAINS(prom, "node=\"MYDB2\"");
    CHECK_CONTAINS(prom, "# TYPE racaffinity_node_picks_total counter");
    free(prom);
    long long picks = node_metric(c, "MYDB1", "picks") + node_metric(c, "MYDB2", "picks") +
                      node_metric(c, "MYDB3", "picks");
    CHECK_EQ_U(picks, 6);
    CHECK_EQ_U(scope_metric(c, "transaction", "placements"), 1);
    CHECK_OK(racaffinity_tx_complete(c, B("gtrid-m")));
    free_cluster(c);
}

static void connect_strings_match_the_documented_forms(void) {
    static const struct {
        uint32_t form;
        const char *want;
    } cases[] = {
        {RACAFFINITY_CONNECT_FORM_DESCRIPTOR,
         "(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=MYDBHOST1)(PORT=1522)))"
         "(CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB1)))"},
        {RACAFFINITY_CONNECT_FORM_EASY_CONNECT, "MYDBHOST1:1522/MYDB/MYDB1"},
        {RACAFFINITY_CONNECT_FORM_JDBC_DESCRIPTOR,
         "jdbc:oracle:thin:@(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=MYDBHOST1)(PORT=1522)))"
         "(CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB1)))"},
        {RACAFFINITY_CONNECT_FORM_JDBC_EASY_CONNECT, "jdbc:oracle:thin:@//MYDBHOST1:1522/MYDB/MYDB1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[512];
        size_t len = 0;
        CHECK_OK(racaffinity_connect_string(cases[i].form, "MYDBHOST1", 1522, "MYDB", "MYDB1", buf, sizeof buf, &len));
        CHECK_STR(buf, cases[i].want);
        CHECK_EQ_U(len, strlen(cases[i].want) + 1);
        /* From an address as written in node.<N>.address: the same strings. */
        CHECK_OK(racaffinity_address_connect_string(cases[i].form, "MYDBHOST1:1522", 1521, "MYDB", "MYDB1", buf,
                                                    sizeof buf, &len));
        CHECK_STR(buf, cases[i].want);
        CHECK_OK(racaffinity_address_connect_string(cases[i].form, "MYDBHOST1", 1522, "MYDB", "MYDB1", buf,
                                                    sizeof buf, NULL));
        CHECK_STR(buf, cases[i].want);
    }
    char buf[256];
    CHECK_OK(racaffinity_address_connect_string(RACAFFINITY_CONNECT_FORM_EASY_CONNECT, "[::1]:1600", 1521, "S",
                                                "I1", buf, sizeof buf, NULL));
    CHECK_STR(buf, "[::1]:1600/S/I1");
    CHECK_RC(racaffinity_address_connect_string(RACAFFINITY_CONNECT_FORM_EASY_CONNECT, "h:99999", 1521, "S", "I1",
                                                buf, sizeof buf, NULL),
             RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_address_connect_string(9, "h:1", 1521, "S", "I1", buf, sizeof buf, NULL),
             RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_address_connect_string(0, NULL, 1521, "S", "I1", buf, sizeof buf, NULL),
             RACAFFINITY_RESULT_NULL_ARGUMENT);
}

static void connect_string_refuses_values_that_break_the_syntax(void) {
    static const struct {
        const char *host;
        uint16_t port;
        const char *service, *instance;
    } bad[] = {
        {"MYDBHOST1", 1522, "MYDB", "X)(INSTANCE_NAME=Y"},
        {"MYDBHOST1", 1522, "S)(SERVER=dedicated", "MYDB1"},
        {"h)(PORT=1", 1522, "MYDB", "MYDB1"},
        {"MYDBHOST1", 1522, "MYDB", "A B"},
        {"MYDBHOST1", 0, "MYDB", "MYDB1"},
        {"", 1522, "MYDB", "MYDB1"},
        {"MYDBHOST1", 1522, "", "MYDB1"},
        {"MYDBHOST1", 1522, "MYDB", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (uint32_t form = 0; form < 4; form++) {
            char buf[512] = "untouched";
            CHECK_RC(racaffinity_connect_string(form, bad[i].host, bad[i].port, bad[i].service, bad[i].instance, buf,
                                                sizeof buf, NULL),
                     RACAFFINITY_RESULT_INVALID_ARGUMENT);
            CHECK_STR(buf, "untouched");
        }
    }
}

/* Feed records: the versioned path for shared inputs (docs/operations.md). */
static void feed_records_join_by_version_and_refuse_bad_records(void) {
    racaffinity_cluster *c = new_cluster(NUM_NODES_3);
    bool applied = false;
    CHECK_OK(racaffinity_feed_record_apply(c, 7, "node/MYDB2/state", "down", &applied));
    CHECK(applied);
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_DOWN);
    /* Older, then the same again: nothing changes. */
    CHECK_OK(racaffinity_feed_record_apply(c, 6, "node/MYDB2/state", "up", &applied));
    CHECK(!applied);
    CHECK_OK(racaffinity_feed_record_apply(c, 7, "node/MYDB2/state", "down", NULL));
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_DOWN);
    /* A deletion (NULL value) is `up`, at its own revision. */
    CHECK_OK(racaffinity_feed_record_apply(c, 9, "node/MYDB2/state", NULL, &applied));
    CHECK(applied);
    CHECK_EQ_U(state_of(c, 1), RACAFFINITY_NODE_STATE_UP);
    CHECK_RC(racaffinity_feed_record_apply(c, 10, "node/NOPE/state", "down", NULL), RACAFFINITY_RESULT_UNKNOWN_NODE);
    CHECK_RC(racaffinity_feed_record_apply(c, 10, "nodes/MYDB1", "x", NULL), RACAFFINITY_RESULT_INVALID_ARGUMENT);
    CHECK_RC(racaffinity_feed_record_apply(c, 10, NULL, "down", NULL), RACAFFINITY_RESULT_NULL_ARGUMENT);
    CHECK_RC(racaffinity_feed_record_apply(c, 10, "node/MYDB1/state", "\xff", NULL), RACAFFINITY_RESULT_INVALID_UTF8);
    CHECK_EQ_U(state_of(c, 0), RACAFFINITY_NODE_STATE_UP);
    free_cluster(c);
}

static const h_test tests[] = {
    TEST(feed_records_join_by_version_and_refuse_bad_records),
    TEST(version_is_a_nonempty_dotted_string),
    TEST(version_macros_match_the_library),
    TEST(result_message_describes_every_code),
    TEST(buffer_too_small_reports_the_needed_size_and_retry_succeeds),
    TEST(cluster_free_of_null_is_ok),
    TEST(null_cluster_is_null_argument_for_every_function),
    TEST(null_pointer_arguments_are_null_argument),
    TEST(null_out_pointer_is_null_argument_and_changes_nothing),
    TEST(documented_nullable_arguments_accept_null),
    TEST(freed_handle_is_invalid_handle_everywhere),
    TEST(stale_handle_stays_invalid_after_its_slot_is_reused),
    TEST(foreign_pointers_are_invalid_handle_and_never_dereferenced),
    TEST(too_many_handles_after_4096_live_clusters),
    TEST(lease_released_twice_is_invalid_lease),
    TEST(a_copied_lease_cannot_be_released_twice),
    TEST(a_request_picks_by_transaction_then_key_then_session_then_pin),
    TEST(lease_from_another_cluster_is_invalid_lease),
    TEST(lease_release_with_a_bad_outcome_keeps_the_lease_live),
    TEST(invalid_utf8_is_invalid_utf8),
    TEST(gtrid_of_65_bytes_or_empty_is_invalid_argument),
    TEST(key_of_1025_bytes_or_empty_is_invalid_argument),
    TEST(huge_lengths_are_refused_before_reading),
    TEST(out_of_range_enum_values_are_invalid_argument),
    TEST(bad_node_name_weight_or_address_is_invalid_argument),
    TEST(config_errors_are_config_and_name_the_key),
    TEST(unknown_node_names_and_ids_are_unknown_node),
    TEST(adding_an_existing_name_is_duplicate_node),
    TEST(no_node_available_with_panic_fail_and_all_nodes_down),
    TEST(strict_transaction_refuses_when_its_node_is_down),
    TEST(prepared_transaction_never_moves),
    TEST(unknown_gtrid_is_unknown_transaction),
    TEST(malformed_event_is_event_parse_and_changes_nothing),
    TEST(event_for_another_database_is_foreign_event),
    TEST(panic_inside_the_library_becomes_panic_result),
    TEST(recovery_on_a_second_node_is_a_split_transaction),
    TEST(thread_pin_keeps_picks_on_one_node_until_unpin),
    TEST(a_pinned_route_after_the_free_is_invalid_handle),
    TEST(nested_thread_pins_release_at_the_outermost_unpin),
    TEST(context_pins_are_independent_of_thread_pins),
    TEST(context_release_drops_every_level_and_auto_pin_pins_contexts),
    TEST(the_epoch_page_lets_a_host_cache_a_pinned_context_route),
    TEST(a_pick_tells_the_host_whether_it_may_lease_the_route_itself),
    TEST(an_unpinned_pick_leaves_an_up_nodes_lease_to_the_host),
    TEST(each_epoch_page_call_holds_the_word_once),
    TEST(a_stale_epoch_page_free_never_takes_another_hosts_hand_out),
    TEST(host_hits_are_counted_in_the_scope_the_host_names),
    TEST(a_finalizer_puts_the_threads_last_error_back),
    TEST(a_host_lease_in_the_page_counts_like_a_library_lease),
    TEST(tx_branches_share_one_node_and_end_with_the_last),
    TEST(tx_begin_on_places_a_new_gtrid_on_the_preferred_node),
    TEST(soft_transaction_repins_when_its_node_is_down),
    TEST(session_sticks_until_ended_and_repins_when_its_node_is_down),
    TEST(key_routes_are_stable_and_fall_back_when_the_owner_is_down),
    TEST(i64_key_routes_like_its_little_endian_bytes),
    TEST(fan_down_removes_a_node_from_picks_and_up_restores_it),
    TEST(fan_user_down_drains_a_node),
    TEST(three_missed_probes_down_a_node_and_a_good_probe_restores_it),
    TEST(recovery_scope_comes_from_the_config),
    TEST(unknown_ids_and_unissued_context_keys_are_refused),
    TEST(ucp_affinity_contexts_and_the_partition_map_replaced_whole),
    TEST(a_planned_drain_keeps_existing_work_until_its_timeout_then_moves_it),
    TEST(session_tokens_carry_primary_and_backup_and_promote_on_failure),
    TEST(of_several_tokens_the_core_chooses_the_one_to_route),
    TEST(the_xa_transaction_key_is_the_cores),
    TEST(a_new_gtrid_follows_the_requests_session_token),
    TEST(token_route_buffer_from_the_header_fits_a_token_that_gains_a_backup),
    TEST(token_route_without_a_buffer_routes_nothing),
    TEST(token_route_in_place_writes_the_token_into_its_own_storage),
    TEST(tokens_route_buffer_from_the_header_fits_a_chosen_token_that_gains_a_backup),
    TEST(tokens_route_takes_an_oversized_candidate_as_malformed_and_routes_nothing_on_a_null_one),
    TEST(five_failed_leases_eject_a_node),
    TEST(five_reported_failures_eject_a_node),
    TEST(set_strict_switches_the_thread_scope_at_runtime),
    TEST(nodes_are_added_and_removed_at_runtime_and_ids_never_reused),
    TEST(metrics_json_and_prometheus_name_the_cluster),
    TEST(an_unreachable_feed_refuses_operator_calls),
    TEST(replay_decisions_walk_the_outcome_state_machine),
    TEST(operator_calls_reach_another_subscriber_through_etcd),
    TEST(connect_strings_match_the_documented_forms),
    TEST(connect_string_refuses_values_that_break_the_syntax),
};

int main(int argc, char **argv) {
    /* Before any call failed on this thread, the last error is empty. */
    char buf[8] = "x";
    size_t len = 99;
    CHECK_OK(racaffinity_last_error_message(buf, sizeof buf, &len));
    CHECK_STR(buf, "");
    CHECK_EQ_U(len, 1);
    int rc = h_main("test_api", tests, sizeof tests / sizeof tests[0], argc, argv);
    if (argc <= 1) {
        h_require_all_codes_seen();
        if (atomic_load(&h_failures) != 0) rc = 1;
    }
    return rc;
}
