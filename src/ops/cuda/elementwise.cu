// CUDA ops on rows: embedding gather (any weight format), RMSNorm (plain and with the fused
// residual add), LayerNorm, add, scale, row scatter/gather, rotary embedding, and the fused
// launches of ops.h (norm_n, rope_n, set_rows_n: several parts of the same rows in one
// kernel). The norms run one block per row (per row and part), hold a row in registers
// (float4) and sum squares in double as the CPU reference does, so results agree with it to
// float32 rounding. Rope and the embedding spread a token's work over several blocks of one
// element (pair) per thread: at decode a token is all the work there is, and one block
// looping over it ran one memory round trip (and one double sin/cos) after another.
// NIBBLE_CUDA_SMALL_OPS=legacy (nb_cuda_small_ops_force_legacy) runs the loop-per-block
// kernels of before, for A/B timings (tests/cuda_ops/test_cuda_small_ops.c --bench).
// Exercised by tests/cuda_ops/test_cuda_vs_cpu.c (norms, rope*, *_n cases) and
// tests/cuda_ops/test_cuda_small_ops.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/pdl.cuh"

#define NB_ROW_THREADS 256

static int small_force = -1;

extern "C" void nb_cuda_small_ops_force_legacy(int legacy) { small_force = legacy < 0 ? -1 : legacy ? 1 : 0; }

extern "C" int nb_cuda_small_ops_legacy(void)
{
    static int env = -1; // read once; a benign race between threads reads the same value
    if (small_force >= 0) return small_force;
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_SMALL_OPS");
        env = e && !strcmp(e, "legacy");
    }
    return env;
}

static int pdl_force = -1;

extern "C" void nb_cuda_pdl_force(int on) { pdl_force = on < 0 ? -1 : on ? 1 : 0; }

extern "C" int nb_cuda_pdl_on(void)
{
    static int env = -1;
    if (nb_cuda_small_ops_legacy()) return 0;
    if (pdl_force >= 0) return pdl_force;
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_PDL");
        env = !(e && !strcmp(e, "0"));
    }
    return env;
}

// Legacy: one block per token walks the row element by element in any format.
__global__ void k_embedding(nb_weight w, const int32_t *ids, float *out, int64_t ld)
{
    int t = blockIdx.x;
    int id = ids[t];
    float *o = out + (int64_t)t * ld;
    bool ok = id >= 0 && id < w.n;
    for (int64_t j = threadIdx.x; j < w.k; j += blockDim.x) o[j] = ok ? nb_d_wload1(w, id, j) : 0.0f;
}

