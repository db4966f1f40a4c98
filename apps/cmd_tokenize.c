/* nibble tokenize: encode text with a model's tokenizer.json and print the ids.
 *   nibble tokenize --model DIR (--text TEXT | --file F) [--no-special] [--time]
 * Prints the ids comma-separated on one line. --no-special skips the post-processor
 * (no bos); added/special tokens written in the text are still matched. --time reports
 * the encode throughput on stderr (how bench/RESULTS.md's MB/s figure is measured).
 * Exercised by tests/tokenizer/test_vs_hf.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/file.h"
#include "nibble.h"
#include "tokenizer/tokenizer.h"

const char nb_cmd_tokenize_summary[] = "encode text with a model's tokenizer and print the ids";

static void nb_tokenize_usage(FILE *f)
{
    fprintf(f, "usage: nibble tokenize --model DIR (--text TEXT | --file F) [--no-special] [--time]\n");
}

int nb_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL;
    int add_special = 1, timed = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--text") && i + 1 < argc) text = argv[++i];
        else if (!strcmp(argv[i], "--file") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(argv[i], "--no-special")) add_special = 0;
        else if (!strcmp(argv[i], "--time")) timed = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            nb_tokenize_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "nibble tokenize: unknown or incomplete option '%s'\n", argv[i]);
            nb_tokenize_usage(stderr);
            return 2;
        }
    }
    if (!model || (!text) == (!file)) {
        nb_tokenize_usage(stderr);
        return 2;
    }
    char *buf = NULL;
    size_t len;
    if (file) {
        if (nb_read_file(file, &buf, &len, 0) != NB_OK) {
            fprintf(stderr, "nibble tokenize: %s\n", nb_last_error());
            return 1;
        }
        text = buf;
    } else {
        len = strlen(text);
    }
    nb_tokenizer *tok;
    if (nb_tokenizer_load(model, &tok) != NB_OK) {
        fprintf(stderr, "nibble tokenize: %s\n", nb_last_error());
        free(buf);
        return 1;
    }
    int32_t *ids;
    size_t n;
    int rc = 0;
    /* CPU time as well as wall time: on a shared machine the wall figure moves with the load */
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    double t0 = nb_now_s();
    nb_status st = nb_tokenizer_encode(tok, text, len, add_special, &ids, &n);
    double dt = nb_now_s() - t0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
    if (st == NB_OK && timed)
        fprintf(stderr,
                "nibble tokenize: encoded %zu bytes into %zu tokens in %.3f s wall (%.2f MB/s), %.3f s CPU "
                "(%.2f MB/s), one thread\n",
                len, n, dt, dt > 0 ? (double)len / dt / 1e6 : 0.0, cpu, cpu > 0 ? (double)len / cpu / 1e6 : 0.0);
    if (st != NB_OK) {
        fprintf(stderr, "nibble tokenize: %s\n", nb_last_error());
        rc = 1;
    } else {
        for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
        printf("\n");
        free(ids);
    }
    nb_tokenizer_free(tok);
    free(buf);
    return rc;
}
