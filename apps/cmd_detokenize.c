/* nibble detokenize: decode ids with a model's tokenizer.json and print the text exactly.
 *   nibble detokenize --model DIR (--ids 1,2,3 | --batch F) [--skip-special] [--stream]
 * No newline is added. --stream decodes through the streaming detokenizer (one id at a
 * time) instead of in one call; the output must be the same. --batch F: one line of ids
 * per text in F; each text is printed as its byte length, a newline, then the bytes (how
 * the oracle test avoids one process per text).
 * Exercised by tests/tokenizer/test_vs_hf.py. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "nibble.h"
#include "tokenizer/tokenizer.h"

const char nb_cmd_detokenize_summary[] = "decode ids with a model's tokenizer and print the text";

static void nb_detokenize_usage(FILE *f)
{
    fprintf(f, "usage: nibble detokenize --model DIR (--ids ID[,ID...] | --batch F) [--skip-special] [--stream]\n"
               "  --batch F   one line of ids per text; prints LENGTH\\n then the text's bytes, per text\n");
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

/* Decode ids (whole or streamed) into a malloc'd buffer. */
static int nb_detok_ids(const nb_tokenizer *tok, const int32_t *ids, size_t n, int skip, int stream, char **out,
                        size_t *out_len)
{
    if (!stream) return nb_tokenizer_decode(tok, ids, n, skip, out, out_len) == NB_OK ? 0 : 1;
    nb_detok *d = NULL;
    size_t cap = 64, len = 0;
    char *buf = malloc(cap);
    int rc = !buf || nb_detok_new(tok, skip, &d) != NB_OK;
    for (size_t i = 0; !rc && i <= n; i++) {
        const char *delta;
        size_t dl;
        nb_status s = i < n ? nb_detok_push(d, ids[i], &delta, &dl) : nb_detok_flush(d, &delta, &dl);
        if (s != NB_OK) {
            rc = 1;
            break;
        }
        while (len + dl + 1 > cap) cap *= 2;
        char *nb = realloc(buf, cap);
        if (!nb) {
            rc = 1;
            break;
        }
        buf = nb;
        memcpy(buf + len, delta, dl);
        len += dl;
    }
    nb_detok_free(d);
    if (rc) {
        free(buf);
        return 1;
    }
    buf[len] = 0;
    *out = buf;
    *out_len = len;
    return 0;
}

int nb_cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL, *ids_s = NULL, *batch = NULL;
    int skip = 0, stream = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_s = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = argv[++i];
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
    if (!model || !ids_s == !batch) {
        nb_detokenize_usage(stderr);
        return 2;
    }
    char *lines = NULL;
    size_t lines_len = 0;
    if (batch && nb_read_file(batch, &lines, &lines_len, 0) != NB_OK) {
        fprintf(stderr, "nibble detokenize: %s\n", nb_last_error());
        return 1;
    }
    nb_tokenizer *tok;
    if (nb_tokenizer_load(model, &tok) != NB_OK) {
        fprintf(stderr, "nibble detokenize: %s\n", nb_last_error());
        free(lines);
        return 1;
    }
    int rc = 0;
    char *cur = batch ? lines : (char *)ids_s;
    while (!rc && cur) {
        char *next = NULL;
        if (batch) { /* one text per line; an empty line is an empty id list */
            if (cur >= lines + lines_len) break;
            char *nl = strchr(cur, '\n');
            if (nl) {
                *nl = 0;
                next = nl + 1;
            } else if (!*cur) {
                break;
            }
        }
        int32_t *ids;
        size_t n;
        if (nb_parse_ids(cur, &ids, &n)) {
            fprintf(stderr, "nibble detokenize: ids must be non-negative integers separated by commas\n");
            rc = 2;
            break;
        }
        char *text;
        size_t len;
        if (nb_detok_ids(tok, ids, n, skip, stream, &text, &len)) {
            fprintf(stderr, "nibble detokenize: %s\n", nb_last_error());
            rc = 1;
        } else {
            if (batch) printf("%zu\n", len);
            fwrite(text, 1, len, stdout);
            free(text);
        }
        free(ids);
        cur = next;
    }
    nb_tokenizer_free(tok);
    free(lines);
    return rc;
}
