/* Engine and sampling flags shared by the commands that run the engine (generate,
 * bench-offline; serve may use it too), with SGLang's server-argument names. Header-only:
 * apps/ compiles nibble.c and cmd_*.c only.
 *   int r = nb_cli_engine_flag(argc, argv, &i, &params);   1 consumed, 0 not ours, -1 bad
 *   int r = nb_cli_sampling_flag(argc, argv, &i, &sp, &stops);  (same)
 * Values must outlive the params (they point into argv). */
#ifndef NB_APPS_ENGINE_CLI_H
#define NB_APPS_ENGINE_CLI_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "nibble.h"

static const char nb_cli_engine_usage[] =
    "engine (SGLang's names):\n"
    "  --model DIR|synthetic:ARCH[:k=v,...]  model folder or synthetic model (glm5, glm5-tiny,\n"
    "                                 deepseek-v3, glm4-moe, qwen3-moe; e.g. synthetic:glm5:num_hidden_layers=8)\n"
    "  --tokenizer DIR                tokenizer folder (default: the model folder)\n"
    "  --backend cpu|cuda             (default cpu)       --threads N   CPU threads (0: all)\n"
    "  --page-size N                  KV tokens per page (64)\n"
    "  --mem-fraction-static F        fraction of memory for weights + KV (0.88)\n"
    "  --cpu-mem-gb G                 CPU memory budget (default: half of RAM)\n"
    "  --max-total-tokens N           KV capacity in tokens (overrides the fraction)\n"
    "  --max-running-requests N       (default: from KV capacity, at most 4096)\n"
    "  --num-continuous-decode-steps N  decode steps between scheduling rounds (1)\n"
    "  --chunked-prefill-size N       prompt tokens per step per request (8192; -1 off)\n"
    "  --max-prefill-tokens N         prompt tokens per step in all (16384)\n"
    "  --schedule-policy fcfs|lpm     (fcfs)    --max-queued-requests N (0: unbounded)\n"
    "  --context-length N             (default: the model's)   --random-seed N\n"
    "  --cuda-graph-max-bs N          largest decode batch replayed from a CUDA graph (1024; cuda)\n"
    "  --disable-cuda-graph           run every step eagerly (cuda)\n"
    "  --kv-cache-dtype auto|float32|bfloat16  MLA latent rows in the KV cache (auto: bfloat16 on cuda, float32 on cpu)\n";

static const char nb_cli_sampling_usage[] =
    "sampling:\n"
    "  --temperature T  --top-k K  --top-p P  --min-p P  --repetition-penalty R\n"
    "  --frequency-penalty F  --presence-penalty P  --seed S  --max-tokens N (--max-new-tokens)\n"
    "  --ignore-eos  --n N  --logprobs  --top-logprobs N  --stop STR (repeatable)\n"
    "  --stop-token-ids 1,2,3\n";

static inline int nb_cli_int(const char *flag, const char *v, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "nibble: %s '%s': expected an integer in [%ld, %ld]\n", flag, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static inline int nb_cli_num(const char *flag, const char *v, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end) {
        fprintf(stderr, "nibble: %s '%s': expected a number\n", flag, v);
        return -1;
    }
    *out = x;
    return 0;
}

static inline int nb_cli_engine_flag(int argc, char **argv, int *i, nb_engine_params *p)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--disable-cuda-graph")) {
        p->disable_cuda_graph = 1;
        return 1;
    }
    static const char *const known[] = {"--model", "--tokenizer", "--backend", "--threads", "--page-size",
                                        "--mem-fraction-static", "--cpu-mem-gb", "--max-total-tokens",
                                        "--max-running-requests", "--num-continuous-decode-steps",
                                        "--chunked-prefill-size", "--max-prefill-tokens", "--schedule-policy",
                                        "--max-queued-requests", "--context-length", "--random-seed", "--device",
                                        "--cuda-graph-max-bs", "--kv-cache-dtype"};
    int ours = 0;
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) ours |= !strcmp(a, known[k]);
    if (!ours) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "nibble: %s needs a value\n", a);
        return -1;
    }
    const char *v = argv[++*i];
    double d;
    int n;
    if (!strcmp(a, "--model")) p->model = v;
    else if (!strcmp(a, "--tokenizer")) p->tokenizer = v;
    else if (!strcmp(a, "--backend")) {
        int b = nb_backend_parse(v);
        if (b < 0) {
            fprintf(stderr, "nibble: --backend '%s': cpu or cuda\n", v);
            return -1;
        }
        p->backend = (nb_backend)b;
    } else if (!strcmp(a, "--kv-cache-dtype")) {
        int k = nb_kv_cache_dtype_parse(v);
        if (k < 0) {
            fprintf(stderr, "nibble: --kv-cache-dtype '%s': auto, float32 (fp32) or bfloat16 (bf16)\n", v);
            return -1;
        }
        p->kv_cache_dtype = (nb_kv_cache_dtype)k;
    } else if (!strcmp(a, "--schedule-policy")) {
        int s = nb_schedule_policy_parse(v);
        if (s < 0) {
            fprintf(stderr, "nibble: --schedule-policy '%s': fcfs or lpm\n", v);
            return -1;
        }
        p->schedule_policy = (nb_schedule_policy)s;
    } else if (!strcmp(a, "--mem-fraction-static")) {
        if (nb_cli_num(a, v, &p->mem_fraction_static)) return -1;
    } else if (!strcmp(a, "--cpu-mem-gb")) {
        if (nb_cli_num(a, v, &p->cpu_mem_gb)) return -1;
    } else if (!strcmp(a, "--max-total-tokens")) {
        if (nb_cli_num(a, v, &d) || d < 0) return -1;
        p->max_total_tokens = (int64_t)d;
    } else if (!strcmp(a, "--random-seed")) {
        if (nb_cli_num(a, v, &d) || d < 0) return -1;
        p->random_seed = (uint64_t)d;
    } else if (!strcmp(a, "--cuda-graph-max-bs")) {
        if (nb_cli_int(a, v, 1, 4096, &p->cuda_graph_max_bs)) return -1;
    } else {
        if (nb_cli_int(a, v, -1, 1 << 30, &n)) return -1;
        if (!strcmp(a, "--threads")) p->threads = n;
        else if (!strcmp(a, "--page-size")) p->page_size = n;
        else if (!strcmp(a, "--max-running-requests")) p->max_running_requests = n;
        else if (!strcmp(a, "--num-continuous-decode-steps")) p->num_continuous_decode_steps = n;
        else if (!strcmp(a, "--chunked-prefill-size")) p->chunked_prefill_size = n;
        else if (!strcmp(a, "--max-prefill-tokens")) p->max_prefill_tokens = n;
        else if (!strcmp(a, "--max-queued-requests")) p->max_queued_requests = n;
        else if (!strcmp(a, "--context-length")) p->context_length = n;
        else if (!strcmp(a, "--device")) p->device = n;
    }
    return 1;
}

