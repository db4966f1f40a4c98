/* nibble — public C API.
 *
 * Opaque handles with the nb_ prefix; functions are nb_<thing>_<verb>; parameters come
 * as structs filled by nb_<thing>_default_params(). Every function that can fail returns
 * an nb_status; the message that explains the last failure on this thread is
 * nb_last_error(). Exercised by: build/nibble --help, tests/base/test_base.c.
 */
#ifndef NIBBLE_H
#define NIBBLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NB_VERSION_MAJOR 0
#define NB_VERSION_MINOR 1
#define NB_VERSION_PATCH 0

/* "0.1.0" (the version this library was built as). */
const char *nb_version(void);

/* Status codes. NB_OK is zero; every other value is an error whose explanation, with
 * the file, tensor, field or parameter involved, is in nb_last_error(). */
typedef enum nb_status {
    NB_OK = 0,
    NB_ERR_INVALID_ARG,   /* a parameter is out of range or malformed */
    NB_ERR_IO,            /* a file could not be opened, read, written or mapped */
    NB_ERR_FORMAT,        /* a file's contents are malformed (safetensors, JSON, config) */
    NB_ERR_UNSUPPORTED,   /* well-formed, but nibble does not support it (architecture, dtype) */
    NB_ERR_NOT_FOUND,     /* a named thing (tensor, model, request) does not exist */
    NB_ERR_OUT_OF_MEMORY, /* host or device allocation failed, or a budget is exceeded */
    NB_ERR_CUDA,          /* a CUDA runtime/driver/library call failed */
    NB_ERR_BUSY,          /* a queue or capacity limit refuses new work for now */
    NB_ERR_ABORTED,       /* the operation was cancelled */
    NB_ERR_INTERNAL,      /* a bug: an invariant did not hold */
    NB_STATUS_COUNT
} nb_status;

/* Short fixed description of a status code ("invalid argument"). Never NULL. */
const char *nb_strerror(nb_status s);

/* The message describing the most recent error set on the calling thread, or "" when
 * none. Valid until the next nibble call on this thread. */
const char *nb_last_error(void);

/* Log levels; messages below the current level cost nothing (not even formatting). */
typedef enum nb_log_level {
    NB_LOG_TRACE = 0,
    NB_LOG_DEBUG,
    NB_LOG_INFO,
    NB_LOG_WARN,
    NB_LOG_ERROR,
    NB_LOG_OFF
} nb_log_level;

/* A log sink receives one formatted line (no trailing newline). */
typedef void (*nb_log_sink)(nb_log_level level, const char *tag, const char *line, void *user);

/* Set the level (default INFO, or NIBBLE_LOG=trace|debug|info|warn|error|off) and the sink
 * (NULL: timestamped lines on stderr). Thread-safe. */
void nb_log_set(nb_log_level level, nb_log_sink sink, void *user);

/* ===================================================================================== */
/* Engine: a loaded model, its paged KV cache and the continuous-batching step loop.      */
/* ===================================================================================== */
/* One engine = one model on one backend. A thread of its own runs the step loop: each
 * step the scheduler picks a batch (prefill chunks of newly admitted requests plus one
 * decode token for every running request), the backend runs one forward pass, tokens
 * are sampled on the host and delivered through the per-request callback.
 * Exercised by: nibble generate, nibble bench-offline, tests/engine/, docs/engine.md. */

typedef struct nb_engine nb_engine;
struct nb_tokenizer; /* src/tokenizer/tokenizer.h (opaque here) */

typedef enum nb_backend { NB_BACKEND_CPU = 0, NB_BACKEND_CUDA } nb_backend;

/* --schedule-policy. fcfs: admit waiting requests in arrival order. lpm (longest prefix
 * match): admit the request sharing the longest prefix with cached pages first; without
 * a prefix cache it orders by arrival too. */
typedef enum nb_schedule_policy { NB_SCHED_FCFS = 0, NB_SCHED_LPM } nb_schedule_policy;
/* The KV cache's storage of MLA latent rows (--kv-cache-dtype): auto (bfloat16 for MLA models
 * on the GPU, float32 on the CPU reference and for GQA models), float32, or bfloat16 (the
 * latent and rope key in half the bytes; MLA models only). */
