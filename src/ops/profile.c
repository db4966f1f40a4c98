/* The per-op profiler (ops/profile.h): records of one profiled step on one context, their
 * merge into an nb_op_prof accumulator, and the request that bench-offline hands the runners.
 * The CUDA timing lives in ops/cuda/profile.cu. Test: tests/ops/test_ops_profile.c. */
#include "ops/profile.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "ops/cpu/cpu_ops.h"

int nb_prof_on_flag;

typedef struct prof_rec {
    nb_prof_key k;
    double t0, t1;            /* CPU: ms on the monotonic clock */
    const int32_t *ids_host;  /* CUDA moe_experts: the pinned copy of the ids */
} prof_rec;

/* One profiled context at a time: the state of its current step. */
static struct {
    nb_ops_ctx *ctx; /* written before the flag is raised, read after it is seen */
    int depth;
    double wall0;
    prof_rec *recs;
    int n, cap;
    double *ms;
    int ms_cap;
#if NIBBLE_HAVE_CUDA
    nb_cuda_prof *cu;
#endif
} g;

static double now_ms(void) { return (double)nb_now_ns() * 1e-6; }

double nb_prof_weight_bytes(const nb_weight *w)
{
    double b = (double)w->n * (double)nb_weight_row_bytes(w->fmt, w->k);
    if (w->fmt == NB_WFMT_NVFP4) b += (double)w->n * (double)((w->k + 15) / 16);
    if (w->fmt == NB_WFMT_FP8_BLOCK && w->block_n > 0 && w->block_k > 0)
        b += 4.0 * (double)((w->n + w->block_n - 1) / w->block_n) * (double)((w->k + w->block_k - 1) / w->block_k);
    if (w->bias) b += 4.0 * (double)w->n;
    return b;
}

void nb_op_prof_free(nb_op_prof *p)
{
    if (!p) return;
    free(p->rows);
    memset(p, 0, sizeof *p);
}

static int cmp_row(const void *a, const void *b)
{
    const nb_op_prof_row *x = a, *y = b;
    return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : strcmp(x->op, y->op);
}

void nb_op_prof_sort(nb_op_prof *p)
{
    if (p->n_rows > 1) qsort(p->rows, (size_t)p->n_rows, sizeof *p->rows, cmp_row);
}

nb_status nb_ops_profile_begin(nb_ops_ctx *ctx)
{
    if (__atomic_load_n(&g.ctx, __ATOMIC_ACQUIRE))
        return nb_error(NB_ERR_BUSY, "ops profile: another context is being profiled");
    if (!g.recs) {
        g.cap = 4096;
        g.recs = malloc((size_t)g.cap * sizeof *g.recs);
        if (!g.recs) return nb_error(NB_ERR_OUT_OF_MEMORY, "ops profile: %d records", g.cap);
    }
#if NIBBLE_HAVE_CUDA
    if (nb_ops_ctx_device(ctx) == NB_DEVICE_CUDA) {
        if (!g.cu) NB_TRY(nb_cuda_prof_new(&g.cu));
        nb_cuda_prof_reset(g.cu);
    }
#endif
    g.n = 0;
    g.depth = 0;
    /* the host clock starts after the device finished earlier work, so wall_ms is this step's */
    NB_TRY(nb_ops_sync(ctx));
    g.wall0 = now_ms();
#if NIBBLE_HAVE_CUDA
    if (nb_ops_ctx_device(ctx) == NB_DEVICE_CUDA) nb_cuda_prof_range(1);
#endif
    __atomic_store_n(&g.ctx, ctx, __ATOMIC_RELEASE);
    __atomic_store_n(&nb_prof_on_flag, 1, __ATOMIC_RELEASE);
    return NB_OK;
}

