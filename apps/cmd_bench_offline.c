/* nibble bench-offline: all requests at once through the engine, no HTTP, with the
 * definitions of SGLang's bench_offline_throughput: random prompts of --input-len token
 * ids, --output-len generated tokens each (ignore_eos, greedy), duration from the first
 * submit to the last finish; request throughput = requests / duration; input, output and
 * total token throughput = those token counts / duration. Also step-time statistics from
 * the engine's step trace: decode-only steps and steps that carry prefill, separately.
 * --num-prompts takes a list (1,2,10,1000): the levels run one after the other on one
 * loaded model. On the CUDA backend every decode-only step also gets its floor (the
 * roofline, docs/bench.md "bench-offline floor"): the device's copy bandwidth and BF16
 * matmul rate are measured in this process first (tools/lab/moe_bench.h), then per step
 *   floor = max(bytes / bandwidth, FLOPs / rate)
 * from the model's config, the step's batch and the context lengths its tokens attended.
 *   nibble bench-offline --model synthetic:glm5-tiny --num-prompts 64 --input-len 128
 *                        --output-len 32 [--json FILE] [--no-floor] [engine flags]
 * --profile-ops N profiles N decode-only steps of each level (after skipping its first
 * BO_PROFILE_SKIP, or --profile-skip N) op by op (ops/profile.h; those steps run eagerly, without CUDA graphs) and
 * prints where their time went (docs/bench.md "Per-op profile").
 * Results are recorded in bench/RESULTS.md. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/sampling.h"
#include "engine_cli.h"
#include "format/footprint.h"
#include "format/model_config.h"
#include "model/synthetic.h"
#include "nibble.h"
#include "ops/profile.h"
#include "server/oai_request.h"
#include "tools/nvml.h"
#if NIBBLE_HAVE_CUDA
#include "tools/lab/moe_bench.h"
#endif

const char nb_cmd_bench_offline_summary[] = "offline throughput: N requests at once through the engine (SGLang's definitions)";

#define BO_MAX_LEVELS 16
/* decode-only steps of a level left alone before --profile-ops starts (first-use costs);
 * --profile-skip N changes it (profile a steady batch: every step of a new token count pays
 * cuBLASLt's first use of that count's bucket) */
#define BO_PROFILE_SKIP 2
static int bo_profile_skip = BO_PROFILE_SKIP;

/* The requests' sampling: greedy, or --extra-request-body's keys over it (bo_extra_sampling). */
static nb_sampling_params bo_sp;
static char bo_sp_note[600] = "greedy (temperature 0)";

/* --extra-request-body (SGLang's flag): the sampling keys of an OpenAI completions body, set
 * over the bench's own {"temperature": 0} and checked by the server's parser, so a value the
 * server would refuse is refused here with its message. Lengths stay the bench's flags. 0, or
 * -1 with a message. */
static int bo_extra_sampling(const char *json)
{
    static const char *const keys[] = {"temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                                       "frequency_penalty", "presence_penalty", "seed", "logprobs"};
    cJSON *x = cJSON_Parse(json);
    if (!cJSON_IsObject(x)) {
        fprintf(stderr, "nibble bench-offline: --extra-request-body '%s': not a JSON object\n", json);
        cJSON_Delete(x);
        return -1;
    }
    for (const cJSON *c = x->child; c; c = c->next) {
        int ok = 0;
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) ok |= !strcmp(c->string, keys[k]);
        if (!ok) {
            fprintf(stderr, "nibble bench-offline: --extra-request-body: '%s' is not a sampling key it takes (temperature, "
                            "top_p, top_k, min_p, repetition_penalty, frequency_penalty, presence_penalty, seed, "
                            "logprobs); lengths come from --input-len and --output-len\n", c->string);
            cJSON_Delete(x);
            return -1;
        }
    }
    char *shown = cJSON_PrintUnformatted(x);
    if (shown) snprintf(bo_sp_note, sizeof bo_sp_note, "%s", shown);
    free(shown);
    cJSON *body = cJSON_CreateObject();
    const int zero = 0;
    cJSON_AddItemToObject(body, "prompt", cJSON_CreateIntArray(&zero, 1));
    cJSON_AddNumberToObject(body, "temperature", 0);
    for (const cJSON *c = x->child; c; c = c->next) {
        cJSON *d = cJSON_Duplicate(c, 1);
        if (d && cJSON_GetObjectItemCaseSensitive(body, c->string))
            cJSON_ReplaceItemInObjectCaseSensitive(body, c->string, d);
        else if (d)
            cJSON_AddItemToObject(body, c->string, d);
    }
    cJSON_Delete(x);
    char *text = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    nb_oai_request req;
    nb_oai_error err;
    memset(&err, 0, sizeof err);
    const int r = text ? nb_oai_parse(NB_OAI_COMPLETIONS, text, strlen(text), &req, &err) : -1;
    free(text);
    if (r != 0) {
        fprintf(stderr, "nibble bench-offline: --extra-request-body: %s\n", err.message[0] ? err.message : "out of memory");
        return -1;
    }
    bo_sp.temperature = req.sp.temperature;
    bo_sp.top_k = req.sp.top_k;
    bo_sp.top_p = req.sp.top_p;
    bo_sp.min_p = req.sp.min_p;
    bo_sp.repetition_penalty = req.sp.repetition_penalty;
    bo_sp.frequency_penalty = req.sp.frequency_penalty;
    bo_sp.presence_penalty = req.sp.presence_penalty;
    bo_sp.seed = req.sp.seed;
    bo_sp.logprobs = req.sp.logprobs;
    bo_sp.top_logprobs = req.sp.top_logprobs;
    nb_oai_request_free(&req);
    return 0;
}

