/* nibble bench: the serving benchmark. Sweeps concurrency levels against any
 * OpenAI-compatible server, prints a table per level, appends JSON lines, writes an HTML
 * report, samples GPU power through NVML and reads the server's /metrics around each level.
 *   nibble bench --base-url http://127.0.0.1:30000 --concurrency 1,2,10,1000 --num-prompts 200
 * Metric definitions: src/tools/bench/metrics.h. Docs: docs/bench.md. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "tools/bench/client.h"
#include "tools/bench/dataset.h"
#include "tools/bench/metrics.h"
#include "tools/bench/prom.h"
#include "tools/bench/report.h"
#include "tools/nvml.h"
#include "tokenizer/tokenizer.h"

const char nb_cmd_bench_summary[] = "benchmark a running server: throughput, latency and GPU power per concurrency";

static void nb_bench_usage(FILE *f)
{
    fprintf(f,
            "usage: nibble bench [options]\n"
            "  --base-url URL          server (default http://127.0.0.1:30000)\n"
            "  --backend completions|chat   endpoint (default completions)\n"
            "  --model NAME            model field (default: first id of GET /v1/models)\n"
            "  --api-key KEY           bearer token (default: $OPENAI_API_KEY)\n"
            "  --concurrency LIST      levels, e.g. 1,2,10,1000 (default 1,2,10,1000)\n"
            "  --num-prompts N|LIST    requests per level; a list gives one per level (default 100)\n"
            "  --input-len L           prompt tokens (default 128)\n"
            "  --output-len L          max_tokens (default 128)\n"
            "  --range-ratio R         draw lengths from [R*L, L] (default 1: exact; SGLang's default is 0)\n"
            "  --dataset random|sharegpt FILE   workload (default random)\n"
            "  --request-rate R        Poisson arrivals per second (default inf: as fast as concurrency allows)\n"
            "  --vocab-size V          random token ids from [0, V) (default: server's vocab_size, else 256)\n"
            "  --tokenizer MODEL_DIR   make text prompts of exactly L tokens (else: id prompts for\n"
            "                          completions, L random bytes for chat; see docs/bench.md)\n"
            "  --disable-ignore-eos    let requests stop at EOS (ignore_eos is on for random data)\n"
            "  --warmup N              warm-up requests before the sweep (default 1)\n"
            "  --seed S                workload seed (default 1)\n"
            "  --timeout S             per-request timeout in seconds (default 3600)\n"
            "  --output-file F.jsonl   append one JSON line per level\n"
            "  --report F.html         write a self-contained HTML report\n"
            "  --no-telemetry          do not sample NVML or scrape /metrics\n"
            "  --extra-request-body J  a JSON object whose keys go into every request body, over the\n"
            "                          bench's own (SGLang's flag), e.g. '{\"temperature\": 0.7, \"top_p\": 0.9}'\n"
            "                          (default: greedy, temperature 0)\n"
            "exit status: 0 when every request of every level succeeded, 1 otherwise, 2 on usage errors\n");
}

static int nb_parse_list(const char *s, int *out, int max)
{
    int n = 0;
    const char *p = s;
    while (*p && n < max) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1000000) return -1;
        out[n++] = (int)v;
        if (*end == ',') p = end + 1;
        else if (*end == 0) break;
        else return -1;
    }
    return n;
}

/* First model id and its vocab_size (a nibble extension) from /v1/models. */
static void nb_query_model(const char *base, const char *key, char *model, size_t n, int *vocab)
{
    char *body;
    long status;
    if (nb_bench_http_get(base, "/v1/models", key, 10.0, &body, &status) != NB_OK) {
        NB_LOG_WARN("bench", "GET /v1/models: %s", nb_last_error());
        return;
    }
    cJSON *j = status == 200 ? cJSON_Parse(body) : NULL;
    const cJSON *d = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(d, "id");
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(d, "vocab_size");
    if (cJSON_IsString(id) && !model[0]) snprintf(model, n, "%s", id->valuestring);
    if (cJSON_IsNumber(vs) && *vocab <= 0) *vocab = (int)vs->valuedouble;
    cJSON_Delete(j);
    free(body);
}

#define NB_MAX_LEVELS 32

