/* Per-op profile of decode steps ("where does a step's time go?"): while a context is being
 * profiled, the dispatch in ops/ops.c brackets every nb_op_* call with a timestamp pair:
 * CUDA events recorded on the context's stream (a preallocated pool, no synchronization per
 * op; elapsed times are read once, after one cudaEventSynchronize at the end of the step),
 * host wall clock on the CPU backend. Records are keyed by op name plus the detail that
 * tells calls apart (linear: tokens, weight shape and format; moe_experts: tokens and expert
 * shape; attention ops: tokens; the rest: their row shape), and summed over steps into an
 * nb_op_prof. Profiled steps run eagerly: the CUDA runner skips graph replay for them.
 * Off (the default) costs one relaxed atomic load per op.
 * Used by `nibble bench-offline --profile-ops N` (docs/bench.md "Per-op profile").
 * Test: tests/ops/test_ops_profile.c (CPU, synthetic:glm5-tiny). */
#ifndef NB_OPS_PROFILE_H
#define NB_OPS_PROFILE_H

#include <stdint.h>

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One (op, detail) key summed over the profiled steps. */
typedef struct nb_op_prof_row {
    char op[24];
    char detail[128];
    int64_t calls;
    double ms;     /* device time (CUDA events) or host wall time (CPU) of its calls */
    double bytes;  /* linear, moe_experts: weight bytes read + activations in and out; else 0 */
} nb_op_prof_row;

/* An accumulator; zero-initialize it ({0}) and free it with nb_op_prof_free. */
typedef struct nb_op_prof {
    int steps;
    double tokens;   /* sum over steps of the tokens each step carried */
    double wall_ms;  /* host wall clock, step begin to end (the device finished at end) */
    double op_ms;    /* sum of every op's time; wall_ms - op_ms is host and launch overhead */
    int n_rows, cap_rows;
    nb_op_prof_row *rows;
} nb_op_prof;

void nb_op_prof_free(nb_op_prof *p);
/* Rows by time, largest first. */
void nb_op_prof_sort(nb_op_prof *p);

/* Profile the ops of ctx from begin to end as one step, and add the step into *acc. One
 * context at a time per process may be profiled (NB_ERR_BUSY otherwise); ops of other contexts
 * are not recorded. end waits for the context's device work. Nested nb_op_* calls (an op
 * implemented with other ops) are recorded once, at the outer call. */
nb_status nb_ops_profile_begin(nb_ops_ctx *ctx);
nb_status nb_ops_profile_end(nb_ops_ctx *ctx, nb_op_prof *acc, double tokens);

/* The process-wide request the runners serve (bench-offline): of the next decode-only steps
 * on any context, skip `skip`, then profile `n` into *into (which must stay valid until a
 * later request replaces it; n = 0 cancels). Thread-safe against the runner's thread. */
void nb_ops_profile_request(int skip, int n, nb_op_prof *into);
/* Runner hooks around one forward step: step_begin returns 1 when this step is profiled (it
 * has then begun profiling ctx; the runner must run the step eagerly and call step_end),
 * 0 otherwise (also when profiling could not start: a warning is logged). */
int nb_ops_profile_step_begin(nb_ops_ctx *ctx, int decode_only, int tokens);
nb_status nb_ops_profile_step_end(nb_ops_ctx *ctx);

/* ---- used by the dispatch in ops/ops.c only -------------------------------------------- */

/* What a record is keyed by: detail is printf(dfmt, d[0..3]) made at the end of the step. */
typedef struct nb_prof_key {
    const char *op;
    const char *name; /* the weight's role (nb_weight.name), put before the detail; or NULL */
    int name_parent;  /* 1: only up to its last '.' ("mlp.shared_experts" of its gate_proj) */
    const char *dfmt;
    long long d[4];
    double bytes;
    /* moe_experts: distinct experts are counted from the ids (bytes += distinct * per_expert) */
    const int32_t *moe_ids;
    int64_t moe_n_ids;
    int moe_n_experts;
    double moe_expert_bytes;
} nb_prof_key;

extern int nb_prof_on_flag; /* read with __atomic_load_n(.., __ATOMIC_RELAXED) */
static inline int nb_prof_on(void) { return __atomic_load_n(&nb_prof_on_flag, __ATOMIC_RELAXED); }
/* Returns a handle (>= 0) when ctx is profiled and this is an outermost op; -1 otherwise. */
int nb_prof_enter(nb_ops_ctx *ctx, const nb_prof_key *k);
void nb_prof_leave(nb_ops_ctx *ctx, int handle);
/* Bytes of a weight as stored: codes, block scales and bias. */
double nb_prof_weight_bytes(const nb_weight *w);
/* Forget ctx (it is being freed). */
void nb_prof_forget(nb_ops_ctx *ctx);

/* CUDA part (ops/cuda/profile.cu): an event pool and pinned space for copies of expert ids. */
typedef struct nb_cuda_prof nb_cuda_prof;
nb_status nb_cuda_prof_new(nb_cuda_prof **out);
void nb_cuda_prof_free(nb_cuda_prof *p);
/* Record event `i` (grown on demand) on the stream. */
nb_status nb_cuda_prof_mark(nb_cuda_prof *p, void *stream, int i);
/* Enqueue a copy of n int32 from device src to pinned memory; *host gets where they will be
 * (valid after nb_cuda_prof_finish until the next nb_cuda_prof_reset). */
nb_status nb_cuda_prof_copy_ids(nb_cuda_prof *p, void *stream, const int32_t *src, int64_t n, const int32_t **host);
/* Wait for event n_marks-1, then ms[i] = elapsed(event 2i, event 2i+1) for i < n_marks/2. */
nb_status nb_cuda_prof_finish(nb_cuda_prof *p, int n_marks, double *ms);
void nb_cuda_prof_reset(nb_cuda_prof *p);
/* With NIBBLE_CUDA_PROFILER_RANGE=1, cudaProfilerStart (on = 1) or cudaProfilerStop (on = 0):
 * `ncu --profile-from-start off` then measures exactly the profiled steps' kernels
 * (docs/bench.md, "Per-op profile"). Without the variable it does nothing. */
void nb_cuda_prof_range(int on);

#ifdef __cplusplus
}
#endif

#endif