// BF16 or F32 rows with 16-byte alignment: grid (token, chunk), one 16-byte load per thread
// (8 BF16 or 4 F32 elements) and float4 stores; a 6144-wide BF16 row is 6 blocks of 128.
#define NB_EMB_THREADS 128
__global__ void __launch_bounds__(NB_EMB_THREADS) k_embedding_vec(const uint8_t *data, int64_t row_bytes, int bf16,
                                                                  int64_t vocab, int64_t k, const int32_t *ids,
                                                                  float *out, int64_t ld)
{
    nb_pdl_wait(); // before any global access (ops/cuda/pdl.cuh)
    nb_pdl_trigger();
    const int64_t t = blockIdx.x, v = (int64_t)blockIdx.y * NB_EMB_THREADS + threadIdx.x;
    const int per = bf16 ? 8 : 4;
    if (v * per >= k) return;
    const int id = ids[t];
    float4 *o = (float4 *)(out + t * ld + v * per);
    if (id < 0 || id >= vocab) {
        o[0] = make_float4(0, 0, 0, 0);
        if (bf16) o[1] = make_float4(0, 0, 0, 0);
        return;
    }
    const uint4 q = ((const uint4 *)(data + (int64_t)id * row_bytes))[v];
    if (bf16) {
        o[0] = make_float4(__uint_as_float(q.x << 16), __uint_as_float(q.x & 0xffff0000u), __uint_as_float(q.y << 16),
                           __uint_as_float(q.y & 0xffff0000u));
        o[1] = make_float4(__uint_as_float(q.z << 16), __uint_as_float(q.z & 0xffff0000u), __uint_as_float(q.w << 16),
                           __uint_as_float(q.w & 0xffff0000u));
    } else {
        o[0] = make_float4(__uint_as_float(q.x), __uint_as_float(q.y), __uint_as_float(q.z), __uint_as_float(q.w));
    }
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
    const int bf16 = table->fmt == NB_WFMT_BF16;
    const int64_t per = bf16 ? 8 : 4;
    const int64_t row_bytes = table->row_stride ? table->row_stride : table->k * (bf16 ? 2 : 4);
    const bool vec = !nb_cuda_small_ops_legacy() && (bf16 || table->fmt == NB_WFMT_F32) && table->k % per == 0 &&
                     row_bytes % 16 == 0 && (uintptr_t)table->data % 16 == 0 && (uintptr_t)out->data % 16 == 0 &&
                     out->stride[0] % 4 == 0;
    if (vec) {
        const unsigned chunks = (unsigned)((table->k / per + NB_EMB_THREADS - 1) / NB_EMB_THREADS);
        const uint8_t *data = (const uint8_t *)table->data;
        int64_t vocab = table->n, k = table->k, ld = out->stride[0];
        float *o = (float *)out->data;
        void *args[] = {&data, (void *)&row_bytes, (void *)&bf16, &vocab, &k, (void *)&ids, &o, &ld};
        NB_CUDA_TRY(nb_pdl_launch((const void *)k_embedding_vec, dim3((unsigned)n, chunks), dim3(NB_EMB_THREADS), 0,
                                  nb_cuda_stream(ctx), args));
    } else {
        k_embedding<<<n, NB_ROW_THREADS, 0, nb_cuda_stream(ctx)>>>(*table, ids, (float *)out->data, out->stride[0]);
    }
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
                              const float *bias, float eps, float s, int64_t d, float *o, double *sh, bool legacy)
{
    const int d4 = (int)(d / 4);
    float4 v[NB_NORM_NV], wr[NB_NORM_NV];
#pragma unroll
    for (int i = 0; i < NB_NORM_NV; i++) {
        int j = (int)threadIdx.x + i * (int)blockDim.x;
        v[i] = j < d4 ? ((const float4 *)x)[j] : make_float4(0, 0, 0, 0);
    }
    // the weights are loaded with the row, not after the reductions: one memory round trip
    // less per row (the legacy switch keeps the late load, for A/B timings)
    const bool early_w = kind != NB_K_SCALE && !legacy;
    if (early_w) {
#pragma unroll
        for (int i = 0; i < NB_NORM_NV; i++) {
            int j = (int)threadIdx.x + i * (int)blockDim.x;
            wr[i] = j < d4 ? ((const float4 *)wt)[j] : make_float4(0, 0, 0, 0);
        }
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
        float4 w4 = early_w ? wr[i] : ((const float4 *)wt)[j], y;
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
    int n, legacy;
    norm_seg_dev seg[NB_FUSED_MAX];
} norm_segs_dev;

// grid (rows, segments): block (row t, segment i) normalizes row t of segment i.
__global__ void __launch_bounds__(NB_NORM_MAX_THREADS) k_norms(norm_segs_dev p)
{
    nb_pdl_wait(); // before any global access (ops/cuda/pdl.cuh)
    nb_pdl_trigger();
    __shared__ double sh[32];
    const norm_seg_dev *g = &p.seg[blockIdx.y];
    int64_t t = blockIdx.x;
    const float *x = g->x + t * g->ldx;
    float *res = g->res ? g->res + t * g->ldr : NULL;
    float *o = g->out + t * g->ldo;
    if (g->fast)
        norm_row_fast(g->kind, x, res, g->wt, g->bias, g->eps, g->s, g->d, o, sh, p.legacy);
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
    p->legacy = nb_cuda_small_ops_legacy();
    void *args[] = {p};
    NB_CUDA_TRY(nb_pdl_launch((const void *)k_norms, dim3((unsigned)rows, (unsigned)p->n), dim3(threads), 0,
                              nb_cuda_stream(ctx), args));
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
    nb_pdl_wait(); // before any global access (ops/cuda/pdl.cuh)
    nb_pdl_trigger();
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
    if (gather) NB_TRY(nb_cuda_check_f32(op, "dst", dst, 2));
    else NB_TRY(nb_cuda_check_f32_bf16(op, "dst", dst, 2)); /* set_rows: F32 or BF16 rows */
    if (src->shape[1] != dst->shape[1])
        return nb_error(NB_ERR_INVALID_ARG, "%s: row widths %lld and %lld differ", op, (long long)src->shape[1],
                        (long long)dst->shape[1]);
    int64_t n_rows = gather ? dst->shape[0] : src->shape[0];
    if (n_rows == 0) return NB_OK;
    const float *sp = (const float *)src->data;
    float *dp = (float *)dst->data;
    int64_t lds = src->stride[0], ldd = dst->stride[0], w = src->shape[1], n = gather ? src->shape[0] : dst->shape[0];
    if (dst->dtype == NB_DTYPE_BF16) /* the KV pool's BF16 rows: set_rows_n's BF16 parts round them */
        return nb_cuda_set_rows_n(ctx, 1, &src, rows, &dst);
    void *args[] = {&sp, &lds, (void *)&rows, &dp, &ldd, &w, &n, &gather};
    NB_CUDA_TRY(nb_pdl_launch((const void *)k_move_rows, dim3((unsigned)n_rows), dim3(NB_ROW_THREADS), 0,
                              nb_cuda_stream(ctx), args));
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

// Rotary embedding of up to NB_FUSED_MAX parts (views [T, heads, >= dim]) in one launch.
// The angle is float(pos) * inv_freq in float32 and cos/sin are taken in double, as the CPU
// op does (both kernels compute the same bits). The tables travel in the kernel's
// parameters (two at most: the model's and the DSA indexer's).
typedef struct rope_part_dev {
    float *x;
    int64_t s0, s1, heads;
    int table;
} rope_part_dev;
typedef struct rope_parts_dev {
    int n;
    rope_part_dev part[NB_FUSED_MAX];
    nb_rope table[2];
    int c0[NB_FUSED_MAX + 1]; // k_rope_pairs: part i owns chunks [c0[i], c0[i+1]) of blockIdx.y
} rope_parts_dev;

// One (head, pair) of token t of part g.
__device__ __forceinline__ void rope_pair(const rope_part_dev *g, const nb_rope *rope, int64_t t, float pt, int64_t w)
{
    const int half = rope->dim / 2;
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

// Legacy: grid (token, part), threads loop over the part's (head, pair)s: GLM-5's q_pe is
// 64 heads x 32 pairs, 8 dependent rounds of loads, double sin/cos and stores per thread.
__global__ void k_rope(rope_parts_dev p, const int32_t *pos)
{
    const rope_part_dev *g = &p.part[blockIdx.y];
    const nb_rope *rope = &p.table[g->table];
    const int64_t t = blockIdx.x;
    const float pt = (float)pos[t];
    for (int64_t w = threadIdx.x; w < g->heads * (rope->dim / 2); w += blockDim.x) rope_pair(g, rope, t, pt, w);
}

// NB_ROPE_HG heads per thread (nb_cuda_rope_n from NB_ROPE_HG_MIN_TOKENS tokens, or
// NIBBLE_CUDA_ROPE_HEADS=0|1 / nb_cuda_rope_force_heads): each thread takes one pair of
// NB_ROPE_HG heads of a token, so cos and sin (in double) are computed once per (token, pair,
// group) instead of once per head: GLM-5's q_pe needs 32 per token, not 2048. The same
// arithmetic per element as rope_pair, so the same bits.
#define NB_ROPE_HG 8
__device__ __forceinline__ void rope_pair_heads(const rope_part_dev *g, const nb_rope *rope, int64_t t, float pt,
                                                int64_t w)
{
    const int half = rope->dim / 2;
    const int64_t h0 = (w / half) * NB_ROPE_HG;
    const int i = (int)(w % half);
    const float ang = pt * rope->inv_freq[i];
    const float c = (float)cos((double)ang) * rope->attention_scaling;
    const float s = (float)sin((double)ang) * rope->attention_scaling;
    const int a = rope->interleave ? 2 * i : i;
    const int b = rope->interleave ? 2 * i + 1 : i + half;
    for (int64_t h = h0; h < h0 + NB_ROPE_HG && h < g->heads; h++) {
        float *v = g->x + t * g->s0 + h * g->s1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x1 * c + x0 * s;
    }
}

// grid (token, chunk): every (head, pair) of every part has its own thread, so a decode
// token's ~3100 pairs (GLM-5) run in one round over ~26 blocks.
#define NB_ROPE_THREADS 128
// HG: NB_ROPE_HG heads per thread (rope_pair_heads), else one (rope_pair).
template <bool HG>
__global__ void __launch_bounds__(NB_ROPE_THREADS) k_rope_pairs(rope_parts_dev p, const int32_t *pos)
{
    nb_pdl_wait(); // before any global access (ops/cuda/pdl.cuh)
    nb_pdl_trigger();
    const int c = blockIdx.y;
    int i = 0;
    while (i + 1 < p.n && c >= p.c0[i + 1]) i++;
    const rope_part_dev *g = &p.part[i];
    const nb_rope *rope = &p.table[g->table];
    const int64_t w = (int64_t)(c - p.c0[i]) * NB_ROPE_THREADS + threadIdx.x;
    const int64_t heads = HG ? (g->heads + NB_ROPE_HG - 1) / NB_ROPE_HG : g->heads;
    if (w >= heads * (rope->dim / 2)) return;
    const int64_t t = blockIdx.x;
    if (HG) rope_pair_heads(g, rope, t, (float)pos[t], w);
    else rope_pair(g, rope, t, (float)pos[t], w);
}

// H200, 8-layer GLM-5 slice (bench/RESULTS.md, issue 9, eighth session): rope_n 0.284 -> 0.129
// ms per step at 1000 tokens, 0.046 -> 0.058 ms at 1 token (a thread loops over 8 heads); the
// crossover between them is not measured.
#define NB_ROPE_HG_MIN_TOKENS 64

static int g_rope_hg = -1; // nb_cuda_rope_force_heads; -1: NIBBLE_CUDA_ROPE_HEADS, else by token count

extern "C" void nb_cuda_rope_force_heads(int on) { g_rope_hg = on == 0 || on == 1 ? on : -1; }

static int rope_heads_on(int64_t tokens)
{
    if (g_rope_hg >= 0) return g_rope_hg;
    static int env = -2; // read once; a benign race between threads reads the same value
    if (env == -2) {
        const char *e = getenv("NIBBLE_CUDA_ROPE_HEADS");
        env = e && (!strcmp(e, "0") || !strcmp(e, "1")) ? e[0] - '0' : -1;
    }
    return env >= 0 ? env : tokens >= NB_ROPE_HG_MIN_TOKENS;
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
    int64_t work = 32, chunks = 0;
    const int hg = !nb_cuda_small_ops_legacy() && n > 0 && rope_heads_on(x[0]->shape[0]); /* k_rope_pairs<true> */
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
        const int64_t half = rope[i]->dim / 2;
        const int64_t pairs = (hg ? (x[i]->shape[1] + NB_ROPE_HG - 1) / NB_ROPE_HG : x[i]->shape[1]) * half;
        work = NB_MAX(work, x[i]->shape[1] * half); /* k_rope's threads: every (head, pair) */
        p.c0[i] = (int)chunks;
        chunks += (pairs + NB_ROPE_THREADS - 1) / NB_ROPE_THREADS;
    }
    p.c0[n] = (int)chunks;
    if (x[0]->shape[0] == 0) return NB_OK;
    if (nb_cuda_small_ops_legacy() || chunks == 0 || chunks > 65535) {
        unsigned threads = (unsigned)NB_MIN((work + 31) / 32 * 32, NB_ROW_THREADS);
        k_rope<<<dim3((unsigned)x[0]->shape[0], (unsigned)n), threads, 0, nb_cuda_stream(ctx)>>>(p, pos);
    } else {
        void *args[] = {&p, (void *)&pos};
        NB_CUDA_TRY(nb_pdl_launch(hg ? (const void *)k_rope_pairs<true> : (const void *)k_rope_pairs<false>,
                                  dim3((unsigned)x[0]->shape[0], (unsigned)chunks), dim3(NB_ROPE_THREADS), 0,
                                  nb_cuda_stream(ctx), args));
    }
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
// A part's dst is F32 or BF16 (bf16: rounded to nearest even; ldd in its elements), parts
// may mix them (the KV pool's BF16 latent rows beside its F32 index keys).
typedef struct set_part_dev {
    const float *src;
    void *dst;
    int64_t lds, ldd, w, n;
    int bf16;
} set_part_dev;

// A part's dst row from the launcher's view (F32 or BF16: nb_cuda_check_f32_bf16 passed).
static set_part_dev set_part_of(const nb_tensor *s, const nb_tensor *d)
{
    return (set_part_dev){(const float *)s->data, d->data, s->stride[0], d->stride[0], s->shape[1], d->shape[0],
                          d->dtype == NB_DTYPE_BF16};
}
typedef struct set_parts_dev {
    set_part_dev part[NB_FUSED_MAX];
} set_parts_dev;

__global__ void k_set_rows_n(set_parts_dev p, const int32_t *rows)
{
    nb_pdl_wait(); // before any global access (ops/cuda/pdl.cuh)
    nb_pdl_trigger();
    const set_part_dev *g = &p.part[blockIdx.y];
    int64_t t = blockIdx.x, r = rows[t];
    if (r < 0 || r >= g->n) return;
    const float *s = g->src + t * g->lds;
    if (g->bf16) {
        uint16_t *d = (uint16_t *)g->dst + r * g->ldd;
        for (int64_t j = threadIdx.x; j < g->w; j += blockDim.x) d[j] = nb_d_to_bf16(s[j]);
        return;
    }
    float *d = (float *)g->dst + r * g->ldd;
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
        NB_TRY(nb_cuda_check_f32_bf16("set_rows_n", "dst", dst[i], 2));
        if (src[i]->shape[1] != dst[i]->shape[1] || src[i]->shape[0] != src[0]->shape[0])
            return nb_error(NB_ERR_INVALID_ARG, "set_rows_n: part %d: src [%lld, %lld], dst [.., %lld], part 0 has %lld rows",
                            i, (long long)src[i]->shape[0], (long long)src[i]->shape[1], (long long)dst[i]->shape[1],
                            (long long)src[0]->shape[0]);
        p.part[i] = set_part_of(src[i], dst[i]);
    }
    if (src[0]->shape[0] == 0) return NB_OK;
    void *args[] = {&p, (void *)&rows};
    NB_CUDA_TRY(nb_pdl_launch((const void *)k_set_rows_n, dim3((unsigned)src[0]->shape[0], (unsigned)n),
                              dim3(NB_ROW_THREADS), 0, nb_cuda_stream(ctx), args));
    NB_CUDA_LAUNCHED("set_rows_n");
    return NB_OK;
}

// norm_rope_set_n (ops.h): an MLA layer's norms, key ropes and pool writes in one launch, one
// block per token. Phase 1: each norm part has its own warps (a row's float4s in registers, at
// most NB_PREP_NV per thread, every load issued first; sums in double as norm_row_fast, warp
// shuffles then a named barrier of the part's warps), so the parts run side by side; phase 2
// (after __syncthreads, which makes the block's global writes visible to it): every rope
// (head, pair) of the token by one thread; phase 3: the writes, float4 where aligned. Parts
// that do not fit (unaligned rows, rows wider than the warps' registers) take the three
// separate launches, as NIBBLE_CUDA_KV_PREP=0 does.
#define NB_PREP_NV 4
#define NB_PREP_MAX_WARPS 16
typedef struct prep_dev {
    int n_norm, n_rope, n_set;
    norm_seg_dev norm[NB_FUSED_MAX];
    int w0[NB_FUSED_MAX + 1]; /* norm part i: warps [w0[i], w0[i+1]) */
    rope_part_dev rope[NB_FUSED_MAX];
    nb_rope table[2];
    int64_t pairs[NB_FUSED_MAX]; /* (head, pair)s of rope part i */
    set_part_dev set[NB_FUSED_MAX];
    int set_vec; /* every write row aligned for 4 values a store (F32 16, BF16 8 bytes), width % 4 == 0 */
} prep_dev;

// Sum over the part's nw warps (starting at warp w0) of a double; bar: its named barrier.
__device__ __forceinline__ double prep_sum(double v, double *sh, int w0, int nw, int bar)
{
    v = nb_d_warp_sum_d(v);
    if (nw == 1) return v;
    const int w = (int)(threadIdx.x >> 5) - w0;
    asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(nw * 32) : "memory");
    if ((threadIdx.x & 31) == 0) sh[w] = v;
    asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(nw * 32) : "memory");
    double t = 0;
    for (int i = 0; i < nw; i++) t += sh[i];
    return t;
}

