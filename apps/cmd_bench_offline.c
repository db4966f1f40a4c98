/* nibble bench-offline: all requests at once through the engine, no HTTP, with the
 * definitions of SGLang's bench_offline_throughput: random prompts of --input-len token
 * ids, --output-len generated tokens each (ignore_eos, greedy), duration from the first
 * submit to the last finish; request throughput = requests / duration; input, output and
 * total token throughput = those token counts / duration. Also step-time statistics from
 * the engine's step trace: decode-only steps and steps that carry prefill, separately.
 *   nibble bench-offline --model synthetic:glm5-tiny --num-prompts 64 --input-len 128
 *                        --output-len 32 [--max-running-requests N] [engine flags]
 * Results are recorded in bench/RESULTS.md. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/sampling.h"
#include "engine_cli.h"
#include "nibble.h"

const char nb_cmd_bench_offline_summary[] = "offline throughput: N requests at once through the engine (SGLang's definitions)";

typedef struct bo_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;
    int64_t out_tokens;
    int aborted;
    double *ttft;     /* per request, seconds from start */
    double t0;
} bo_state;

typedef struct bo_req {
    bo_state *st;
    int index;
    int got_first;
} bo_req;

static void on_event(const nb_engine_event *ev, void *user)
{
    bo_req *r = user;
    bo_state *st = r->st;
    pthread_mutex_lock(&st->mu);
    if (ev->type == NB_EVENT_TOKENS) {
        st->out_tokens += ev->n_tokens;
        if (!r->got_first) {
            r->got_first = 1;
            st->ttft[r->index] = nb_now_s() - st->t0;
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

static void stat_line(const char *name, double *v, int n)
{
    if (n == 0) {
        printf("%-40s %s\n", name, "-");
        return;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    double mean = 0;
    for (int i = 0; i < n; i++) mean += v[i];
    mean /= n;
    printf("%-40s mean %.2f  p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", name, mean, pct(v, n, 50), pct(v, n, 90),
           pct(v, n, 99), v[n - 1]);
}

static int usage(FILE *f)
{
    fprintf(f,
            "usage: nibble bench-offline --model M [--num-prompts N (1000)] [--input-len I (1024)]\n"
            "                            [--output-len O (1024)] [--seed S] [engine flags]\n"
            "(--random-input-len / --random-output-len are accepted as SGLang spells them)\n\n%s",
            nb_cli_engine_usage);
    return f == stdout ? 0 : 2;
}

int nb_cmd_bench_offline(int argc, char **argv)
{
    nb_engine_params ep = nb_engine_default_params();
    int num = 1000, in_len = 1024, out_len = 1024, seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
        int r = nb_cli_engine_flag(argc, argv, &i, &ep);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (i + 1 >= argc) return usage(stderr);
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--num-prompts")) bad = nb_cli_int(a, v, 1, 1 << 24, &num);
        else if (!strcmp(a, "--input-len") || !strcmp(a, "--random-input-len")) bad = nb_cli_int(a, v, 1, 1 << 24, &in_len);
        else if (!strcmp(a, "--output-len") || !strcmp(a, "--random-output-len")) bad = nb_cli_int(a, v, 1, 1 << 24, &out_len);
        else if (!strcmp(a, "--seed")) bad = nb_cli_int(a, v, 0, 1 << 30, &seed);
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
    nb_engine *e = NULL;
    nb_status s = nb_engine_create(&ep, &e);
    if (s != NB_OK) {
        fprintf(stderr, "nibble bench-offline: %s: %s\n", nb_strerror(s), nb_last_error());
        return 1;
    }
    nb_engine_info info;
    nb_engine_get_info(e, &info);
    if (in_len + out_len > info.context_length) {
        fprintf(stderr, "nibble bench-offline: input %d + output %d exceeds the context length %d\n", in_len, out_len,
                info.context_length);
        nb_engine_destroy(e);
        return 2;
    }
    /* random prompts: ids drawn uniformly, avoiding eos ids */
    int32_t *prompts = malloc((size_t)num * (size_t)in_len * sizeof *prompts);
    bo_req *reqs = calloc((size_t)num, sizeof *reqs);
    bo_state st = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, NULL, 0};
    st.ttft = calloc((size_t)num, sizeof *st.ttft);
    int trace_cap = 4 * (num + out_len) + 1024;
    nb_step_record *trace = malloc((size_t)trace_cap * sizeof *trace);
    if (!prompts || !reqs || !st.ttft || !trace) {
        fprintf(stderr, "nibble bench-offline: out of memory for %d prompts\n", num);
        nb_engine_destroy(e);
        return 1;
    }
    for (int64_t i = 0; i < (int64_t)num * in_len; i++) {
        int32_t t;
        uint64_t k = (uint64_t)i;
        do {
            t = (int32_t)(nb_mix64((uint64_t)seed * 0x9E3779B97F4A7C15ULL + k) % (uint64_t)info.vocab_size);
            k += 0x100000000ULL;
            int eos = 0;
            for (int j = 0; j < info.n_eos; j++) eos |= t == info.eos_ids[j];
            if (!eos) break;
        } while (1);
        prompts[i] = t;
    }
    nb_sampling_params sp = nb_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = out_len;
    sp.ignore_eos = 1;
    printf("bench-offline: %s, %d prompts, input %d, output %d, max running %d, chunked prefill %d, decode steps %d\n",
           info.model_name, num, in_len, out_len, info.max_running_requests, ep.chunked_prefill_size,
           ep.num_continuous_decode_steps);
    fflush(stdout);
    nb_engine_trace(e, trace, trace_cap);
    st.t0 = nb_now_s();
    int submitted = 0;
    for (int i = 0; i < num; i++) {
        reqs[i] = (bo_req){&st, i, 0};
        pthread_mutex_lock(&st.mu);
        st.pending++;
        pthread_mutex_unlock(&st.mu);
        s = nb_engine_submit(e, prompts + (size_t)i * in_len, in_len, &sp, on_event, &reqs[i], NULL);
        if (s != NB_OK) {
            pthread_mutex_lock(&st.mu);
            st.pending--;
            pthread_mutex_unlock(&st.mu);
            fprintf(stderr, "nibble bench-offline: request %d: %s\n", i, nb_last_error());
            break;
        }
        submitted++;
    }
    pthread_mutex_lock(&st.mu);
    while (st.pending > 0) pthread_cond_wait(&st.cv, &st.mu);
    pthread_mutex_unlock(&st.mu);
    double dur = nb_now_s() - st.t0;
    int n_steps = nb_engine_trace_count(e);
    nb_engine_trace(e, NULL, 0);
    nb_engine_stats es;
    nb_engine_get_stats(e, &es);

    int64_t in_tok = (int64_t)submitted * in_len, out_tok = st.out_tokens;
    printf("\n====== Offline Throughput Benchmark Result =======\n");
    printf("%-40s %s\n", "Backend:", info.backend == NB_BACKEND_CUDA ? "nibble (cuda)" : "nibble (cpu)");
    printf("%-40s %d\n", "Successful requests:", submitted - st.aborted);
    printf("%-40s %.2f\n", "Benchmark duration (s):", dur);
    printf("%-40s %lld\n", "Total input tokens:", (long long)in_tok);
    printf("%-40s %lld\n", "Total generated tokens:", (long long)out_tok);
    printf("%-40s %.2f\n", "Request throughput (req/s):", submitted / dur);
    printf("%-40s %.2f\n", "Input token throughput (tok/s):", (double)in_tok / dur);
    printf("%-40s %.2f\n", "Output token throughput (tok/s):", (double)out_tok / dur);
    printf("%-40s %.2f\n", "Total token throughput (tok/s):", (double)(in_tok + out_tok) / dur);
    printf("================== Engine steps ==================\n");
    double *dec = malloc((size_t)(n_steps + 1) * sizeof *dec), *pre = malloc((size_t)(n_steps + 1) * sizeof *pre);
    int nd = 0, np = 0;
    double dec_s = 0, pre_s = 0, dec_batch = 0, fwd_s = 0;
    int64_t dec_tok = 0, pre_tok = 0, pre_dec_tok = 0;
    for (int i = 0; i < n_steps; i++) {
        fwd_s += trace[i].forward_ms * 1e-3;
        if (trace[i].n_prefill_tokens == 0) {
            dec[nd++] = trace[i].ms;
            dec_s += trace[i].ms * 1e-3;
            dec_tok += trace[i].n_decode;
            dec_batch += trace[i].n_decode;
        } else {
            pre[np++] = trace[i].ms;
            pre_s += trace[i].ms * 1e-3;
            pre_tok += trace[i].n_prefill_tokens;
            pre_dec_tok += trace[i].n_decode;
        }
    }
    printf("%-40s %d (%d decode-only, %d with prefill)%s\n", "Steps:", n_steps, nd, np,
           n_steps == trace_cap ? " [trace full]" : "");
    printf("%-40s %.2f (forward %.2f, engine: plan/sample/deliver %.2f)\n", "Time in steps (s):", dec_s + pre_s,
           fwd_s, dec_s + pre_s - fwd_s);
    stat_line("Decode-only step time (ms):", dec, nd);
    stat_line("Prefill step time (ms):", pre, np);
    printf("%-40s %.1f\n", "Mean decode batch (requests):", nd ? dec_batch / nd : 0.0);
    printf("%-40s %.2f\n", "Prefill throughput (tok/s):", pre_s > 0 ? (double)pre_tok / pre_s : 0.0);
    printf("%-40s %.2f\n", "Decode throughput (tok/s):", dec_s > 0 ? (double)dec_tok / dec_s : 0.0);
    printf("%-40s %lld (+%lld decode tokens in prefill steps)\n", "Prefill tokens computed:", (long long)pre_tok,
           (long long)pre_dec_tok);
    printf("%-40s %llu\n", "Preemptions:", (unsigned long long)es.preemptions);
    stat_line("Time to first token (s):", st.ttft, submitted);
    printf("==================================================\n");
    free(dec);
    free(pre);
    nb_engine_destroy(e);
    free(prompts);
    free(reqs);
    free(st.ttft);
    free(trace);
    return st.aborted ? 1 : 0;
}
