/* Reading the server's Prometheus /metrics during a benchmark: one value by metric name
 * (summed over label sets), and a background scraper that keeps the peak of gauges
 * (KV usage, running requests) while a level runs.
 * Exercised by tests/bench/test_bench_metrics.c (parser) and `nibble bench`. */
#ifndef NB_TOOLS_BENCH_PROM_H
#define NB_TOOLS_BENCH_PROM_H

#include "nibble.h"

/* Sum of every sample of metric `name` in a text exposition; returns how many samples
 * matched (0: absent, *value = 0). `name` is matched exactly (not as a prefix). */
int nb_prom_get(const char *text, const char *name, double *value);

/* Server-side view of one level, from /metrics. Fields are NaN when not exposed. */
typedef struct nb_prom_view {
    int available;                     /* /metrics answered 200 */
    double prompt_tokens, gen_tokens;  /* counter deltas over the level */
    double kv_usage_peak;              /* max of the KV usage gauge (0..1) while running */
    double running_peak, waiting_peak; /* max of the request gauges */
} nb_prom_view;

typedef struct nb_prom_scraper nb_prom_scraper;

/* Scrape base_url/metrics now (the "before" reading) and every period_ms after. */
nb_status nb_prom_scraper_start(const char *base_url, const char *api_key, int period_ms, nb_prom_scraper **out);
/* Scrape once more (the "after" reading), stop, and fill *view. Frees the scraper. */
void nb_prom_scraper_finish(nb_prom_scraper *s, nb_prom_view *view);

#endif