/* ------------------------------------------------------------------ the floor */

/* What one decode step must move and compute, from the config (format/footprint.h). */
typedef struct bo_floor_model {
    int ok;
    double bw, rate;            /* measured: bytes/s, FLOP/s */
    char device[256];
    double fixed_bytes;         /* every weight but the routed experts and the embedding */
    double embed_row_bytes;     /* one embedding row (read per token) */
    double expert_bytes, expert_params; /* one routed expert (gate + up + down) */
    int n_moe, n_experts, topk;
    double dense_params;        /* per-token active parameters outside the routed experts */
    double kv_bytes_per_token;  /* the KV pool's, all layers */
    double attn_flops_full, attn_flops_dsa; /* per (token, attended position), summed over layers */
    double idx_flops;           /* DSA indexer per (token, context position), over its layers */
    int dsa_topk;
} bo_floor_model;

static nb_status floor_model_init(const char *spec, const nb_engine_info *info, bo_floor_model *f)
{
    nb_model_config c;
    if (nb_synthetic_is(spec)) {
        char *json = NULL;
        NB_TRY(nb_synthetic_config_json(spec, &json));
        nb_status st = nb_model_config_parse(spec, json, &c);
        free(json);
        NB_TRY(st);
    } else {
        NB_TRY(nb_model_config_load(spec, &c));
    }
    nb_footprint fp;
    nb_footprint_from_config(&c, 2, &fp);
    int n_moe = 0, n_dsa = 0;
    for (int l = 0; l < c.num_layers; l++) {
        n_moe += c.layer_is_moe[l] != 0;
        n_dsa += c.layer_has_indexer[l] != 0;
    }
    double all = 0;
    for (int r = 0; r < NB_ROLE_COUNT; r++) all += (double)fp.bytes[r];
    f->fixed_bytes = all - (double)fp.bytes[NB_ROLE_EXPERT] - (double)fp.bytes[NB_ROLE_EMBED];
    f->embed_row_bytes = c.vocab_size > 0 ? (double)fp.bytes[NB_ROLE_EMBED] / c.vocab_size : 0;
    f->n_moe = n_moe;
    f->n_experts = c.n_routed_experts;
    f->topk = c.num_experts_per_tok;
    double n_exp = (double)n_moe * (c.n_routed_experts > 0 ? c.n_routed_experts : 1);
    f->expert_bytes = n_moe ? (double)fp.bytes[NB_ROLE_EXPERT] / n_exp : 0;
    f->expert_params = n_moe ? (double)fp.params[NB_ROLE_EXPERT] / n_exp : 0;
    f->dense_params = (double)(nb_footprint_total_params(&fp) - fp.params[NB_ROLE_EXPERT] - fp.params[NB_ROLE_EMBED]);
    f->kv_bytes_per_token = info->max_total_tokens > 0 ? info->kv_bytes / (double)info->max_total_tokens : 0;
    /* attention per (token, attended position) and layer: MLA in the absorbed form (scores over
     * the latent + rope key, values over the latent); GQA: q.k and p.v over every head */
    double per_layer = c.attn == NB_ATTN_MLA
                           ? 2.0 * c.num_heads * (2.0 * c.kv_lora_rank + c.qk_rope_head_dim)
                           : 4.0 * c.num_heads * (double)c.head_dim;
    f->attn_flops_full = per_layer * (c.num_layers - n_dsa);
    f->attn_flops_dsa = per_layer * n_dsa;
    f->idx_flops = 2.0 * c.index_n_heads * (double)c.index_head_dim * n_dsa;
    f->dsa_topk = n_dsa ? c.index_topk : 0;
    nb_model_config_free(&c);
    f->ok = 1;
    return NB_OK;
}

/* Distinct experts B tokens touch in one MoE layer: the exact expectation when each token
 * picks topk distinct experts uniformly, E (1 - (1 - k/E)^B). Synthetic routers are
 * close to uniform; a trained router concentrates, so this is an upper bound there. */
static double distinct_experts(const bo_floor_model *f, int B)
{
    if (f->n_experts <= 0) return 0;
    double E = f->n_experts;
    return E * (1.0 - pow(1.0 - (double)f->topk / E, B));
}

typedef struct bo_floor {
    double ms, bytes, weight_bytes, kv_bytes, flops;
    int compute_bound;
} bo_floor;

static bo_floor floor_of(const bo_floor_model *f, int B, double kv_tok, double kv_eff)
{
    bo_floor r;
    r.weight_bytes = f->fixed_bytes + B * f->embed_row_bytes + f->n_moe * distinct_experts(f, B) * f->expert_bytes;
    r.kv_bytes = kv_tok * f->kv_bytes_per_token;
    r.bytes = r.weight_bytes + r.kv_bytes;
    r.flops = 2.0 * B * (f->dense_params + (double)f->n_moe * f->topk * f->expert_params) +
              f->attn_flops_full * kv_tok + f->attn_flops_dsa * kv_eff + f->idx_flops * kv_tok;
    double tb = r.bytes / f->bw * 1e3, tf = r.flops / f->rate * 1e3;
    r.compute_bound = tf > tb;
    r.ms = r.compute_bound ? tf : tb;
    return r;
}

/* ------------------------------------------------------------------ requests */

typedef struct bo_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;
    int64_t out_tokens;
    int aborted;
    double *ttft; /* per request, seconds from start */
    double t0;
    nb_engine *e;
    int in_len, dsa_topk, trace_cap;
    double *kv_tok, *kv_eff; /* per step index: context positions its decode tokens attended */
    int *step_tok;           /* per step index: tokens delivered (to check the attribution) */
} bo_state;

