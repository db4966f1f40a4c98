// CUDA ops on rows: embedding gather (any weight format), RMSNorm (plain and with the fused
// residual add), LayerNorm, add, scale, row scatter/gather, rotary embedding, and the fused
// launches of ops.h (norm_n, rope_n, set_rows_n: several parts of the same rows in one
// kernel). One block per row (per row and part); the norms hold a row in registers (float4)
// and sum squares in double as the CPU reference does, so results agree with it to float32
// rounding. Exercised by tests/cuda_ops/test_cuda_vs_cpu.c (norms, rope*, *_n cases).
#include <math.h>

#include "ops/cuda/common.cuh"

#define NB_ROW_THREADS 256

__global__ void k_embedding(nb_weight w, const int32_t *ids, float *out, int64_t ld)
{
    int t = blockIdx.x;
    int id = ids[t];
    float *o = out + (int64_t)t * ld;
    bool ok = id >= 0 && id < w.n;
    for (int64_t j = threadIdx.x; j < w.k; j += blockDim.x) o[j] = ok ? nb_d_wload1(w, id, j) : 0.0f;
}

extern "C" nb_status nb_cuda_embedding(nb_ops_ctx *ctx, const nb_weight *table, const int32_t *ids, int n,
                                       nb_tensor *out)
{
    NB_TRY(nb_cuda_check_f32("embedding", "out", out, 2));
    NB_TRY(nb_cuda_check_weight("embedding", table));
    if (out->shape[0] != n || out->shape[1] != table->k)
        return nb_error(NB_ERR_INVALID_ARG, "embedding: out is [%lld, %lld], expected [%d, %lld]",
                        (long long)out->shape[0], (long long)out->shape[1], n, (long long)table->k);
    if (n == 0) return NB_OK;
    k_embedding<<<n, NB_ROW_THREADS, 0, nb_cuda_stream(ctx)>>>(*table, ids, (float *)out->data, out->stride[0]);
    NB_CUDA_LAUNCHED("embedding");
    return NB_OK;
}

// Row norms. Why the old one-loop kernel took ~20 us for one row of 6144: 256 threads each
// walked 24 elements in a loop whose store to the residual may alias the next load, so the
// loads ran one memory latency after another. Now a row's elements are loaded at once into
// registers as float4 (NB_NORM_NV per thread, every load issued before any store), reduced
// once (in double, as the CPU reference), and written from the registers: one memory round
// trip per row. Rows that are unaligned or too wide for the registers take norm_row_slow.
#define NB_NORM_NV 8
enum { NB_K_RMS = 0, NB_K_ADD_RMS = 1, NB_K_LAYER = 2, NB_K_SCALE = 3 };

// Threads of a block for rows of d floats: about 4 float4 per thread, a multiple of 32, at
// most NB_NORM_MAX_THREADS (k_norms' launch bound: the register arrays of the fast path do
// not fit 1024 threads; the H200 refused such a launch for rows of 40000).
#define NB_NORM_MAX_THREADS 512
static unsigned norm_threads(int64_t d)
{
    int64_t t = ((d + 15) / 16 + 31) / 32 * 32;
    return (unsigned)(t < 32 ? 32 : t > NB_NORM_MAX_THREADS ? NB_NORM_MAX_THREADS : t);
}

static bool norm_fast_ok(const void *p, int64_t ld, int64_t d, unsigned threads)
{
    return d % 4 == 0 && ((uintptr_t)p % 16) == 0 && ld % 4 == 0 && d / 4 <= (int64_t)threads * NB_NORM_NV;
}

// Sum over the block of a double, every thread gets it; sh: 32 doubles.
__device__ double block_sum_any(double v, double *sh)
{
    v = nb_d_warp_sum_d(v);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = (int)(blockDim.x >> 5);
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    double t = 0;
    for (int i = 0; i < nw; i++) t += sh[i];
    return t;
}

