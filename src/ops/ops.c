/* ops.h plumbing: tensor views, contexts with scratch memory, backend memory, and the one
 * table that maps each nb_op_<op> to its backend: nb_cpu_<op> (ops/cpu/cpu_ops.h) for CPU
 * contexts, nb_cuda_<op> (ops/cuda/cuda_ops.h) for CUDA contexts in CUDA builds.
 * Exercised by tests/ops/ (CPU) and tests/cuda_ops/test_cuda_vs_cpu.c (both). */
#include "ops/ops.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/sample.h"
#include "ops/profile.h"
#if NIBBLE_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/sample.h"
#endif

static nb_tensor tensor_nd(void *data, nb_dtype dt, int ndim, const int64_t *shape)
{
    nb_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.ndim = ndim;
    t.device = NB_DEVICE_CPU;
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.stride[i] = s;
        s *= shape[i];
    }
    return t;
}

nb_tensor nb_tensor_1d(void *data, nb_dtype dt, int64_t n0) { return tensor_nd(data, dt, 1, (int64_t[]){n0}); }
nb_tensor nb_tensor_2d(void *data, nb_dtype dt, int64_t n0, int64_t n1)
{
    return tensor_nd(data, dt, 2, (int64_t[]){n0, n1});
}
nb_tensor nb_tensor_3d(void *data, nb_dtype dt, int64_t n0, int64_t n1, int64_t n2)
{
    return tensor_nd(data, dt, 3, (int64_t[]){n0, n1, n2});
}

int64_t nb_tensor_numel(const nb_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int nb_tensor_is_contiguous(const nb_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return 0;
        s *= t->shape[i];
    }
    return 1;
}

nb_status nb_ops_ctx_new_cpu(int n_threads, nb_ops_ctx **out)
{
    *out = NULL;
    if (n_threads < 0 || n_threads > 256) return nb_error(NB_ERR_INVALID_ARG, "ops: n_threads %d out of range", n_threads);
    if (n_threads == 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc > 0 ? (int)NB_MIN(nc, 64) : 1;
    }
    nb_ops_ctx *c = calloc(1, sizeof *c);
    if (!c) return nb_error(NB_ERR_OUT_OF_MEMORY, "ops: context");
    c->device = NB_DEVICE_CPU;
    c->n_threads = n_threads;
    *out = c;
    return NB_OK;
}

nb_status nb_ops_ctx_new_cuda(int device, nb_ops_ctx **out)
{
    *out = NULL;
#if NIBBLE_HAVE_CUDA
    nb_ops_ctx *c = calloc(1, sizeof *c);
    if (!c) return nb_error(NB_ERR_OUT_OF_MEMORY, "ops: context");
    c->device = NB_DEVICE_CUDA;
    c->n_threads = 1;
    nb_status st = nb_cuda_ctx_init(c, device);
    if (st != NB_OK) {
        free(c);
        return st;
    }
    *out = c;
    return NB_OK;
#else
    (void)device;
    return nb_error(NB_ERR_UNSUPPORTED, "ops: this build has no CUDA backend (configure with nvcc present)");
#endif
}

void nb_ops_ctx_free(nb_ops_ctx *ctx)
{
    if (!ctx) return;
    nb_prof_forget(ctx);
#if NIBBLE_HAVE_CUDA
    if (ctx->device == NB_DEVICE_CUDA) {
        nb_cuda_ctx_release(ctx);
        free(ctx);
        return;
    }
#endif
    for (int i = 0; i < NB_OPS_SCRATCH_SLOTS; i++) free(ctx->scratch[i]);
    free(ctx);
}

nb_device nb_ops_ctx_device(const nb_ops_ctx *ctx) { return ctx->device; }