typedef struct bo_req {
    bo_state *st;
    int index;
    int got; /* tokens received */
} bo_req;

static void on_event(const nb_engine_event *ev, void *user)
{
    bo_req *r = user;
    bo_state *st = r->st;
    /* deliveries come before the engine records the step: the step's index is the count so far */
    int step = ev->type == NB_EVENT_TOKENS ? nb_engine_trace_count(st->e) : 0;
    pthread_mutex_lock(&st->mu);
    if (ev->type == NB_EVENT_TOKENS) {
        st->out_tokens += ev->n_tokens;
        if (r->got == 0) st->ttft[r->index] = nb_now_s() - st->t0;
        for (int t = 0; t < ev->n_tokens; t++, r->got++) {
            if (step >= st->trace_cap) continue;
            /* output token t > 0 came from a decode step reading in_len + t cached positions */
            double ctx = r->got > 0 ? st->in_len + r->got : 0;
            st->kv_tok[step] += ctx;
            st->kv_eff[step] += st->dsa_topk > 0 && ctx > st->dsa_topk ? st->dsa_topk : ctx;
            st->step_tok[step]++;
        }
    } else {
        if (ev->finish_reason == NB_FINISH_ABORT) st->aborted++;
        if (ev->last) {
            st->pending--;
            pthread_cond_broadcast(&st->cv);
        }
    }
    pthread_mutex_unlock(&st->mu);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, int n, double p)
{
    if (n == 0) return 0;
    double r = p / 100.0 * (n - 1);
    int lo = (int)r;
    int hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (v[hi] - v[lo]) * (r - lo);
}

static double mean_of(const double *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return n ? s / n : 0;
}

