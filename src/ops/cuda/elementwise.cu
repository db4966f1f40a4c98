// CUDA ops on rows: embedding gather (any weight format), RMSNorm (plain and with the fused
// residual add), LayerNorm, add, scale, row scatter/gather and rotary embedding. One block
// per row; sums of squares in double as the CPU reference does, so results agree with it to
// float32 rounding. Exercised by tests/cuda_ops/test_cuda_vs_cpu.c.
#include <math.h>

#include "ops/cuda/common.cuh"

#define NB_ROW_THREADS 256

// Sum of v over the block (all threads get it). sh: NB_ROW_THREADS / 32 doubles.
__device__ double block_sum_d(double v, double *sh)
{
    v = nb_d_warp_sum_d(v);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    double t = 0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += sh[i];
    return t;
}

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

// mode 0: rmsnorm; 1: residual += x then rmsnorm(residual).
__global__ void k_rmsnorm(const float *x, int64_t ldx, float *res, int64_t ldr, const float *wt, float eps, int64_t d,
                          float *out, int64_t ldo, int add)
{
    __shared__ double sh[NB_ROW_THREADS / 32];
    const float *xr = x + blockIdx.x * ldx;
    float *rr = add ? res + blockIdx.x * ldr : NULL;
    float *o = out + blockIdx.x * ldo;
    double ss = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        float v = xr[j];
        if (add) {
            v = rr[j] + v;
            rr[j] = v;
        }
        ss += (double)v * v;
    }
    ss = block_sum_d(ss, sh);
    float inv = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
    const float *src = add ? rr : xr;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = wt[j] * (src[j] * inv);
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
    if (x->shape[0] == 0) return NB_OK;
    k_rmsnorm<<<(unsigned)x->shape[0], NB_ROW_THREADS, 0, nb_cuda_stream(ctx)>>>(
        (const float *)x->data, x->stride[0], NULL, 0, weight, eps, x->shape[1], (float *)out->data, out->stride[0], 0);
    NB_CUDA_LAUNCHED("rmsnorm");
    return NB_OK;
}

extern "C" nb_status nb_cuda_add_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *residual,
                                         const float *weight, float eps, nb_tensor *out)
{
    NB_TRY(same_rows("add_rmsnorm", x, "x", residual, "residual"));
    NB_TRY(same_rows("add_rmsnorm", x, "x", out, "out"));
    if (x->shape[0] == 0) return NB_OK;
    k_rmsnorm<<<(unsigned)x->shape[0], NB_ROW_THREADS, 0, nb_cuda_stream(ctx)>>>(
        (const float *)x->data, x->stride[0], (float *)residual->data, residual->stride[0], weight, eps, x->shape[1],
        (float *)out->data, out->stride[0], 1);
    NB_CUDA_LAUNCHED("add_rmsnorm");
    return NB_OK;
}

__global__ void k_layernorm(const float *x, int64_t ldx, const float *wt, const float *bias, float eps, int64_t d,
                            float *out, int64_t ldo)
{
    __shared__ double sh[NB_ROW_THREADS / 32];
    const float *xr = x + blockIdx.x * ldx;
    float *o = out + blockIdx.x * ldo;
    double s = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += xr[j];
    double mean = block_sum_d(s, sh) / (double)d;
    double v = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) v += ((double)xr[j] - mean) * ((double)xr[j] - mean);
    double inv = 1.0 / sqrt(block_sum_d(v, sh) / (double)d + (double)eps);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        float y = (float)(((double)xr[j] - mean) * inv);
        o[j] = y * wt[j] + (bias ? bias[j] : 0.0f);
    }
}

extern "C" nb_status nb_cuda_layernorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, const float *bias,
                                       float eps, nb_tensor *out)
{
    NB_TRY(same_rows("layernorm", x, "x", out, "out"));
    if (x->shape[0] == 0) return NB_OK;
    k_layernorm<<<(unsigned)x->shape[0], NB_ROW_THREADS, 0, nb_cuda_stream(ctx)>>>(
        (const float *)x->data, x->stride[0], weight, bias, eps, x->shape[1], (float *)out->data, out->stride[0]);
    NB_CUDA_LAUNCHED("layernorm");
    return NB_OK;
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

// One block per token; threads over (head, pair). The angle is float(pos) * inv_freq in
// float32 and cos/sin are taken in double, as the CPU op does.
__global__ void k_rope(float *x, int64_t s0, int64_t s1, int64_t heads, const int32_t *pos, nb_rope rope)
{
    const int half = rope.dim / 2;
    int64_t t = blockIdx.x;
    float p = (float)pos[t];
    for (int64_t w = threadIdx.x; w < heads * half; w += blockDim.x) {
        int64_t h = w / half;
        int i = (int)(w % half);
        float ang = p * rope.inv_freq[i];
        float c = (float)cos((double)ang) * rope.attention_scaling;
        float s = (float)sin((double)ang) * rope.attention_scaling;
        float *v = x + t * s0 + h * s1;
        int a = rope.interleave ? 2 * i : i;
        int b = rope.interleave ? 2 * i + 1 : i + half;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x1 * c + x0 * s;
    }
}

extern "C" nb_status nb_cuda_rope(nb_ops_ctx *ctx, nb_tensor *x, const int32_t *pos, const nb_rope *rope)
{
    NB_TRY(nb_cuda_check_f32("rope", "x", x, 3));
    if (x->shape[2] < rope->dim)
        return nb_error(NB_ERR_INVALID_ARG, "rope: head has %lld dims, fewer than the %d rotated",
                        (long long)x->shape[2], rope->dim);
    if (x->shape[0] == 0) return NB_OK;
    k_rope<<<(unsigned)x->shape[0], NB_ROW_THREADS, 0, nb_cuda_stream(ctx)>>>((float *)x->data, x->stride[0],
                                                                              x->stride[1], x->shape[1], pos, *rope);
    NB_CUDA_LAUNCHED("rope");
    return NB_OK;
}
