/* CPU backend helpers: a parallel-for over contiguous ranges (threads spawned per call: the
 * ops are coarse, so the ~20 us of thread start-up is noise next to their work), threaded
 * weight dequantization and argument checks. Exercised by every test in tests/ops/. */
#include <pthread.h>
#include <stdlib.h>

#include "base/error.h"
#include "ops/cpu/cpu_ops.h"

typedef struct range_job {
    nb_cpu_range_fn fn;
    void *arg;
    int64_t begin, end;
    int thread;
} range_job;

static void *range_main(void *p)
{
    range_job *j = p;
    j->fn(j->arg, j->begin, j->end, j->thread);
    return NULL;
}

void nb_cpu_parallel_for(nb_ops_ctx *ctx, int64_t n, int64_t min_per_thread, nb_cpu_range_fn fn, void *arg)
{
    if (n <= 0) return;
    int nt = ctx->n_threads;
    if (min_per_thread < 1) min_per_thread = 1;
    if (n < min_per_thread * 2 || nt <= 1) {
        fn(arg, 0, n, 0);
        return;
    }
    if ((int64_t)nt > n / min_per_thread) nt = (int)(n / min_per_thread);
    range_job jobs[64];
    pthread_t tids[64];
    int started[64] = {0};
    if (nt > 64) nt = 64;
    for (int t = 0; t < nt; t++) {
        jobs[t] = (range_job){fn, arg, n * t / nt, n * (t + 1) / nt, t};
        if (t > 0) started[t] = pthread_create(&tids[t], NULL, range_main, &jobs[t]) == 0;
    }
    fn(arg, jobs[0].begin, jobs[0].end, 0);
    for (int t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(tids[t], NULL);
        else
            fn(arg, jobs[t].begin, jobs[t].end, t); /* thread creation failed: do its share here */
    }
}

typedef struct dq_job {
    const nb_weight *w;
    int64_t r0;
    float *dst;
    nb_status st[64];
} dq_job;

static void dq_range(void *p, int64_t b, int64_t e, int t)
{
    dq_job *j = p;
    nb_status s = nb_weight_dequant_rows(j->w, j->r0 + b, e - b, j->dst + b * j->w->k);
    if (s != NB_OK) j->st[t] = s;
}

nb_status nb_cpu_dequant_rows(nb_ops_ctx *ctx, const nb_weight *w, int64_t r0, int64_t nr, float *dst)
{
    dq_job j = {.w = w, .r0 = r0, .dst = dst};
    for (int i = 0; i < 64; i++) j.st[i] = NB_OK;
    /* ~64k elements per thread at least, else the threads cost more than they save. */
    int64_t min_rows = 65536 / (w->k > 0 ? w->k : 1) + 1;
    nb_cpu_parallel_for(ctx, nr, min_rows, dq_range, &j);
    for (int i = 0; i < 64; i++)
        if (j.st[i] != NB_OK) return j.st[i];
    return NB_OK;
}

nb_status nb_cpu_check_f32(const char *op, const char *param, const nb_tensor *t, int ndim)
{
    if (t && t->data && t->dtype != NB_DTYPE_F32)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s must be F32", op, param);
    return nb_cpu_check_f32_bf16(op, param, t, ndim);
}

nb_status nb_cpu_check_f32_bf16(const char *op, const char *param, const nb_tensor *t, int ndim)
{
    if (!t || !t->data) return nb_error(NB_ERR_INVALID_ARG, "%s: %s is NULL", op, param);
    if (t->dtype != NB_DTYPE_F32 && t->dtype != NB_DTYPE_BF16)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s must be F32 or BF16", op, param);
    if (t->device != NB_DEVICE_CPU) return nb_error(NB_ERR_INVALID_ARG, "%s: %s is not in host memory", op, param);
    if (ndim && t->ndim != ndim)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s has %d dims, expected %d", op, param, t->ndim, ndim);
    if (t->stride[t->ndim - 1] != 1 && t->shape[t->ndim - 1] > 1)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s last dim is not contiguous", op, param);
    return NB_OK;
}