// One row of kind `kind` with every float4 in registers. res is read and written (ADD_RMS).
__device__ void norm_row_fast(int kind, const float *x, float *res, const float *wt,
                              const float *bias, float eps, float s, int64_t d, float *o, double *sh)
{
    const int d4 = (int)(d / 4);
    float4 v[NB_NORM_NV];
#pragma unroll
    for (int i = 0; i < NB_NORM_NV; i++) {
        int j = (int)threadIdx.x + i * (int)blockDim.x;
        v[i] = j < d4 ? ((const float4 *)x)[j] : make_float4(0, 0, 0, 0);
    }
    if (kind == NB_K_ADD_RMS) {
        float4 r[NB_NORM_NV];
#pragma unroll
        for (int i = 0; i < NB_NORM_NV; i++) {
            int j = (int)threadIdx.x + i * (int)blockDim.x;
            r[i] = j < d4 ? ((const float4 *)res)[j] : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < NB_NORM_NV; i++) {
            int j = (int)threadIdx.x + i * (int)blockDim.x;
            v[i] = make_float4(r[i].x + v[i].x, r[i].y + v[i].y, r[i].z + v[i].z, r[i].w + v[i].w);
            if (j < d4) ((float4 *)res)[j] = v[i];
        }
    }
    if (kind == NB_K_SCALE) {
#pragma unroll
        for (int i = 0; i < NB_NORM_NV; i++) {
            int j = (int)threadIdx.x + i * (int)blockDim.x;
            if (j < d4) ((float4 *)o)[j] = make_float4(v[i].x * s, v[i].y * s, v[i].z * s, v[i].w * s);
        }
        return;
    }
    double mean = 0, inv;
    if (kind == NB_K_LAYER) {
        double t = 0;
#pragma unroll
        for (int i = 0; i < NB_NORM_NV; i++) t += ((double)v[i].x + v[i].y) + ((double)v[i].z + v[i].w);
        mean = block_sum_any(t, sh) / (double)d;
        double q = 0;
#pragma unroll
        for (int i = 0; i < NB_NORM_NV; i++) {
            int j = (int)threadIdx.x + i * (int)blockDim.x;
            if (j < d4) {
                double a = v[i].x - mean, b = v[i].y - mean, c = v[i].z - mean, e = v[i].w - mean;
                q += a * a + b * b + c * c + e * e;
            }
        }
        inv = 1.0 / sqrt(block_sum_any(q, sh) / (double)d + (double)eps);
    } else {
        double q = 0;
#pragma unroll
        for (int i = 0; i < NB_NORM_NV; i++)
            q += (double)v[i].x * v[i].x + (double)v[i].y * v[i].y + (double)v[i].z * v[i].z +
                 (double)v[i].w * v[i].w;
        inv = (double)(float)(1.0 / sqrt(block_sum_any(q, sh) / (double)d + (double)eps));
    }
#pragma unroll
    for (int i = 0; i < NB_NORM_NV; i++) {
        int j = (int)threadIdx.x + i * (int)blockDim.x;
        if (j >= d4) continue;
        float4 w4 = ((const float4 *)wt)[j], y;
        if (kind == NB_K_LAYER) {
            float4 b4 = bias ? ((const float4 *)bias)[j] : make_float4(0, 0, 0, 0);
            y.x = (float)((v[i].x - mean) * inv) * w4.x + b4.x;
            y.y = (float)((v[i].y - mean) * inv) * w4.y + b4.y;
            y.z = (float)((v[i].z - mean) * inv) * w4.z + b4.z;
            y.w = (float)((v[i].w - mean) * inv) * w4.w + b4.w;
        } else {
            float fi = (float)inv;
            y = make_float4(w4.x * (v[i].x * fi), w4.y * (v[i].y * fi), w4.z * (v[i].z * fi), w4.w * (v[i].w * fi));
        }
        ((float4 *)o)[j] = y;
    }
}

// The same row through global memory, for unaligned or very wide rows.
__device__ void norm_row_slow(int kind, const float *x, float *res, const float *wt,
                              const float *bias, float eps, float s, int64_t d, float *o, double *sh)
{
    if (kind == NB_K_SCALE) {
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = x[j] * s;
        return;
    }
    if (kind == NB_K_ADD_RMS) {
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) res[j] = res[j] + x[j];
        __syncthreads();
        x = res;
    }
    if (kind == NB_K_LAYER) {
        double t = 0;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) t += x[j];
        double mean = block_sum_any(t, sh) / (double)d, q = 0;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) q += ((double)x[j] - mean) * ((double)x[j] - mean);
        double inv = 1.0 / sqrt(block_sum_any(q, sh) / (double)d + (double)eps);
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
            o[j] = (float)(((double)x[j] - mean) * inv) * wt[j] + (bias ? bias[j] : 0.0f);
        return;
    }
    double q = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) q += (double)x[j] * x[j];
    float inv = (float)(1.0 / sqrt(block_sum_any(q, sh) / (double)d + (double)eps));
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = wt[j] * (x[j] * inv);
}

