/* Benchmark tables, JSON lines and the HTML report (tools/bench/report.h). */
#include "tools/bench/report.h"
#include "base/error.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int nb_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

nb_status nb_bench_level_keep_samples(nb_bench_level *lv, const nb_bench_req *reqs, int n)
{
    int ni = 0;
    for (int i = 0; i < n; i++)
        if (reqs[i].success) ni += reqs[i].n_itl;
    lv->ttft_ms = malloc(((size_t)n + 1) * sizeof(double));
    lv->e2e_ms = malloc(((size_t)n + 1) * sizeof(double));
    lv->itl_ms = malloc(((size_t)ni + 1) * sizeof(double));
    if (!lv->ttft_ms || !lv->e2e_ms || !lv->itl_ms) return nb_error(NB_ERR_OUT_OF_MEMORY, "bench: samples");
    lv->n_ttft = lv->n_e2e = lv->n_itl = 0;
    for (int i = 0; i < n; i++) {
        if (!reqs[i].success) {
            if (!lv->first_error[0]) snprintf(lv->first_error, sizeof lv->first_error, "%s", reqs[i].error);
            continue;
        }
        lv->ttft_ms[lv->n_ttft++] = reqs[i].ttft_s * 1000;
        lv->e2e_ms[lv->n_e2e++] = reqs[i].latency_s * 1000;
        for (int k = 0; k < reqs[i].n_itl; k++) lv->itl_ms[lv->n_itl++] = reqs[i].itl[k] * 1000;
    }
    qsort(lv->ttft_ms, (size_t)lv->n_ttft, sizeof(double), nb_cmp_d);
    qsort(lv->e2e_ms, (size_t)lv->n_e2e, sizeof(double), nb_cmp_d);
    qsort(lv->itl_ms, (size_t)lv->n_itl, sizeof(double), nb_cmp_d);
    return NB_OK;
}

void nb_bench_level_free(nb_bench_level *lv)
{
    free(lv->ttft_ms), free(lv->itl_ms), free(lv->e2e_ms);
    lv->ttft_ms = lv->itl_ms = lv->e2e_ms = NULL;
}

static void nb_fmt_num(char *b, size_t n, double v, const char *fmt)
{
    if (isnan(v)) snprintf(b, n, "n/a");
    else snprintf(b, n, fmt, v);
}

static void nb_print_stat(FILE *f, const char *name, const nb_bench_stat *s)
{
    fprintf(f, "  %-10s %10.2f %10.2f %10.2f %10.2f %10.2f\n", name, s->mean, s->median, s->p90, s->p99, s->max);
}