typedef enum nb_kv_cache_dtype { NB_KV_CACHE_AUTO = 0, NB_KV_CACHE_F32, NB_KV_CACHE_BF16 } nb_kv_cache_dtype;

/* Knobs carry SGLang's server-argument names (--page-size → page_size) and meanings. */
typedef struct nb_engine_params {
    const char *model;                /* a model folder (config.json + *.safetensors) or
                                         "synthetic:ARCH[:key=value,...]" (glm5, glm5-tiny,
                                         deepseek-v3, glm4-moe, qwen3-moe). Required. */
    const char *tokenizer;            /* tokenizer folder; NULL: the model folder (synthetic
                                         glm5-tiny: the built-in byte tokenizer) */
    nb_backend backend;               /* --backend cpu|cuda; default cpu */
    int device;                       /* CUDA device ordinal; default 0 */
    int threads;                      /* CPU worker threads; 0 (default): all cores */
    int page_size;                    /* --page-size: tokens per KV page; default 64 */
    double mem_fraction_static;       /* --mem-fraction-static: fraction of device memory
                                         (CPU: of cpu_mem_gb) for weights plus KV cache;
                                         default 0.88 */
    double cpu_mem_gb;                /* --cpu-mem-gb: CPU backend memory budget in GiB;
                                         0 (default): half of physical memory */
    int64_t max_total_tokens;         /* --max-total-tokens: KV capacity in tokens; 0
                                         (default): derived from the memory budget. When
                                         set it wins over the memory fraction (rounded down
                                         to whole pages). */
    int max_running_requests;         /* --max-running-requests; 0 (default): derived from
                                         KV capacity, min(4096, KV pages) */
    int num_continuous_decode_steps;  /* --num-continuous-decode-steps N: while requests are
                                         decoding, new work is admitted only every N-th step
                                         (N-1 decode-only steps in between), so a new
                                         request waits at most N steps; default 1 (every
                                         step) */
    int chunked_prefill_size;         /* --chunked-prefill-size: most prompt tokens of one
                                         request computed per step; longer prompts are split
                                         into chunks over several steps; <= 0 disables
                                         chunking; default 8192 */
    int max_prefill_tokens;           /* --max-prefill-tokens: most prompt tokens of all
                                         requests admitted in one step (a single longer
                                         request is still admitted alone); default 16384 */
    nb_schedule_policy schedule_policy; /* --schedule-policy; default fcfs */
    int max_queued_requests;          /* --max-queued-requests: submit fails with NB_ERR_BUSY
                                         when this many requests wait; 0 (default):
                                         unbounded */
    int context_length;               /* --context-length: longest prompt+output; 0
                                         (default): the model's max_position_embeddings,
                                         capped at the KV capacity */
    uint64_t random_seed;             /* --random-seed: seeds requests whose sampling seed is
                                         -1 (each gets random_seed mixed with its id); 0 */
    int cuda_graph_max_bs;            /* --cuda-graph-max-bs: decode steps of up to this many
                                         requests replay CUDA graphs (backend cuda; ignored on
                                         cpu); 0 (default): 256; 1..4096 */
    int disable_cuda_graph;           /* --disable-cuda-graph: 1 runs every step eagerly */
    nb_kv_cache_dtype kv_cache_dtype; /* --kv-cache-dtype auto|float32|bfloat16: the MLA
                                         latent rows' storage; default auto (bfloat16 on
                                         the GPU, float32 on the CPU) */
} nb_engine_params;

/* The defaults documented above (model NULL: the caller must set it). */
nb_engine_params nb_engine_default_params(void);

/* Load the model, size and allocate the KV cache, start the step thread. Logs one line
 *   KV cache: 495,488 tokens (37.8 GiB); 1,935 requests of 256 tokens
 * Returns NB_OK and *out; NB_ERR_INVALID_ARG (a knob out of range or model spec
 * malformed, named in the message), NB_ERR_IO / NB_ERR_FORMAT / NB_ERR_UNSUPPORTED (the
 * checkpoint, as the loader reports), NB_ERR_OUT_OF_MEMORY (weights do not fit the
 * budget or no KV page fits), NB_ERR_CUDA (backend cuda unavailable or failing). */
