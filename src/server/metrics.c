/* Prometheus metrics for the server (server/metrics.h). */
#include "server/metrics.h"
#include "tools/nvml.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define NB_MAX_BUCKETS 24

typedef struct nb_hist {
    const char *name, *help;
    int nb;
    double le[NB_MAX_BUCKETS];
    uint64_t count[NB_MAX_BUCKETS + 1]; /* per bucket (not cumulative); last: +Inf */
    uint64_t n;
    double sum;
} nb_hist;

struct nb_srv_metrics {
    pthread_mutex_t mu;
    nb_hist h[NB_HIST_COUNT];
    uint64_t finish[4];
    uint64_t http_2xx, http_4xx, http_5xx;
    uint64_t http_by_code[6]; /* 400 401 404 413 503 other */
    int64_t active;
};

static const double nb_ttft_le[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0};
static const double nb_itl_le[] = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                                   0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0};
static const double nb_e2e_le[] = {0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 15.0, 20.0,
                                   30.0, 40.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 2400.0};

static void nb_hist_init(nb_hist *h, const char *name, const char *help, const double *le, int n)
{
    h->name = name;
    h->help = help;
    h->nb = n;
    for (int i = 0; i < n; i++) h->le[i] = le[i];
}

nb_srv_metrics *nb_srv_metrics_new(void)
{
    nb_srv_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    nb_hist_init(&m->h[NB_HIST_TTFT], "nibble:time_to_first_token_seconds",
                 "Time from request arrival to its first generated token.", nb_ttft_le,
                 (int)(sizeof nb_ttft_le / sizeof nb_ttft_le[0]));
    nb_hist_init(&m->h[NB_HIST_ITL], "nibble:inter_token_latency_seconds",
                 "Time between consecutive generated tokens of a request.", nb_itl_le,
                 (int)(sizeof nb_itl_le / sizeof nb_itl_le[0]));
    nb_hist_init(&m->h[NB_HIST_E2E], "nibble:e2e_request_latency_seconds",
                 "Time from request arrival to its last token.", nb_e2e_le,
                 (int)(sizeof nb_e2e_le / sizeof nb_e2e_le[0]));
    return m;
}

