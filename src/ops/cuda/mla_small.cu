// MLA's absorption steps for small token counts (mla.h: nb_cuda_mla_small_in / _out), in
// place of the two batched cuBLASLt GEMMs and their BF16 hi/lo split and sum kernels:
//   q_lat[h][t][:]  = alpha * q_nope[t, h, :] . W_uk[h]       (W_uk[h]: [nope, r])
//   out[t, h, :]    = alpha * o_lat[h][t][:] . W_uv[h]^T      (W_uv[h]: [v, r])
// At 1..32 tokens these are matrix-vector products: the time is reading kv_b (29 MB BF16 on
// GLM-5) once, so every weight element is loaded once from HBM and used for all T tokens held
// in shared memory; activations stay float32 and sums are float32 (BF16 weights times F32
// activations, no hi/lo split). The token count is a template bucket (1, 2, 4, 8, 16, 32) so
// the per-token accumulators live in registers.
// The output step can also merge the attention kernel's KV splits itself (the per-split
// (m, l, sum) partials of k_mla_attend), which saves the merge launch (a win at a few tokens:
// each of its blocks re-reads its head's partials). With programmatic dependent launch (PDL,
// NIBBLE_CUDA_MLA_PDL=1) the attention kernel starts while the input step drains, and the
// output step starts while the attention runs: it prefetches its slice of W_uv into L2 and its
// first weights into registers, then waits (griddepcontrol.wait) for the attention's results.
// Measured slower on the H200 (51 vs 35 us per call at one token), hence off by default. The
// chained form (NIBBLE_CUDA_MLA_PDL=2, mla.h NB_CUDA_MLA_PDL_CHAIN: every step launched early,
// each doing before its wait only what no kernel of the step writes; the output step with its
// whole W_uv slice in registers, k_mla_small_out_pre) measured slower too (42 vs 29.5 us at one
// token, 48 vs 33 at two; NIBBLE_CUDA_MLA_PDL=3, the same kernels launched plainly: 34 and 39),
// so it is an A/B switch only (bench/RESULTS.md, fourth session).
// Where this path runs at all (by default 1 and 2 tokens) is in mla.h, with the measurements.
// Exercised by tests/cuda_ops/test_cuda_vs_cpu.c (mla*), timed by
// tests/cuda_ops/test_cuda_vs_cpu_mla_timing.c (NIBBLE_CUDA_MLA_SMALL=0 for the GEMM path).
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/mla.h"
#include "ops/cuda/pdl.cuh"

#define MS_IN_COLS 64   /* q_lat columns per block of the input step: 2 per lane */
#define MS_IN_WARPS 4   /* each over a quarter of the nope rows, summed at the end */
#define MS_IN_GROUP 24  /* weight rows loaded ahead per warp (GLM-5: two groups per warp) */
#define MS_OUT_ROWS 64  /* output rows per block of the output step: rows lane and lane + 32 */
#define MS_OUT_WARPS 8  /* each over an eighth of the rank, summed at the end */

// Weight loads kept raw until used, so the next group's loads stay in flight while the
// current group is multiplied: 2 consecutive elements (input step), 8 (output step).
typedef struct ms_f8 {
    float4 a, b;
} ms_f8;

