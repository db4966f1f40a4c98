/* The server's Prometheus metrics: latency histograms observed as tokens are delivered,
 * response counters, plus gauges and counters read from the engine and NVML at scrape
 * time. Names carry the `nibble:` prefix (as SGLang's carry `sglang:`); docs/server.md
 * lists them. Thread-safe: observations come from the engine thread, renders from HTTP.
 * Exercised by tests/server/test_oai_request.c (render) and GET /metrics. */
#ifndef NB_SERVER_METRICS_H
#define NB_SERVER_METRICS_H

#include "nibble.h"
#include "server/strbuf.h"

typedef struct nb_srv_metrics nb_srv_metrics;

typedef enum nb_hist_id { NB_HIST_TTFT = 0, NB_HIST_ITL, NB_HIST_E2E, NB_HIST_COUNT } nb_hist_id;

nb_srv_metrics *nb_srv_metrics_new(void);
void nb_srv_metrics_free(nb_srv_metrics *m);

void nb_srv_metrics_observe(nb_srv_metrics *m, nb_hist_id h, double seconds);
/* One finished choice (stop / length / abort). */
void nb_srv_metrics_finish(nb_srv_metrics *m, nb_finish_reason fr);
/* One HTTP response status sent. */
void nb_srv_metrics_http(nb_srv_metrics *m, int status);
/* Live HTTP generation requests (+1 when accepted, -1 when released). */
void nb_srv_metrics_active(nb_srv_metrics *m, int delta);

/* Prometheus text exposition. e (NULL while loading) supplies engine gauges/counters. */
void nb_srv_metrics_render(nb_srv_metrics *m, nb_engine *e, int ready, nb_strbuf *out);

#endif