void nb_srv_metrics_free(nb_srv_metrics *m)
{
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void nb_srv_metrics_observe(nb_srv_metrics *m, nb_hist_id id, double s)
{
    if (!m || !(s >= 0)) return;
    nb_hist *h = &m->h[id];
    int b = 0;
    while (b < h->nb && s > h->le[b]) b++;
    pthread_mutex_lock(&m->mu);
    h->count[b]++;
    h->n++;
    h->sum += s;
    pthread_mutex_unlock(&m->mu);
}

void nb_srv_metrics_finish(nb_srv_metrics *m, nb_finish_reason fr)
{
    if (!m || fr < 0 || fr > NB_FINISH_ABORT) return;
    pthread_mutex_lock(&m->mu);
    m->finish[fr]++;
    pthread_mutex_unlock(&m->mu);
}

void nb_srv_metrics_http(nb_srv_metrics *m, int status)
{
    if (!m) return;
    static const int codes[] = {400, 401, 404, 413, 503};
    pthread_mutex_lock(&m->mu);
    int k = 5;
    for (int i = 0; i < 5; i++)
        if (codes[i] == status) k = i;
    if (status >= 200 && status < 300) m->http_2xx++;
    else m->http_by_code[k]++;
    pthread_mutex_unlock(&m->mu);
}

void nb_srv_metrics_active(nb_srv_metrics *m, int delta)
{
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->active += delta;
    pthread_mutex_unlock(&m->mu);
}

static void nb_metric(nb_strbuf *o, const char *name, const char *type, const char *help)
{
    nb_sb_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void nb_srv_metrics_render(nb_srv_metrics *m, nb_engine *e, int ready, nb_strbuf *o)
{
    nb_metric(o, "nibble:server_ready", "gauge", "1 when the model is loaded and requests are served.");
    nb_sb_printf(o, "nibble:server_ready %d\n", ready);
    if (e) {
        nb_engine_stats st;
        nb_engine_info info;
        nb_engine_get_stats(e, &st);
        nb_engine_get_info(e, &info);
        nb_metric(o, "nibble:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.");
        nb_sb_printf(o, "nibble:prompt_tokens_total %llu\n", (unsigned long long)st.prompt_tokens_total);
        nb_metric(o, "nibble:generation_tokens_total", "counter", "Generated tokens delivered.");
        nb_sb_printf(o, "nibble:generation_tokens_total %llu\n", (unsigned long long)st.generation_tokens_total);
        nb_metric(o, "nibble:prefill_tokens_computed_total", "counter", "Prompt tokens run through the model (with recompute).");
        nb_sb_printf(o, "nibble:prefill_tokens_computed_total %llu\n", (unsigned long long)st.prefill_tokens_computed);
        nb_metric(o, "nibble:num_requests_running", "gauge", "Requests holding KV cache (prefilling or decoding).");
        nb_sb_printf(o, "nibble:num_requests_running %d\n", st.running);
        nb_metric(o, "nibble:num_requests_waiting", "gauge", "Requests queued (including preempted ones).");
        nb_sb_printf(o, "nibble:num_requests_waiting %d\n", st.waiting);
        nb_metric(o, "nibble:kv_cache_usage_perc", "gauge", "Fraction of KV cache tokens in use (page granular), 0..1.");
        nb_sb_printf(o, "nibble:kv_cache_usage_perc %.6f\n", st.kv_usage);
        nb_metric(o, "nibble:kv_cache_used_tokens", "gauge", "KV cache tokens in use (used pages x page size).");
        nb_sb_printf(o, "nibble:kv_cache_used_tokens %lld\n", (long long)st.kv_used_tokens);
        nb_metric(o, "nibble:kv_cache_total_tokens", "gauge", "KV cache capacity in tokens.");
        nb_sb_printf(o, "nibble:kv_cache_total_tokens %lld\n", (long long)st.kv_total_tokens);
        nb_metric(o, "nibble:kv_pages_used", "gauge", "KV cache pages in use.");
        nb_sb_printf(o, "nibble:kv_pages_used %lld\n", (long long)(info.page_size > 0 ? st.kv_used_tokens / info.page_size : 0));
        nb_metric(o, "nibble:preemptions_total", "counter", "Requests preempted for KV space.");
        nb_sb_printf(o, "nibble:preemptions_total %llu\n", (unsigned long long)st.preemptions);
        nb_metric(o, "nibble:engine_steps_total", "counter", "Engine steps run.");
        nb_sb_printf(o, "nibble:engine_steps_total %llu\n", (unsigned long long)st.steps);
        nb_metric(o, "nibble:engine_busy_seconds_total", "counter", "Time the engine spent inside steps.");
        nb_sb_printf(o, "nibble:engine_busy_seconds_total %.6f\n", st.busy_s);
    }
    pthread_mutex_lock(&m->mu);
    nb_metric(o, "nibble:request_finished_total", "counter", "Finished choices by reason.");
    static const char *const fr[] = {"none", "stop", "length", "abort"};
    for (int i = 1; i < 4; i++)
        nb_sb_printf(o, "nibble:request_finished_total{finish_reason=\"%s\"} %llu\n", fr[i], (unsigned long long)m->finish[i]);
    nb_metric(o, "nibble:http_responses_total", "counter", "HTTP responses by status code class.");
    static const char *const codes[] = {"400", "401", "404", "413", "503", "other"};
    nb_sb_printf(o, "nibble:http_responses_total{code=\"2xx\"} %llu\n", (unsigned long long)m->http_2xx);
    for (int i = 0; i < 6; i++)
        nb_sb_printf(o, "nibble:http_responses_total{code=\"%s\"} %llu\n", codes[i], (unsigned long long)m->http_by_code[i]);
    nb_metric(o, "nibble:http_requests_active", "gauge", "Generation requests accepted over HTTP and not yet released.");
    nb_sb_printf(o, "nibble:http_requests_active %lld\n", (long long)m->active);
    for (int k = 0; k < NB_HIST_COUNT; k++) {
        const nb_hist *h = &m->h[k];
        nb_metric(o, h->name, "histogram", h->help);
        uint64_t cum = 0;
        for (int b = 0; b < h->nb; b++) {
            cum += h->count[b];
            nb_sb_printf(o, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->le[b], (unsigned long long)cum);
        }
        cum += h->count[h->nb];
        nb_sb_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", h->name,
                     (unsigned long long)cum, h->name, h->sum, h->name, (unsigned long long)h->n);
    }
    pthread_mutex_unlock(&m->mu);
    int ng = 0;
    if (nb_nvml_open(&ng) == NB_OK && ng > 0) {
        nb_metric(o, "nibble:gpu_power_watts", "gauge", "GPU power draw (NVML).");
        nb_gpu_reading r[NB_NVML_MAX_GPUS];
        for (int g = 0; g < ng; g++) nb_nvml_read(g, &r[g]);
        for (int g = 0; g < ng; g++)
            if (!isnan(r[g].power_w)) nb_sb_printf(o, "nibble:gpu_power_watts{gpu=\"%d\"} %.1f\n", g, r[g].power_w);
        nb_metric(o, "nibble:gpu_power_limit_watts", "gauge", "Enforced GPU power limit (NVML).");
        for (int g = 0; g < ng; g++)
            if (!isnan(r[g].power_limit_w)) nb_sb_printf(o, "nibble:gpu_power_limit_watts{gpu=\"%d\"} %.1f\n", g, r[g].power_limit_w);
        nb_metric(o, "nibble:gpu_sm_clock_mhz", "gauge", "GPU SM clock (NVML).");
        for (int g = 0; g < ng; g++)
            if (!isnan(r[g].sm_clock_mhz)) nb_sb_printf(o, "nibble:gpu_sm_clock_mhz{gpu=\"%d\"} %.0f\n", g, r[g].sm_clock_mhz);
        nb_metric(o, "nibble:gpu_utilization_ratio", "gauge", "GPU utilization 0..1 (NVML).");
        for (int g = 0; g < ng; g++)
            if (!isnan(r[g].util_pct)) nb_sb_printf(o, "nibble:gpu_utilization_ratio{gpu=\"%d\"} %.2f\n", g, r[g].util_pct / 100);
    }
}