void *nb_ops_scratch(nb_ops_ctx *ctx, int slot, size_t bytes)
{
    NB_ASSERT(slot >= 0 && slot < NB_OPS_SCRATCH_SLOTS);
#if NIBBLE_HAVE_CUDA
    if (ctx->device == NB_DEVICE_CUDA) return nb_cuda_scratch(ctx, slot, bytes);
#endif
    if (bytes == 0) bytes = 1;
    if (ctx->scratch_size[slot] < bytes) {
        /* Grow geometrically so a sequence of slightly larger requests does not realloc each time. */
        size_t want = NB_MAX(bytes, ctx->scratch_size[slot] + ctx->scratch_size[slot] / 2);
        void *p = aligned_alloc(64, (want + 63) / 64 * 64);
        if (!p) {
            nb_error(NB_ERR_OUT_OF_MEMORY, "ops: scratch slot %d: %zu bytes", slot, want);
            return NULL;
        }
        free(ctx->scratch[slot]);
        ctx->scratch[slot] = p;
        ctx->scratch_size[slot] = want;
    }
    return ctx->scratch[slot];
}

void *nb_ops_alloc(nb_ops_ctx *ctx, size_t bytes)
{
#if NIBBLE_HAVE_CUDA
    if (ctx->device == NB_DEVICE_CUDA) return nb_cuda_mem_alloc(ctx, bytes);
#endif
    void *p = aligned_alloc(64, (NB_MAX(bytes, 1) + 63) / 64 * 64);
    if (!p) nb_error(NB_ERR_OUT_OF_MEMORY, "ops: %zu bytes", bytes);
    return p;
}

void nb_ops_free(nb_ops_ctx *ctx, void *p)
{
#if NIBBLE_HAVE_CUDA
    if (ctx->device == NB_DEVICE_CUDA) {
        nb_cuda_mem_free(ctx, p);
        return;
    }
#endif
    free(p);
}

nb_status nb_ops_upload(nb_ops_ctx *ctx, void *dst, const void *src_host, size_t bytes)
{
#if NIBBLE_HAVE_CUDA
    if (ctx->device == NB_DEVICE_CUDA) return nb_cuda_mem_upload(ctx, dst, src_host, bytes);
#endif
    if (bytes) memmove(dst, src_host, bytes);
    return NB_OK;
}

nb_status nb_ops_download(nb_ops_ctx *ctx, void *dst_host, const void *src, size_t bytes)
{
#if NIBBLE_HAVE_CUDA
    if (ctx->device == NB_DEVICE_CUDA) return nb_cuda_mem_download(ctx, dst_host, src, bytes);
#endif
    if (bytes) memmove(dst_host, src, bytes);
    return NB_OK;
}

nb_status nb_ops_memset(nb_ops_ctx *ctx, void *dst, int byte, size_t bytes)
{
#if NIBBLE_HAVE_CUDA
    if (ctx->device == NB_DEVICE_CUDA) return nb_cuda_mem_set(ctx, dst, byte, bytes);
#endif
    if (bytes) memset(dst, byte, bytes);
    return NB_OK;
}

nb_status nb_ops_sync(nb_ops_ctx *ctx)
{
#if NIBBLE_HAVE_CUDA
    if (ctx->device == NB_DEVICE_CUDA) return nb_cuda_sync(ctx);
#endif
    return NB_OK;
}

int nb_ops_can_branch(nb_ops_ctx *ctx)
{
#if NIBBLE_HAVE_CUDA
    if (ctx->device == NB_DEVICE_CUDA) return !nb_prof_on() && nb_cuda_can_branch(ctx);
#endif
    (void)ctx;
    return 0;
}

nb_status nb_ops_branch(nb_ops_ctx *ctx)
{
#if NIBBLE_HAVE_CUDA
    if (ctx->device == NB_DEVICE_CUDA && nb_ops_can_branch(ctx)) return nb_cuda_branch(ctx);
#endif
    (void)ctx;
    return NB_OK;
}