/* Stop strings and stop ids collected from the command line. */
typedef struct nb_cli_stops {
    const char *strs[32];
    int n_strs;
    int32_t ids[64];
    int n_ids;
} nb_cli_stops;

static inline int nb_cli_sampling_flag(int argc, char **argv, int *i, nb_sampling_params *sp, nb_cli_stops *st)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--ignore-eos")) {
        sp->ignore_eos = 1;
        return 1;
    }
    if (!strcmp(a, "--logprobs")) {
        sp->logprobs = 1;
        return 1;
    }
    static const char *const known[] = {"--temperature", "--top-k", "--top-p", "--min-p", "--repetition-penalty",
                                        "--frequency-penalty", "--presence-penalty", "--seed", "--max-tokens",
                                        "--max-new-tokens", "--n", "--top-logprobs", "--stop", "--stop-token-ids"};
    int ours = 0;
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) ours |= !strcmp(a, known[k]);
    if (!ours) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "nibble: %s needs a value\n", a);
        return -1;
    }
    const char *v = argv[++*i];
    double d;
    int n;
    if (!strcmp(a, "--stop")) {
        if (st->n_strs == 32) {
            fprintf(stderr, "nibble: at most 32 --stop strings\n");
            return -1;
        }
        st->strs[st->n_strs++] = v;
        sp->stop = st->strs;
        sp->n_stop = st->n_strs;
    } else if (!strcmp(a, "--stop-token-ids")) {
        const char *q = v;
        while (*q) {
            char *end;
            long x = strtol(q, &end, 10);
            if (end == q || x < 0 || x > INT32_MAX || (*end && *end != ',') || st->n_ids == 64) {
                fprintf(stderr, "nibble: --stop-token-ids '%s': comma-separated ids (at most 64)\n", v);
                return -1;
            }
            st->ids[st->n_ids++] = (int32_t)x;
            q = *end ? end + 1 : end;
        }
        sp->stop_token_ids = st->ids;
        sp->n_stop_token_ids = st->n_ids;
    } else if (!strcmp(a, "--seed")) {
        if (nb_cli_num(a, v, &d)) return -1;
        sp->seed = (int64_t)d;
    } else if (!strcmp(a, "--top-k") || !strcmp(a, "--max-tokens") || !strcmp(a, "--max-new-tokens") ||
               !strcmp(a, "--n") || !strcmp(a, "--top-logprobs")) {
        if (nb_cli_int(a, v, -1, 1 << 30, &n)) return -1;
        if (!strcmp(a, "--top-k")) sp->top_k = n;
        else if (!strcmp(a, "--n")) sp->n = n;
        else if (!strcmp(a, "--top-logprobs")) sp->top_logprobs = n;
        else sp->max_tokens = n;
    } else {
        if (nb_cli_num(a, v, &d)) return -1;
        if (!strcmp(a, "--temperature")) sp->temperature = (float)d;
        else if (!strcmp(a, "--top-p")) sp->top_p = (float)d;
        else if (!strcmp(a, "--min-p")) sp->min_p = (float)d;
        else if (!strcmp(a, "--repetition-penalty")) sp->repetition_penalty = (float)d;
        else if (!strcmp(a, "--frequency-penalty")) sp->frequency_penalty = (float)d;
        else if (!strcmp(a, "--presence-penalty")) sp->presence_penalty = (float)d;
    }
    return 1;
}

#endif
