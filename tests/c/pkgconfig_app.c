/* A minimal application built the way the README tells users to: against the
 * installed header and library found through pkg-config (shared and static).
 * run.sh builds it after `make install PREFIX=<tmp>`; exit status 0 = works. */
#include <racaffinity.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    racaffinity_cluster *c = NULL;
    racaffinity_result r = racaffinity_cluster_new("nodes = MYDB1, MYDB2, MYDB3\ntransaction.strict = true", &c);
    if (r != RACAFFINITY_RESULT_OK) {
        char msg[256];
        racaffinity_last_error_message(msg, sizeof msg, NULL);
        fprintf(stderr, "racaffinity: %s\n", msg);
        return 1;
    }
    racaffinity_route a, b;
    if (racaffinity_tx_begin(c, (const uint8_t *)"gtrid-42", 8, &a) != RACAFFINITY_RESULT_OK ||
        racaffinity_tx_begin(c, (const uint8_t *)"gtrid-42", 8, &b) != RACAFFINITY_RESULT_OK || a.node != b.node) {
        fprintf(stderr, "branches of gtrid-42 split\n");
        return 1;
    }
    char name[64];
    if (racaffinity_node_name(c, a.node, name, sizeof name, NULL) != RACAFFINITY_RESULT_OK) return 1;
    printf("libracaffinity %s: gtrid-42 lives on %s\n", racaffinity_version(), name);
    if (racaffinity_cluster_free(c) != RACAFFINITY_RESULT_OK) return 1;
    return racaffinity_cluster_free(c) == RACAFFINITY_RESULT_INVALID_HANDLE ? 0 : 1;
}