nb_status nb_ops_branch_main(nb_ops_ctx *ctx)
{
#if NIBBLE_HAVE_CUDA
    if (ctx->device == NB_DEVICE_CUDA && nb_cuda_st_branch(ctx) == 1) return nb_cuda_branch_main(ctx);
#endif
    (void)ctx;
    return NB_OK;
}

nb_status nb_ops_join(nb_ops_ctx *ctx)
{
#if NIBBLE_HAVE_CUDA
    if (ctx->device == NB_DEVICE_CUDA && nb_cuda_st_branch(ctx) != 0) return nb_cuda_join(ctx);
#endif
    (void)ctx;
    return NB_OK;
}

/* The dispatch table: each op goes to the implementation of its context's backend, and
 * refuses a context of a backend not compiled in. */
#if NIBBLE_HAVE_CUDA
#define NB_CALL(op, call)                                                                                \
    (ctx->device == NB_DEVICE_CPU    ? nb_cpu_##call                                                     \
     : ctx->device == NB_DEVICE_CUDA ? nb_cuda_##call                                                    \
                                     : nb_error(NB_ERR_UNSUPPORTED, "%s: no implementation for this device", op))
#else
#define NB_CALL(op, call)                                                                                \
    (ctx->device == NB_DEVICE_CPU ? nb_cpu_##call                                                        \
                                  : nb_error(NB_ERR_UNSUPPORTED, "%s: no implementation for this device", op))
#endif
/* With the per-op profiler (ops/profile.h) off, one relaxed load and branch; on, the call is
 * bracketed and `key` (a statement filling nb_prof_key k_) says what the record is keyed by. */
#define NB_DISPATCH_K(name, call, key)                                                                   \
    do {                                                                                                 \
        if (__builtin_expect(!nb_prof_on(), 1)) return NB_CALL(name, call);                              \
        nb_prof_key k_;                                                                                  \
        memset(&k_, 0, sizeof k_);                                                                       \
        k_.op = name;                                                                                    \
        key;                                                                                             \
        int h_ = nb_prof_enter(ctx, &k_);                                                                \
        nb_status s_ = NB_CALL(name, call);                                                              \
        nb_prof_leave(ctx, h_);                                                                          \
        return s_;                                                                                       \
    } while (0)
#define NB_DISPATCH(name, call) NB_DISPATCH_K(name, call, (void)0)

/* ---- profile keys (only built while profiling) ------------------------------------------- */

/* detail "[rows x cols]" of a 2-D view (rows = all leading dims) */
static void key_shape(nb_prof_key *k, const nb_tensor *t)
{
    if (!t || t->ndim < 1) return;
    int64_t rows = 1;
    for (int i = 0; i + 1 < t->ndim; i++) rows *= t->shape[i];
    k->dfmt = "[%lld x %lld]";
    k->d[0] = rows;
    k->d[1] = t->shape[t->ndim - 1];
}

static void key_tokens(nb_prof_key *k, int64_t tokens, const char *dfmt)
{
    k->dfmt = dfmt;
    k->d[0] = tokens;
}

static void key_linear(nb_prof_key *k, const nb_tensor *x, const nb_weight *w)
{
    static const char *const f[] = {"%lld tok, [%lld x %lld] f32", "%lld tok, [%lld x %lld] bf16",
                                    "%lld tok, [%lld x %lld] nvfp4", "%lld tok, [%lld x %lld] fp8"};
    if (!x || !w || x->ndim < 1) return;
    k->dfmt = (unsigned)w->fmt < 4 ? f[w->fmt] : "%lld tok, [%lld x %lld] ?";
    k->name = w->name;
    k->d[0] = x->shape[0];
    k->d[1] = w->n;
    k->d[2] = w->k;
    k->bytes = nb_prof_weight_bytes(w) + 4.0 * (double)x->shape[0] * (double)(w->k + w->n);
}

