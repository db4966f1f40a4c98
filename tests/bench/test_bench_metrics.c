/* Unit tests of the benchmark's arithmetic: SGLang-defined metrics on hand-built
 * timelines, numpy-style percentiles, the /metrics parser, workload lengths, the JSON
 * line and the HTML report, the NVML summary arithmetic.
 *   build-srv/tests/test_bench_metrics [NAME_SUBSTRING] */
#include "nbtest.h"
#include "base/file.h"
#include "tools/bench/dataset.h"
#include "tools/bench/metrics.h"
#include "tools/bench/prom.h"
#include "tools/bench/report.h"
#include "tools/nvml.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <unistd.h>

static void test_percentile(void)
{
    double v[] = {1, 2, 3, 4};
    NB_CHECK_NEAR(nb_bench_percentile(v, 4, 50), 2.5, 1e-12);
    NB_CHECK_NEAR(nb_bench_percentile(v, 4, 90), 3.7, 1e-12);
    NB_CHECK_NEAR(nb_bench_percentile(v, 4, 99), 3.97, 1e-12);
    NB_CHECK_NEAR(nb_bench_percentile(v, 4, 100), 4, 1e-12);
    NB_CHECK_NEAR(nb_bench_percentile(v, 4, 0), 1, 1e-12);
    double one[] = {7};
    NB_CHECK_NEAR(nb_bench_percentile(one, 1, 99), 7, 1e-12);
    double w[] = {5, 1, 3};
    nb_bench_stat st;
    nb_bench_stat_of(w, 3, 1000, &st);
    NB_CHECK_NEAR(st.mean, 3000, 1e-9);
    NB_CHECK_NEAR(st.median, 3000, 1e-9);
    NB_CHECK_NEAR(st.std, 1632.9931618554521, 1e-6); /* numpy.std([1,3,5]) * 1000 */
    NB_CHECK_NEAR(st.max, 5000, 1e-9);
    nb_bench_stat_of(w, 0, 1000, &st);
    NB_CHECK(st.mean == 0 && st.p99 == 0 && st.n == 0);
}

static nb_bench_req nb_mk(double start, double ttft, double lat, int out, int prompt, int ok, const double *itl, int n)
{
    nb_bench_req r = {0};
    r.start_s = start;
    r.ttft_s = ttft;
    r.latency_s = lat;
    r.output_len = out;
    r.prompt_len = prompt;
    r.success = ok;
    for (int i = 0; i < n; i++) nb_bench_req_add_itl(&r, itl[i]);
    return r;
}

static void test_timeline(void)
{
    const double ia[] = {0.05, 0.05, 0.1}, ib[] = {0.1};
    nb_bench_req r[4];
    r[0] = nb_mk(0.0, 0.1, 0.3, 4, 10, 1, ia, 3);
    r[1] = nb_mk(0.05, 0.2, 0.4, 2, 20, 1, ib, 1);
    r[2] = nb_mk(0.5, 0, 0.01, 0, 7, 0, NULL, 0);
    r[3] = nb_mk(0.31, 0.05, 0.05, 1, 5, 1, NULL, 0);
    nb_bench_metrics m;
    NB_CHECK_OK(nb_bench_compute(r, 4, 1.0, &m));
    NB_CHECK(m.completed == 3 && m.failed == 1);
    NB_CHECK(m.total_input == 35 && m.total_output == 7);
    NB_CHECK_NEAR(m.request_throughput, 3, 1e-12);
    NB_CHECK_NEAR(m.input_throughput, 35, 1e-12);
    NB_CHECK_NEAR(m.output_throughput, 7, 1e-12);
    NB_CHECK_NEAR(m.total_throughput, 42, 1e-12);
    /* TPOT excludes the first token and requests of one token: A (0.3-0.1)/3, B 0.2/1. */
    NB_CHECK(m.tpot_ms.n == 2);
    NB_CHECK_NEAR(m.tpot_ms.mean, (0.2 / 3 + 0.2) / 2 * 1000, 1e-9);
    NB_CHECK_NEAR(m.tpot_ms.p99, (0.2 / 3 + 0.99 * (0.2 - 0.2 / 3)) * 1000, 1e-9);
    /* ITL: every chunk gap of successful requests. */
    NB_CHECK(m.itl_ms.n == 4);
    NB_CHECK_NEAR(m.itl_ms.mean, 75, 1e-9);
    NB_CHECK_NEAR(m.itl_ms.median, 75, 1e-9);
    NB_CHECK_NEAR(m.itl_ms.p90, 100, 1e-9);
    NB_CHECK_NEAR(m.itl_ms.max, 100, 1e-9);
    NB_CHECK_NEAR(m.ttft_ms.mean, 350.0 / 3, 1e-9);
    NB_CHECK_NEAR(m.ttft_ms.median, 100, 1e-9);
    NB_CHECK_NEAR(m.ttft_ms.p90, 180, 1e-9);
    NB_CHECK_NEAR(m.ttft_ms.std, 62.36095644623235, 1e-6);
    NB_CHECK_NEAR(m.e2e_ms.mean, 250, 1e-9);
    NB_CHECK_NEAR(m.e2e_ms.median, 300, 1e-9);
    NB_CHECK_NEAR(m.e2e_ms.max, 400, 1e-9);
    NB_CHECK_NEAR(m.concurrency, 0.75, 1e-12);
    NB_CHECK(m.peak_concurrency == 2);
    NB_CHECK_STATUS(nb_bench_compute(r, 4, 0, &m), NB_ERR_INVALID_ARG);
    for (int i = 0; i < 4; i++) nb_bench_req_free(&r[i]);
}