nb_status nb_engine_create(const nb_engine_params *params, nb_engine **out);

/* Stop the step thread and free everything. Requests still waiting or running get a
 * FINISH event with NB_FINISH_ABORT before it returns. NULL is a no-op.
 * Must not be called from inside an event callback. */
void nb_engine_destroy(nb_engine *e);

/* -------- sampling -------- */

#define NB_MAX_TOP_LOGPROBS 20

typedef struct nb_sampling_params {
    float temperature;        /* 1.0; 0: greedy (argmax; ties to the lowest id) */
    int top_k;                /* -1 (default) or 0: off; else keep the k most likely */
    float top_p;              /* 1.0: off; keep the most likely tokens while the mass
                                 before each is <= top_p (the nucleus) */
    float min_p;              /* 0: off; drop tokens with p < min_p * p_max */
    float repetition_penalty; /* 1.0: off; logits of tokens seen in prompt or output are
                                 divided by it when positive, multiplied when negative */
    float frequency_penalty;  /* 0: off; logit -= f * count of the token in the output */
    float presence_penalty;   /* 0: off; logit -= p if the token occurs in the output */
    int64_t seed;             /* -1 (default): engine-chosen; else output is a function of
                                 (prompt, params, seed) only: batch, preemption and timing
                                 do not change it. Choice i of n uses seed + i. */
    const int32_t *stop_token_ids; /* finish with NB_FINISH_STOP when sampled (the token
                                 is delivered, like EOS) */
    int n_stop_token_ids;
    const char *const *stop;  /* stop strings matched on the decoded text (across token
                                 boundaries); the match and anything after it are not
                                 delivered. Needs a tokenizer (else NB_ERR_INVALID_ARG). */
    int n_stop;
    int max_tokens;           /* most generated tokens; -1 (default): up to the context */
    int ignore_eos;           /* 1: do not stop at the model's EOS ids; default 0 */
    int n;                    /* independent choices sampled from one prompt; default 1 */
    int logprobs;             /* 1: deliver the log-probability of each sampled token
                                 (log-softmax of the raw logits, before any filter) */
    int top_logprobs;         /* 0..NB_MAX_TOP_LOGPROBS alternatives per token (> 0
                                 implies logprobs) */
    int skip_special_tokens;  /* 1 (default): special tokens produce no text */
} nb_sampling_params;

nb_sampling_params nb_sampling_default_params(void);

/* -------- events delivered to the submitter -------- */

typedef enum nb_engine_event_type {
    NB_EVENT_TOKENS = 0,      /* new tokens for one choice */
    NB_EVENT_FINISH           /* one choice finished (after its last TOKENS event) */
} nb_engine_event_type;

typedef enum nb_finish_reason {
    NB_FINISH_NONE = 0,
    NB_FINISH_STOP,           /* EOS, a stop token id or a stop string */
    NB_FINISH_LENGTH,         /* max_tokens or the context length reached */
    NB_FINISH_ABORT           /* nb_engine_abort, engine shutdown or an engine error */
} nb_finish_reason;

typedef struct nb_token_logprob {
    int32_t id;
    float logprob;
} nb_token_logprob;

typedef struct nb_engine_event {
    nb_engine_event_type type;
    uint64_t request_id;
    int index;                        /* choice 0..n-1 */
    /* NB_EVENT_TOKENS (pointers valid only during the callback) */
    const int32_t *token_ids;         /* n_tokens >= 1 new ids, in order */
    int n_tokens;
    const char *text;                 /* UTF-8 text that became final with these tokens
                                         (may be "" while a multi-byte character or a
                                         possible stop string is pending; what is still
                                         held when the choice ends comes with its last
                                         token). On FINISH: always "". NULL without a
                                         tokenizer. The concatenation of all texts of a
                                         choice is its completion. */
    size_t text_len;
    const float *logprobs;            /* [n_tokens] when requested, else NULL */
    const nb_token_logprob *top_logprobs; /* [n_tokens][n_top], best first, else NULL */
    int n_top;
    /* NB_EVENT_FINISH */
    nb_finish_reason finish_reason;
    int32_t stop_token;               /* the id that stopped it (EOS or stop id), else -1 */
    int stop_string;                  /* index into params.stop that matched, else -1 */
    int prompt_tokens;                /* usage of this choice */
    int completion_tokens;
    int last;                         /* 1 on the final event of the whole request (every
                                         choice finished): no callback follows it */
} nb_engine_event;