__global__ void __launch_bounds__(NB_PREP_MAX_WARPS * 32) k_norm_rope_set(prep_dev p, const int32_t *pos,
                                                                          const int32_t *rows)
{
    nb_pdl_wait(); // before any global access (ops/cuda/pdl.cuh)
    nb_pdl_trigger();
    __shared__ double sh[NB_FUSED_MAX][NB_PREP_MAX_WARPS];
    const int64_t t = blockIdx.x;
    const int warp = (int)(threadIdx.x >> 5);
    int i = 0;
    while (i < p.n_norm && warp >= p.w0[i + 1]) i++;
    if (i < p.n_norm) {
        const norm_seg_dev *g = &p.norm[i];
        const int nw = p.w0[i + 1] - p.w0[i], lt = (int)threadIdx.x - 32 * p.w0[i], nt = 32 * nw;
        const int d4 = (int)(g->d / 4);
        const float4 *x = (const float4 *)(g->x + t * g->ldx);
        float4 *o = (float4 *)(g->out + t * g->ldo);
        float4 v[NB_PREP_NV], wr[NB_PREP_NV], br[NB_PREP_NV];
#pragma unroll
        for (int k = 0; k < NB_PREP_NV; k++) {
            const int j = lt + k * nt;
            const bool in = j < d4;
            v[k] = in ? x[j] : make_float4(0, 0, 0, 0);
            wr[k] = in && g->wt ? ((const float4 *)g->wt)[j] : make_float4(0, 0, 0, 0);
            br[k] = in && g->bias ? ((const float4 *)g->bias)[j] : make_float4(0, 0, 0, 0);
        }
        const int bar = 1 + i;
        if (g->kind == NB_K_SCALE) {
#pragma unroll
            for (int k = 0; k < NB_PREP_NV; k++) {
                const int j = lt + k * nt;
                if (j < d4) o[j] = make_float4(v[k].x * g->s, v[k].y * g->s, v[k].z * g->s, v[k].w * g->s);
            }
        } else if (g->kind == NB_K_LAYER) {
            double s = 0;
#pragma unroll
            for (int k = 0; k < NB_PREP_NV; k++) s += ((double)v[k].x + v[k].y) + ((double)v[k].z + v[k].w);
            const double mean = prep_sum(s, sh[i], p.w0[i], nw, bar) / (double)g->d;
            double q = 0;
#pragma unroll
            for (int k = 0; k < NB_PREP_NV; k++)
                if (lt + k * nt < d4) {
                    double a = v[k].x - mean, b = v[k].y - mean, c = v[k].z - mean, e = v[k].w - mean;
                    q += a * a + b * b + c * c + e * e;
                }
            const double inv = 1.0 / sqrt(prep_sum(q, sh[i], p.w0[i], nw, bar) / (double)g->d + (double)g->eps);
#pragma unroll
            for (int k = 0; k < NB_PREP_NV; k++) {
                const int j = lt + k * nt;
                if (j >= d4) continue;
                float4 y;
                y.x = (float)((v[k].x - mean) * inv) * wr[k].x + br[k].x;
                y.y = (float)((v[k].y - mean) * inv) * wr[k].y + br[k].y;
                y.z = (float)((v[k].z - mean) * inv) * wr[k].z + br[k].z;
                y.w = (float)((v[k].w - mean) * inv) * wr[k].w + br[k].w;
                o[j] = y;
            }
        } else {
            double q = 0;
#pragma unroll
            for (int k = 0; k < NB_PREP_NV; k++)
                q += (double)v[k].x * v[k].x + (double)v[k].y * v[k].y + (double)v[k].z * v[k].z +
                     (double)v[k].w * v[k].w;
            const float fi =
                (float)(1.0 / sqrt(prep_sum(q, sh[i], p.w0[i], nw, bar) / (double)g->d + (double)g->eps));
#pragma unroll
            for (int k = 0; k < NB_PREP_NV; k++) {
                const int j = lt + k * nt;
                if (j < d4)
                    o[j] = make_float4(wr[k].x * (v[k].x * fi), wr[k].y * (v[k].y * fi), wr[k].z * (v[k].z * fi),
                                       wr[k].w * (v[k].w * fi));
            }
        }
    }
    __syncthreads();
    if (p.n_rope) {
        const float pt = (float)pos[t];
        for (int r = 0; r < p.n_rope; r++)
            for (int64_t w = threadIdx.x; w < p.pairs[r]; w += blockDim.x)
                rope_pair(&p.rope[r], &p.table[p.rope[r].table], t, pt, w);
        __syncthreads();
    }
    if (p.n_set) {
        const int64_t row = rows[t];
        for (int r = 0; r < p.n_set; r++) {
            const set_part_dev *g = &p.set[r];
            if (row < 0 || row >= g->n) continue;
            const float *src = g->src + t * g->lds;
            if (g->bf16) { /* a BF16 dst: rounded to nearest even, 4 values per 8-byte store */
                uint16_t *dst = (uint16_t *)g->dst + row * g->ldd;
                if (p.set_vec) {
                    for (int64_t j = threadIdx.x; j < g->w / 4; j += blockDim.x) {
                        const float4 v = ((const float4 *)src)[j];
                        ((uint2 *)dst)[j] = make_uint2(nb_d_to_bf16(v.x) | (uint32_t)nb_d_to_bf16(v.y) << 16,
                                                       nb_d_to_bf16(v.z) | (uint32_t)nb_d_to_bf16(v.w) << 16);
                    }
                } else {
                    for (int64_t j = threadIdx.x; j < g->w; j += blockDim.x) dst[j] = nb_d_to_bf16(src[j]);
                }
                continue;
            }
            float *dst = (float *)g->dst + row * g->ldd;
            if (p.set_vec) {
                for (int64_t j = threadIdx.x; j < g->w / 4; j += blockDim.x)
                    ((float4 *)dst)[j] = ((const float4 *)src)[j];
            } else {
                for (int64_t j = threadIdx.x; j < g->w; j += blockDim.x) dst[j] = src[j];
            }
        }
    }
}