/* Sorts v. */
static void stat_line(const char *name, double *v, int n)
{
    if (n == 0) {
        printf("%-40s %s\n", name, "-");
        return;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    printf("%-40s mean %.2f  p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", name, mean_of(v, n), pct(v, n, 50),
           pct(v, n, 90), pct(v, n, 99), v[n - 1]);
}

static int usage(FILE *f)
{
    fprintf(f,
            "usage: nibble bench-offline --model M [--num-prompts N|N1,N2,.. (1000)] [--input-len I (1024)]\n"
            "                            [--output-len O (1024)] [--seed S] [--warmup N (0)] [--json FILE]\n"
            "                            [--no-floor | --ceilings GBPS,TFLOPS] [--profile-ops N]\n"
            "                            [--profile-skip N (2)] [--extra-request-body JSON] [engine flags]\n"
            "(--random-input-len / --random-output-len are accepted as SGLang spells them)\n"
            "A list of prompt counts runs one level per count on one loaded model. On --backend cuda\n"
            "each decode step is set against its floor (docs/bench.md); --no-floor skips that;\n"
            "--ceilings gives the bandwidth and BF16 rate instead of measuring them (any backend).\n"
            "--profile-ops N: time every op of N decode-only steps per level (eagerly, no CUDA graphs)\n"
            "and print where the step's time goes (docs/bench.md), after skipping the level's first\n"
            "--profile-skip decode-only steps.\n"
            "--extra-request-body '{\"temperature\": 0.7, \"top_p\": 0.9}': sampling keys of an OpenAI body\n"
            "(SGLang's flag) over the default greedy sampling: temperature, top_p, top_k, min_p, the\n"
            "penalties, seed, logprobs (top-n alternatives), checked as the server checks them.\n\n%s",
            nb_cli_engine_usage);
    return f == stdout ? 0 : 2;
}

/* One level's figures, for the summary and --json. */
typedef struct bo_level {
    int num, submitted, aborted, n_steps, nd, np;
    double dur, in_tok, out_tok, dec_s, pre_s, fwd_s, dec_tok, pre_tok;
    double dec_p50, dec_mean, dec_p90, dec_batch, ttft_p50;
    /* floor over the decode-only steps */
    int floor_steps, compute_bound_steps, attrib_mismatch;
    double floor_mean, floor_p50, ratio_mean, ratio_p50, fwd_ratio_p50;
    double weight_gb, kv_gb, tflop; /* per step, means */
    /* every step: decode tokens, prefill tokens, attended positions (plain, DSA-capped),
     * step ms, forward ms, floor ms (0 without a floor or for steps with prefill) */
    double (*steps)[7];
    nb_op_prof prof; /* --profile-ops */
    int n_gpus;      /* NVML over the level (CUDA backend; 0 without a driver) */
    nb_gpu_summary gpu[NB_NVML_MAX_GPUS];
} bo_level;

static void gen_prompts(int32_t *prompts, int64_t n, int seed, const nb_engine_info *info)
{
    for (int64_t i = 0; i < n; i++) { /* ids drawn uniformly, avoiding eos ids */
        int32_t t;
        uint64_t k = (uint64_t)i;
        do {
            t = (int32_t)(nb_mix64((uint64_t)seed * 0x9E3779B97F4A7C15ULL + k) % (uint64_t)info->vocab_size);
            k += 0x100000000ULL;
            int eos = 0;
            for (int j = 0; j < info->n_eos; j++) eos |= t == info->eos_ids[j];
            if (!eos) break;
        } while (1);
        prompts[i] = t;
    }
}

/* The --profile-ops table: per (op, detail), per step; bytes and GB/s for the ops that read
 * weights, set against the measured copy bandwidth (bw bytes/s; 0: not measured). */
static void print_profile(const nb_op_prof *p, double bw)
{
    if (p->steps == 0) {
        printf("Per-op profile: no decode-only step was profiled (the level had %s)\n",
               "too few decode-only steps after the skipped ones");
        return;
    }
    const double n = p->steps, wall = p->wall_ms / n, ops = p->op_ms / n;
    printf("Per-op profile: %d decode-only steps (skipped the first %d), mean batch %.1f\n", p->steps,
           bo_profile_skip, p->tokens / n);
    printf("  step wall %.3f ms, ops %.3f ms (%.1f%%), gap %.3f ms (host work, launches, device idle)\n", wall, ops,
           wall > 0 ? 100.0 * ops / wall : 0.0, wall - ops);
    printf("  %-14s %-52s %7s %9s %6s %10s %8s %7s\n", "op", "detail", "calls", "ms/step", "%step", "MB/step",
           "GB/s", "of copy");
    for (int i = 0; i < p->n_rows; i++) {
        const nb_op_prof_row *r = &p->rows[i];
        printf("  %-14s %-52s %7.1f %9.4f %6.2f", r->op, r->detail, r->calls / n, r->ms / n,
               wall > 0 ? 100.0 * r->ms / n / wall : 0.0);
        if (r->bytes > 0 && r->ms > 0) {
            double gbs = r->bytes / (r->ms * 1e-3) / 1e9;
            printf(" %10.2f %8.1f", r->bytes / n / 1e6, gbs);
            if (bw > 0) printf(" %7.2f", gbs * 1e9 / bw);
        }
        printf("\n");
    }
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
    fputc('"', f);
}

static void write_json_profile(FILE *f, const nb_op_prof *p, double bw)
{
    const double n = p->steps ? p->steps : 1;
    fprintf(f, ", \"profile\": {\"steps\": %d, \"skipped\": %d, \"mean_batch\": %.2f, \"wall_ms\": %.4f, "
               "\"op_ms\": %.4f, \"gap_ms\": %.4f, \"ops\": [",
            p->steps, bo_profile_skip, p->tokens / n, p->wall_ms / n, p->op_ms / n, (p->wall_ms - p->op_ms) / n);
    for (int i = 0; i < p->n_rows; i++) {
        const nb_op_prof_row *r = &p->rows[i];
        fprintf(f, "%s\n    {\"op\": ", i ? "," : "");
        json_str(f, r->op);
        fprintf(f, ", \"detail\": ");
        json_str(f, r->detail);
        fprintf(f, ", \"calls_per_step\": %.2f, \"ms_per_step\": %.6f, \"pct_of_step\": %.3f", r->calls / n,
                r->ms / n, p->wall_ms > 0 ? 100.0 * r->ms / p->wall_ms : 0.0);
        if (r->bytes > 0 && r->ms > 0) {
            double bps = r->bytes / (r->ms * 1e-3);
            fprintf(f, ", \"bytes_per_step\": %.0f, \"GBps\": %.3f", r->bytes / n, bps / 1e9);
            if (bw > 0) fprintf(f, ", \"of_copy\": %.5f", bps / bw);
        }
        fprintf(f, "}");
    }
    fprintf(f, "]}");
}

/* Submit `num` requests and wait for all; fills L. Returns 0, or 1 on failure. */
static int run_level(nb_engine *e, const nb_engine_info *info, const bo_floor_model *fm, int num, int in_len,
                     int out_len, int seed, int print, int profile_n, bo_level *L)
{
    memset(L, 0, sizeof *L);
    L->num = num;
    int32_t *prompts = malloc((size_t)num * (size_t)in_len * sizeof *prompts);
    bo_req *reqs = calloc((size_t)num, sizeof *reqs);
    bo_state st = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, NULL, 0, e, in_len,
                   fm->ok ? fm->dsa_topk : 0, 0, NULL, NULL, NULL};
    st.ttft = calloc((size_t)num, sizeof *st.ttft);
    int trace_cap = 4 * (num + out_len) + 1024;
    st.trace_cap = trace_cap;
    nb_step_record *trace = malloc((size_t)trace_cap * sizeof *trace);
    st.kv_tok = calloc((size_t)trace_cap, sizeof(double));
    st.kv_eff = calloc((size_t)trace_cap, sizeof(double));
    st.step_tok = calloc((size_t)trace_cap, sizeof(int));
    double *dec = malloc((size_t)(trace_cap + 1) * sizeof *dec), *pre = malloc((size_t)(trace_cap + 1) * sizeof *pre);
    double *fl = malloc((size_t)(trace_cap + 1) * sizeof *fl), *ra = malloc((size_t)(trace_cap + 1) * sizeof *ra);
    double *fr = malloc((size_t)(trace_cap + 1) * sizeof *fr);
    int rc = 1;
    if (!prompts || !reqs || !st.ttft || !trace || !st.kv_tok || !st.kv_eff || !st.step_tok || !dec || !pre || !fl ||
        !ra || !fr) {
        fprintf(stderr, "nibble bench-offline: out of memory for %d prompts\n", num);
        goto done;
    }
    gen_prompts(prompts, (int64_t)num * in_len, seed, info);
    nb_sampling_params sp = bo_sp;
    sp.max_tokens = out_len;
    sp.ignore_eos = 1;
    if (print) {
        printf("\nbench-offline: %s, %d prompts, input %d, output %d, max running %d, sampling %s\n", info->model_name,
               num, in_len, out_len, info->max_running_requests, bo_sp_note);
        fflush(stdout);
    }
    nb_engine_trace(e, trace, trace_cap);
    if (profile_n > 0) nb_ops_profile_request(bo_profile_skip, profile_n, &L->prof);
    /* Hold the step loop while submitting, so every request arrives at once (as SGLang's
     * offline benchmark hands its engine the whole batch), not one per step. */
    nb_engine_test_gate(e, 1);
    st.t0 = nb_now_s();
    for (int i = 0; i < num; i++) {
        reqs[i] = (bo_req){&st, i, 0};
        pthread_mutex_lock(&st.mu);
        st.pending++;
        pthread_mutex_unlock(&st.mu);
        nb_status s = nb_engine_submit(e, prompts + (size_t)i * in_len, in_len, &sp, on_event, &reqs[i], NULL);
        if (s != NB_OK) {
            pthread_mutex_lock(&st.mu);
            st.pending--;
            pthread_mutex_unlock(&st.mu);
            fprintf(stderr, "nibble bench-offline: request %d: %s\n", i, nb_last_error());
            break;
        }
        L->submitted++;
    }
    nb_engine_test_gate(e, 0);
    pthread_mutex_lock(&st.mu);
    while (st.pending > 0) pthread_cond_wait(&st.cv, &st.mu);
    pthread_mutex_unlock(&st.mu);
    L->dur = nb_now_s() - st.t0;
    nb_engine_wait_idle(e); /* the last step is recorded after its tokens are delivered */
    if (profile_n > 0) {
        nb_ops_profile_request(0, 0, NULL);
        nb_op_prof_sort(&L->prof);
    }
    int n_steps = nb_engine_trace_count(e);
    nb_engine_trace(e, NULL, 0);
    L->n_steps = n_steps;
    L->aborted = st.aborted;
    L->in_tok = (double)L->submitted * in_len;
    L->out_tok = (double)st.out_tokens;
    int nd = 0, np = 0, nf = 0;
    double wsum = 0, ksum = 0, fsum = 0;
    L->steps = calloc((size_t)n_steps + 1, sizeof *L->steps);
    for (int i = 0; i < n_steps; i++) {
        if (L->steps) {
            double *r = L->steps[i];
            r[0] = trace[i].n_decode, r[1] = trace[i].n_prefill_tokens, r[2] = st.kv_tok[i], r[3] = st.kv_eff[i];
            r[4] = trace[i].ms, r[5] = trace[i].forward_ms;
            if (fm->ok && trace[i].n_prefill_tokens == 0)
                r[6] = floor_of(fm, trace[i].n_decode, st.kv_tok[i], st.kv_eff[i]).ms;
        }
        L->fwd_s += trace[i].forward_ms * 1e-3;
        if (trace[i].n_prefill_tokens == 0) {
            dec[nd++] = trace[i].ms;
            L->dec_s += trace[i].ms * 1e-3;
            L->dec_tok += trace[i].n_decode;
            L->dec_batch += trace[i].n_decode;
            if (fm->ok) {
                if (st.step_tok[i] != trace[i].n_decode) L->attrib_mismatch++;
                bo_floor f = floor_of(fm, trace[i].n_decode, st.kv_tok[i], st.kv_eff[i]);
                fl[nf] = f.ms;
                ra[nf] = trace[i].ms / f.ms;
                fr[nf] = trace[i].forward_ms / f.ms;
                nf++;
                L->compute_bound_steps += f.compute_bound;
                wsum += f.weight_bytes;
                ksum += f.kv_bytes;
                fsum += f.flops;
            }
        } else {
            pre[np++] = trace[i].ms;
            L->pre_s += trace[i].ms * 1e-3;
            L->pre_tok += trace[i].n_prefill_tokens;
        }
    }
    L->nd = nd;
    L->np = np;
    L->dec_mean = mean_of(dec, nd);
    L->dec_batch = nd ? L->dec_batch / nd : 0;
    L->floor_steps = nf;
    if (nf) {
        L->floor_mean = mean_of(fl, nf);
        L->ratio_mean = L->dec_mean / L->floor_mean; /* mean step time over mean floor */
        L->weight_gb = wsum / nf / 1e9;
        L->kv_gb = ksum / nf / 1e9;
        L->tflop = fsum / nf / 1e12;
        qsort(fl, (size_t)nf, sizeof *fl, cmp_d);
        qsort(ra, (size_t)nf, sizeof *ra, cmp_d);
        qsort(fr, (size_t)nf, sizeof *fr, cmp_d);
        L->floor_p50 = pct(fl, nf, 50);
        L->ratio_p50 = pct(ra, nf, 50);
        L->fwd_ratio_p50 = pct(fr, nf, 50);
    }
    if (print) {
        printf("\n====== Offline Throughput Benchmark Result =======\n");
        printf("%-40s %s\n", "Backend:", info->backend == NB_BACKEND_CUDA ? "nibble (cuda)" : "nibble (cpu)");
        printf("%-40s %d\n", "Successful requests:", L->submitted - st.aborted);
        printf("%-40s %.2f\n", "Benchmark duration (s):", L->dur);
        printf("%-40s %.0f\n", "Total input tokens:", L->in_tok);
        printf("%-40s %.0f\n", "Total generated tokens:", L->out_tok);
        printf("%-40s %.2f\n", "Request throughput (req/s):", L->submitted / L->dur);
        printf("%-40s %.2f\n", "Input token throughput (tok/s):", L->in_tok / L->dur);
        printf("%-40s %.2f\n", "Output token throughput (tok/s):", L->out_tok / L->dur);
        printf("%-40s %.2f\n", "Total token throughput (tok/s):", (L->in_tok + L->out_tok) / L->dur);
        printf("================== Engine steps ==================\n");
        printf("%-40s %d (%d decode-only, %d with prefill)%s\n", "Steps:", n_steps, nd, np,
               n_steps == trace_cap ? " [trace full]" : "");
        printf("%-40s %.2f (forward+sampling %.2f, engine host: plan/deliver %.2f)\n", "Time in steps (s):",
               L->dec_s + L->pre_s, L->fwd_s, L->dec_s + L->pre_s - L->fwd_s);
    }
    qsort(dec, (size_t)nd, sizeof *dec, cmp_d);
    L->dec_p50 = pct(dec, nd, 50);
    L->dec_p90 = pct(dec, nd, 90);
    if (print) {
        stat_line("Decode-only step time (ms):", dec, nd);
        stat_line("Prefill step time (ms):", pre, np);
        printf("%-40s %.1f\n", "Mean decode batch (requests):", L->dec_batch);
        printf("%-40s %.2f\n", "Prefill throughput (tok/s):", L->pre_s > 0 ? L->pre_tok / L->pre_s : 0.0);
        printf("%-40s %.2f\n", "Decode throughput (tok/s):", L->dec_s > 0 ? L->dec_tok / L->dec_s : 0.0);
        if (nf) {
            printf("%-40s mean %.3f  p50 %.3f (%d of %d steps compute-bound)\n", "Decode step floor (ms):",
                   L->floor_mean, L->floor_p50, L->compute_bound_steps, nf);
            printf("%-40s weights %.3f GB + KV %.3f GB, %.3f TFLOP\n", "Floor per step (mean):", L->weight_gb,
                   L->kv_gb, L->tflop);
            printf("%-40s mean %.2f  p50 %.2f (forward+sampling p50 %.2f)\n", "Decode step time / floor:", L->ratio_mean,
                   L->ratio_p50, L->fwd_ratio_p50);
            if (L->attrib_mismatch)
                printf("%-40s %d steps (tokens delivered != decode batch; their KV counts are off)\n",
                       "KV attribution mismatches:", L->attrib_mismatch);
        }
    }
    qsort(st.ttft, (size_t)L->submitted, sizeof *st.ttft, cmp_d);
    L->ttft_p50 = pct(st.ttft, L->submitted, 50);
    if (print) {
        nb_engine_stats es;
        nb_engine_get_stats(e, &es);
        printf("%-40s %.0f\n", "Prefill tokens computed:", L->pre_tok);
        printf("%-40s %llu (cumulative)\n", "Preemptions:", (unsigned long long)es.preemptions);
        stat_line("Time to first token (s):", st.ttft, L->submitted);
        printf("==================================================\n");
        if (profile_n > 0) print_profile(&L->prof, fm->bw);
        fflush(stdout);
    }
    rc = st.aborted || L->submitted < num;
done:
    free(prompts);
    free(reqs);
    free(st.ttft);
    free(trace);
    free(st.kv_tok);
    free(st.kv_eff);
    free(st.step_tok);
    free(dec);
    free(pre);
    free(fl);
    free(ra);
    free(fr);
    return rc;
}