static void key_mlp(nb_prof_key *k, const nb_tensor *x, const nb_weight *g, const nb_weight *u, const nb_weight *dn)
{
    static const char *const f[] = {"%lld tok, inter %lld f32", "%lld tok, inter %lld bf16",
                                    "%lld tok, inter %lld nvfp4", "%lld tok, inter %lld fp8"};
    if (!x || !g || !u || !dn || x->ndim < 1) return;
    k->dfmt = (unsigned)g->fmt < 4 ? f[g->fmt] : "%lld tok, inter %lld ?";
    k->name = g->name;
    k->name_parent = 1;
    k->d[0] = x->shape[0];
    k->d[1] = g->n;
    k->bytes = nb_prof_weight_bytes(g) + nb_prof_weight_bytes(u) + nb_prof_weight_bytes(dn) +
               4.0 * (double)x->shape[0] * (double)(2 * g->k);
}

static void key_moe(nb_prof_key *k, const nb_tensor *x, const nb_tensor *ids, const nb_moe_weights *w)
{
    static const char *const f[] = {"%lld tok, top-%lld of %lld, [%lld x H] f32",
                                    "%lld tok, top-%lld of %lld, [%lld x H] bf16",
                                    "%lld tok, top-%lld of %lld, [%lld x H] nvfp4",
                                    "%lld tok, top-%lld of %lld, [%lld x H] fp8"};
    if (!x || !ids || !w || !w->gate || x->ndim < 1 || ids->ndim != 2) return;
    const int64_t T = x->shape[0], K = ids->shape[1];
    k->dfmt = (unsigned)w->gate[0].fmt < 4 ? f[w->gate[0].fmt] : "%lld tok, top-%lld of %lld, [%lld x H] ?";
    k->d[0] = T;
    k->d[1] = K;
    k->d[2] = w->n_experts;
    k->d[3] = w->inter;
    /* activations: x in, out read and written, ids and weights */
    k->bytes = 4.0 * (double)T * (3.0 * w->hidden + 2.0 * (double)K);
    k->moe_expert_bytes =
        nb_prof_weight_bytes(&w->gate[0]) + nb_prof_weight_bytes(&w->up[0]) + nb_prof_weight_bytes(&w->down[0]);
    k->moe_n_experts = w->n_experts;
    if (nb_tensor_is_contiguous(ids)) {
        k->moe_ids = (const int32_t *)ids->data;
        k->moe_n_ids = T * K;
    }
}

nb_status nb_op_set_rows(nb_ops_ctx *ctx, const nb_tensor *src, const int32_t *rows, nb_tensor *dst)
{
    NB_DISPATCH_K("set_rows", set_rows(ctx, src, rows, dst), key_shape(&k_, src));
}
nb_status nb_op_get_rows(nb_ops_ctx *ctx, const nb_tensor *x, const int32_t *rows, nb_tensor *out)
{
    NB_DISPATCH_K("get_rows", get_rows(ctx, x, rows, out), key_shape(&k_, out));
}
nb_status nb_op_scale(nb_ops_ctx *ctx, nb_tensor *x, float s) {
    NB_DISPATCH_K("scale", scale(ctx, x, s), key_shape(&k_, x));
}