/* Called on the engine thread, one event at a time, in order per request. It must return
 * quickly and must not call nb_engine_destroy; it may call nb_engine_submit/abort. */
typedef void (*nb_engine_event_fn)(const nb_engine_event *ev, void *user);

/* Queue a request: prompt ids (copied), sampling params (copied, with their arrays and
 * strings), a callback and its user pointer. On NB_OK *request_id (if not NULL) is the
 * id used in events and nb_engine_abort, and the callback will see exactly one FINISH
 * per choice, the last one with last = 1. On error the callback is never called.
 * NB_ERR_INVALID_ARG: empty prompt, a token id outside the vocabulary, prompt_len +
 *   max_tokens over the context length, a sampling field out of range (named), stop
 *   strings without a tokenizer.
 * NB_ERR_BUSY: max_queued_requests requests are already waiting.
 * NB_ERR_ABORTED: the engine is shutting down or has failed. */
nb_status nb_engine_submit(nb_engine *e, const int32_t *prompt, int prompt_len,
                           const nb_sampling_params *sp, nb_engine_event_fn fn, void *user,
                           uint64_t *request_id);

/* Abort a request at whatever stage it is (waiting, prefilling, decoding, preempted):
 * within one step its KV pages are free and its remaining choices get FINISH with
 * NB_FINISH_ABORT. Thread-safe; may be called from a callback. NB_OK: the abort is
 * queued (an id that has already finished is ignored: no further event).
 * NB_ERR_NOT_FOUND: the id was never issued by this engine. */
nb_status nb_engine_abort(nb_engine *e, uint64_t request_id);

/* -------- introspection -------- */

typedef struct nb_engine_info {
    char model_name[128];             /* folder name, or the synthetic spec */
    char model_type[32];              /* config model_type ("glm_moe_dsa") */
    int vocab_size;
    int context_length;
    int64_t max_total_tokens;         /* KV capacity in tokens */
    double kv_bytes;                  /* KV cache bytes allocated */
    int page_size;
    int max_running_requests;
    int eos_ids[8];
    int n_eos;
    int bos_id;                       /* -1 when none */
    nb_backend backend;
} nb_engine_info;

nb_status nb_engine_get_info(const nb_engine *e, nb_engine_info *out);

/* A consistent snapshot for /metrics; counters are cumulative since create. */
typedef struct nb_engine_stats {
    int running;                      /* sequences (choices) holding KV: prefilling or decoding */
    int waiting;                      /* sequences queued, including preempted ones, plus
                                         requests submitted but not yet taken in */
    int64_t kv_used_tokens;           /* page-granular: used pages x page_size */
    int64_t kv_total_tokens;
    double kv_usage;                  /* kv_used_tokens / kv_total_tokens */
    int max_context;                  /* longest prompt+output among running requests */
    uint64_t prompt_tokens_total;     /* prompt tokens of admitted requests (once per
                                         request, whatever n and preemptions) */
    uint64_t generation_tokens_total; /* tokens delivered */
    uint64_t prefill_tokens_computed; /* forward tokens incl. preemption recompute */
    uint64_t requests_finished;       /* choices finished with stop or length */
    uint64_t requests_aborted;        /* choices finished with abort */
    uint64_t preemptions;
    uint64_t steps;
    double last_step_ms;
    double busy_s;                    /* time inside steps */
} nb_engine_stats;

void nb_engine_get_stats(nb_engine *e, nb_engine_stats *out);

/* The engine's tokenizer (NULL when none was loaded) and chat template source (NULL
 * when the model has none); valid until nb_engine_destroy. The server applies templates. */
const struct nb_tokenizer *nb_engine_tokenizer(const nb_engine *e);
const char *nb_engine_chat_template(const nb_engine *e);

#ifdef __cplusplus
}
#endif
#endif /* NIBBLE_H */