// One segment of rows for k_norms: its kind, rows and parameters.
typedef struct norm_seg_dev {
    int kind, fast;
    const float *x;
    float *res, *out;
    int64_t ldx, ldr, ldo, d;
    const float *wt, *bias;
    float eps, s;
} norm_seg_dev;

typedef struct norm_segs_dev {
    int n;
    norm_seg_dev seg[NB_FUSED_MAX];
} norm_segs_dev;

// grid (rows, segments): block (row t, segment i) normalizes row t of segment i.
__global__ void __launch_bounds__(NB_NORM_MAX_THREADS) k_norms(norm_segs_dev p)
{
    __shared__ double sh[32];
    const norm_seg_dev *g = &p.seg[blockIdx.y];
    int64_t t = blockIdx.x;
    const float *x = g->x + t * g->ldx;
    float *res = g->res ? g->res + t * g->ldr : NULL;
    float *o = g->out + t * g->ldo;
    if (g->fast)
        norm_row_fast(g->kind, x, res, g->wt, g->bias, g->eps, g->s, g->d, o, sh);
    else
        norm_row_slow(g->kind, x, res, g->wt, g->bias, g->eps, g->s, g->d, o, sh);
}

// Fill one segment's device parameters; *threads grows to what its rows need.
static void norm_seg_fill(norm_seg_dev *g, int kind, const nb_tensor *x, nb_tensor *res, const float *wt,
                          const float *bias, float eps, float s, nb_tensor *out, unsigned *threads)
{
    memset(g, 0, sizeof *g);
    g->kind = kind;
    g->x = (const float *)x->data;
    g->ldx = x->stride[0];
    g->res = res ? (float *)res->data : NULL;
    g->ldr = res ? res->stride[0] : 0;
    g->out = (float *)out->data;
    g->ldo = out->stride[0];
    g->d = x->shape[1];
    g->wt = wt;
    g->bias = bias;
    g->eps = eps;
    g->s = s;
    unsigned t = norm_threads(g->d);
    if (t > *threads) *threads = t;
}

// Launch segments filled by norm_seg_fill over `rows` rows each, with `threads` threads.
static nb_status norm_launch(nb_ops_ctx *ctx, const char *op, norm_segs_dev *p, int64_t rows, unsigned threads)
{
    if (rows == 0 || p->n == 0) return NB_OK;
    for (int i = 0; i < p->n; i++) {
        norm_seg_dev *g = &p->seg[i];
        g->fast = norm_fast_ok(g->x, g->ldx, g->d, threads) && norm_fast_ok(g->out, g->ldo, g->d, threads) &&
                  (!g->res || norm_fast_ok(g->res, g->ldr, g->d, threads)) &&
                  (!g->wt || (uintptr_t)g->wt % 16 == 0) && (!g->bias || (uintptr_t)g->bias % 16 == 0);
    }
    k_norms<<<dim3((unsigned)rows, (unsigned)p->n), threads, 0, nb_cuda_stream(ctx)>>>(*p);
    NB_CUDA_LAUNCHED(op);
    return NB_OK;
}

static nb_status same_rows(const char *op, const nb_tensor *a, const char *an, const nb_tensor *b, const char *bn)
{
    NB_TRY(nb_cuda_check_f32(op, an, a, 2));
    NB_TRY(nb_cuda_check_f32(op, bn, b, 2));
    if (a->shape[0] != b->shape[0] || a->shape[1] != b->shape[1])
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s [%lld, %lld] and %s [%lld, %lld] differ", op, an,
                        (long long)a->shape[0], (long long)a->shape[1], bn, (long long)b->shape[0],
                        (long long)b->shape[1]);
    return NB_OK;
}

extern "C" nb_status nb_cuda_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, float eps,
                                     nb_tensor *out)
{
    NB_TRY(same_rows("rmsnorm", x, "x", out, "out"));
    norm_segs_dev p;
    unsigned th = 32;
    p.n = 1;
    norm_seg_fill(&p.seg[0], NB_K_RMS, x, NULL, weight, NULL, eps, 1.0f, out, &th);
    return norm_launch(ctx, "rmsnorm", &p, x->shape[0], th);
}

