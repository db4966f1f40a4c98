/* Benchmark output: the terminal table per concurrency level, one JSON line per level
 * (--output-file), and a self-contained HTML report with inline SVG charts (throughput
 * versus concurrency; CDFs of TTFT, ITL and E2E per level; GPU power per level).
 * Exercised by tests/bench/test_bench_metrics.c and tests/bench/test_bench_e2e.sh. */
#ifndef NB_TOOLS_BENCH_REPORT_H
#define NB_TOOLS_BENCH_REPORT_H

#include <stdio.h>
#include "nibble.h"
#include "tools/bench/metrics.h"
#include "tools/bench/prom.h"
#include "tools/nvml.h"

/* What was asked: printed with every level so a figure carries its workload. */
typedef struct nb_bench_setup {
    char base_url[512], backend[16], model[128], dataset[256];
    int num_prompts, input_len, output_len;
    double range_ratio, request_rate;
    unsigned long long seed;
    int ignore_eos;
    char length_note[160]; /* how input lengths were made exact or approximated */
    char extra_body[1024]; /* --extra-request-body as sent (compact JSON), or "" */
} nb_bench_setup;

typedef struct nb_bench_level {
    int concurrency;
    int num_prompts;
    nb_bench_metrics m;
    int n_gpus;                     /* 0: NVML absent ("n/a") */
    nb_gpu_summary gpu[NB_NVML_MAX_GPUS];
    nb_prom_view server;
    /* Sorted samples in ms for the distribution charts (owned). */
    double *ttft_ms, *itl_ms, *e2e_ms;
    int n_ttft, n_itl, n_e2e;
    char first_error[160];
} nb_bench_level;

/* Copy the sorted samples of reqs into lv (for the HTML CDFs). */
nb_status nb_bench_level_keep_samples(nb_bench_level *lv, const nb_bench_req *reqs, int n);
void nb_bench_level_free(nb_bench_level *lv);

void nb_bench_print_level(FILE *f, const nb_bench_setup *su, const nb_bench_level *lv);
/* The closing one-line-per-level summary. */
void nb_bench_print_summary(FILE *f, const nb_bench_level *lv, int n);

/* One JSON object (no newline), malloc'd; keys follow SGLang's result names where they exist. */
char *nb_bench_json_line(const nb_bench_setup *su, const nb_bench_level *lv);
nb_status nb_bench_append_jsonl(const char *path, const nb_bench_setup *su, const nb_bench_level *lv);

nb_status nb_bench_write_html(const char *path, const nb_bench_setup *su, const nb_bench_level *lv, int n);

#endif