static void write_json(FILE *f, const char *model, const nb_engine_info *info, const bo_floor_model *fm, int in_len,
                       int out_len, double load_s, const bo_level *L, int n, int profile_n)
{
    fprintf(f, "{\"model\": \"%s\", \"backend\": \"%s\", \"input_len\": %d, \"output_len\": %d, \"load_s\": %.3f",
            model, info->backend == NB_BACKEND_CUDA ? "cuda" : "cpu", in_len, out_len, load_s);
    fprintf(f, ", \"sampling\": ");
    json_str(f, bo_sp_note);
    if (fm->ok)
        fprintf(f, ", \"device\": \"%s\", \"copy_GBps\": %.1f, \"bf16_TFLOPs\": %.1f, \"floor\": {"
                   "\"fixed_weight_bytes\": %.0f, \"embed_row_bytes\": %.0f, \"expert_bytes\": %.0f, "
                   "\"expert_params\": %.0f, \"dense_params\": %.0f, \"moe_layers\": %d, \"experts\": %d, "
                   "\"topk\": %d, \"kv_bytes_per_token\": %.1f, \"attn_flops_full\": %.0f, \"attn_flops_dsa\": %.0f, "
                   "\"index_flops\": %.0f, \"dsa_topk\": %d, \"experts_touched\": \"expectation under uniform "
                   "routing\"}",
                fm->device, fm->bw / 1e9, fm->rate / 1e12, fm->fixed_bytes, fm->embed_row_bytes, fm->expert_bytes,
                fm->expert_params, fm->dense_params, fm->n_moe, fm->n_experts, fm->topk, fm->kv_bytes_per_token,
                fm->attn_flops_full, fm->attn_flops_dsa, fm->idx_flops, fm->dsa_topk);
    fprintf(f, ", \"levels\": [");
    for (int i = 0; i < n; i++) {
        const bo_level *l = &L[i];
        fprintf(f,
                "%s\n  {\"num_prompts\": %d, \"completed\": %d, \"duration_s\": %.3f, \"output_throughput\": %.2f, "
                "\"total_throughput\": %.2f, \"steps\": %d, \"decode_steps\": %d, \"prefill_steps\": %d, "
                "\"mean_decode_batch\": %.2f, \"decode_step_p50_ms\": %.4f, \"decode_step_mean_ms\": %.4f, "
                "\"decode_step_p90_ms\": %.4f, \"decode_tok_s\": %.2f, \"ttft_p50_s\": %.4f",
                i ? "," : "", l->num, l->submitted - l->aborted, l->dur, l->out_tok / l->dur,
                (l->in_tok + l->out_tok) / l->dur, l->n_steps, l->nd, l->np, l->dec_batch, l->dec_p50, l->dec_mean,
                l->dec_p90, l->dec_s > 0 ? l->dec_tok / l->dec_s : 0.0, l->ttft_p50);
        if (l->floor_steps)
            fprintf(f,
                    ", \"floor_mean_ms\": %.4f, \"floor_p50_ms\": %.4f, \"time_over_floor_mean\": %.3f, "
                    "\"time_over_floor_p50\": %.3f, \"forward_over_floor_p50\": %.3f, \"compute_bound_steps\": %d, "
                    "\"floor_weight_GB\": %.4f, \"floor_kv_GB\": %.4f, \"floor_TFLOP\": %.4f, "
                    "\"kv_attribution_mismatches\": %d",
                    l->floor_mean, l->floor_p50, l->ratio_mean, l->ratio_p50, l->fwd_ratio_p50,
                    l->compute_bound_steps, l->weight_gb, l->kv_gb, l->tflop, l->attrib_mismatch);
        if (l->steps) { /* [decode, prefill, positions, positions DSA-capped, ms, forward ms, floor ms] */
            fprintf(f, ", \"step_records\": [");
            for (int k = 0; k < l->n_steps; k++) {
                const double *r = l->steps[k];
                fprintf(f, "%s[%.0f,%.0f,%.0f,%.0f,%.4f,%.4f,%.6g]", k ? "," : "", r[0], r[1], r[2], r[3], r[4], r[5],
                        r[6]);
            }
            fprintf(f, "]");
        }
        if (l->prof.steps || profile_n > 0) write_json_profile(f, &l->prof, fm->bw);
        fprintf(f, ", \"gpus\": [");
        for (int g = 0; g < l->n_gpus; g++) {
            const nb_gpu_summary *s = &l->gpu[g];
            fprintf(f, "%s{\"name\": ", g ? ", " : "");
            json_str(f, s->name);
            fprintf(f, ", \"samples\": %d, \"power_mean_w\": %.1f, \"power_max_w\": %.1f, \"power_limit_w\": %.1f, "
                       "\"sm_clock_mean_mhz\": %.0f, \"sm_clock_max_mhz\": %.0f",
                    s->samples, s->power_mean_w, s->power_max_w, s->power_limit_w, s->sm_clock_mean_mhz,
                    s->sm_clock_max_mhz);
            if (s->reason_samples > 0)
                fprintf(f, ", \"power_capped_pct\": %.1f, \"thermal_slowdown_pct\": %.1f", s->power_capped_pct,
                        s->thermal_pct);
            else /* the driver did not say: null, as in nibble bench's JSON */
                fprintf(f, ", \"power_capped_pct\": null, \"thermal_slowdown_pct\": null");
            fprintf(f, "}");
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n]}\n");
}