nb_status nb_op_embedding(nb_ops_ctx *ctx, const nb_weight *table, const int32_t *ids, int n, nb_tensor *out)
{
    NB_DISPATCH_K("embedding", embedding(ctx, table, ids, n, out), key_tokens(&k_, n, "%lld tok"));
}
nb_status nb_op_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, float eps, nb_tensor *out)
{
    NB_DISPATCH_K("rmsnorm", rmsnorm(ctx, x, weight, eps, out), key_shape(&k_, x));
}
nb_status nb_op_add_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *residual, const float *weight, float eps,
                            nb_tensor *out)
{
    NB_DISPATCH_K("add_rmsnorm", add_rmsnorm(ctx, x, residual, weight, eps, out), key_shape(&k_, x));
}
nb_status nb_op_layernorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, const float *bias, float eps,
                          nb_tensor *out)
{
    NB_DISPATCH_K("layernorm", layernorm(ctx, x, weight, bias, eps, out), key_shape(&k_, x));
}
nb_status nb_op_add(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *y) {
    NB_DISPATCH_K("add", add(ctx, x, y), key_shape(&k_, x));
}
nb_status nb_op_rope(nb_ops_ctx *ctx, nb_tensor *x, const int32_t *pos, const nb_rope *rope)
{
    NB_DISPATCH_K("rope", rope(ctx, x, pos, rope), key_shape(&k_, x));
}
/* fused launches: keyed by their rows and number of parts */
static void key_parts(nb_prof_key *k, const nb_tensor *t, int n)
{
    k->dfmt = "%lld rows, %lld parts";
    k->d[0] = t && t->ndim >= 1 ? t->shape[0] : 0;
    k->d[1] = n;
}
nb_status nb_op_rope_n(nb_ops_ctx *ctx, int n, nb_tensor *const *x, const int32_t *pos, const nb_rope *const *rope)
{
    NB_DISPATCH_K("rope_n", rope_n(ctx, n, x, pos, rope), key_parts(&k_, n > 0 ? x[0] : NULL, n));
}
nb_status nb_op_norm_n(nb_ops_ctx *ctx, int n, const nb_norm_part *parts)
{
    NB_DISPATCH_K("norm_n", norm_n(ctx, n, parts), key_parts(&k_, n > 0 ? parts[0].x : NULL, n));
}
nb_status nb_op_set_rows_n(nb_ops_ctx *ctx, int n, const nb_tensor *const *src, const int32_t *rows,
                           nb_tensor *const *dst)
{
    NB_DISPATCH_K("set_rows_n", set_rows_n(ctx, n, src, rows, dst), key_parts(&k_, n > 0 ? src[0] : NULL, n));
}
nb_status nb_op_norm_rope_set_n(nb_ops_ctx *ctx, const nb_norm_rope_set *p)
{
    NB_DISPATCH_K("norm_rope_set_n", norm_rope_set_n(ctx, p),
                  key_parts(&k_, p->n_norm > 0 ? p->norms[0].x : p->n_rope > 0 ? p->rope_x[0] : NULL,
                            p->n_norm + p->n_rope + p->n_set));
}
nb_status nb_op_linear(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *w, nb_tensor *y)
{
    NB_DISPATCH_K("linear", linear(ctx, x, w, y), key_linear(&k_, x, w));
}
nb_status nb_op_mlp(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *gate, const nb_weight *up,
                    const nb_weight *down, int accumulate, nb_tensor *out)
{
    NB_DISPATCH_K("mlp", mlp(ctx, x, gate, up, down, accumulate, out), key_mlp(&k_, x, gate, up, down));
}
/* ---- shape agreement, checked once here for every backend ------------------------------
 * The backends check only what is theirs (dtype and device of each tensor, kernel limits);
 * these checks need only the shapes, so they run before the dispatch. */

static nb_status nb_need(const char *op, const char *param, const nb_tensor *t, int ndim)
{
    if (!t || !t->data) return nb_error(NB_ERR_INVALID_ARG, "%s: %s is NULL", op, param);
    if (t->ndim != ndim) return nb_error(NB_ERR_INVALID_ARG, "%s: %s has %d dims, expected %d", op, param, t->ndim, ndim);
    return NB_OK;
}