__device__ __forceinline__ uint32_t ms_ld2(const uint16_t *p) { return __ldg((const unsigned int *)p); }
__device__ __forceinline__ float2 ms_ld2(const float *p) { return __ldg((const float2 *)p); }
__device__ __forceinline__ float2 ms_cv2(uint32_t u)
{
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
__device__ __forceinline__ float2 ms_cv2(float2 v) { return v; }
__device__ __forceinline__ void ms_zero(uint32_t &u) { u = 0; }
__device__ __forceinline__ void ms_zero(float2 &v) { v = make_float2(0.0f, 0.0f); }

__device__ __forceinline__ uint4 ms_ld8(const uint16_t *p) { return __ldg((const uint4 *)p); }
__device__ __forceinline__ ms_f8 ms_ld8(const float *p)
{
    ms_f8 v;
    v.a = __ldg((const float4 *)p);
    v.b = __ldg((const float4 *)p + 1);
    return v;
}
__device__ __forceinline__ void ms_cv8(uint4 u, float *f)
{
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void ms_cv8(const ms_f8 &v, float *f)
{
    f[0] = v.a.x, f[1] = v.a.y, f[2] = v.a.z, f[3] = v.a.w;
    f[4] = v.b.x, f[5] = v.b.y, f[6] = v.b.z, f[7] = v.b.w;
}
__device__ __forceinline__ void ms_zero(uint4 &u) { u = make_uint4(0, 0, 0, 0); }
__device__ __forceinline__ void ms_zero(ms_f8 &v) { v.a = v.b = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

// PDL (sm_90): wait for the preceding grid's completion and memory; let the next grid launch.
__device__ __forceinline__ void ms_grid_wait(void) { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void ms_grid_launch(void) { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

template <typename WT> struct ms_raw;
template <> struct ms_raw<uint16_t> {
    typedef uint32_t two;
    typedef uint4 eight;
};
template <> struct ms_raw<float> {
    typedef float2 two;
    typedef ms_f8 eight;
};

typedef struct ms_in_args {
    const float *q; /* [T, H, nope + rope]: q_nope read from here */
    int64_t qs0, qs1;
    const void *w; /* kv_b form [H * (nope + v), r] */
    float alpha;
    int T, nope, hs, r;
    int np; /* nope rounded up to MS_IN_WARPS * MS_IN_GROUP: rows of q in shared memory */
    float *qlat; /* [H][T][r] */
} ms_in_args;

// Block (head blockIdx.x, columns [64 * blockIdx.y, + 64)); lane: 2 columns; warp w: rows
// [w * np / 4, (w + 1) * np / 4) of W_uk[h], then the four warps' sums are added.
template <typename WT, int TM>
__global__ void __launch_bounds__(MS_IN_WARPS * 32) k_mla_small_in(ms_in_args a)
{
    typedef typename ms_raw<WT>::two raw;
    extern __shared__ float4 ms_sh[];
    float *qs = (float *)ms_sh; /* [T][np], zero past nope; then the warps' partial sums */
    const int h = blockIdx.x, tid = threadIdx.x, w = tid >> 5, lane = tid & 31, T = a.T, np = a.np;
    const int c = blockIdx.y * MS_IN_COLS + 2 * lane;
    const bool has_col = c < a.r;
    ms_grid_launch(); /* the attention kernel may be scheduled; it waits for this grid */
    const WT *wh = (const WT *)a.w + (int64_t)h * a.hs * a.r + c;
    const int rw = np / MS_IN_WARPS, i0 = w * rw, i1 = i0 + rw;
    float acc[TM][2];
#pragma unroll
    for (int t = 0; t < TM; t++) acc[t][0] = acc[t][1] = 0.0f;
    raw nx[MS_IN_GROUP];
#pragma unroll
    for (int k = 0; k < MS_IN_GROUP; k++) {
        if (has_col && i0 + k < a.nope) nx[k] = ms_ld2(wh + (int64_t)(i0 + k) * a.r);
        else ms_zero(nx[k]);
    }
    /* a programmatic dependent (NB_CUDA_MLA_PDL_CHAIN): the weights above are static, q is the
     * preceding kernels'; a no-op on a plain launch */
    ms_grid_wait();
    for (int e = tid; e < T * np; e += MS_IN_WARPS * 32) {
        const int t = e / np, i = e - t * np;
        qs[e] = i < a.nope ? a.q[(int64_t)t * a.qs0 + (int64_t)h * a.qs1 + i] : 0.0f;
    }
    __syncthreads();
    for (int i = i0; i < i1; i += MS_IN_GROUP) {
        raw cu[MS_IN_GROUP];
#pragma unroll
        for (int k = 0; k < MS_IN_GROUP; k++) cu[k] = nx[k];
        if (i + MS_IN_GROUP < i1) {
#pragma unroll
            for (int k = 0; k < MS_IN_GROUP; k++) {
                const int row = i + MS_IN_GROUP + k;
                if (has_col && row < a.nope) nx[k] = ms_ld2(wh + (int64_t)row * a.r);
                else ms_zero(nx[k]);
            }
        }
#pragma unroll
        for (int k4 = 0; k4 < MS_IN_GROUP / 4; k4++) {
            const float2 w0 = ms_cv2(cu[4 * k4]), w1 = ms_cv2(cu[4 * k4 + 1]), w2 = ms_cv2(cu[4 * k4 + 2]),
                         w3 = ms_cv2(cu[4 * k4 + 3]);
#pragma unroll
            for (int t = 0; t < TM; t++) {
                if (t < T) {
                    const float4 qv = *(const float4 *)(qs + t * np + i + 4 * k4);
                    acc[t][0] = fmaf(qv.w, w3.x, fmaf(qv.z, w2.x, fmaf(qv.y, w1.x, fmaf(qv.x, w0.x, acc[t][0]))));
                    acc[t][1] = fmaf(qv.w, w3.y, fmaf(qv.z, w2.y, fmaf(qv.y, w1.y, fmaf(qv.x, w0.y, acc[t][1]))));
                }
            }
        }
    }
    __syncthreads(); /* q is consumed: the buffer takes the partial sums [warp][t][64] */
#pragma unroll
    for (int t = 0; t < TM; t++)
        if (t < T) *(float2 *)(qs + (w * T + t) * MS_IN_COLS + 2 * lane) = make_float2(acc[t][0], acc[t][1]);
    __syncthreads();
    for (int e = tid; e < T * (MS_IN_COLS / 2); e += MS_IN_WARPS * 32) {
        const int t = e / (MS_IN_COLS / 2), cc = 2 * (e - t * (MS_IN_COLS / 2)), col = blockIdx.y * MS_IN_COLS + cc;
        if (col >= a.r) continue;
        float2 s = make_float2(0.0f, 0.0f);
#pragma unroll
        for (int j = 0; j < MS_IN_WARPS; j++) {
            const float2 p = *(const float2 *)(qs + (j * T + t) * MS_IN_COLS + cc);
            s.x += p.x, s.y += p.y;
        }
        *(float2 *)(a.qlat + ((int64_t)h * T + t) * a.r + col) = make_float2(a.alpha * s.x, a.alpha * s.y);
    }
}

typedef struct ms_out_args {
    const float *olat; /* [H][T][r] normalized, or NULL: merge `part` */
    const float *part; /* [T][H][S][2 + r]: (m, l, unnormalized sum) per KV split */
    int S;
    const void *w; /* kv_b form [H * (nope + v), r] */
    float alpha;
    int T, H, nope, v, hs, r;
    int cp; /* rank columns per warp, a multiple of 8 */
    float *out;
    int64_t os0, os1;
    int pdl; /* NB_CUDA_MLA_PDL_START: prefetch W_uv into L2 before the wait */
} ms_out_args;

// o_lat of head blockIdx.x for all T tokens into os [T][r]: copied, or merged from the KV
// split partials (es [T][S], inv [T]: scratch in shared memory). Ends with a barrier.
__device__ __forceinline__ void ms_gather_olat(const ms_out_args &a, float *os, float *es, float *inv)
{
    const int T = a.T, r = a.r, S = a.S, h = blockIdx.x, tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int NT = MS_OUT_WARPS * 32;
    if (!a.part) {
        const float *src = a.olat + (int64_t)h * T * r;
        for (int e = tid; e < T * r; e += NT) os[e] = src[e];
    } else {
        const int64_t st = 2 + r;
        for (int t = w; t < T; t += MS_OUT_WARPS) {
            const float *base = a.part + ((int64_t)t * a.H + h) * S * st;
            float M = -INFINITY;
            for (int s = lane; s < S; s += 32) M = fmaxf(M, base[s * st]);
            M = nb_d_warp_max(M);
            float L = 0.0f;
            for (int s = lane; s < S; s += 32) {
                const float ms = base[s * st], e = ms > -INFINITY ? expf(ms - M) : 0.0f;
                es[t * S + s] = e;
                if (e != 0.0f) L += base[s * st + 1] * e;
            }
            L = nb_d_warp_sum(L);
            if (lane == 0) inv[t] = L > 0 ? 1.0f / L : 0.0f;
        }
        __syncthreads();
        for (int e = tid; e < T * r; e += NT) {
            const int t = e / r, c = e - t * r;
            const float *base = a.part + ((int64_t)t * a.H + h) * S * st + 2 + c;
            const float *et = es + t * S;
            float v = 0.0f;
#pragma unroll 4
            for (int s = 0; s < S; s++)
                if (et[s] != 0.0f) v += base[s * st] * et[s]; /* empty splits' sums are never written */
            os[e] = v * inv[t];
        }
    }
    __syncthreads();
}

// Block (head blockIdx.x, output rows [64 * blockIdx.y, + 64)); lane: rows lane and lane + 32
// of the slice; warp w: rank columns [w * cp, (w + 1) * cp), then the eight warps' sums are
// added. o_lat of the head (all T tokens) is first put in shared memory, merged from the KV
// split partials when the attention was split.
template <typename WT, int TM>
__global__ void __launch_bounds__(MS_OUT_WARPS * 32) k_mla_small_out(ms_out_args a)
{
    typedef typename ms_raw<WT>::eight raw;
    extern __shared__ float4 ms_sh[];
    const int T = a.T, r = a.r, S = a.S;
    float *os = (float *)ms_sh; /* [T][r], then the warps' partial sums [warp][t][64] */
    const int osz = max(T * r, MS_OUT_WARPS * T * MS_OUT_ROWS);
    float *es = os + osz, *inv = es + T * S; /* [T][S] split weights exp(m_s - M), [T] 1 / L */
    const int h = blockIdx.x, tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int NT = MS_OUT_WARPS * 32;
    const int jb = blockIdx.y * MS_OUT_ROWS, ja = jb + lane, jc = ja + 32;
    const int c0 = w * a.cp, c1 = min(r, c0 + a.cp);
    const WT *wa = (const WT *)a.w + ((int64_t)h * a.hs + a.nope + min(ja, a.v - 1)) * r;
    const WT *wc = (const WT *)a.w + ((int64_t)h * a.hs + a.nope + min(jc, a.v - 1)) * r;
    // the first weights in flight while o_lat is gathered
    raw na[2], nc[2];
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int c = c0 + 8 * k;
        if (c < c1) na[k] = ms_ld8(wa + c), nc[k] = ms_ld8(wc + c);
        else ms_zero(na[k]), ms_zero(nc[k]);
    }
    if (a.pdl == NB_CUDA_MLA_PDL_START) {
        /* the block's W_uv rows are contiguous: into L2 in 4 KB pieces while the attention runs */
        const int rows = min(MS_OUT_ROWS, a.v - jb);
        const char *src = (const char *)a.w + ((int64_t)h * a.hs + a.nope + jb) * r * (int64_t)sizeof(WT);
        const int64_t bytes = (int64_t)rows * r * (int64_t)sizeof(WT);
        for (int64_t off = (int64_t)tid * 4096; off < bytes; off += (int64_t)NT * 4096) {
            const unsigned n = (unsigned)min((int64_t)4096, bytes - off);
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src + off), "r"(n) : "memory");
        }
    }
    ms_grid_wait(); /* o_lat / the partials are the preceding grid's (no-op on a plain launch) */
    ms_gather_olat(a, os, es, inv);
    float acc[TM][2];
#pragma unroll
    for (int t = 0; t < TM; t++) acc[t][0] = acc[t][1] = 0.0f;
    for (int c = c0; c < c1; c += 16) {
        raw ca[2] = {na[0], na[1]}, cc[2] = {nc[0], nc[1]};
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int cn = c + 16 + 8 * k;
            if (cn < c1) na[k] = ms_ld8(wa + cn), nc[k] = ms_ld8(wc + cn);
            else ms_zero(na[k]), ms_zero(nc[k]);
        }
#pragma unroll
        for (int k = 0; k < 2; k++) {
            if (c + 8 * k >= c1) break;
            float fa[8], fc[8];
            ms_cv8(ca[k], fa);
            ms_cv8(cc[k], fc);
#pragma unroll
            for (int t = 0; t < TM; t++) {
                if (t < T) {
                    const float4 o0 = *(const float4 *)(os + t * r + c + 8 * k);
                    const float4 o1 = *(const float4 *)(os + t * r + c + 8 * k + 4);
                    const float ov[8] = {o0.x, o0.y, o0.z, o0.w, o1.x, o1.y, o1.z, o1.w};
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        acc[t][0] = fmaf(ov[i], fa[i], acc[t][0]);
                        acc[t][1] = fmaf(ov[i], fc[i], acc[t][1]);
                    }
                }
            }
        }
    }
    __syncthreads(); /* o_lat is consumed: the buffer takes the partial sums */
#pragma unroll
    for (int t = 0; t < TM; t++)
        if (t < T) {
            os[(w * T + t) * MS_OUT_ROWS + lane] = acc[t][0];
            os[(w * T + t) * MS_OUT_ROWS + 32 + lane] = acc[t][1];
        }
    __syncthreads();
    for (int e = tid; e < T * MS_OUT_ROWS; e += NT) {
        const int t = e / MS_OUT_ROWS, jj = e - t * MS_OUT_ROWS, j = jb + jj;
        if (j >= a.v) continue;
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < MS_OUT_WARPS; k++) s += os[(k * T + t) * MS_OUT_ROWS + jj];
        a.out[(int64_t)t * a.os0 + (int64_t)h * a.os1 + j] = a.alpha * s;
    }
}