extern "C" nb_status nb_cuda_add_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *residual,
                                         const float *weight, float eps, nb_tensor *out)
{
    NB_TRY(same_rows("add_rmsnorm", x, "x", residual, "residual"));
    NB_TRY(same_rows("add_rmsnorm", x, "x", out, "out"));
    norm_segs_dev p;
    unsigned th = 32;
    p.n = 1;
    norm_seg_fill(&p.seg[0], NB_K_ADD_RMS, x, residual, weight, NULL, eps, 1.0f, out, &th);
    return norm_launch(ctx, "add_rmsnorm", &p, x->shape[0], th);
}

extern "C" nb_status nb_cuda_layernorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, const float *bias,
                                       float eps, nb_tensor *out)
{
    NB_TRY(same_rows("layernorm", x, "x", out, "out"));
    norm_segs_dev p;
    unsigned th = 32;
    p.n = 1;
    norm_seg_fill(&p.seg[0], NB_K_LAYER, x, NULL, weight, bias, eps, 1.0f, out, &th);
    return norm_launch(ctx, "layernorm", &p, x->shape[0], th);
}

// mode 0: y += x; 1: y *= s.
__global__ void k_rows_elementwise(const float *x, int64_t ldx, float *y, int64_t ldy, int64_t d, float s, int mode)
{
    float *yr = y + blockIdx.x * ldy;
    if (mode == 0) {
        const float *xr = x + blockIdx.x * ldx;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] += xr[j];
    } else {
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] *= s;
    }
}

extern "C" nb_status nb_cuda_add(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *y)
{
    NB_TRY(same_rows("add", x, "x", y, "y"));
    if (x->shape[0] == 0) return NB_OK;
    k_rows_elementwise<<<(unsigned)x->shape[0], NB_ROW_THREADS, 0, nb_cuda_stream(ctx)>>>(
        (const float *)x->data, x->stride[0], (float *)y->data, y->stride[0], x->shape[1], 0.0f, 0);
    NB_CUDA_LAUNCHED("add");
    return NB_OK;
}

extern "C" nb_status nb_cuda_scale(nb_ops_ctx *ctx, nb_tensor *x, float s)
{
    NB_TRY(nb_cuda_check_f32("scale", "x", x, 2));
    if (x->shape[0] == 0) return NB_OK;
    k_rows_elementwise<<<(unsigned)x->shape[0], NB_ROW_THREADS, 0, nb_cuda_stream(ctx)>>>(
        NULL, 0, (float *)x->data, x->stride[0], x->shape[1], s, 1);
    NB_CUDA_LAUNCHED("scale");
    return NB_OK;
}

// scatter: dst[rows[t]] = src[t]; gather: dst[t] = src[rows[t]]. Rows outside [0, n) are skipped.
__global__ void k_move_rows(const float *src, int64_t lds, const int32_t *rows, float *dst, int64_t ldd, int64_t w,
                            int64_t n, int gather)
{
    int64_t t = blockIdx.x;
    int64_t r = rows[t];
    if (r < 0 || r >= n) return;
    const float *s = src + (gather ? r : t) * lds;
    float *d = dst + (gather ? t : r) * ldd;
    for (int64_t j = threadIdx.x; j < w; j += blockDim.x) d[j] = s[j];
}

static nb_status move_rows(nb_ops_ctx *ctx, const char *op, const nb_tensor *src, const int32_t *rows,
                           nb_tensor *dst, int gather)
{
    NB_TRY(nb_cuda_check_f32(op, "src", src, 2));
    NB_TRY(nb_cuda_check_f32(op, "dst", dst, 2));
    if (src->shape[1] != dst->shape[1])
        return nb_error(NB_ERR_INVALID_ARG, "%s: row widths %lld and %lld differ", op, (long long)src->shape[1],
                        (long long)dst->shape[1]);
    int64_t n_rows = gather ? dst->shape[0] : src->shape[0];
    if (n_rows == 0) return NB_OK;
    k_move_rows<<<(unsigned)n_rows, NB_ROW_THREADS, 0, nb_cuda_stream(ctx)>>>(
        (const float *)src->data, src->stride[0], rows, (float *)dst->data, dst->stride[0], src->shape[1],
        gather ? src->shape[0] : dst->shape[0], gather);
    NB_CUDA_LAUNCHED(op);
    return NB_OK;
}

extern "C" nb_status nb_cuda_set_rows(nb_ops_ctx *ctx, const nb_tensor *src, const int32_t *rows, nb_tensor *dst)
{
    return move_rows(ctx, "set_rows", src, rows, dst, 0);
}

