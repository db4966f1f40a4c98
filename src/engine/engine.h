/* Engine internals shared by engine.c (step loop, submit/abort), engine_create.c (model
 * loading and KV sizing) and the tests, which drive a real engine over a fake runner.
 * Public API: include/nibble.h. Tests: tests/engine/test_engine.c. */
#ifndef NB_ENGINE_ENGINE_H
#define NB_ENGINE_ENGINE_H

#include "engine/runner.h"
#include "nibble.h"

struct nb_tokenizer;

/* Everything nb_engine_create resolved: the runner (owned by the engine from then on,
 * also on failure), the optional tokenizer and chat template (owned too). */
typedef struct nb_engine_parts {
    nb_runner *runner;
    struct nb_tokenizer *tokenizer;
    char *chat_template;            /* malloc'd, or NULL */
    char model_name[128];
    double mem_budget_bytes;        /* device or CPU memory budget (before the fraction) */
} nb_engine_parts;

/* Size the KV cache from params and the runner, start the step thread. */
nb_status nb_engine_create_from_parts(const nb_engine_params *p, nb_engine_parts *parts, nb_engine **out);

/* Parse "fcfs"/"lpm", "cpu"/"cuda", "auto"/"float32"/"bfloat16" (also "fp32", "bf16") for
 * CLI flags. -1 when unknown. */
int nb_schedule_policy_parse(const char *s);
int nb_backend_parse(const char *s);
int nb_kv_cache_dtype_parse(const char *s);

/* Test hook: block the step loop before each step until nb_engine_test_step(e, n) allows
 * n more steps (so tests can hold requests at a chosen stage). Off by default. */
void nb_engine_test_gate(nb_engine *e, int enabled);
void nb_engine_test_step(nb_engine *e, int n);
/* Step trace for benchmarks: from now on, one record per executed step is appended to
 * buf (owned by the caller, cap entries; later steps are dropped). NULL stops tracing.
 * nb_engine_trace_count returns how many records were written. */
typedef struct nb_step_record {
    double ms;            /* forward + sampling + delivery */
    double forward_ms;    /* the runner's forward, and its sampling when the runner samples
                           * (an asynchronous backend's step is done when its sampling returns) */
    int n_decode;         /* decode tokens */
    int n_prefill_tokens; /* prompt (or recomputed) tokens */
    int n_seqs;           /* sequences in the batch */
} nb_step_record;
void nb_engine_trace(nb_engine *e, nb_step_record *buf, int cap);
int nb_engine_trace_count(nb_engine *e);

/* Wait until the engine thread is idle (no live requests and nothing incoming). */
void nb_engine_wait_idle(nb_engine *e);

#endif