static void test_peak_back_to_back(void)
{
    /* A request that starts the instant another ends does not overlap it. */
    nb_bench_req r[3];
    r[0] = nb_mk(0.0, 0.1, 1.0, 2, 1, 1, NULL, 0);
    r[1] = nb_mk(1.0, 0.1, 1.0, 2, 1, 1, NULL, 0);
    r[2] = nb_mk(1.5, 0.1, 0.2, 2, 1, 1, NULL, 0);
    nb_bench_metrics m;
    NB_CHECK_OK(nb_bench_compute(r, 3, 2.0, &m));
    NB_CHECK(m.peak_concurrency == 2);
}

static void test_prom(void)
{
    const char *t = "# HELP nibble:kv_cache_usage_perc x\n"
                    "# TYPE nibble:kv_cache_usage_perc gauge\n"
                    "nibble:kv_cache_usage_perc 0.25\n"
                    "nibble:kv_cache_usage_perc_other 9\n"
                    "nibble:gpu_power_watts{gpu=\"0\"} 100.5\n"
                    "nibble:gpu_power_watts{gpu=\"1\",note=\"a}b\"} 200\n"
                    "nibble:x_total 3 1700000000\n";
    double v;
    NB_CHECK(nb_prom_get(t, "nibble:kv_cache_usage_perc", &v) == 1);
    NB_CHECK_NEAR(v, 0.25, 1e-12);
    NB_CHECK(nb_prom_get(t, "nibble:gpu_power_watts", &v) == 2);
    NB_CHECK_NEAR(v, 300.5, 1e-12);
    NB_CHECK(nb_prom_get(t, "nibble:x_total", &v) == 1);
    NB_CHECK_NEAR(v, 3, 1e-12);
    NB_CHECK(nb_prom_get(t, "nibble:absent", &v) == 0 && v == 0);
}

static void test_dataset_lengths(void)
{
    nb_bench_dataset_cfg c = {.random = 1, .input_len = 100, .output_len = 40, .range_ratio = 1, .vocab_size = 50};
    nb_bench_prompt *p;
    NB_CHECK_OK(nb_bench_dataset_make(&c, 200, 7, &p));
    int bad = 0;
    for (int i = 0; i < 200; i++) {
        bad += p[i].n_ids != 100 || p[i].prompt_len != 100 || p[i].output_len != 40;
        for (int k = 0; k < p[i].n_ids; k++) bad += p[i].ids[k] < 0 || p[i].ids[k] >= 50;
    }
    NB_CHECK(bad == 0);
    /* Fresh prompts: no two requests share their first 8 ids. */
    int same = 0;
    for (int i = 1; i < 200; i++) same += !memcmp(p[0].ids, p[i].ids, 8 * sizeof(int));
    NB_CHECK(same == 0);
    nb_bench_dataset_free(p, 200);
    c.range_ratio = 0.5;
    NB_CHECK_OK(nb_bench_dataset_make(&c, 2000, 7, &p));
    double sum = 0;
    int lo = 1 << 30, hi = 0;
    for (int i = 0; i < 2000; i++) {
        sum += p[i].prompt_len;
        lo = NB_MIN(lo, p[i].prompt_len), hi = NB_MAX(hi, p[i].prompt_len);
    }
    NB_CHECK(lo >= 50 && hi <= 100 && lo <= 52 && hi >= 98);
    NB_CHECK_NEAR(sum / 2000, 75, 1.5);
    nb_bench_dataset_free(p, 2000);
    c.range_ratio = 0; /* SGLang's default: [1, L] */
    c.as_text = 1;
    NB_CHECK_OK(nb_bench_dataset_make(&c, 500, 3, &p));
    lo = 1 << 30;
    for (int i = 0; i < 500; i++) {
        lo = NB_MIN(lo, p[i].prompt_len);
        NB_CHECK(p[i].text && (int)strlen(p[i].text) == p[i].prompt_len);
    }
    NB_CHECK(lo >= 1 && lo < 10);
    nb_bench_dataset_free(p, 500);
    c.range_ratio = 2;
    NB_CHECK_STATUS(nb_bench_dataset_make(&c, 5, 1, &p), NB_ERR_INVALID_ARG);
}