extern "C" nb_status nb_cuda_get_rows(nb_ops_ctx *ctx, const nb_tensor *x, const int32_t *rows, nb_tensor *out)
{
    return move_rows(ctx, "get_rows", x, rows, out, 1);
}

// Rotary embedding of up to NB_FUSED_MAX parts (views [T, heads, >= dim]) in one launch:
// grid (token, part), threads over (head, pair). The angle is float(pos) * inv_freq in
// float32 and cos/sin are taken in double, as the CPU op does. The tables travel in the
// kernel's parameters (two at most: the model's and the DSA indexer's).
typedef struct rope_part_dev {
    float *x;
    int64_t s0, s1, heads;
    int table;
} rope_part_dev;
typedef struct rope_parts_dev {
    int n;
    rope_part_dev part[NB_FUSED_MAX];
    nb_rope table[2];
} rope_parts_dev;

__global__ void k_rope(rope_parts_dev p, const int32_t *pos)
{
    const rope_part_dev *g = &p.part[blockIdx.y];
    const nb_rope *rope = &p.table[g->table];
    const int half = rope->dim / 2;
    const int64_t t = blockIdx.x;
    const float pt = (float)pos[t];
    for (int64_t w = threadIdx.x; w < g->heads * half; w += blockDim.x) {
        int64_t h = w / half;
        int i = (int)(w % half);
        float ang = pt * rope->inv_freq[i];
        float c = (float)cos((double)ang) * rope->attention_scaling;
        float s = (float)sin((double)ang) * rope->attention_scaling;
        float *v = g->x + t * g->s0 + h * g->s1;
        int a = rope->interleave ? 2 * i : i;
        int b = rope->interleave ? 2 * i + 1 : i + half;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x1 * c + x0 * s;
    }
}

extern "C" nb_status nb_cuda_rope_n(nb_ops_ctx *ctx, int n, nb_tensor *const *x, const int32_t *pos,
                                    const nb_rope *const *rope)
{
    if (n < 1 || n > NB_FUSED_MAX) return nb_error(NB_ERR_INVALID_ARG, "rope_n: %d parts (1..%d)", n, NB_FUSED_MAX);
    rope_parts_dev p;
    memset(&p, 0, sizeof p);
    p.n = n;
    const nb_rope *tabs[2] = {NULL, NULL};
    int n_tabs = 0;
    int64_t work = 32;
    for (int i = 0; i < n; i++) {
        NB_TRY(nb_cuda_check_f32("rope", "x", x[i], 3));
        if (x[i]->shape[2] < rope[i]->dim)
            return nb_error(NB_ERR_INVALID_ARG, "rope: part %d: head has %lld dims, fewer than the %d rotated", i,
                            (long long)x[i]->shape[2], rope[i]->dim);
        if (x[i]->shape[0] != x[0]->shape[0])
            return nb_error(NB_ERR_INVALID_ARG, "rope_n: part %d has %lld tokens, part 0 %lld", i,
                            (long long)x[i]->shape[0], (long long)x[0]->shape[0]);
        int tb = -1;
        for (int j = 0; j < n_tabs; j++)
            if (tabs[j] == rope[i]) tb = j;
        if (tb < 0) {
            if (n_tabs == 2) return nb_error(NB_ERR_UNSUPPORTED, "rope_n: more than two rope tables in one launch");
            tabs[n_tabs] = rope[i];
            p.table[n_tabs] = *rope[i];
            tb = n_tabs++;
        }
        p.part[i] = (rope_part_dev){(float *)x[i]->data, x[i]->stride[0], x[i]->stride[1], x[i]->shape[1], tb};
        work = NB_MAX(work, x[i]->shape[1] * (rope[i]->dim / 2));
    }
    if (x[0]->shape[0] == 0) return NB_OK;
    unsigned threads = (unsigned)NB_MIN((work + 31) / 32 * 32, NB_ROW_THREADS);
    k_rope<<<dim3((unsigned)x[0]->shape[0], (unsigned)n), threads, 0, nb_cuda_stream(ctx)>>>(p, pos);
    NB_CUDA_LAUNCHED(n == 1 ? "rope" : "rope_n");
    return NB_OK;
}

extern "C" nb_status nb_cuda_rope(nb_ops_ctx *ctx, nb_tensor *x, const int32_t *pos, const nb_rope *rope)
{
    return nb_cuda_rope_n(ctx, 1, &x, pos, &rope);
}

