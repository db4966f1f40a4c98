/* Serving-benchmark metrics with the definitions of SGLang's bench_serving, so figures
 * compare one to one:
 *   TTFT  time from sending the request to the first chunk carrying text;
 *   ITL   gap between consecutive text-carrying chunks (per chunk, not per token);
 *   TPOT  per request (latency - ttft) / (output_len - 1), only when output_len > 1;
 *   E2E   time from sending to the last chunk received;
 *   throughputs = totals over successful requests / level duration;
 *   concurrency = sum(E2E) / duration (SGLang's "Concurrency");
 * plus the peak number of requests in flight at once (from the start/end timeline).
 * Statistics: mean, median, std (population), p90, p99, max, with numpy's default
 * linear-interpolation percentile. Exercised by tests/bench/test_bench_metrics.c. */
#ifndef NB_TOOLS_BENCH_METRICS_H
#define NB_TOOLS_BENCH_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include "nibble.h"

/* One request's timeline, filled by the client. Times in seconds. */
typedef struct nb_bench_req {
    int prompt_len;   /* input tokens (server's usage.prompt_tokens when it reported it) */
    int output_len;   /* usage.completion_tokens when reported, else the requested length */
    int want_output;  /* requested max_tokens */
    int success;
    int chunks;       /* text-carrying chunks received */
    double start_s;   /* send time, seconds after the level started */
    double ttft_s;    /* 0 when no text chunk arrived */
    double latency_s; /* E2E */
    double *itl;      /* n_itl gaps in seconds (malloc'd, owned) */
    int n_itl, cap_itl;
    char error[160];
} nb_bench_req;

/* Append one inter-chunk gap. */
nb_status nb_bench_req_add_itl(nb_bench_req *r, double gap_s);
void nb_bench_req_free(nb_bench_req *r);

typedef struct nb_bench_stat {
    double mean, median, std, p90, p99, max;
    size_t n;
} nb_bench_stat;

typedef struct nb_bench_metrics {
    int completed, failed;
    int64_t total_input, total_output;
    double duration_s;
    double request_throughput, input_throughput, output_throughput, total_throughput;
    nb_bench_stat ttft_ms, tpot_ms, itl_ms, e2e_ms;
    double concurrency;   /* sum(E2E) / duration */
    int peak_concurrency; /* most requests in flight at one instant */
} nb_bench_metrics;

/* numpy.percentile(v, p) (linear interpolation) over an ascending `sorted` of n > 0. */
double nb_bench_percentile(const double *sorted, size_t n, double p);

/* Statistics of v[0..n) scaled by `scale` (1000 for ms); sorts v in place. n == 0 gives
 * zeros, as SGLang's `np.mean(x or 0)`. */
void nb_bench_stat_of(double *v, size_t n, double scale, nb_bench_stat *out);

/* Metrics of n requests run over duration_s seconds. Failed requests count in `failed`
 * only. NB_ERR_INVALID_ARG when duration_s <= 0. */
nb_status nb_bench_compute(const nb_bench_req *reqs, size_t n, double duration_s, nb_bench_metrics *m);

#endif