int nb_cmd_bench(int argc, char **argv)
{
    const char *base = "http://127.0.0.1:30000", *backend = "completions", *model_arg = NULL;
    const char *api_key = getenv("OPENAI_API_KEY"), *dataset = "random", *sharegpt = NULL;
    const char *out_file = NULL, *report = NULL, *tokenizer = NULL, *extra_s = NULL;
    const char *conc_s = "1,2,10,1000", *np_s = "100";
    int input_len = 128, output_len = 128, vocab = 0, ignore_eos = 1, warmup = 1, telemetry = 1, out_given = 0;
    double range_ratio = 1.0, rate = INFINITY, timeout = 3600;
    unsigned long long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NB_ARG(name) (!strcmp(a, name) && v && (i++, 1))
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            nb_bench_usage(stdout);
            return 0;
        } else if (NB_ARG("--base-url")) base = v;
        else if (NB_ARG("--backend")) backend = v;
        else if (NB_ARG("--model")) model_arg = v;
        else if (NB_ARG("--api-key")) api_key = v;
        else if (NB_ARG("--concurrency")) conc_s = v;
        else if (NB_ARG("--num-prompts")) np_s = v;
        else if (NB_ARG("--input-len")) input_len = atoi(v);
        else if (NB_ARG("--output-len")) output_len = atoi(v), out_given = 1;
        else if (NB_ARG("--range-ratio")) range_ratio = atof(v);
        else if (NB_ARG("--request-rate")) rate = atof(v);
        else if (NB_ARG("--vocab-size")) vocab = atoi(v);
        else if (NB_ARG("--tokenizer")) tokenizer = v;
        else if (NB_ARG("--warmup")) warmup = atoi(v);
        else if (NB_ARG("--seed")) seed = strtoull(v, NULL, 10);
        else if (NB_ARG("--timeout")) timeout = atof(v);
        else if (NB_ARG("--output-file")) out_file = v;
        else if (NB_ARG("--report")) report = v;
        else if (NB_ARG("--extra-request-body")) extra_s = v;
        else if (!strcmp(a, "--disable-ignore-eos")) ignore_eos = 0;
        else if (!strcmp(a, "--no-telemetry")) telemetry = 0;
        else if (!strcmp(a, "--dataset") && v) {
            dataset = argv[++i];
            if (!strcmp(dataset, "sharegpt")) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "nibble bench: --dataset sharegpt needs a FILE\n");
                    return 2;
                }
                sharegpt = argv[++i];
            } else if (strcmp(dataset, "random")) {
                fprintf(stderr, "nibble bench: unknown dataset '%s' (random, sharegpt FILE)\n", dataset);
                return 2;
            }
        } else {
            fprintf(stderr, "nibble bench: unknown or incomplete option '%s'\n\n", a);
            nb_bench_usage(stderr);
            return 2;
        }