void nb_bench_print_level(FILE *f, const nb_bench_setup *su, const nb_bench_level *lv)
{
    const nb_bench_metrics *m = &lv->m;
    char rate[32];
    if (su->request_rate > 0 && isfinite(su->request_rate)) snprintf(rate, sizeof rate, "%g req/s", su->request_rate);
    else snprintf(rate, sizeof rate, "inf");
    fprintf(f, "\n=========== concurrency %d  (%s, %s, rate %s) ===========\n", lv->concurrency, su->backend,
            su->dataset, rate);
    fprintf(f, "  %-36s %d / %d\n", "Successful / failed requests:", m->completed, m->failed);
    if (m->failed && lv->first_error[0]) fprintf(f, "  %-36s %s\n", "First error:", lv->first_error);
    fprintf(f, "  %-36s %.2f\n", "Benchmark duration (s):", m->duration_s);
    fprintf(f, "  %-36s %lld\n", "Total input tokens:", (long long)m->total_input);
    fprintf(f, "  %-36s %lld\n", "Total generated tokens:", (long long)m->total_output);
    fprintf(f, "  %-36s %.2f\n", "Request throughput (req/s):", m->request_throughput);
    fprintf(f, "  %-36s %.2f\n", "Input token throughput (tok/s):", m->input_throughput);
    fprintf(f, "  %-36s %.2f\n", "Output token throughput (tok/s):", m->output_throughput);
    fprintf(f, "  %-36s %.2f\n", "Total token throughput (tok/s):", m->total_throughput);
    fprintf(f, "  %-36s %.2f (peak in flight %d)\n", "Concurrency (sum E2E / duration):", m->concurrency,
            m->peak_concurrency);
    fprintf(f, "  %-10s %10s %10s %10s %10s %10s\n", "(ms)", "mean", "median", "p90", "p99", "max");
    nb_print_stat(f, "TTFT", &m->ttft_ms);
    nb_print_stat(f, "TPOT", &m->tpot_ms);
    nb_print_stat(f, "ITL", &m->itl_ms);
    nb_print_stat(f, "E2E", &m->e2e_ms);
    if (lv->n_gpus == 0) {
        fprintf(f, "  %-36s n/a (no NVML)\n", "GPU power:");
    }
    for (int g = 0; g < lv->n_gpus; g++) nb_gpu_summary_fprint(f, g, &lv->gpu[g]);
    if (lv->server.available) {
        char a[32], b[32], c[32], d[32];
        nb_fmt_num(a, sizeof a, lv->server.prompt_tokens, "%.0f");
        nb_fmt_num(b, sizeof b, lv->server.gen_tokens, "%.0f");
        nb_fmt_num(c, sizeof c, lv->server.kv_usage_peak * 100, "%.1f%%");
        nb_fmt_num(d, sizeof d, lv->server.running_peak, "%.0f");
        fprintf(f, "  server /metrics: prompt tokens %s, generated %s, KV usage peak %s, running peak %s\n", a, b, c,
                d);
    } else {
        fprintf(f, "  server /metrics: n/a\n");
    }
}

void nb_bench_print_summary(FILE *f, const nb_bench_level *lv, int n)
{
    fprintf(f, "\n%6s %6s %6s %9s %9s %9s %9s %9s %9s %9s %8s\n", "conc", "ok", "fail", "req/s", "out tok/s",
            "TTFT p50", "TTFT p99", "TPOT p50", "ITL p50", "E2E p50", "GPU W");
    for (int i = 0; i < n; i++) {
        const nb_bench_metrics *m = &lv[i].m;
        char w[32];
        if (lv[i].n_gpus) {
            double sum = 0;
            for (int g = 0; g < lv[i].n_gpus; g++) sum += lv[i].gpu[g].power_mean_w;
            snprintf(w, sizeof w, "%.0f", sum / lv[i].n_gpus);
        } else {
            snprintf(w, sizeof w, "n/a");
        }
        fprintf(f, "%6d %6d %6d %9.2f %9.1f %9.1f %9.1f %9.2f %9.2f %9.1f %8s\n", lv[i].concurrency, m->completed,
                m->failed, m->request_throughput, m->output_throughput, m->ttft_ms.median, m->ttft_ms.p99,
                m->tpot_ms.median, m->itl_ms.median, m->e2e_ms.median, w);
    }
    fprintf(f, "(latencies in ms; TPOT excludes the first token; ITL per streamed chunk)\n");
}

static void nb_json_num_or_null(cJSON *o, const char *k, double v)
{
    if (isnan(v) || isinf(v)) cJSON_AddNullToObject(o, k);
    else cJSON_AddNumberToObject(o, k, v);
}

static void nb_json_stat(cJSON *o, const char *name, const nb_bench_stat *s)
{
    char k[64];
    snprintf(k, sizeof k, "mean_%s_ms", name), cJSON_AddNumberToObject(o, k, s->mean);
    snprintf(k, sizeof k, "median_%s_ms", name), cJSON_AddNumberToObject(o, k, s->median);
    snprintf(k, sizeof k, "std_%s_ms", name), cJSON_AddNumberToObject(o, k, s->std);
    snprintf(k, sizeof k, "p90_%s_ms", name), cJSON_AddNumberToObject(o, k, s->p90);
    snprintf(k, sizeof k, "p99_%s_ms", name), cJSON_AddNumberToObject(o, k, s->p99);
    snprintf(k, sizeof k, "max_%s_ms", name), cJSON_AddNumberToObject(o, k, s->max);
}