// The same step with the thread's whole W_uv slice (two rows x cp <= MS_PRE_COLS BF16
// columns: 64 registers at GLM-5's rank 512) loaded before the wait (NB_CUDA_MLA_PDL_CHAIN,
// _EARLY): launched as a programmatic dependent, the weights stream while the attention runs.
// Same products in the same order as k_mla_small_out (bitwise the same result).
#define MS_PRE_COLS 64
template <int TM>
__global__ void __launch_bounds__(MS_OUT_WARPS * 32) k_mla_small_out_pre(ms_out_args a)
{
    extern __shared__ float4 ms_sh[];
    const int T = a.T, r = a.r, S = a.S;
    float *os = (float *)ms_sh;
    const int osz = max(T * r, MS_OUT_WARPS * T * MS_OUT_ROWS);
    float *es = os + osz, *inv = es + T * S;
    const int h = blockIdx.x, tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int NT = MS_OUT_WARPS * 32;
    const int jb = blockIdx.y * MS_OUT_ROWS, ja = jb + lane, jc = ja + 32;
    const int c0 = w * a.cp, c1 = min(r, c0 + a.cp);
    const uint16_t *wa = (const uint16_t *)a.w + ((int64_t)h * a.hs + a.nope + min(ja, a.v - 1)) * r;
    const uint16_t *wc = (const uint16_t *)a.w + ((int64_t)h * a.hs + a.nope + min(jc, a.v - 1)) * r;
    uint4 ra[MS_PRE_COLS / 8], rc[MS_PRE_COLS / 8];
#pragma unroll
    for (int k = 0; k < MS_PRE_COLS / 8; k++) {
        const int c = c0 + 8 * k;
        if (c < c1) ra[k] = ms_ld8(wa + c), rc[k] = ms_ld8(wc + c);
        else ms_zero(ra[k]), ms_zero(rc[k]);
    }
    ms_grid_wait();
    ms_gather_olat(a, os, es, inv);
    float acc[TM][2];
#pragma unroll
    for (int t = 0; t < TM; t++) acc[t][0] = acc[t][1] = 0.0f;
#pragma unroll
    for (int k = 0; k < MS_PRE_COLS / 8; k++) {
        const int c = c0 + 8 * k;
        if (c >= c1) break;
        float fa[8], fc[8];
        ms_cv8(ra[k], fa);
        ms_cv8(rc[k], fc);
#pragma unroll
        for (int t = 0; t < TM; t++) {
            if (t < T) {
                const float4 o0 = *(const float4 *)(os + t * r + c);
                const float4 o1 = *(const float4 *)(os + t * r + c + 4);
                const float ov[8] = {o0.x, o0.y, o0.z, o0.w, o1.x, o1.y, o1.z, o1.w};
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    acc[t][0] = fmaf(ov[i], fa[i], acc[t][0]);
                    acc[t][1] = fmaf(ov[i], fc[i], acc[t][1]);
                }
            }
        }
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < TM; t++)
        if (t < T) {
            os[(w * T + t) * MS_OUT_ROWS + lane] = acc[t][0];
            os[(w * T + t) * MS_OUT_ROWS + 32 + lane] = acc[t][1];
        }
    __syncthreads();
    for (int e = tid; e < T * MS_OUT_ROWS; e += NT) {
        const int t = e / MS_OUT_ROWS, jj = e - t * MS_OUT_ROWS, j = jb + jj;
        if (j >= a.v) continue;
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < MS_OUT_WARPS; k++) s += os[(k * T + t) * MS_OUT_ROWS + jj];
        a.out[(int64_t)t * a.os0 + (int64_t)h * a.os1 + j] = a.alpha * s;
    }
}

