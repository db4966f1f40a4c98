/* nibble version: prints the version and the build's features. */
#include <stdio.h>

#include "nibble.h"

const char nb_cmd_version_summary[] = "print the version and build features";

int nb_cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("nibble %s (cuda: %s)\n", nb_version(), NIBBLE_HAVE_CUDA ? "yes" : "no");
    return 0;
}