char *nb_bench_json_line(const nb_bench_setup *su, const nb_bench_level *lv)
{
    const nb_bench_metrics *m = &lv->m;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tool", "nibble bench");
    cJSON_AddStringToObject(o, "base_url", su->base_url);
    cJSON_AddStringToObject(o, "backend", su->backend);
    cJSON_AddStringToObject(o, "model", su->model);
    cJSON_AddStringToObject(o, "dataset_name", su->dataset);
    cJSON_AddNumberToObject(o, "max_concurrency", lv->concurrency);
    nb_json_num_or_null(o, "request_rate", su->request_rate > 0 ? su->request_rate : INFINITY);
    cJSON_AddNumberToObject(o, "num_prompts", lv->num_prompts);
    cJSON_AddNumberToObject(o, "random_input_len", su->input_len);
    cJSON_AddNumberToObject(o, "random_output_len", su->output_len);
    cJSON_AddNumberToObject(o, "random_range_ratio", su->range_ratio);
    cJSON_AddNumberToObject(o, "seed", (double)su->seed);
    cJSON_AddBoolToObject(o, "ignore_eos", su->ignore_eos);
    cJSON_AddStringToObject(o, "input_lengths", su->length_note);
    if (su->extra_body[0]) {
        cJSON *x = cJSON_Parse(su->extra_body);
        if (x) cJSON_AddItemToObject(o, "extra_request_body", x);
    }
    cJSON_AddNumberToObject(o, "duration", m->duration_s);
    cJSON_AddNumberToObject(o, "completed", m->completed);
    cJSON_AddNumberToObject(o, "failed", m->failed);
    cJSON_AddNumberToObject(o, "total_input_tokens", (double)m->total_input);
    cJSON_AddNumberToObject(o, "total_output_tokens", (double)m->total_output);
    cJSON_AddNumberToObject(o, "request_throughput", m->request_throughput);
    cJSON_AddNumberToObject(o, "input_throughput", m->input_throughput);
    cJSON_AddNumberToObject(o, "output_throughput", m->output_throughput);
    cJSON_AddNumberToObject(o, "total_throughput", m->total_throughput);
    nb_json_stat(o, "ttft", &m->ttft_ms);
    nb_json_stat(o, "tpot", &m->tpot_ms);
    nb_json_stat(o, "itl", &m->itl_ms);
    nb_json_stat(o, "e2e_latency", &m->e2e_ms);
    cJSON_AddNumberToObject(o, "concurrency", m->concurrency);
    cJSON_AddNumberToObject(o, "peak_concurrency", m->peak_concurrency);
    if (lv->first_error[0]) cJSON_AddStringToObject(o, "first_error", lv->first_error);
    cJSON *gpus = cJSON_AddArrayToObject(o, "gpus");
    for (int g = 0; g < lv->n_gpus; g++) {
        const nb_gpu_summary *s = &lv->gpu[g];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "name", s->name);
        cJSON_AddNumberToObject(x, "samples", s->samples);
        cJSON_AddNumberToObject(x, "power_mean_w", s->power_mean_w);
        cJSON_AddNumberToObject(x, "power_max_w", s->power_max_w);
        cJSON_AddNumberToObject(x, "power_limit_w", s->power_limit_w);
        nb_json_num_or_null(x, "power_mean_pct_of_limit", s->power_limit_w > 0 ? 100 * s->power_mean_w / s->power_limit_w : NAN);
        cJSON_AddNumberToObject(x, "sm_clock_mean_mhz", s->sm_clock_mean_mhz);
        cJSON_AddNumberToObject(x, "sm_clock_max_mhz", s->sm_clock_max_mhz);
        cJSON_AddNumberToObject(x, "util_mean_pct", s->util_mean_pct);
        cJSON_AddNumberToObject(x, "mem_used_max_gib", s->mem_used_max_gib);
        nb_json_num_or_null(x, "power_capped_pct", s->reason_samples > 0 ? s->power_capped_pct : NAN);
        nb_json_num_or_null(x, "thermal_slowdown_pct", s->reason_samples > 0 ? s->thermal_pct : NAN);
        cJSON_AddItemToArray(gpus, x);
    }
    cJSON *srv = cJSON_AddObjectToObject(o, "server_metrics");
    cJSON_AddBoolToObject(srv, "available", lv->server.available);
    nb_json_num_or_null(srv, "prompt_tokens", lv->server.prompt_tokens);
    nb_json_num_or_null(srv, "generation_tokens", lv->server.gen_tokens);
    nb_json_num_or_null(srv, "kv_usage_peak", lv->server.kv_usage_peak);
    nb_json_num_or_null(srv, "running_peak", lv->server.running_peak);
    nb_json_num_or_null(srv, "waiting_peak", lv->server.waiting_peak);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