// ---- host side -------------------------------------------------------------------------

/* nb_cuda_mla_force_small; -1: the environment */
static int g_small = -1, g_merge = -1, g_pdl = -1;

extern "C" void nb_cuda_mla_force_small(int max_tokens, int merge, int pdl)
{
    g_small = max_tokens < 0 ? -1 : max_tokens > NB_CUDA_MLA_SMALL_MAX ? NB_CUDA_MLA_SMALL_MAX : max_tokens;
    g_merge = merge == NB_CUDA_MLA_MERGE_FOLD || merge == NB_CUDA_MLA_MERGE_KERNEL ? merge : -1;
    g_pdl = pdl >= NB_CUDA_MLA_PDL_OFF && pdl <= NB_CUDA_MLA_PDL_EARLY ? pdl : -1;
}

static int g_stages; /* nb_cuda_mla_force_stages; 0: all */

extern "C" void nb_cuda_mla_force_stages(int mask) { g_stages = mask > 0 && mask < 15 ? mask : 0; }
extern "C" int nb_cuda_mla_stages(void) { return g_stages ? g_stages : 15; }

// The settings (mla.h): forced, else NIBBLE_CUDA_MLA_SMALL (unset: NB_CUDA_MLA_SMALL_DEFAULT;
// N: up to N tokens, 0: never), NIBBLE_CUDA_MLA_MERGE (fold | kernel; unset: by token count),
// NIBBLE_CUDA_MLA_PDL (0..3: NB_CUDA_MLA_PDL_*, mla.h; unset: plain).
static void small_setting(int *max_tokens, int *merge, int *pdl)
{
    const char *e = getenv("NIBBLE_CUDA_MLA_SMALL");
    int n = e && *e ? atoi(e) : NB_CUDA_MLA_SMALL_DEFAULT;
    *max_tokens = g_small >= 0 ? g_small : n < 0 ? 0 : n > NB_CUDA_MLA_SMALL_MAX ? NB_CUDA_MLA_SMALL_MAX : n;
    e = getenv("NIBBLE_CUDA_MLA_MERGE");
    *merge = g_merge >= 0 ? g_merge
             : e && !strcmp(e, "fold")   ? NB_CUDA_MLA_MERGE_FOLD
             : e && !strcmp(e, "kernel") ? NB_CUDA_MLA_MERGE_KERNEL
                                         : -1;
    e = getenv("NIBBLE_CUDA_MLA_PDL");
    const int ep = e && e[0] >= '0' && e[0] <= '3' && !e[1] ? e[0] - '0' : NB_CUDA_MLA_PDL_OFF;
    *pdl = g_pdl >= 0 ? g_pdl : ep;
}