#undef NB_ARG
    }
    int chat = !strcmp(backend, "chat");
    if (!chat && strcmp(backend, "completions")) {
        fprintf(stderr, "nibble bench: --backend must be completions or chat\n");
        return 2;
    }
    nb_tokenizer *tok = NULL;
    if (tokenizer && nb_tokenizer_load(tokenizer, &tok) != NB_OK) {
        fprintf(stderr, "nibble bench: --tokenizer %s: %s\n", tokenizer, nb_last_error());
        return 2;
    }
    int conc[NB_MAX_LEVELS], nps[NB_MAX_LEVELS];
    int nl = nb_parse_list(conc_s, conc, NB_MAX_LEVELS), nn = nb_parse_list(np_s, nps, NB_MAX_LEVELS);
    if (nl <= 0 || nn <= 0 || (nn != 1 && nn != nl)) {
        fprintf(stderr, "nibble bench: bad --concurrency '%s' or --num-prompts '%s' (positive integers; one "
                        "prompt count or one per level)\n", conc_s, np_s);
        return 2;
    }
    if (!(timeout > 0) || input_len < 1 || output_len < 1) {
        fprintf(stderr, "nibble bench: --timeout, --input-len and --output-len must be positive\n");
        return 2;
    }
    cJSON *extra = extra_s ? cJSON_Parse(extra_s) : NULL;
    char *extra_compact = extra ? cJSON_PrintUnformatted(extra) : NULL;
    if (extra_s && (!cJSON_IsObject(extra) || !extra_compact || strlen(extra_compact) >= sizeof(((nb_bench_setup *)0)->extra_body))) {
        fprintf(stderr, "nibble bench: --extra-request-body '%s': %s\n", extra_s,
                !cJSON_IsObject(extra) ? "not a JSON object" : "longer than 1023 bytes");
        cJSON_Delete(extra);
        free(extra_compact);
        if (tok) nb_tokenizer_free(tok);
        return 2;
    }
    size_t blen = strlen(base);
    char base_buf[512];
    snprintf(base_buf, sizeof base_buf, "%.*s", (int)(blen && base[blen - 1] == '/' ? blen - 1 : blen), base);
    base = base_buf;

    curl_global_init(CURL_GLOBAL_DEFAULT);
    char model[128] = "";
    if (model_arg) snprintf(model, sizeof model, "%s", model_arg);
    nb_query_model(base, api_key, model, sizeof model, &vocab);
    if (!model[0]) snprintf(model, sizeof model, "default");

    nb_bench_setup su = {0};
    snprintf(su.base_url, sizeof su.base_url, "%s", base);
    snprintf(su.backend, sizeof su.backend, "%s", backend);
    snprintf(su.model, sizeof su.model, "%s", model);
    snprintf(su.dataset, sizeof su.dataset, "%s%s%s", dataset, sharegpt ? " " : "", sharegpt ? sharegpt : "");
    su.input_len = input_len;
    su.output_len = output_len;
    su.range_ratio = range_ratio;
    su.request_rate = isfinite(rate) ? rate : 0;
    su.seed = seed;
    su.ignore_eos = sharegpt ? 0 : ignore_eos;
    if (extra_compact) snprintf(su.extra_body, sizeof su.extra_body, "%s", extra_compact);
    if (tok)
        snprintf(su.length_note, sizeof su.length_note, "Prompts are text that %s's tokenizer encodes to exactly L "
                 "tokens%s.", tokenizer, chat ? " (plus the chat template)" : "");
    else if (sharegpt)
        snprintf(su.length_note, sizeof su.length_note, "ShareGPT lengths approximated as bytes/4 (no --tokenizer); "
                                                        "token totals are the server's usage counts.");
    else if (chat)
        snprintf(su.length_note, sizeof su.length_note, "Chat prompts are random text of L bytes; input token totals "
                                                        "are the server's usage counts (template included).");
    else
        snprintf(su.length_note, sizeof su.length_note, "Prompts are L random token ids from [0, %d) sent as id "
                                                        "arrays: exact lengths.", vocab > 0 ? vocab : 256);

    nb_bench_dataset_cfg dc = {.random = sharegpt == NULL, .sharegpt = sharegpt, .input_len = input_len,
                               .output_len = output_len, .range_ratio = range_ratio, .vocab_size = vocab,
                               .as_text = chat, .output_len_given = out_given, .tok = tok};
    nb_bench_client_cfg cc = {.base_url = base, .model = model, .api_key = api_key, .chat = chat,
                              .request_rate = rate, .ignore_eos = su.ignore_eos, .seed = seed, .timeout_s = timeout,
                              .progress = 1, .extra = extra};
    int rc = 0;
    nb_bench_level *levels = calloc(NB_MAX_LEVELS, sizeof *levels);
    nb_nvml_sampler *sampler = NULL;
    if (telemetry && nb_nvml_sampler_start(100, &sampler) != NB_OK) {
        NB_LOG_WARN("bench", "%s", nb_last_error());
        sampler = NULL;
    }
    printf("nibble bench: %s, model %s, backend %s, dataset %s, input %d, output %d, range ratio %g%s%s\n", base, model,
           backend, su.dataset, input_len, output_len, range_ratio, extra ? ", extra request body " : "",
           extra ? su.extra_body : "");
    if (warmup > 0) {
        nb_bench_prompt *wp;
        nb_bench_dataset_cfg wc = dc;
        wc.output_len = NB_MIN(output_len, 32);
        wc.output_len_given = 1;
        if (nb_bench_dataset_make(&wc, warmup, seed ^ 0xabcdefULL, &wp) == NB_OK) {
            nb_bench_req *wr = calloc((size_t)warmup, sizeof *wr);
            double d;
            nb_bench_client_cfg wcc = cc;
            wcc.concurrency = warmup;
            wcc.progress = 0;
            wcc.request_rate = INFINITY;
            if (wr && nb_bench_run(&wcc, wp, warmup, wr, &d) == NB_OK) {
                int ok = 0;
                for (int k = 0; k < warmup; k++) ok += wr[k].success;
                if (!ok) {
                    fprintf(stderr, "nibble bench: warm-up failed: %s\n", wr[0].error);
                    rc = 1;
                }
            }
            for (int k = 0; wr && k < warmup; k++) nb_bench_req_free(&wr[k]);
            free(wr);
            nb_bench_dataset_free(wp, warmup);
        }
    }
    int done_levels = 0;
    for (int L = 0; L < nl && rc == 0; L++) {
        int n = nn == 1 ? nps[0] : nps[L];
        nb_bench_level *lv = &levels[L];
        lv->concurrency = conc[L];
        lv->num_prompts = n;
        if (n < conc[L])
            NB_LOG_WARN("bench", "concurrency %d with only %d prompts: the level cannot reach its concurrency", conc[L], n);
        nb_bench_prompt *prompts;
        /* A fresh seed per level: no two levels send the same prompts. */
        if (nb_bench_dataset_make(&dc, n, seed + 1000003ULL * (unsigned long long)(L + 1), &prompts) != NB_OK) {
            fprintf(stderr, "nibble bench: %s\n", nb_last_error());
            rc = 2;
            break;
        }
        nb_bench_req *reqs = calloc((size_t)n, sizeof *reqs);
        nb_prom_scraper *scr = NULL;
        if (telemetry && nb_prom_scraper_start(base, api_key, 500, &scr) != NB_OK) scr = NULL;
        nb_nvml_sampler_reset(sampler);
        char label[32];
        snprintf(label, sizeof label, "concurrency %d", conc[L]);
        cc.concurrency = conc[L];
        cc.label = label;
        double dur = 0;
        nb_status s = reqs ? nb_bench_run(&cc, prompts, n, reqs, &dur) : NB_ERR_OUT_OF_MEMORY;
        lv->n_gpus = nb_nvml_sampler_snapshot(sampler, lv->gpu, NB_NVML_MAX_GPUS);
        if (scr) nb_prom_scraper_finish(scr, &lv->server);
        if (s == NB_OK) s = nb_bench_compute(reqs, (size_t)n, dur > 0 ? dur : 1e-9, &lv->m);
        if (s == NB_OK) s = nb_bench_level_keep_samples(lv, reqs, n);
        for (int k = 0; reqs && k < n; k++) nb_bench_req_free(&reqs[k]);
        free(reqs);
        nb_bench_dataset_free(prompts, n);
        if (s != NB_OK) {
            fprintf(stderr, "nibble bench: %s\n", nb_last_error());
            rc = 1;
            break;
        }
        done_levels++;
        nb_bench_print_level(stdout, &su, lv);
        fflush(stdout);
        if (lv->m.failed) rc = 1;
        if (out_file && nb_bench_append_jsonl(out_file, &su, lv) != NB_OK) {
            fprintf(stderr, "nibble bench: %s\n", nb_last_error());
            rc = 1;
        }
    }
    if (done_levels) nb_bench_print_summary(stdout, levels, done_levels);
    if (report && done_levels) {
        if (nb_bench_write_html(report, &su, levels, done_levels) != NB_OK) {
            fprintf(stderr, "nibble bench: %s\n", nb_last_error());
            rc = 1;
        } else {
            printf("report: %s\n", report);
        }
    }
    if (out_file && done_levels) printf("results: %s\n", out_file);
    for (int L = 0; L < NB_MAX_LEVELS; L++) nb_bench_level_free(&levels[L]);
    free(levels);
    nb_nvml_sampler_stop(sampler);
    if (tok) nb_tokenizer_free(tok);
    cJSON_Delete(extra);
    free(extra_compact);
    curl_global_cleanup();
    return rc;
}