nb_status nb_bench_append_jsonl(const char *path, const nb_bench_setup *su, const nb_bench_level *lv)
{
    char *line = nb_bench_json_line(su, lv);
    if (!line) return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: JSON line", path);
    FILE *f = fopen(path, "a");
    if (!f) {
        free(line);
        return nb_error(NB_ERR_IO, "%s: cannot open for appending", path);
    }
    int bad = fprintf(f, "%s\n", line) < 0;
    bad |= fclose(f) != 0;
    free(line);
    return bad ? nb_error(NB_ERR_IO, "%s: write failed", path) : NB_OK;
}

/* ---- HTML ------------------------------------------------------------------------- */

static const char *const nb_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                        "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

static void nb_html_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

/* A round upper bound for an axis (1, 2, 5 x 10^k). */
static double nb_nice_max(double v)
{
    if (!(v > 0)) return 1;
    double p = pow(10, floor(log10(v))), steps[] = {1, 2, 5, 10};
    for (int i = 0; i < 4; i++)
        if (v <= steps[i] * p) return steps[i] * p;
    return 10 * p;
}

#define NB_W 640
#define NB_H 300
#define NB_L 70
#define NB_R 20
#define NB_T 30
#define NB_B 45

static void nb_svg_axes(FILE *f, const char *title, const char *xlabel, const char *ylabel, double ymax)
{
    int pw = NB_W - NB_L - NB_R, ph = NB_H - NB_T - NB_B;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif' font-size='11'>\n",
            NB_W, NB_H);
    fprintf(f, "<text x='%d' y='18' font-size='13' font-weight='bold'>", NB_L);
    nb_html_escape(f, title);
    fprintf(f, "</text>\n<rect x='%d' y='%d' width='%d' height='%d' fill='none' stroke='#999'/>\n", NB_L, NB_T, pw, ph);
    for (int i = 0; i <= 4; i++) {
        double y = NB_T + ph - ph * i / 4.0;
        fprintf(f, "<line x1='%d' x2='%d' y1='%.1f' y2='%.1f' stroke='#eee'/>", NB_L, NB_L + pw, y, y);
        fprintf(f, "<text x='%d' y='%.1f' text-anchor='end'>%.4g</text>\n", NB_L - 4, y + 4, ymax * i / 4.0);
    }
    fprintf(f, "<text x='%d' y='%d' text-anchor='middle'>", NB_L + pw / 2, NB_H - 6);
    nb_html_escape(f, xlabel);
    fprintf(f, "</text><text transform='translate(14,%d) rotate(-90)' text-anchor='middle'>", NB_T + ph / 2);
    nb_html_escape(f, ylabel);
    fprintf(f, "</text>\n");
}