static int in_np(int nope)
{
    const int q = MS_IN_WARPS * MS_IN_GROUP;
    return (nope + q - 1) / q * q;
}

static size_t in_smem(int T, int nope)
{
    const size_t a = (size_t)T * in_np(nope), b = (size_t)MS_IN_WARPS * T * MS_IN_COLS;
    return (a > b ? a : b) * 4;
}

static size_t out_smem(int T, int r, int S)
{
    const size_t a = (size_t)T * r, b = (size_t)MS_OUT_WARPS * T * MS_OUT_ROWS;
    return ((a > b ? a : b) + (size_t)T * S + T) * 4;
}

extern "C" int nb_cuda_mla_uses_small(const nb_mla_dims *d, const void *w, int n_tokens, int *merge, int *pdl)
{
    int max_tokens, mg, pd;
    small_setting(&max_tokens, &mg, &pd);
    /* automatic: folded while every output block re-reading its head's partials costs less
     * than a launch (measured: ahead at 1 and 2 tokens, behind at 10) */
    if (mg < 0) mg = n_tokens <= NB_CUDA_MLA_FOLD_MAX ? NB_CUDA_MLA_MERGE_FOLD : NB_CUDA_MLA_MERGE_KERNEL;
    if (merge) *merge = mg;
    if (pdl) *pdl = pd;
    /* 8-element (16-byte BF16) weight loads along the rank; q and out sizes in shared memory
     * within the default 48 KB (input) and the opt-in maximum (output, checked at launch) */
    return n_tokens >= 1 && n_tokens <= max_tokens && d->kv_lora_rank % 8 == 0 && (uintptr_t)w % 16 == 0 &&
           in_smem(n_tokens, d->qk_nope) <= 48 * 1024 && out_smem(n_tokens, d->kv_lora_rank, 64) <= 200 * 1024;
}