static nb_status nb_attention_shapes(const nb_tensor *q, const nb_tensor *k_pool, const nb_tensor *v_pool,
                                     const nb_attn_index *idx, const nb_tensor *out)
{
    NB_TRY(nb_need("attention", "q", q, 3));
    NB_TRY(nb_need("attention", "k_pool", k_pool, 3));
    NB_TRY(nb_need("attention", "v_pool", v_pool, 3));
    NB_TRY(nb_need("attention", "out", out, 3));
    if (!idx) return nb_error(NB_ERR_INVALID_ARG, "attention: idx is NULL");
    const int64_t T = q->shape[0], nh = q->shape[1], nkv = k_pool->shape[1];
    if (T != idx->n_tokens || out->shape[0] != T || out->shape[1] != nh || nkv <= 0 || nh % nkv ||
        v_pool->shape[1] != nkv || k_pool->shape[2] != q->shape[2] || out->shape[2] != v_pool->shape[2] ||
        v_pool->shape[0] != k_pool->shape[0])
        return nb_error(NB_ERR_INVALID_ARG,
                        "attention: q [%lld, %lld, %lld], k_pool [%lld, %lld, %lld], v_pool [.., %lld, %lld], "
                        "out [%lld, %lld, %lld], %d index tokens do not agree",
                        (long long)T, (long long)nh, (long long)q->shape[2], (long long)k_pool->shape[0],
                        (long long)nkv, (long long)k_pool->shape[2], (long long)v_pool->shape[1],
                        (long long)v_pool->shape[2], (long long)out->shape[0], (long long)out->shape[1],
                        (long long)out->shape[2], idx->n_tokens);
    return NB_OK;
}

static nb_status nb_mla_shapes(const nb_mla_dims *d, const nb_tensor *q, const nb_tensor *latent_pool,
                               const nb_tensor *kpe_pool, const nb_weight *kv_b, const nb_attn_index *idx,
                               const nb_tensor *out)
{
    NB_TRY(nb_need("mla_attention", "q", q, 3));
    NB_TRY(nb_need("mla_attention", "latent_pool", latent_pool, 2));
    NB_TRY(nb_need("mla_attention", "kpe_pool", kpe_pool, 2));
    NB_TRY(nb_need("mla_attention", "out", out, 3));
    if (!d || !kv_b || !idx) return nb_error(NB_ERR_INVALID_ARG, "mla_attention: dims, kv_b or idx is NULL");
    const int64_t T = q->shape[0];
    const int hs = d->qk_nope + d->v_dim, r = d->kv_lora_rank;
    if (T != idx->n_tokens || q->shape[1] != d->n_heads || q->shape[2] != d->qk_nope + d->qk_rope ||
        latent_pool->shape[1] != r || kpe_pool->shape[1] != d->qk_rope || kpe_pool->shape[0] != latent_pool->shape[0] ||
        kv_b->n != (int64_t)d->n_heads * hs || kv_b->k != r || out->shape[0] != T || out->shape[1] != d->n_heads ||
        out->shape[2] != d->v_dim)
        return nb_error(NB_ERR_INVALID_ARG,
                        "mla_attention: shapes disagree with dims (heads %d, nope %d, rope %d, v %d, rank %d): "
                        "q [%lld, %lld, %lld], latent [%lld, %lld], kpe [.., %lld], kv_b [%lld, %lld]",
                        d->n_heads, d->qk_nope, d->qk_rope, d->v_dim, r, (long long)T, (long long)q->shape[1],
                        (long long)q->shape[2], (long long)latent_pool->shape[0], (long long)latent_pool->shape[1],
                        (long long)kpe_pool->shape[1], (long long)kv_b->n, (long long)kv_b->k);
    return NB_OK;
}

static nb_status nb_dsa_shapes(const nb_tensor *q, const nb_tensor *w, const nb_tensor *key_pool,
                               const nb_attn_index *idx, int topk)
{
    NB_TRY(nb_need("dsa_select", "q", q, 3));
    NB_TRY(nb_need("dsa_select", "w", w, 2));
    NB_TRY(nb_need("dsa_select", "key_pool", key_pool, 2));
    if (!idx) return nb_error(NB_ERR_INVALID_ARG, "dsa_select: idx is NULL");
    const int64_t T = q->shape[0];
    if (T != idx->n_tokens || w->shape[0] != T || w->shape[1] != q->shape[1] || key_pool->shape[1] != q->shape[2])
        return nb_error(NB_ERR_INVALID_ARG, "dsa_select: q [%lld, %lld, %lld], w [%lld, %lld], key_pool [.., %lld]",
                        (long long)T, (long long)q->shape[1], (long long)q->shape[2], (long long)w->shape[0],
                        (long long)w->shape[1], (long long)key_pool->shape[1]);
    if (topk <= 0) return nb_error(NB_ERR_INVALID_ARG, "dsa_select: index_topk %d", topk);
    return NB_OK;
}