/* Output throughput against concurrency on a log2 x axis (levels are far apart). */
static void nb_svg_throughput(FILE *f, const nb_bench_level *lv, int n)
{
    int pw = NB_W - NB_L - NB_R, ph = NB_H - NB_T - NB_B;
    double ymax = 0, xmin = 1e30, xmax = 0;
    for (int i = 0; i < n; i++) {
        ymax = fmax(ymax, lv[i].m.output_throughput);
        xmin = fmin(xmin, lv[i].concurrency);
        xmax = fmax(xmax, lv[i].concurrency);
    }
    ymax = nb_nice_max(ymax);
    double lx0 = log2(xmin), lx1 = log2(xmax);
    if (lx1 - lx0 < 1e-9) lx1 = lx0 + 1, lx0 -= 1;
    nb_svg_axes(f, "Output throughput vs concurrency", "concurrent requests (log scale)", "output tokens / s", ymax);
    fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", nb_colors[0]);
    for (int i = 0; i < n; i++)
        fprintf(f, "%.1f,%.1f ", NB_L + pw * (log2(lv[i].concurrency) - lx0) / (lx1 - lx0),
                NB_T + ph - ph * lv[i].m.output_throughput / ymax);
    fprintf(f, "'/>\n");
    for (int i = 0; i < n; i++) {
        double x = NB_L + pw * (log2(lv[i].concurrency) - lx0) / (lx1 - lx0);
        double y = NB_T + ph - ph * lv[i].m.output_throughput / ymax;
        fprintf(f, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'><title>%d concurrent: %.1f tok/s</title></circle>", x, y,
                nb_colors[0], lv[i].concurrency, lv[i].m.output_throughput);
        fprintf(f, "<text x='%.1f' y='%d' text-anchor='middle'>%d</text>\n", x, NB_T + ph + 14, lv[i].concurrency);
    }
    fprintf(f, "</svg>\n");
}

/* Empirical CDF of one latency per level (x: ms on a log axis, since levels differ by
 * orders of magnitude; y: fraction of samples). */
static void nb_svg_cdf(FILE *f, const char *title, const nb_bench_level *lv, int n, int which)
{
    int pw = NB_W - NB_L - NB_R, ph = NB_H - NB_T - NB_B;
    double hi = 0, lo = INFINITY;
    for (int i = 0; i < n; i++) {
        const double *v = which == 0 ? lv[i].ttft_ms : which == 1 ? lv[i].itl_ms : lv[i].e2e_ms;
        int k = which == 0 ? lv[i].n_ttft : which == 1 ? lv[i].n_itl : lv[i].n_e2e;
        if (!k) continue;
        hi = fmax(hi, v[k - 1]);
        /* The p0.5 bounds the axis below so a stray near-zero gap does not stretch it. */
        double p = nb_bench_percentile(v, (size_t)k, 0.5);
        if (p > 0) lo = fmin(lo, p);
    }
    if (!(hi > 0)) hi = 1;
    if (!isfinite(lo) || lo >= hi) lo = hi / 10;
    double l0 = floor(log10(lo)), l1 = ceil(log10(hi));
    if (l1 <= l0) l1 = l0 + 1;
    nb_svg_axes(f, title, "milliseconds (log scale)", "fraction of samples", 1.0);
    for (double d = l0; d <= l1 + 1e-9; d += 1) {
        double x = NB_L + pw * (d - l0) / (l1 - l0);
        fprintf(f, "<line x1='%.1f' x2='%.1f' y1='%d' y2='%d' stroke='#eee'/>", x, x, NB_T, NB_T + ph);
        fprintf(f, "<text x='%.1f' y='%d' text-anchor='middle'>%g</text>\n", x, NB_T + ph + 14, pow(10, d));
    }
    for (int i = 0; i < n; i++) {
        const double *v = which == 0 ? lv[i].ttft_ms : which == 1 ? lv[i].itl_ms : lv[i].e2e_ms;
        int k = which == 0 ? lv[i].n_ttft : which == 1 ? lv[i].n_itl : lv[i].n_e2e;
        const char *col = nb_colors[i % NB_ARRAY_LEN(nb_colors)];
        if (k == 0) continue;
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.5' points='", col);
        int pts = k < 200 ? k : 200; /* at most 200 points per curve keeps the file small */
        for (int j = 0; j < pts; j++) {
            int idx = (int)((double)j * (k - 1) / (pts > 1 ? pts - 1 : 1));
            double x = log10(fmax(v[idx], pow(10, l0)));
            fprintf(f, "%.1f,%.1f ", NB_L + pw * (x - l0) / (l1 - l0), NB_T + ph - ph * (idx + 1.0) / k);
        }
        fprintf(f, "'/>\n<text x='%d' y='%d' fill='%s'>%d concurrent</text>\n", NB_L + 8, NB_T + 16 + 14 * i, col,
                lv[i].concurrency);
    }
    fprintf(f, "</svg>\n");
}