static int bucket(int T) { return T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : T <= 8 ? 8 : T <= 16 ? 16 : 32; }

template <typename WT, int TM>
static cudaError_t in_launch(dim3 grid, size_t smem, cudaStream_t st, int pdl, const ms_in_args &a)
{
    void *args[] = {(void *)&a};
    return nb_pdl_launch_if((const void *)k_mla_small_in<WT, TM>, grid, dim3(MS_IN_WARPS * 32), smem, st, args, pdl);
}

#define MS_IN_LAUNCH(WT)                                                                  \
    switch (bucket(a.T)) {                                                                \
    case 1: le = in_launch<WT, 1>(grid, smem, st, pdl, a); break;                         \
    case 2: le = in_launch<WT, 2>(grid, smem, st, pdl, a); break;                         \
    case 4: le = in_launch<WT, 4>(grid, smem, st, pdl, a); break;                         \
    case 8: le = in_launch<WT, 8>(grid, smem, st, pdl, a); break;                         \
    case 16: le = in_launch<WT, 16>(grid, smem, st, pdl, a); break;                       \
    default: le = in_launch<WT, 32>(grid, smem, st, pdl, a); break;                       \
    }

extern "C" nb_status nb_cuda_mla_small_in(nb_ops_ctx *ctx, const nb_mla_dims *d, const nb_cuda_mla_w *W,
                                          const nb_tensor *q, float *qlat)
{
    return nb_cuda_mla_small_in_pdl(ctx, d, W, q, qlat, NB_CUDA_MLA_PDL_OFF);
}