static int prep_force = -1;

extern "C" void nb_cuda_norm_rope_set_force(int fused) { prep_force = fused < 0 ? -1 : fused ? 1 : 0; }

static int prep_on(void)
{
    static int env = -1;
    if (prep_force >= 0) return prep_force;
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_KV_PREP");
        env = !(e && !strcmp(e, "0"));
    }
    return env;
}

static bool al16(const void *p, int64_t ld) { return (uintptr_t)p % 16 == 0 && ld % 4 == 0; }

extern "C" nb_status nb_cuda_norm_rope_set_n(nb_ops_ctx *ctx, const nb_norm_rope_set *q)
{
    if (q->n_norm < 0 || q->n_norm > NB_FUSED_MAX || q->n_rope < 0 || q->n_rope > NB_FUSED_MAX || q->n_set < 0 ||
        q->n_set > NB_FUSED_MAX || q->n_norm + q->n_rope + q->n_set == 0)
        return nb_error(NB_ERR_INVALID_ARG, "norm_rope_set_n: %d norm, %d rope, %d set parts (0..%d each, not none)",
                        q->n_norm, q->n_rope, q->n_set, NB_FUSED_MAX);
    const int64_t T = q->n_norm ? q->norms[0].x->shape[0] : q->n_rope ? q->rope_x[0]->shape[0] : q->src[0]->shape[0];
    for (int i = 0; i < q->n_norm; i++)
        if (q->norms[i].x->shape[0] != T)
            return nb_error(NB_ERR_INVALID_ARG, "norm_rope_set_n: norm part %d has %lld rows, not %lld", i,
                            (long long)q->norms[i].x->shape[0], (long long)T);
    for (int i = 0; i < q->n_rope; i++)
        if (q->rope_x[i]->shape[0] != T)
            return nb_error(NB_ERR_INVALID_ARG, "norm_rope_set_n: rope part %d has %lld tokens, not %lld", i,
                            (long long)q->rope_x[i]->shape[0], (long long)T);
    for (int i = 0; i < q->n_set; i++)
        if (q->src[i]->shape[0] != T)
            return nb_error(NB_ERR_INVALID_ARG, "norm_rope_set_n: set part %d has %lld rows, not %lld", i,
                            (long long)q->src[i]->shape[0], (long long)T);
    /* the fused kernel's shapes; otherwise the three launches (their own checks) */
    bool fit = prep_on() && !nb_cuda_small_ops_legacy() && T > 0 && T <= 2147483647;
    prep_dev p;
    memset(&p, 0, sizeof p);
    p.n_norm = q->n_norm, p.n_rope = q->n_rope, p.n_set = q->n_set;
    int warps = 0;
    for (int i = 0; fit && i < q->n_norm; i++) {
        const nb_norm_part *a = &q->norms[i];
        NB_TRY(same_rows("norm_rope_set_n", a->x, "x", a->out, "out"));
        if (a->kind == NB_NORM_SCALE && a->x->data != a->out->data)
            return nb_error(NB_ERR_INVALID_ARG, "norm_rope_set_n: norm part %d: a scale part must be in place", i);
        if (a->kind != NB_NORM_SCALE && !a->weight)
            return nb_error(NB_ERR_INVALID_ARG, "norm_rope_set_n: norm part %d: weight is NULL", i);
        const int kind = a->kind == NB_NORM_RMS ? NB_K_RMS : a->kind == NB_NORM_LAYER ? NB_K_LAYER : NB_K_SCALE;
        unsigned th = 32;
        norm_seg_fill(&p.norm[i], kind, a->x, NULL, kind == NB_K_SCALE ? NULL : a->weight,
                      kind == NB_K_LAYER ? a->bias : NULL, a->eps, a->s, a->out, &th);
        const int64_t d = a->x->shape[1], d4 = d / 4;
        const int nw = (int)NB_MAX(1, (d4 + 32 * NB_PREP_NV - 1) / (32 * NB_PREP_NV));
        fit = fit && d % 4 == 0 && al16(a->x->data, a->x->stride[0]) && al16(a->out->data, a->out->stride[0]) &&
              (uintptr_t)p.norm[i].wt % 16 == 0 && (uintptr_t)p.norm[i].bias % 16 == 0;
        p.w0[i] = warps;
        warps += nw;
        p.w0[i + 1] = warps;
    }
    fit = fit && warps <= NB_PREP_MAX_WARPS;
    const nb_rope *tabs[2] = {NULL, NULL};
    int n_tabs = 0;
    for (int i = 0; fit && i < q->n_rope; i++) {
        const nb_tensor *x = q->rope_x[i];
        NB_TRY(nb_cuda_check_f32("norm_rope_set_n", "rope x", x, 3));
        if (x->shape[2] < q->rope[i]->dim)
            return nb_error(NB_ERR_INVALID_ARG, "norm_rope_set_n: rope part %d: head has %lld dims, fewer than %d", i,
                            (long long)x->shape[2], q->rope[i]->dim);
        int tb = -1;
        for (int j = 0; j < n_tabs; j++)
            if (tabs[j] == q->rope[i]) tb = j;
        if (tb < 0 && n_tabs == 2) fit = false; /* more than two tables: the rope launch says so */
        if (tb < 0 && fit) tabs[n_tabs] = q->rope[i], p.table[n_tabs] = *q->rope[i], tb = n_tabs++;
        p.rope[i] = (rope_part_dev){(float *)x->data, x->stride[0], x->stride[1], x->shape[1], tb};
        p.pairs[i] = x->shape[1] * (q->rope[i]->dim / 2);
    }
    p.set_vec = 1;
    for (int i = 0; fit && i < q->n_set; i++) {
        const nb_tensor *s = q->src[i], *d = q->dst[i];
        NB_TRY(nb_cuda_check_f32("norm_rope_set_n", "src", s, 2));
        NB_TRY(nb_cuda_check_f32_bf16("norm_rope_set_n", "dst", d, 2));
        if (s->shape[1] != d->shape[1])
            return nb_error(NB_ERR_INVALID_ARG, "norm_rope_set_n: set part %d: src width %lld, dst %lld", i,
                            (long long)s->shape[1], (long long)d->shape[1]);
        p.set[i] = set_part_of(s, d);
        const bool dal = p.set[i].bf16 ? (uintptr_t)d->data % 8 == 0 && d->stride[0] % 4 == 0 : al16(d->data, d->stride[0]);
        if (!(s->shape[1] % 4 == 0 && al16(s->data, s->stride[0]) && dal)) p.set_vec = 0;
    }
    if (!fit) {
        if (q->n_norm) NB_TRY(nb_cuda_norm_n(ctx, q->n_norm, q->norms));
        if (q->n_rope) NB_TRY(nb_cuda_rope_n(ctx, q->n_rope, (nb_tensor *const *)q->rope_x, q->pos, q->rope));
        if (q->n_set) NB_TRY(nb_cuda_set_rows_n(ctx, q->n_set, q->src, q->rows, q->dst));
        return NB_OK;
    }
    const int threads = NB_MAX(warps, 4) * 32;
    const int32_t *pos = q->pos, *rows = q->rows;
    void *args[] = {&p, (void *)&pos, (void *)&rows};
    NB_CUDA_TRY(nb_pdl_launch((const void *)k_norm_rope_set, dim3((unsigned)T), dim3((unsigned)threads), 0,
                              nb_cuda_stream(ctx), args));
    NB_CUDA_LAUNCHED("norm_rope_set_n");
    return NB_OK;
}

// Device-to-device bytes in stream order (model/upload.c concatenates projection weights).
extern "C" nb_status nb_cuda_copy_d2d(nb_ops_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return NB_OK;
    NB_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nb_cuda_stream(ctx)));
    return NB_OK;
}
