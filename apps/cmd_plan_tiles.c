/* nibble plan-tiles --sm 90|100|120: every tile configuration's shared memory (main-loop
 * stages + epilogue) against the device's opt-in limit per block (tools/tile_plan.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nibble.h"
#include "tools/tile_plan.h"

const char nb_cmd_plan_tiles_summary[] = "shared-memory budget of each GEMM tile config vs the sm's limit";

int nb_cmd_plan_tiles(int argc, char **argv)
{
    int sm = 90;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sm") && i + 1 < argc) {
            sm = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: nibble plan-tiles [--sm 90|100|120]   (default 90: H100/H200)\n");
            return 0;
        } else {
            fprintf(stderr, "plan-tiles: unknown argument '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    if (nb_tile_print_table(stdout, sm) != NB_OK) {
        fprintf(stderr, "plan-tiles: %s\n", nb_last_error());
        return 2;
    }
    return 0;
}