static void test_tokenizer_prompts(void)
{
    /* The built-in byte tokenizer with two specials: every prompt must encode to exactly L. */
    const char *specials[] = {"<|endoftext|>", "<|user|>"};
    nb_tokenizer *tok;
    NB_CHECK_OK(nb_tokenizer_builtin_bytes(specials, 2, &tok));
    nb_bench_dataset_cfg c = {.random = 1, .input_len = 40, .output_len = 4, .range_ratio = 0.5, .tok = tok};
    nb_bench_prompt *p;
    NB_CHECK_OK(nb_bench_dataset_make(&c, 50, 9, &p));
    int bad = 0;
    for (int i = 0; i < 50; i++) {
        int32_t *ids;
        size_t n;
        NB_CHECK_OK(nb_tokenizer_encode(tok, p[i].text, strlen(p[i].text), 0, &ids, &n));
        bad += (int)n != p[i].prompt_len || p[i].prompt_len < 20 || p[i].prompt_len > 40;
        for (size_t k = 0; k < n; k++) bad += nb_tokenizer_is_special(tok, ids[k]);
        free(ids);
    }
    NB_CHECK(bad == 0);
    nb_bench_dataset_free(p, 50);
    nb_tokenizer_free(tok);
}

static void test_sharegpt(void)
{
    char path[] = "/tmp/nb_sharegpt_XXXXXX";
    int fd = mkstemp(path);
    NB_CHECK(fd >= 0);
    const char *json = "[{\"conversations\":[{\"from\":\"human\",\"value\":\"Tell me about the sea and the sky please\"},"
                       "{\"from\":\"gpt\",\"value\":\"The sea is wide and the sky is high above it all.\"}]},"
                       "{\"conversations\":[{\"from\":\"human\",\"value\":\"hi\"}]}]";
    NB_CHECK(write(fd, json, strlen(json)) == (ssize_t)strlen(json));
    close(fd);
    nb_bench_dataset_cfg c = {.random = 0, .sharegpt = path, .range_ratio = 1};
    nb_bench_prompt *p;
    NB_CHECK_OK(nb_bench_dataset_make(&c, 3, 1, &p));
    for (int i = 0; i < 3; i++) {
        NB_CHECK(p[i].text && !strcmp(p[i].text, "Tell me about the sea and the sky please"));
        NB_CHECK(p[i].output_len == 13); /* 49 bytes / 4, rounded up */
    }
    nb_bench_dataset_free(p, 3);
    unlink(path);
}