static nb_status nb_moe_experts_shapes(const nb_tensor *x, const nb_tensor *ids, const nb_tensor *weights,
                                       const nb_moe_weights *w, const nb_tensor *out)
{
    NB_TRY(nb_need("moe_experts", "x", x, 2));
    NB_TRY(nb_need("moe_experts", "weights", weights, 2));
    NB_TRY(nb_need("moe_experts", "out", out, 2));
    if (!ids || ids->dtype != NB_DTYPE_I32 || ids->ndim != 2)
        return nb_error(NB_ERR_INVALID_ARG, "moe_experts: ids must be I32 [T, k]");
    if (!w) return nb_error(NB_ERR_INVALID_ARG, "moe_experts: weights descriptor is NULL");
    const int64_t T = x->shape[0], H = w->hidden, K = ids->shape[1];
    if (x->shape[1] != H || out->shape[0] != T || out->shape[1] != H || ids->shape[0] != T ||
        weights->shape[0] != T || weights->shape[1] != K)
        return nb_error(NB_ERR_INVALID_ARG, "moe_experts: x [%lld, %lld], ids [%lld, %lld], out [%lld, %lld], hidden %d",
                        (long long)T, (long long)x->shape[1], (long long)ids->shape[0], (long long)K,
                        (long long)out->shape[0], (long long)out->shape[1], w->hidden);
    return NB_OK;
}