extern "C" nb_status nb_cuda_mla_small_in_pdl(nb_ops_ctx *ctx, const nb_mla_dims *d, const nb_cuda_mla_w *W,
                                              const nb_tensor *q, float *qlat, int pdl_mode)
{
    ms_in_args a;
    a.q = (const float *)q->data;
    a.qs0 = q->stride[0], a.qs1 = q->stride[1];
    a.w = W->w;
    a.alpha = W->alpha;
    a.T = (int)q->shape[0], a.nope = d->qk_nope, a.hs = d->qk_nope + d->v_dim, a.r = d->kv_lora_rank;
    a.np = in_np(d->qk_nope);
    a.qlat = qlat;
    if (a.T < 1 || a.T > NB_CUDA_MLA_SMALL_MAX)
        return nb_error(NB_ERR_INTERNAL, "mla small: %d tokens (1..%d)", a.T, NB_CUDA_MLA_SMALL_MAX);
    const dim3 grid((unsigned)d->n_heads, (unsigned)((a.r + MS_IN_COLS - 1) / MS_IN_COLS));
    const size_t smem = in_smem(a.T, a.nope);
    cudaStream_t st = nb_cuda_stream(ctx);
    /* only the chained mode launches the input step early: its wait is its only guard */
    const int pdl = pdl_mode == NB_CUDA_MLA_PDL_CHAIN;
    cudaError_t le;
    if (W->bf16) {
        MS_IN_LAUNCH(uint16_t);
    } else {
        MS_IN_LAUNCH(float);
    }
    if (le != cudaSuccess) {
        cudaGetLastError();
        return nb_error(NB_ERR_CUDA, "mla_attention small in: launch failed: %s", cudaGetErrorString(le));
    }
    NB_CUDA_LAUNCHED("mla_attention small in");
    return NB_OK;
}

