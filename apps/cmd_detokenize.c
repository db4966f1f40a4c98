/* nibble detokenize: decode ids with a model's tokenizer.json and print the text exactly.
 *   nibble detokenize --model DIR --ids 1,2,3 [--skip-special] [--stream]
 * No newline is added. --stream decodes through the streaming detokenizer (one id at a
 * time) instead of in one call; the output must be the same.
 * Exercised by tests/tokenizer/test_vs_hf.py. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nibble.h"
#include "tokenizer/tokenizer.h"

const char nb_cmd_detokenize_summary[] = "decode ids with a model's tokenizer and print the text";

static void nb_detokenize_usage(FILE *f)
{
    fprintf(f, "usage: nibble detokenize --model DIR --ids ID[,ID...] [--skip-special] [--stream]\n");
}

/* "1,2 3": ids separated by commas and/or blanks. */
static int nb_parse_ids(const char *s, int32_t **out, size_t *n)
{
    size_t cap = 16;
    int32_t *v = malloc(cap * sizeof *v);
    *n = 0;
    if (!v) return -1;
    while (*s) {
        if (*s == ',' || *s == ' ' || *s == '\n' || *s == '\t') {
            s++;
            continue;
        }
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < 0 || x > 2147483647L) {
            free(v);
            return -1;
        }
        if (*n == cap) {
            int32_t *w = realloc(v, (cap *= 2) * sizeof *v);
            if (!w) {
                free(v);
                return -1;
            }
            v = w;
        }
        v[(*n)++] = (int32_t)x;
        s = end;
    }
    *out = v;
    return 0;
}

int nb_cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL, *ids_s = NULL;
    int skip = 0, stream = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_s = argv[++i];
        else if (!strcmp(argv[i], "--skip-special")) skip = 1;
        else if (!strcmp(argv[i], "--stream")) stream = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            nb_detokenize_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "nibble detokenize: unknown or incomplete option '%s'\n", argv[i]);
            nb_detokenize_usage(stderr);
            return 2;
        }
    }
    int32_t *ids;
    size_t n;
    if (!model || !ids_s) {
        nb_detokenize_usage(stderr);
        return 2;
    }
    if (nb_parse_ids(ids_s, &ids, &n)) {
        fprintf(stderr, "nibble detokenize: --ids must be non-negative integers separated by commas\n");
        return 2;
    }
    nb_tokenizer *tok;
    if (nb_tokenizer_load(model, &tok) != NB_OK) {
        fprintf(stderr, "nibble detokenize: %s\n", nb_last_error());
        free(ids);
        return 1;
    }
    int rc = 0;
    if (stream) {
        nb_detok *d = NULL;
        const char *delta;
        size_t len;
        if (nb_detok_new(tok, skip, &d) != NB_OK) rc = 1;
        for (size_t i = 0; !rc && i < n; i++) {
            if (nb_detok_push(d, ids[i], &delta, &len) != NB_OK) rc = 1;
            else fwrite(delta, 1, len, stdout);
        }
        if (!rc && nb_detok_flush(d, &delta, &len) == NB_OK) fwrite(delta, 1, len, stdout);
        nb_detok_free(d);
    } else {
        char *text;
        size_t len;
        if (nb_tokenizer_decode(tok, ids, n, skip, &text, &len) != NB_OK) {
            rc = 1;
        } else {
            fwrite(text, 1, len, stdout);
            free(text);
        }
    }
    if (rc) fprintf(stderr, "nibble detokenize: %s\n", nb_last_error());
    nb_tokenizer_free(tok);
    free(ids);
    return rc;
}