static void test_report(void)
{
    nb_bench_setup su = {0};
    snprintf(su.base_url, sizeof su.base_url, "http://x");
    snprintf(su.backend, sizeof su.backend, "completions");
    snprintf(su.model, sizeof su.model, "m<1>");
    snprintf(su.dataset, sizeof su.dataset, "random");
    su.input_len = 8;
    su.output_len = 4;
    su.range_ratio = 1;
    const double ia[] = {0.01, 0.02};
    nb_bench_req r[2];
    r[0] = nb_mk(0, 0.1, 0.2, 3, 8, 1, ia, 2);
    r[1] = nb_mk(0, 0.1, 0.2, 3, 8, 0, NULL, 0);
    snprintf(r[1].error, sizeof r[1].error, "HTTP 503");
    nb_bench_level lv[2] = {{0}};
    for (int k = 0; k < 2; k++) {
        lv[k].concurrency = k ? 4 : 1;
        lv[k].num_prompts = 2;
        NB_CHECK_OK(nb_bench_compute(r, 2, 1.0, &lv[k].m));
        NB_CHECK_OK(nb_bench_level_keep_samples(&lv[k], r, 2));
        lv[k].server.prompt_tokens = lv[k].server.gen_tokens = NAN;
    }
    lv[1].n_gpus = 1;
    lv[1].gpu[0] = (nb_gpu_summary){.samples = 3, .power_mean_w = 235, .power_max_w = 300, .power_limit_w = 600};
    NB_CHECK(!strcmp(lv[0].first_error, "HTTP 503"));
    char *line = nb_bench_json_line(&su, &lv[1]);
    cJSON *j = cJSON_Parse(line);
    NB_CHECK(j != NULL);
    NB_CHECK(cJSON_GetObjectItem(j, "completed")->valueint == 1);
    NB_CHECK(cJSON_GetObjectItem(j, "failed")->valueint == 1);
    NB_CHECK(cJSON_GetObjectItem(j, "total_output_tokens")->valueint == 3);
    NB_CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "request_rate")));
    NB_CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "gpus"), 0), "power_mean_pct_of_limit")
                      ->valuedouble, 235.0 / 6, 1e-9);
    NB_CHECK(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "server_metrics"), "prompt_tokens")));
    /* no clock event reasons read: null, not 0 */
    NB_CHECK(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "gpus"), 0), "power_capped_pct")));
    cJSON_Delete(j);
    free(line);
    char path[] = "/tmp/nb_report_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    NB_CHECK_OK(nb_bench_write_html(path, &su, lv, 2));
    char *html;
    size_t n;
    NB_CHECK_OK(nb_read_file(path, &html, &n, 0));
    NB_CHECK(strstr(html, "<svg") && strstr(html, "m&lt;1&gt;") && strstr(html, "235 / 300 (39%)"));
    NB_CHECK(!strstr(html, "<script") && !strstr(html, "src=")); /* self-contained */
    free(html);
    unlink(path);
    for (int k = 0; k < 2; k++) nb_bench_level_free(&lv[k]);
    for (int i = 0; i < 2; i++) nb_bench_req_free(&r[i]);
}

static void test_gpu_summary(void)
{
    nb_gpu_summary s = {0};
    nb_gpu_reading a = {100, 600, 1500, 50, 10, 80, 1, 0}, b = {200, 600, 1700, 100, 12, 80, 0, 0};
    nb_gpu_reading c = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    nb_gpu_summary_add(&s, &a);
    nb_gpu_summary_add(&s, &b);
    NB_CHECK_NEAR(s.power_mean_w, 150, 1e-9);
    NB_CHECK_NEAR(s.power_max_w, 200, 1e-9);
    NB_CHECK_NEAR(s.sm_clock_mean_mhz, 1600, 1e-9);
    NB_CHECK_NEAR(s.util_mean_pct, 75, 1e-9);
    NB_CHECK_NEAR(s.mem_used_max_gib, 12, 1e-9);
    NB_CHECK(s.reason_samples == 2);
    NB_CHECK_NEAR(s.power_capped_pct, 50, 1e-9); /* the power cap held the clock in one of two */
    NB_CHECK_NEAR(s.thermal_pct, 0, 1e-9);
    nb_gpu_summary_add(&s, &c); /* a refused reading changes nothing but the count */
    NB_CHECK(s.samples == 3 && s.reason_samples == 2);
    NB_CHECK_NEAR(s.power_max_w, 200, 1e-9);
    NB_CHECK_NEAR(s.power_capped_pct, 50, 1e-9);
    /* the report line names the share only when the reasons were read */
    char buf[512] = "";
    FILE *mf = fmemopen(buf, sizeof buf, "w");
    NB_CHECK(mf != NULL);
    nb_gpu_summary_fprint(mf, 0, &s);
    nb_gpu_summary none = {.samples = 1, .power_mean_w = 90, .power_limit_w = 700};
    nb_gpu_summary_fprint(mf, 1, &none);
    fclose(mf);
    NB_CHECK(strstr(buf, "power-capped 50% / thermal 0% of samples") != NULL);
    NB_CHECK(strstr(buf, "GPU 1") && !strstr(strstr(buf, "GPU 1"), "power-capped"));
    /* Without a driver the sampler is absent (NULL, not an error): the report says n/a. */
    int n;
    if (nb_nvml_open(&n) != NB_OK) {
        nb_nvml_sampler *smp = (nb_nvml_sampler *)1;
        NB_CHECK_OK(nb_nvml_sampler_start(100, &smp));
        NB_CHECK(smp == NULL);
        nb_gpu_summary out[2];
        NB_CHECK(nb_nvml_sampler_snapshot(smp, out, 2) == 0);
    }
}

static const nb_test tests[] = {
    {"percentile", test_percentile},       {"timeline", test_timeline},     {"peak_back_to_back", test_peak_back_to_back},
    {"prom", test_prom},                   {"dataset_lengths", test_dataset_lengths}, {"sharegpt", test_sharegpt}, {"tokenizer_prompts", test_tokenizer_prompts},
    {"report", test_report},               {"gpu_summary", test_gpu_summary},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
