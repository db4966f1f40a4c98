/* Prometheus text parsing and the /metrics scraper (tools/bench/prom.h). */
#include "tools/bench/prom.h"
#include "tools/bench/client.h"
#include "base/error.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int nb_prom_get(const char *text, const char *name, double *value)
{
    size_t nl = strlen(name);
    int hits = 0;
    double sum = 0;
    for (const char *p = text; p && *p;) {
        const char *eol = strchr(p, '\n');
        if (*p != '#' && !strncmp(p, name, nl) && (p[nl] == ' ' || p[nl] == '{')) {
            const char *v = p + nl;
            if (*v == '{') {
                /* Label values may hold '}' inside quotes. */
                int inq = 0;
                for (v++; *v && *v != '\n'; v++) {
                    if (*v == '\\' && inq && v[1]) v++;
                    else if (*v == '"') inq = !inq;
                    else if (*v == '}' && !inq) break;
                }
                if (*v == '}') v++;
            }
            char *end;
            double d = strtod(v, &end);
            if (end != v) {
                sum += d;
                hits++;
            }
        }
        p = eol ? eol + 1 : NULL;
    }
    *value = sum;
    return hits;
}

struct nb_prom_scraper {
    char base_url[512], api_key[256];
    int period_ms, stop;
    pthread_t th;
    pthread_mutex_t mu;
    nb_prom_view v;
    double prompt0, gen0;
};

static int nb_scrape(nb_prom_scraper *s, double *prompt, double *gen)
{
    char *body;
    long status;
    if (nb_bench_http_get(s->base_url, "/metrics", s->api_key, 5.0, &body, &status) != NB_OK) {
        nb_error_clear();
        return 0;
    }
    int ok = status == 200;
    if (ok) {
        double x;
        pthread_mutex_lock(&s->mu);
        s->v.available = 1;
        if (nb_prom_get(body, "nibble:kv_cache_usage_perc", &x) && (isnan(s->v.kv_usage_peak) || x > s->v.kv_usage_peak))
            s->v.kv_usage_peak = x;
        if (nb_prom_get(body, "nibble:num_requests_running", &x) && (isnan(s->v.running_peak) || x > s->v.running_peak))
            s->v.running_peak = x;
        if (nb_prom_get(body, "nibble:num_requests_waiting", &x) && (isnan(s->v.waiting_peak) || x > s->v.waiting_peak))
            s->v.waiting_peak = x;
        pthread_mutex_unlock(&s->mu);
        *prompt = nb_prom_get(body, "nibble:prompt_tokens_total", &x) ? x : NAN;
        *gen = nb_prom_get(body, "nibble:generation_tokens_total", &x) ? x : NAN;
    }
    free(body);
    return ok;
}

static void *nb_scraper_main(void *arg)
{
    nb_prom_scraper *s = arg;
    for (;;) {
        struct timespec ts = {s->period_ms / 1000, (long)(s->period_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        double a, b;
        nb_scrape(s, &a, &b);
    }
    return NULL;
}

nb_status nb_prom_scraper_start(const char *base_url, const char *api_key, int period_ms, nb_prom_scraper **out)
{
    nb_prom_scraper *s = calloc(1, sizeof *s);
    if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "metrics scraper");
    snprintf(s->base_url, sizeof s->base_url, "%s", base_url);
    snprintf(s->api_key, sizeof s->api_key, "%s", api_key ? api_key : "");
    s->period_ms = period_ms > 0 ? period_ms : 500;
    pthread_mutex_init(&s->mu, NULL);
    s->v.prompt_tokens = s->v.gen_tokens = s->v.kv_usage_peak = s->v.running_peak = s->v.waiting_peak = NAN;
    s->prompt0 = s->gen0 = NAN;
    nb_scrape(s, &s->prompt0, &s->gen0);
    if (pthread_create(&s->th, NULL, nb_scraper_main, s) != 0) {
        free(s);
        return nb_error(NB_ERR_INTERNAL, "metrics scraper: pthread_create failed");
    }
    *out = s;
    return NB_OK;
}

void nb_prom_scraper_finish(nb_prom_scraper *s, nb_prom_view *view)
{
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    double p1 = NAN, g1 = NAN;
    nb_scrape(s, &p1, &g1);
    *view = s->v;
    view->prompt_tokens = p1 - s->prompt0;
    view->gen_tokens = g1 - s->gen0;
    pthread_mutex_destroy(&s->mu);
    free(s);
}
