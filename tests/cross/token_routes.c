/* tests/cross/token_routes.c: the C third of the cross-language token test
 * (python/tests/test_cross_language_tokens.py runs it beside Java and Python).
 *
 *   token_routes CONFIG_FILE TOKENS_FILE DOWN1 DOWN2
 *
 * Builds a cluster from CONFIG_FILE and routes every token of TOKENS_FILE
 * (one a line) through racaffinity_session_token_route in four phases: all
 * nodes up; DOWN1 marked down; DOWN2 marked down too; both up again. Each
 * phase routes the tokens the previous phase left the client holding. Prints
 * one line per token and phase: "<phase> <node name> <token held after it>". */
#include <racaffinity.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what, racaffinity_result rc) {
    char msg[512];
    size_t n = 0;
    if (racaffinity_last_error_message(msg, sizeof msg, &n) != RACAFFINITY_RESULT_OK) msg[0] = '\0';
    fprintf(stderr, "token_routes: %s failed (%d): %s\n", what, (int)rc, msg);
    exit(1);
}

static char *copy(const char *s) {
    size_t len = strlen(s) + 1;
    char *out = malloc(len);
    if (!out) { perror("malloc"); exit(1); }
    return memcpy(out, s, len);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) { perror(path); exit(1); }
    text[len] = '\0';
    fclose(f);
    return text;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: token_routes CONFIG_FILE TOKENS_FILE DOWN1 DOWN2\n");
        return 2;
    }
    char *config = slurp(argv[1]);
    char *tokens_text = slurp(argv[2]);
    racaffinity_cluster *c = NULL;
    racaffinity_result rc = racaffinity_cluster_new(config, &c);
    if (rc != RACAFFINITY_RESULT_OK) die("racaffinity_cluster_new", rc);

    size_t count = 0;
    for (char *p = tokens_text; *p; p++) count += *p == '\n';
    char **held = calloc(count + 1, sizeof *held);
    size_t n = 0;
    for (char *line = strtok(tokens_text, "\n"); line; line = strtok(NULL, "\n")) held[n++] = copy(line);

    const uint32_t states[4][2] = {
        {RACAFFINITY_NODE_STATE_UP, RACAFFINITY_NODE_STATE_UP},
        {RACAFFINITY_NODE_STATE_DOWN, RACAFFINITY_NODE_STATE_UP},
        {RACAFFINITY_NODE_STATE_DOWN, RACAFFINITY_NODE_STATE_DOWN},
        {RACAFFINITY_NODE_STATE_UP, RACAFFINITY_NODE_STATE_UP},
    };
    for (int phase = 0; phase < 4; phase++) {
        for (int d = 0; d < 2; d++) {
            rc = racaffinity_node_set_state(c, argv[3 + d], states[phase][d]);
            if (rc != RACAFFINITY_RESULT_OK) die("racaffinity_node_set_state", rc);
        }
        for (size_t i = 0; i < n; i++) {
            size_t cap = strlen(held[i]) + 5, len = 0; /* the header's bound */
            char *buf = malloc(cap);
            racaffinity_route route;
            bool changed = false;
            rc = racaffinity_session_token_route(c, held[i], &route, buf, cap, &len, &changed);
            if (rc != RACAFFINITY_RESULT_OK) die("racaffinity_session_token_route", rc);
            char name[256];
            rc = racaffinity_node_name(c, route.node, name, sizeof name, &len);
            if (rc != RACAFFINITY_RESULT_OK) die("racaffinity_node_name", rc);
            printf("%d %s %s\n", phase, name, buf);
            free(held[i]);
            held[i] = buf;
        }
    }
    for (size_t i = 0; i < n; i++) free(held[i]);
    free(held);
    free(config);
    free(tokens_text);
    racaffinity_cluster_free(c);
    return 0;
}
