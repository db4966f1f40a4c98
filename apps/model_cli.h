/* Shared by the model commands (score, generate): parse "--ids 5,17,42" and the common model
 * flags. Header-only: apps/ compiles nibble.c and cmd_*.c only. */
#ifndef NB_APPS_MODEL_CLI_H
#define NB_APPS_MODEL_CLI_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parse a comma-separated list of non-negative ints into a malloc'd array. 0 on success;
 * -1 with a message on stderr. */
static int nb_cli_parse_ids(const char *s, int32_t **out, int *n)
{
    int cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "nibble: --ids: '%s' is not a comma-separated list of token ids\n", s);
            free(v);
            return -1;
        }
        if (k == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        fprintf(stderr, "nibble: --ids is empty\n");
        free(v);
        return -1;
    }
    *out = v;
    *n = k;
    return 0;
}

/* "--backend cpu" is the only backend so far. */
static int nb_cli_check_backend(const char *b)
{
    if (b && strcmp(b, "cpu") != 0) {
        fprintf(stderr, "nibble: --backend %s: only 'cpu' is available in this build of the model commands\n", b);
        return -1;
    }
    return 0;
}

#endif
