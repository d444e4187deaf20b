/* Built by tests/c/cmake_consumer/CMakeLists.txt against the installed
 * package only: the header and library come from find_package. */
#include <racaffinity.h>
#include <stdio.h>

int main(void) {
    racaffinity_cluster *c = NULL;
    if (racaffinity_cluster_new("nodes = RAC1, RAC2, RAC3", &c) != RACAFFINITY_RESULT_OK) return 1;
    racaffinity_route a, b;
    if (racaffinity_tx_begin(c, (const uint8_t *)"gtrid-7", 7, &a) != RACAFFINITY_RESULT_OK ||
        racaffinity_tx_begin(c, (const uint8_t *)"gtrid-7", 7, &b) != RACAFFINITY_RESULT_OK || a.node != b.node)
        return 1;
    printf("cmake consumer: libracaffinity %s, gtrid-7 on node %u\n", racaffinity_version(), (unsigned)a.node);
    return racaffinity_cluster_free(c) == RACAFFINITY_RESULT_OK ? 0 : 1;
}