int nb_cmd_bench_offline(int argc, char **argv)
{
    bo_sp = nb_sampling_default_params();
    bo_sp.temperature = 0;
    nb_engine_params ep = nb_engine_default_params();
    int nums[BO_MAX_LEVELS] = {1000}, n_levels = 1, in_len = 1024, out_len = 1024, seed = 1, warmup = 0, no_floor = 0;
    int profile_n = 0;
    const char *json = NULL;
    double ceil_copy = 0, ceil_bf16 = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
        if (!strcmp(a, "--no-floor")) {
            no_floor = 1;
            continue;
        }
        int r = nb_cli_engine_flag(argc, argv, &i, &ep);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (i + 1 >= argc) return usage(stderr);
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--num-prompts")) {
            char buf[256], *save = NULL;
            snprintf(buf, sizeof buf, "%s", v);
            n_levels = 0;
            for (char *t = strtok_r(buf, ",", &save); t && !bad; t = strtok_r(NULL, ",", &save)) {
                if (n_levels == BO_MAX_LEVELS) {
                    fprintf(stderr, "nibble bench-offline: at most %d levels in --num-prompts\n", BO_MAX_LEVELS);
                    return 2;
                }
                bad = nb_cli_int(a, t, 1, 1 << 24, &nums[n_levels++]);
            }
            if (!n_levels) bad = 1;
        } else if (!strcmp(a, "--input-len") || !strcmp(a, "--random-input-len")) bad = nb_cli_int(a, v, 1, 1 << 24, &in_len);
        else if (!strcmp(a, "--output-len") || !strcmp(a, "--random-output-len")) bad = nb_cli_int(a, v, 1, 1 << 24, &out_len);
        else if (!strcmp(a, "--seed")) bad = nb_cli_int(a, v, 0, 1 << 30, &seed);
        else if (!strcmp(a, "--warmup")) bad = nb_cli_int(a, v, 0, 1 << 20, &warmup);
        else if (!strcmp(a, "--profile-ops")) bad = nb_cli_int(a, v, 1, 1 << 20, &profile_n);
        else if (!strcmp(a, "--profile-skip")) bad = nb_cli_int(a, v, 0, 1 << 20, &bo_profile_skip);
        else if (!strcmp(a, "--json")) json = v;
        else if (!strcmp(a, "--extra-request-body")) bad = bo_extra_sampling(v) ? 1 : 0;
        else if (!strcmp(a, "--ceilings")) {
            if (sscanf(v, "%lf,%lf", &ceil_copy, &ceil_bf16) != 2 || !(ceil_copy > 0) || !(ceil_bf16 > 0)) {
                fprintf(stderr, "nibble bench-offline: --ceilings '%s': expected GBPS,TFLOPS\n", v);
                return 2;
            }
        }
        else {
            fprintf(stderr, "nibble bench-offline: unknown option '%s'\n", a);
            return usage(stderr);
        }
        if (bad) return 2;
    }
    if (!ep.model) {
        fprintf(stderr, "nibble bench-offline: --model is required\n");
        return usage(stderr);
    }
    /* The ceilings first, while the device is empty (they need ~4 GiB for a moment). */
    bo_floor_model fm;
    memset(&fm, 0, sizeof fm);
    int given = ceil_copy > 0;
    int want_floor = !no_floor && (given || ep.backend == NB_BACKEND_CUDA);
    if (given) snprintf(fm.device, sizeof fm.device, "given by --ceilings");
    else if (want_floor) {
#if NIBBLE_HAVE_CUDA
        if (nb_bench_ceilings(&ceil_copy, &ceil_bf16, fm.device, sizeof fm.device) != NB_OK) {
            fprintf(stderr, "nibble bench-offline: measuring the ceilings: %s (--no-floor skips them)\n",
                    nb_last_error());
            return 1;
        }
#else
        fprintf(stderr, "nibble bench-offline: no floor in a build without CUDA\n");
        want_floor = 0;
#endif
    }
    nb_engine *e = NULL;
    double t_load = nb_now_s();
    nb_status s = nb_engine_create(&ep, &e);
    if (s != NB_OK) {
        fprintf(stderr, "nibble bench-offline: %s: %s\n", nb_strerror(s), nb_last_error());
        return 1;
    }
    t_load = nb_now_s() - t_load;
    printf("engine ready in %.2f s (model load, weights%s, KV pool)\n", t_load,
           ep.backend == NB_BACKEND_CUDA ? " on the GPU" : "");
    nb_engine_info info;
    nb_engine_get_info(e, &info);
    if (in_len + out_len > info.context_length) {
        fprintf(stderr, "nibble bench-offline: input %d + output %d exceeds the context length %d\n", in_len, out_len,
                info.context_length);
        nb_engine_destroy(e);
        return 2;
    }
    if (want_floor) {
        if (floor_model_init(ep.model, &info, &fm) != NB_OK) {
            fprintf(stderr, "nibble bench-offline: floor model: %s\n", nb_last_error());
            nb_engine_destroy(e);
            return 1;
        }
        fm.bw = ceil_copy * 1e9;
        fm.rate = ceil_bf16 * 1e12;
        printf("floor: bytes / %.0f GB/s or FLOPs / %.0f TFLOP/s, the larger; weights outside the routed experts "
               "%.3f GB per step, one routed expert %.2f MB (%d MoE layers, %d experts, top-%d; experts touched: the "
               "expectation under uniform routing), KV %.0f bytes per attended position\n",
               ceil_copy, ceil_bf16, fm.fixed_bytes / 1e9, fm.expert_bytes / 1e6, fm.n_moe, fm.n_experts, fm.topk,
               fm.kv_bytes_per_token);
    }
    printf("bench-offline: %s, levels", info.model_name);
    for (int i = 0; i < n_levels; i++) printf(" %d", nums[i]);
    printf(" prompts, input %d, output %d, max running %d, chunked prefill %d, decode steps %d\n", in_len, out_len,
           info.max_running_requests, ep.chunked_prefill_size, ep.num_continuous_decode_steps);
    fflush(stdout);
    int rc = 0;
    bo_level L[BO_MAX_LEVELS], W = {0};
    if (warmup > 0) { /* not counted: first-use costs (handles, lazily captured graphs of small sizes) */
        rc |= run_level(e, &info, &fm, warmup, in_len, out_len < 8 ? out_len : 8, seed + 1000, 0, 0, &W);
    }
    /* power, SM clock and the share of time the power cap held the clock down, per level:
     * a step slower than its kernels timed alone is often a capped clock (docs/bench.md) */
    nb_nvml_sampler *smp = NULL;
    if (info.backend == NB_BACKEND_CUDA && nb_nvml_sampler_start(100, &smp) != NB_OK) {
        fprintf(stderr, "nibble bench-offline: GPU telemetry: %s (continuing without)\n", nb_last_error());
        nb_error_clear();
        smp = NULL;
    }
    for (int i = 0; i < n_levels; i++) {
        nb_nvml_sampler_reset(smp);
        rc |= run_level(e, &info, &fm, nums[i], in_len, out_len, seed + i, 1, profile_n, &L[i]);
        L[i].n_gpus = nb_nvml_sampler_snapshot(smp, L[i].gpu, NB_NVML_MAX_GPUS);
        for (int g = 0; g < L[i].n_gpus; g++) nb_gpu_summary_fprint(stdout, g, &L[i].gpu[g]);
        fflush(stdout);
    }
    nb_nvml_sampler_stop(smp);
    printf("\n%-10s %10s %12s %12s %12s %12s %12s %10s %10s\n", "prompts", "batch", "step p50 ms", "step mean ms",
           "decode tok/s", "output tok/s", "floor ms", "time/floor", "(p50)");
    for (int i = 0; i < n_levels; i++) {
        const bo_level *l = &L[i];
        printf("%-10d %10.1f %12.3f %12.3f %12.1f %12.1f ", l->num, l->dec_batch, l->dec_p50, l->dec_mean,
               l->dec_s > 0 ? l->dec_tok / l->dec_s : 0.0, l->out_tok / l->dur);
        if (l->floor_steps) printf("%12.3f %10.2f %10.2f\n", l->floor_mean, l->ratio_mean, l->ratio_p50);
        else printf("%12s %10s %10s\n", "-", "-", "-");
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "nibble bench-offline: cannot write %s\n", json);
            rc = 1;
        } else {
            write_json(f, ep.model, &info, &fm, in_len, out_len, t_load, L, n_levels, profile_n);
            fclose(f);
        }
    }
    for (int i = 0; i < n_levels; i++) {
        free(L[i].steps);
        nb_op_prof_free(&L[i].prof);
    }
    free(W.steps);
    nb_engine_destroy(e);
    return rc ? 1 : 0;
}
