/* NVML telemetry through dlopen("libnvidia-ml.so.1"): no link-time dependency, so the
 * same binary runs on machines without a driver (every reading is then "n/a").
 * Used by `nibble bench` (100 ms sampling per GPU) and the server's /metrics.
 * Exercised by tests/bench/test_bench_metrics.c (the sampler's arithmetic and the
 * "no NVML" path) and by `nibble bench` on a GPU machine. */
#ifndef NB_TOOLS_NVML_H
#define NB_TOOLS_NVML_H

#include <stdint.h>
#include <stdio.h>
#include "nibble.h"

#define NB_NVML_MAX_GPUS 16

/* One reading of one GPU; a field the driver refused is NaN. */
typedef struct nb_gpu_reading {
    double power_w, power_limit_w; /* instantaneous draw, enforced limit */
    double sm_clock_mhz, util_pct, mem_used_gib, mem_total_gib;
    /* the driver's clock event reasons at this moment, 1 active / 0 not: the software power
     * cap holding the SM clock down (the board at its power limit), and any thermal slowdown
     * (software or hardware) */
    double power_capped, thermal;
} nb_gpu_reading;

/* Load NVML and count GPUs. NB_ERR_UNSUPPORTED (with a message) when the library or a
 * driver is absent; safe to call repeatedly and from several threads. */
nb_status nb_nvml_open(int *n_gpus);
/* Name of GPU i (after a successful open), or "?". */
const char *nb_nvml_name(int i);
nb_status nb_nvml_read(int i, nb_gpu_reading *out);

/* Accumulated statistics of one GPU over a sampling window. */
typedef struct nb_gpu_summary {
    int samples;
    double power_mean_w, power_max_w, power_limit_w;
    double sm_clock_mean_mhz, sm_clock_max_mhz, util_mean_pct, mem_used_max_gib, mem_total_gib;
    int reason_samples;                   /* samples whose clock event reasons were read */
    double power_capped_pct, thermal_pct; /* share of those with the reason active */
    char name[64];
} nb_gpu_summary;

/* Fold one reading into a summary (running mean; NaN fields skipped). */
void nb_gpu_summary_add(nb_gpu_summary *s, const nb_gpu_reading *r);

/* One line for a report: "GPU g name power mean ... W, SM ... MHz, power-capped ...% of samples". */
void nb_gpu_summary_fprint(FILE *f, int g, const nb_gpu_summary *s);

/* A background thread sampling every GPU every period_ms. */
typedef struct nb_nvml_sampler nb_nvml_sampler;
/* *out is NULL (and NB_OK) when NVML is absent: callers print "n/a". */
nb_status nb_nvml_sampler_start(int period_ms, nb_nvml_sampler **out);
/* Summaries since the last reset; returns the GPU count (<= max). */
int nb_nvml_sampler_snapshot(nb_nvml_sampler *s, nb_gpu_summary *out, int max);
void nb_nvml_sampler_reset(nb_nvml_sampler *s);
void nb_nvml_sampler_stop(nb_nvml_sampler *s);

#endif
