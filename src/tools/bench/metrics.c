/* Serving-benchmark metric arithmetic (tools/bench/metrics.h).
 * Exercised by: build-srv/tests/test_bench_metrics */
#include "tools/bench/metrics.h"
#include "base/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

nb_status nb_bench_req_add_itl(nb_bench_req *r, double gap_s)
{
    if (r->n_itl == r->cap_itl) {
        int cap = r->cap_itl ? r->cap_itl * 2 : 64;
        double *p = realloc(r->itl, (size_t)cap * sizeof *p);
        if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "bench: ITL list of %d entries", cap);
        r->itl = p;
        r->cap_itl = cap;
    }
    r->itl[r->n_itl++] = gap_s;
    return NB_OK;
}

void nb_bench_req_free(nb_bench_req *r)
{
    free(r->itl);
    r->itl = NULL;
    r->n_itl = r->cap_itl = 0;
}

double nb_bench_percentile(const double *sorted, size_t n, double p)
{
    if (n == 0) return 0.0;
    double pos = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    if (lo >= n - 1) return sorted[n - 1];
    double frac = pos - (double)lo;
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}

static int nb_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void nb_bench_stat_of(double *v, size_t n, double scale, nb_bench_stat *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n == 0) return;
    qsort(v, n, sizeof *v, nb_cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    double mean = sum / (double)n, ss = 0;
    for (size_t i = 0; i < n; i++) ss += (v[i] - mean) * (v[i] - mean);
    out->mean = mean * scale;
    out->std = sqrt(ss / (double)n) * scale;
    out->median = nb_bench_percentile(v, n, 50) * scale;
    out->p90 = nb_bench_percentile(v, n, 90) * scale;
    out->p99 = nb_bench_percentile(v, n, 99) * scale;
    out->max = v[n - 1] * scale;
}

typedef struct nb_event {
    double t;
    int delta; /* +1 start, -1 end */
} nb_event;

static int nb_cmp_event(const void *a, const void *b)
{
    const nb_event *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->delta - y->delta; /* an end at the same instant as a start comes first */
}

nb_status nb_bench_compute(const nb_bench_req *reqs, size_t n, double duration_s, nb_bench_metrics *m)
{
    memset(m, 0, sizeof *m);
    if (!(duration_s > 0)) return nb_error(NB_ERR_INVALID_ARG, "bench: level duration %g s", duration_s);
    m->duration_s = duration_s;
    size_t n_itl = 0;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].success) n_itl += (size_t)reqs[i].n_itl;
    double *ttft = malloc((n + 1) * sizeof *ttft), *tpot = malloc((n + 1) * sizeof *tpot);
    double *e2e = malloc((n + 1) * sizeof *e2e), *itl = malloc((n_itl + 1) * sizeof *itl);
    nb_event *ev = malloc((2 * n + 1) * sizeof *ev);
    if (!ttft || !tpot || !e2e || !itl || !ev) {
        free(ttft), free(tpot), free(e2e), free(itl), free(ev);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "bench: metrics of %zu requests", n);
    }
    size_t nt = 0, np = 0, ne = 0, ni = 0, nev = 0;
    double sum_e2e = 0;
    for (size_t i = 0; i < n; i++) {
        const nb_bench_req *r = &reqs[i];
        /* Every request occupied a slot while in flight, failed or not. */
        ev[nev++] = (nb_event){r->start_s, +1};
        ev[nev++] = (nb_event){r->start_s + r->latency_s, -1};
        if (!r->success) {
            m->failed++;
            continue;
        }
        m->completed++;
        m->total_input += r->prompt_len;
        m->total_output += r->output_len;
        if (r->output_len > 1) tpot[np++] = (r->latency_s - r->ttft_s) / (double)(r->output_len - 1);
        for (int k = 0; k < r->n_itl; k++) itl[ni++] = r->itl[k];
        ttft[nt++] = r->ttft_s;
        e2e[ne++] = r->latency_s;
        sum_e2e += r->latency_s;
    }
    qsort(ev, nev, sizeof *ev, nb_cmp_event);
    int cur = 0;
    for (size_t i = 0; i < nev; i++) {
        cur += ev[i].delta;
        if (cur > m->peak_concurrency) m->peak_concurrency = cur;
    }
    m->request_throughput = m->completed / duration_s;
    m->input_throughput = (double)m->total_input / duration_s;
    m->output_throughput = (double)m->total_output / duration_s;
    m->total_throughput = (double)(m->total_input + m->total_output) / duration_s;
    m->concurrency = sum_e2e / duration_s;
    nb_bench_stat_of(ttft, nt, 1000.0, &m->ttft_ms);
    nb_bench_stat_of(tpot, np, 1000.0, &m->tpot_ms);
    nb_bench_stat_of(itl, ni, 1000.0, &m->itl_ms);
    nb_bench_stat_of(e2e, ne, 1000.0, &m->e2e_ms);
    free(ttft), free(tpot), free(e2e), free(itl), free(ev);
    return NB_OK;
}