static void nb_svg_power(FILE *f, const nb_bench_level *lv, int n)
{
    int pw = NB_W - NB_L - NB_R, ph = NB_H - NB_T - NB_B;
    double ymax = 0;
    for (int i = 0; i < n; i++)
        for (int g = 0; g < lv[i].n_gpus; g++) ymax = fmax(ymax, fmax(lv[i].gpu[g].power_limit_w, lv[i].gpu[g].power_max_w));
    ymax = nb_nice_max(ymax);
    nb_svg_axes(f, "GPU power per level (bar: mean, tick: max, dashed: enforced limit)", "concurrent requests", "watts",
                ymax);
    double slot = (double)pw / n;
    for (int i = 0; i < n; i++) {
        int ng = lv[i].n_gpus;
        for (int g = 0; g < ng; g++) {
            const nb_gpu_summary *s = &lv[i].gpu[g];
            double bw = slot * 0.8 / ng, x = NB_L + slot * i + slot * 0.1 + bw * g;
            double y = NB_T + ph - ph * s->power_mean_w / ymax, ym = NB_T + ph - ph * s->power_max_w / ymax;
            double yl = NB_T + ph - ph * s->power_limit_w / ymax;
            fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s'><title>GPU %d: mean %.0f W, max %.0f W, limit %.0f W</title></rect>",
                    x, y, bw * 0.9, NB_T + ph - y, nb_colors[g % 10], g, s->power_mean_w, s->power_max_w, s->power_limit_w);
            fprintf(f, "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='black'/>", x, x + bw * 0.9, ym, ym);
            fprintf(f, "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='red' stroke-dasharray='3,2'/>\n", x,
                    x + bw * 0.9, yl, yl);
        }
        fprintf(f, "<text x='%.1f' y='%d' text-anchor='middle'>%d</text>\n", NB_L + slot * (i + 0.5), NB_T + ph + 14,
                lv[i].concurrency);
    }
    fprintf(f, "</svg>\n");
}

