/* nibble tokenize: encode text with a model's tokenizer.json and print the ids.
 *   nibble tokenize --model DIR (--text TEXT | --file F | --batch F) [--no-special] [--time]
 * Prints the ids comma-separated on one line. --no-special skips the post-processor
 * (no bos); added/special tokens written in the text are still matched. --batch F: F holds
 * several texts separated by NUL bytes; one line of ids per text (how the oracle test
 * avoids one process per text). --time reports the encode throughput on stderr (how
 * bench/RESULTS.md's MB/s figure is measured).
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
    fprintf(f, "usage: nibble tokenize --model DIR (--text TEXT | --file F | --batch F) [--no-special] [--time]\n"
               "  --batch F   F holds texts separated by NUL bytes; prints one line of ids per text\n");
}

static double nb_thread_cpu_s(void)
{
    struct timespec c;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
    return (double)c.tv_sec + 1e-9 * (double)c.tv_nsec;
}

/* Encode one text and print its ids line; adds the bytes and CPU/wall time to the totals. */
static int nb_tokenize_one(const nb_tokenizer *tok, const char *text, size_t len, int add_special, double *cpu,
                           double *wall, size_t *ntok)
{
    int32_t *ids;
    size_t n;
    /* CPU time as well as wall time: on a shared machine the wall figure moves with the load */
    double c0 = nb_thread_cpu_s(), t0 = nb_now_s();
    nb_status st = nb_tokenizer_encode(tok, text, len, add_special, &ids, &n);
    *wall += nb_now_s() - t0;
    *cpu += nb_thread_cpu_s() - c0;
    if (st != NB_OK) {
        fprintf(stderr, "nibble tokenize: %s\n", nb_last_error());
        return 1;
    }
    for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    printf("\n");
    *ntok += n;
    free(ids);
    return 0;
}

int nb_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL, *batch = NULL;
    int add_special = 1, timed = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--text") && i + 1 < argc) text = argv[++i];
        else if (!strcmp(argv[i], "--file") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = argv[++i];
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
    if (!model || (!!text + !!file + !!batch) != 1) {
        nb_tokenize_usage(stderr);
        return 2;
    }
    char *buf = NULL;
    size_t len;
    if (file || batch) {
        if (nb_read_file(file ? file : batch, &buf, &len, 0) != NB_OK) {
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
    int rc = 0;
    double cpu = 0, wall = 0;
    size_t ntok = 0;
    if (batch) {
        /* NUL-separated texts; a trailing NUL does not start an extra text */
        size_t a = 0;
        while (a < len && !rc) {
            const char *z = memchr(text + a, 0, len - a);
            size_t b = z ? (size_t)(z - text) : len;
            rc = nb_tokenize_one(tok, text + a, b - a, add_special, &cpu, &wall, &ntok);
            a = b + 1;
        }
    } else {
        rc = nb_tokenize_one(tok, text, len, add_special, &cpu, &wall, &ntok);
    }
    if (!rc && timed)
        fprintf(stderr,
                "nibble tokenize: encoded %zu bytes into %zu tokens in %.3f s wall (%.2f MB/s), %.3f s CPU "
                "(%.2f MB/s), one thread\n",
                len, ntok, wall, wall > 0 ? (double)len / wall / 1e6 : 0.0, cpu, cpu > 0 ? (double)len / cpu / 1e6 : 0.0);
    nb_tokenizer_free(tok);
    free(buf);
    return rc;
}