int nb_prof_enter(nb_ops_ctx *ctx, const nb_prof_key *k)
{
    if (__atomic_load_n(&g.ctx, __ATOMIC_ACQUIRE) != ctx) return -1;
    if (g.depth++ > 0) return -2;
    if (g.n == g.cap) {
        prof_rec *r = realloc(g.recs, (size_t)g.cap * 2 * sizeof *r);
        if (!r) return -2; /* not recorded; the step's op sum then falls short, never over */
        g.recs = r;
        g.cap *= 2;
    }
    prof_rec *r = &g.recs[g.n];
    r->k = *k;
    r->ids_host = NULL;
    if (k->moe_ids && k->moe_n_ids > 0) {
#if NIBBLE_HAVE_CUDA
        if (nb_ops_ctx_device(ctx) == NB_DEVICE_CUDA) {
            /* enqueued before the op's start event: the copy is not counted in its time */
            if (nb_cuda_prof_copy_ids(g.cu, ctx->stream, k->moe_ids, k->moe_n_ids, &r->ids_host) != NB_OK)
                r->ids_host = NULL;
        } else
#endif
            r->ids_host = k->moe_ids;
    }
    /* CPU ids are counted now, while they are valid; CUDA ids after the step */
    if (r->ids_host && nb_ops_ctx_device(ctx) == NB_DEVICE_CPU) {
        int64_t n = r->k.moe_n_ids;
        int E = r->k.moe_n_experts;
        unsigned char *seen = calloc((size_t)(E > 0 ? E : 1), 1);
        int distinct = 0;
        for (int64_t i = 0; seen && i < n; i++) {
            int32_t e = r->ids_host[i];
            if (e >= 0 && e < E && !seen[e]) seen[e] = 1, distinct++;
        }
        free(seen);
        r->k.bytes += distinct * r->k.moe_expert_bytes;
        r->ids_host = NULL;
    }
#if NIBBLE_HAVE_CUDA
    if (nb_ops_ctx_device(ctx) == NB_DEVICE_CUDA) {
        if (nb_cuda_prof_mark(g.cu, ctx->stream, 2 * g.n) != NB_OK) return -2;
        g.n++;
        return g.n - 1;
    }
#endif
    r->t0 = now_ms();
    g.n++;
    return g.n - 1;
}

void nb_prof_leave(nb_ops_ctx *ctx, int handle)
{
    if (handle == -1) return;
    g.depth--;
    if (handle < 0) return;
#if NIBBLE_HAVE_CUDA
    if (nb_ops_ctx_device(ctx) == NB_DEVICE_CUDA) {
        if (nb_cuda_prof_mark(g.cu, ctx->stream, 2 * handle + 1) != NB_OK) g.recs[handle].k.op = NULL;
        return;
    }
#endif
    g.recs[handle].t1 = now_ms();
}

static nb_status merge(nb_op_prof *acc, const prof_rec *r, double ms)
{
    char rest[72], detail[128];
    snprintf(rest, sizeof rest, r->k.dfmt ? r->k.dfmt : "", r->k.d[0], r->k.d[1], r->k.d[2], r->k.d[3]);
    const char *nm = r->k.name ? r->k.name : "", *dot = r->k.name_parent ? strrchr(nm, '.') : NULL;
    int nl = dot ? (int)(dot - nm) : (int)strlen(nm);
    snprintf(detail, sizeof detail, "%.*s%s%s", nl, nm, nl ? " " : "", rest);
    nb_op_prof_row *row = NULL;
    for (int i = 0; i < acc->n_rows && !row; i++)
        if (!strcmp(acc->rows[i].op, r->k.op) && !strcmp(acc->rows[i].detail, detail)) row = &acc->rows[i];
    if (!row) {
        if (acc->n_rows == acc->cap_rows) {
            int cap = acc->cap_rows ? acc->cap_rows * 2 : 64;
            nb_op_prof_row *p = realloc(acc->rows, (size_t)cap * sizeof *p);
            if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "ops profile: %d rows", cap);
            acc->rows = p;
            acc->cap_rows = cap;
        }
        row = &acc->rows[acc->n_rows++];
        memset(row, 0, sizeof *row);
        snprintf(row->op, sizeof row->op, "%s", r->k.op);
        snprintf(row->detail, sizeof row->detail, "%s", detail);
    }
    double bytes = r->k.bytes;
    if (r->ids_host) { /* CUDA moe_experts: the ids copied during the step */
        int E = r->k.moe_n_experts, distinct = 0;
        unsigned char *seen = calloc((size_t)(E > 0 ? E : 1), 1);
        for (int64_t i = 0; seen && i < r->k.moe_n_ids; i++) {
            int32_t e = r->ids_host[i];
            if (e >= 0 && e < E && !seen[e]) seen[e] = 1, distinct++;
        }
        free(seen);
        bytes += distinct * r->k.moe_expert_bytes;
    }
    row->calls++;
    row->ms += ms;
    row->bytes += bytes;
    acc->op_ms += ms;
    return NB_OK;
}