extern "C" nb_status nb_cuda_norm_n(nb_ops_ctx *ctx, int n, const nb_norm_part *parts)
{
    if (n < 1 || n > NB_FUSED_MAX) return nb_error(NB_ERR_INVALID_ARG, "norm_n: %d parts (1..%d)", n, NB_FUSED_MAX);
    norm_segs_dev p;
    memset(&p, 0, sizeof p);
    p.n = n;
    unsigned th = 32;
    for (int i = 0; i < n; i++) {
        const nb_norm_part *q = &parts[i];
        NB_TRY(same_rows("norm_n", q->x, "x", q->out, "out"));
        if (q->x->shape[0] != parts[0].x->shape[0])
            return nb_error(NB_ERR_INVALID_ARG, "norm_n: part %d has %lld rows, part 0 %lld", i,
                            (long long)q->x->shape[0], (long long)parts[0].x->shape[0]);
        int kind = q->kind == NB_NORM_RMS ? NB_K_RMS : q->kind == NB_NORM_LAYER ? NB_K_LAYER : NB_K_SCALE;
        if (q->kind == NB_NORM_SCALE && q->x->data != q->out->data)
            return nb_error(NB_ERR_INVALID_ARG, "norm_n: part %d: a scale part must be in place", i);
        if (q->kind != NB_NORM_SCALE && !q->weight)
            return nb_error(NB_ERR_INVALID_ARG, "norm_n: part %d: weight is NULL", i);
        norm_seg_fill(&p.seg[i], kind, q->x, NULL, q->kind == NB_NORM_SCALE ? NULL : q->weight,
                      q->kind == NB_NORM_LAYER ? q->bias : NULL, q->eps, q->s, q->out, &th);
    }
    return norm_launch(ctx, n == 1 ? "norm" : "norm_n", &p, parts[0].x->shape[0], th);
}

// set_rows of up to NB_FUSED_MAX (src, dst) parts with the same rows: grid (token, part).
typedef struct set_part_dev {
    const float *src;
    float *dst;
    int64_t lds, ldd, w, n;
} set_part_dev;
typedef struct set_parts_dev {
    set_part_dev part[NB_FUSED_MAX];
} set_parts_dev;

__global__ void k_set_rows_n(set_parts_dev p, const int32_t *rows)
{
    const set_part_dev *g = &p.part[blockIdx.y];
    int64_t t = blockIdx.x, r = rows[t];
    if (r < 0 || r >= g->n) return;
    const float *s = g->src + t * g->lds;
    float *d = g->dst + r * g->ldd;
    for (int64_t j = threadIdx.x; j < g->w; j += blockDim.x) d[j] = s[j];
}

extern "C" nb_status nb_cuda_set_rows_n(nb_ops_ctx *ctx, int n, const nb_tensor *const *src, const int32_t *rows,
                                        nb_tensor *const *dst)
{
    if (n < 1 || n > NB_FUSED_MAX)
        return nb_error(NB_ERR_INVALID_ARG, "set_rows_n: %d parts (1..%d)", n, NB_FUSED_MAX);
    set_parts_dev p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < n; i++) {
        NB_TRY(nb_cuda_check_f32("set_rows_n", "src", src[i], 2));
        NB_TRY(nb_cuda_check_f32("set_rows_n", "dst", dst[i], 2));
        if (src[i]->shape[1] != dst[i]->shape[1] || src[i]->shape[0] != src[0]->shape[0])
            return nb_error(NB_ERR_INVALID_ARG, "set_rows_n: part %d: src [%lld, %lld], dst [.., %lld], part 0 has %lld rows",
                            i, (long long)src[i]->shape[0], (long long)src[i]->shape[1], (long long)dst[i]->shape[1],
                            (long long)src[0]->shape[0]);
        p.part[i] = (set_part_dev){(const float *)src[i]->data, (float *)dst[i]->data, src[i]->stride[0],
                                   dst[i]->stride[0], src[i]->shape[1], dst[i]->shape[0]};
    }
    if (src[0]->shape[0] == 0) return NB_OK;
    k_set_rows_n<<<dim3((unsigned)src[0]->shape[0], (unsigned)n), NB_ROW_THREADS, 0, nb_cuda_stream(ctx)>>>(p, rows);
    NB_CUDA_LAUNCHED("set_rows_n");
    return NB_OK;
}

// Device-to-device bytes in stream order (model/upload.c concatenates projection weights).
extern "C" nb_status nb_cuda_copy_d2d(nb_ops_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return NB_OK;
    NB_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nb_cuda_stream(ctx)));
    return NB_OK;
}