nb_status nb_bench_write_html(const char *path, const nb_bench_setup *su, const nb_bench_level *lv, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) return nb_error(NB_ERR_IO, "%s: cannot open for writing", path);
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>nibble bench</title>\n"
               "<style>body{font-family:sans-serif;margin:24px;max-width:1000px}table{border-collapse:collapse}"
               "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}"
               "svg{display:block;margin:12px 0}</style></head><body>\n<h1>nibble bench</h1>\n<p>");
    fprintf(f, "Server <code>");
    nb_html_escape(f, su->base_url);
    fprintf(f, "</code>, model <code>");
    nb_html_escape(f, su->model);
    fprintf(f, "</code>, backend %s, dataset ", su->backend);
    nb_html_escape(f, su->dataset);
    fprintf(f, ", input %d / output %d tokens, range ratio %g, ignore_eos %s, seed %llu. ", su->input_len,
            su->output_len, su->range_ratio, su->ignore_eos ? "on" : "off", su->seed);
    nb_html_escape(f, su->length_note);
    fprintf(f, "</p>\n<p>Metric definitions follow SGLang's bench_serving: TTFT to the first text chunk, TPOT = "
               "(E2E - TTFT) / (output tokens - 1), ITL per streamed chunk, E2E to the last chunk; "
               "percentiles interpolate linearly.</p>\n<table><tr><th>concurrency</th><th>ok</th><th>failed</th>"
               "<th>duration s</th><th>req/s</th><th>output tok/s</th><th>total tok/s</th><th>TTFT p50</th>"
               "<th>TTFT p99</th><th>TPOT p50</th><th>TPOT p99</th><th>ITL p50</th><th>ITL p99</th>"
               "<th>E2E p50</th><th>E2E p99</th><th>peak in flight</th><th>GPU W mean / max (%% limit)</th></tr>\n");
    for (int i = 0; i < n; i++) {
        const nb_bench_metrics *m = &lv[i].m;
        fprintf(f, "<tr><td>%d</td><td>%d</td><td>%d</td><td>%.2f</td><td>%.2f</td><td>%.1f</td><td>%.1f</td>"
                   "<td>%.1f</td><td>%.1f</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%.1f</td>"
                   "<td>%.1f</td><td>%d</td><td>",
                lv[i].concurrency, m->completed, m->failed, m->duration_s, m->request_throughput,
                m->output_throughput, m->total_throughput, m->ttft_ms.median, m->ttft_ms.p99, m->tpot_ms.median,
                m->tpot_ms.p99, m->itl_ms.median, m->itl_ms.p99, m->e2e_ms.median, m->e2e_ms.p99,
                m->peak_concurrency);
        if (!lv[i].n_gpus) fprintf(f, "n/a");
        for (int g = 0; g < lv[i].n_gpus; g++) {
            const nb_gpu_summary *s = &lv[i].gpu[g];
            fprintf(f, "%s%.0f / %.0f (%.0f%%)", g ? "<br>" : "", s->power_mean_w, s->power_max_w,
                    s->power_limit_w > 0 ? 100 * s->power_mean_w / s->power_limit_w : 0.0);
        }
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table>\n<p>Latencies in milliseconds.</p>\n");
    nb_svg_throughput(f, lv, n);
    nb_svg_cdf(f, "Time to first token (CDF)", lv, n, 0);
    nb_svg_cdf(f, "Inter-token latency per chunk (CDF)", lv, n, 1);
    nb_svg_cdf(f, "End-to-end latency (CDF)", lv, n, 2);
    int any_gpu = 0;
    for (int i = 0; i < n; i++) any_gpu |= lv[i].n_gpus > 0;
    if (any_gpu) nb_svg_power(f, lv, n);
    else fprintf(f, "<p>GPU telemetry: n/a (NVML not available on the client machine).</p>\n");
    fprintf(f, "<h2>Server-side (/metrics)</h2><table><tr><th>concurrency</th><th>prompt tokens</th>"
               "<th>generated tokens</th><th>KV usage peak</th><th>running peak</th><th>waiting peak</th></tr>\n");
    for (int i = 0; i < n; i++) {
        const nb_prom_view *v = &lv[i].server;
        char a[32], b[32], c[32], d[32], e[32];
        nb_fmt_num(a, sizeof a, v->available ? v->prompt_tokens : NAN, "%.0f");
        nb_fmt_num(b, sizeof b, v->available ? v->gen_tokens : NAN, "%.0f");
        nb_fmt_num(c, sizeof c, v->available ? v->kv_usage_peak * 100 : NAN, "%.1f%%");
        nb_fmt_num(d, sizeof d, v->available ? v->running_peak : NAN, "%.0f");
        nb_fmt_num(e, sizeof e, v->available ? v->waiting_peak : NAN, "%.0f");
        fprintf(f, "<tr><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
                lv[i].concurrency, a, b, c, d, e);
    }
    fprintf(f, "</table>\n</body></html>\n");
    if (fclose(f) != 0) return nb_error(NB_ERR_IO, "%s: write failed", path);
    return NB_OK;
}