// The output kernel for a weight form, preload variant and token bucket.
static const void *out_kernel(int bf16, int pre, int T, int *index)
{
    static const void *const fns[3][6] = {
        {(const void *)k_mla_small_out<float, 1>, (const void *)k_mla_small_out<float, 2>,
         (const void *)k_mla_small_out<float, 4>, (const void *)k_mla_small_out<float, 8>,
         (const void *)k_mla_small_out<float, 16>, (const void *)k_mla_small_out<float, 32>},
        {(const void *)k_mla_small_out<uint16_t, 1>, (const void *)k_mla_small_out<uint16_t, 2>,
         (const void *)k_mla_small_out<uint16_t, 4>, (const void *)k_mla_small_out<uint16_t, 8>,
         (const void *)k_mla_small_out<uint16_t, 16>, (const void *)k_mla_small_out<uint16_t, 32>},
        {(const void *)k_mla_small_out_pre<1>, (const void *)k_mla_small_out_pre<2>,
         (const void *)k_mla_small_out_pre<4>, (const void *)k_mla_small_out_pre<8>,
         (const void *)k_mla_small_out_pre<16>, (const void *)k_mla_small_out_pre<32>}};
    const int b = bucket(T), i = b == 1 ? 0 : b == 2 ? 1 : b == 4 ? 2 : b == 8 ? 3 : b == 16 ? 4 : 5;
    const int f = pre ? 2 : bf16 ? 1 : 0;
    *index = f * 6 + i;
    return fns[f][i];
}

extern "C" nb_status nb_cuda_mla_small_out(nb_ops_ctx *ctx, const nb_mla_dims *d, const nb_cuda_mla_w *W,
                                           const float *olat, const float *part, int splits, int pdl, nb_tensor *out)
{
    nb_cuda_state *cs = nb_cuda_st(ctx);
    ms_out_args a;
    a.olat = olat;
    a.part = splits > 1 ? part : NULL;
    a.S = splits > 1 ? splits : 1;
    a.w = W->w;
    a.alpha = W->alpha;
    a.T = (int)out->shape[0], a.H = d->n_heads, a.nope = d->qk_nope, a.v = d->v_dim;
    a.hs = d->qk_nope + d->v_dim, a.r = d->kv_lora_rank;
    a.cp = (a.r / 8 + MS_OUT_WARPS - 1) / MS_OUT_WARPS * 8;
    a.out = (float *)out->data;
    a.os0 = out->stride[0], a.os1 = out->stride[1];
    a.pdl = pdl;
    if (a.T < 1 || a.T > NB_CUDA_MLA_SMALL_MAX || a.r % 8)
        return nb_error(NB_ERR_INTERNAL, "mla small: %d tokens (1..%d), rank %d", a.T, NB_CUDA_MLA_SMALL_MAX, a.r);
    const size_t smem = out_smem(a.T, a.r, a.S);
    int max_smem = 0;
    cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, cs->device);
    if (smem > (size_t)max_smem)
        return nb_error(NB_ERR_UNSUPPORTED, "mla small: %zu bytes of shared memory for %d tokens, rank %d (%d)", smem,
                        a.T, a.r, max_smem);
    const dim3 grid((unsigned)a.H, (unsigned)((a.v + MS_OUT_ROWS - 1) / MS_OUT_ROWS));
    cudaStream_t st = nb_cuda_stream(ctx);
    /* the chained / early modes hold the thread's W_uv slice in registers (BF16, cp <= 64) */
    const int pre = (pdl == NB_CUDA_MLA_PDL_CHAIN || pdl == NB_CUDA_MLA_PDL_EARLY) && W->bf16 && a.cp <= MS_PRE_COLS;
    int fi = 0;
    const void *fn = out_kernel(W->bf16, pre, a.T, &fi);
    static int attr_done[18]; /* the opt-in shared memory attribute, once per kernel and device */
    if (attr_done[fi] != cs->device + 1) {
        NB_CUDA_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
        attr_done[fi] = cs->device + 1;
    }
    void *args[] = {&a};
    const cudaError_t le = nb_pdl_launch_if((const void *)fn, grid, dim3(MS_OUT_WARPS * 32), smem, st, args,
                                            pdl == NB_CUDA_MLA_PDL_START || pdl == NB_CUDA_MLA_PDL_CHAIN);
    if (le != cudaSuccess) {
        cudaGetLastError();
        return nb_error(NB_ERR_CUDA, "mla_attention small out: launch failed: %s", cudaGetErrorString(le));
    }
    NB_CUDA_LAUNCHED("mla_attention small out");
    return NB_OK;
}