nb_status nb_ops_profile_end(nb_ops_ctx *ctx, nb_op_prof *acc, double tokens)
{
    if (__atomic_load_n(&g.ctx, __ATOMIC_ACQUIRE) != ctx)
        return nb_error(NB_ERR_INVALID_ARG, "ops profile: end on a context that is not being profiled");
    __atomic_store_n(&nb_prof_on_flag, 0, __ATOMIC_RELEASE);
    nb_status st = NB_OK;
    if (g.ms_cap < g.n) {
        free(g.ms);
        g.ms_cap = g.n;
        g.ms = malloc((size_t)g.ms_cap * sizeof *g.ms);
        if (!g.ms) {
            g.ms_cap = 0;
            st = nb_error(NB_ERR_OUT_OF_MEMORY, "ops profile: %d op times", g.n);
        }
    }
#if NIBBLE_HAVE_CUDA
    if (st == NB_OK && nb_ops_ctx_device(ctx) == NB_DEVICE_CUDA) st = nb_cuda_prof_finish(g.cu, 2 * g.n, g.ms);
    else
#endif
        if (st == NB_OK) st = nb_ops_sync(ctx);
    double wall = now_ms() - g.wall0;
#if NIBBLE_HAVE_CUDA
    if (nb_ops_ctx_device(ctx) == NB_DEVICE_CUDA) nb_cuda_prof_range(0); /* after the step's wall clock */
#endif
    if (st == NB_OK && nb_ops_ctx_device(ctx) == NB_DEVICE_CPU)
        for (int i = 0; i < g.n; i++) g.ms[i] = g.recs[i].t1 - g.recs[i].t0;
    for (int i = 0; st == NB_OK && i < g.n; i++)
        if (g.recs[i].k.op) st = merge(acc, &g.recs[i], g.ms[i]);
    if (st == NB_OK) {
        acc->steps++;
        acc->tokens += tokens;
        acc->wall_ms += wall;
    }
    g.n = 0;
    __atomic_store_n(&g.ctx, NULL, __ATOMIC_RELEASE);
    return st;
}

void nb_prof_forget(nb_ops_ctx *ctx)
{
    if (__atomic_load_n(&g.ctx, __ATOMIC_ACQUIRE) == ctx) {
        __atomic_store_n(&nb_prof_on_flag, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&g.ctx, NULL, __ATOMIC_RELEASE);
    }
#if NIBBLE_HAVE_CUDA
    /* the events belong to the device of the context that made them; kept while another
     * context is being profiled with them */
    if (nb_ops_ctx_device(ctx) == NB_DEVICE_CUDA && g.cu && !__atomic_load_n(&g.ctx, __ATOMIC_ACQUIRE)) {
        nb_cuda_prof_free(g.cu);
        g.cu = NULL;
    }
#endif
}

/* ---- the runners' request ----------------------------------------------------------------- */

static pthread_mutex_t rq_mu = PTHREAD_MUTEX_INITIALIZER;
static int rq_active; /* atomic: the runners' fast path */
static int rq_skip, rq_n;
static nb_op_prof *rq_into;
static nb_op_prof *step_into;
static double step_tokens;

void nb_ops_profile_request(int skip, int n, nb_op_prof *into)
{
    pthread_mutex_lock(&rq_mu);
    rq_skip = skip > 0 ? skip : 0;
    rq_n = into && n > 0 ? n : 0;
    rq_into = rq_n ? into : NULL;
    step_into = NULL; /* a step still running adds into nothing the caller holds */
    __atomic_store_n(&rq_active, rq_n > 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&rq_mu);
}

int nb_ops_profile_step_begin(nb_ops_ctx *ctx, int decode_only, int tokens)
{
    if (!__atomic_load_n(&rq_active, __ATOMIC_ACQUIRE) || !decode_only) return 0;
    pthread_mutex_lock(&rq_mu);
    int go = 0;
    if (rq_n > 0) {
        if (rq_skip > 0) rq_skip--;
        else go = 1;
    }
    if (go) {
        if (nb_ops_profile_begin(ctx) != NB_OK) {
            NB_LOG_WARN("profile", "step not profiled: %s", nb_last_error());
            go = 0;
        } else {
            rq_n--;
            step_into = rq_into;
            step_tokens = tokens;
            if (!rq_n) __atomic_store_n(&rq_active, 0, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&rq_mu);
    return go;
}

nb_status nb_ops_profile_step_end(nb_ops_ctx *ctx)
{
    pthread_mutex_lock(&rq_mu);
    nb_op_prof scratch = {0};
    nb_op_prof *into = step_into ? step_into : &scratch; /* the request was cancelled meanwhile */
    nb_status st = nb_ops_profile_end(ctx, into, step_tokens);
    nb_op_prof_free(&scratch);
    step_into = NULL;
    pthread_mutex_unlock(&rq_mu);
    return st;
}