nb_status nb_op_attention(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *k_pool, const nb_tensor *v_pool,
                          const nb_attn_index *idx, const nb_attn_select *sel, float scale, nb_tensor *out)
{
    NB_TRY(nb_attention_shapes(q, k_pool, v_pool, idx, out));
    NB_DISPATCH_K("attention", attention(ctx, q, k_pool, v_pool, idx, sel, scale, out),
                  key_tokens(&k_, q->shape[0], sel ? "%lld tok, sparse" : "%lld tok"));
}
nb_status nb_op_mla_attention(nb_ops_ctx *ctx, nb_mla_mode mode, const nb_mla_dims *d, const nb_tensor *q,
                              const nb_tensor *latent_pool, const nb_tensor *kpe_pool, const nb_weight *kv_b,
                              const nb_attn_index *idx, const nb_attn_select *sel, float scale, nb_tensor *out)
{
    NB_TRY(nb_mla_shapes(d, q, latent_pool, kpe_pool, kv_b, idx, out));
    NB_DISPATCH_K("mla_attention", mla_attention(ctx, mode, d, q, latent_pool, kpe_pool, kv_b, idx, sel, scale, out),
                  key_tokens(&k_, q->shape[0],
                             mode == NB_MLA_NAIVE ? (sel ? "%lld tok, naive, sparse" : "%lld tok, naive")
                                                  : (sel ? "%lld tok, absorbed, sparse" : "%lld tok, absorbed")));
}
nb_status nb_op_dsa_select(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *w, float softmax_scale,
                           const nb_tensor *key_pool, const nb_attn_index *idx, int topk, int32_t *sel_pos,
                           int32_t *sel_count)
{
    NB_TRY(nb_dsa_shapes(q, w, key_pool, idx, topk));
    NB_DISPATCH_K("dsa_select", dsa_select(ctx, q, w, softmax_scale, key_pool, idx, topk, sel_pos, sel_count),
                  key_tokens(&k_, q->shape[0], "%lld tok"));
}
nb_status nb_op_moe_route(nb_ops_ctx *ctx, const nb_tensor *logits, const nb_router_params *p, nb_tensor *ids,
                          nb_tensor *weights)
{
    NB_DISPATCH_K("moe_route", moe_route(ctx, logits, p, ids, weights), key_shape(&k_, logits));
}
/* profiled as a moe_route row whose detail names the gate: "[T x E], gate [E x H] bf16" */
static void key_gate_route(nb_prof_key *k, const nb_tensor *logits, const nb_weight *g)
{
    static const char *const f[] = {"[%lld x %lld], gate [%lld x %lld] f32", "[%lld x %lld], gate [%lld x %lld] bf16",
                                    "[%lld x %lld], gate [%lld x %lld] nvfp4", "[%lld x %lld], gate [%lld x %lld] fp8"};
    if (!logits || !g || logits->ndim != 2) return;
    k->dfmt = (unsigned)g->fmt < 4 ? f[g->fmt] : "[%lld x %lld], gate [%lld x %lld] ?";
    k->d[0] = logits->shape[0];
    k->d[1] = logits->shape[1];
    k->d[2] = g->n;
    k->d[3] = g->k; /* no bytes: the profile's rates are for linear, mlp and moe_experts rows */
}
nb_status nb_op_moe_gate_route(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *gate, nb_tensor *logits,
                               const nb_router_params *p, nb_tensor *ids, nb_tensor *weights)
{
    NB_TRY(nb_need("moe_gate_route", "x", x, 2));
    NB_TRY(nb_need("moe_gate_route", "logits", logits, 2));
    if (!gate || !p) return nb_error(NB_ERR_INVALID_ARG, "moe_gate_route: gate or router params is NULL");
    if (gate->n != p->n_experts || gate->k != x->shape[1] || logits->shape[0] != x->shape[0] ||
        logits->shape[1] != gate->n)
        return nb_error(NB_ERR_INVALID_ARG, "moe_gate_route: x [%lld, %lld], gate [%lld, %lld], logits [%lld, %lld], %d experts",
                        (long long)x->shape[0], (long long)x->shape[1], (long long)gate->n, (long long)gate->k,
                        (long long)logits->shape[0], (long long)logits->shape[1], p->n_experts);
    NB_DISPATCH_K("moe_route", moe_gate_route(ctx, x, gate, logits, p, ids, weights), key_gate_route(&k_, logits, gate));
}
nb_status nb_op_moe_experts(nb_ops_ctx *ctx, const nb_tensor *x, const nb_tensor *ids, const nb_tensor *weights,
                            const nb_moe_weights *w, int accumulate, nb_tensor *out)
{
    NB_TRY(nb_moe_experts_shapes(x, ids, weights, w, out));
    NB_DISPATCH_K("moe_experts", moe_experts(ctx, x, ids, weights, w, accumulate, out), key_moe(&k_, x, ids, w));
}
nb_status nb_op_sample(nb_ops_ctx *ctx, nb_tensor *logits, const nb_sample_params *params,
                       const nb_sample_hist *hist, nb_sample_out *out)
{
    NB_TRY(nb_need("sample", "logits", logits, 2));
    if (!params || !out) return nb_error(NB_ERR_INVALID_ARG, "sample: params or out is NULL");
    if (logits->shape[1] < 1 || logits->shape[1] > NB_SAMPLE_MAX_VOCAB || !nb_tensor_is_contiguous(logits))
        return nb_error(NB_ERR_INVALID_ARG, "sample: logits [%lld, %lld] must be contiguous with 1..%d columns",
                        (long long)logits->shape[0], (long long)logits->shape[1], NB_SAMPLE_MAX_VOCAB);
    if (hist && hist->n_entries > 0 && (!hist->off || !hist->token || !hist->count))
        return nb_error(NB_ERR_INVALID_ARG, "sample: history of %lld entries without its arrays",
                        (long long)hist->n_entries);
    NB_DISPATCH_K("sample", sample(ctx, logits, params, hist, out), key_shape(&k_, logits));
}
