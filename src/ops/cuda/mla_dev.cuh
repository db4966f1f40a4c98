// Device-side pieces shared by the MLA attention kernels (mla.cu: the float32 kernel, the
// 32-head tensor-core kernel, the split merge; mla_decode.cu: the 64-head pipelined decode
// kernel): the kernels' argument block, the attended-row lookup, the output store, and the
// BF16 mma.sync / ldmatrix wrappers. CUDA only; the C-facing plan is mla.h.
#ifndef NB_OPS_CUDA_MLA_DEV_CUH
#define NB_OPS_CUDA_MLA_DEV_CUH

#include "ops/cuda/common.cuh"
#include "ops/cuda/mla.h"

typedef struct mla_args {
    const float *q; /* [T, H, nope + rope]: q_pe read from here */
    int64_t qs0, qs1;
    const float *qlat; /* [H][two * T][r]: row t (+ row T + t when two) */
    const uint16_t *qlat16; /* or (the wg kernel, one term) BF16 [H][T][r + rope]: q_lat, then q_pe (mla.h) */
    int two;
    const float *lat, *kpe; /* F32 pools (ops.h), or NULL when the pools are BF16: */
    const uint16_t *lat16, *kpe16; /* BF16 pools (--kv-cache-dtype bf16), else NULL */
    int64_t ls0, ps0, pool_rows;   /* row strides in elements of the pools' dtype */
    nb_attn_index idx;
    const int32_t *sel_pos, *sel_count;
    int sel_stride;
    float scale;
    int T, H, r, rope, nope, Dp;
    int vec; /* pool rows 16-byte aligned (BF16: and rank, rope multiples of 8): chunk rows
              * copied in 16-byte pieces that never straddle latent and k_pe */
    float *part;     /* splits > 1: [T][H][S][2 + r] (m, l, unnormalized sum) */
    float *o32;      /* F32 output [H][T][r] */
    uint16_t *ob;    /* or BF16 hi/lo output [H][2T][r] */
    int ob1;         /* ob holds the hi term only: [H][T][r] (mla.h NIBBLE_CUDA_MLA_TERMS=1) */
    int wgst;        /* the wg kernel's BF16 q form: outputs staged in shared memory (mla.h) */
    int l2pf;        /* the wg / dec kernel prefetches its next chunks' rows into L2 (mla.h) */
} mla_args;

// Attended entries of token i: its causal length, or its clamped selection count.
__device__ __forceinline__ int mla_count(const mla_args &a, int i)
{
    if (!a.sel_pos) return a.idx.pos[i] + 1;
    int n = a.sel_count[i];
    return n < 0 ? 0 : n > a.sel_stride ? a.sel_stride : n;
}

// Attended entry j of token i -> pool row, or -1 (outside the causal range or the pool).
__device__ __forceinline__ int64_t mla_row(const mla_args &a, int i, int j, int pos)
{
    int p = a.sel_pos ? a.sel_pos[(int64_t)i * a.sel_stride + j] : j;
    if (p < 0 || p > pos) return -1;
    int64_t row = a.idx.slot_table[a.idx.slot_base[i] + p];
    return row >= 0 && row < a.pool_rows ? row : -1;
}

// Element c of row `row`'s [latent | k_pe] in a BF16 pool (a.lat16 / a.kpe16).
__device__ __forceinline__ const uint16_t *mla_row16(const mla_args &a, int64_t row, int c)
{
    return c < a.r ? a.lat16 + row * a.ls0 + c : a.kpe16 + row * a.ps0 + (c - a.r);
}

// Output column c of head h, token t: F32, or the BF16 hi/lo pair the second GEMM reads.
__device__ __forceinline__ void mla_put(const mla_args &a, int h, int t, int c, float v)
{
    if (a.ob) {
        uint16_t hi = nb_d_to_bf16(v);
        if (a.ob1) {
            a.ob[((int64_t)h * a.T + t) * a.r + c] = hi;
            return;
        }
        uint16_t lo = nb_d_to_bf16(v - nb_d_bf16(hi));
        a.ob[((int64_t)h * 2 * a.T + t) * a.r + c] = hi;
        a.ob[((int64_t)h * 2 * a.T + a.T + t) * a.r + c] = lo;
    } else {
        a.o32[((int64_t)h * a.T + t) * a.r + c] = v;
    }
}

// Two floats -> one register of two BF16 (lo in the low half), round to nearest.
__device__ __forceinline__ uint32_t mma_pack(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// c += a . b on m16n8k16, BF16 inputs, F32 accumulators.
__device__ __forceinline__ void mma_16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *p)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* The 64-head decode kernel (mla_decode.cu). Heads per block: */
#define MLA_DEC_G 64

// Shared memory of the decode kernel for these dims, or 0 when it does not take them (rank
// not a multiple of 32 or above 512, rope not a multiple of 4, or more than max_smem bytes).
extern "C" size_t nb_cuda_mla_dec_smem(int r, int rope, int max_smem);
// Launch it over grid (T * ceil(H / 64), S) on the stream; the caller merges splits (S > 1)
// with the common merge kernel. max_smem: the device's opt-in limit (attribute set once).
extern "C" nb_status nb_cuda_mla_dec_launch(const mla_args *a, int groups, int S, int device, int max_smem,
                                            cudaStream_t stream);

/* The wgmma decode kernel (mla_wg.cu, sm_90a): 1 when it takes these dims on a device of this
 * compute capability major and opt-in shared memory (rank 512, rope 64, Hopper). */
extern "C" int nb_cuda_mla_wg_ok(int r, int rope, int cc_major, int max_smem);
// Launch it over the T * ceil(H / 64) * S (token, head group, split) items (a persistent grid
// or a block per item, mla.h nb_cuda_mla_wg_force_persist); F32 (a->lat) or BF16 (a->lat16)
// pool rows, which must be 16-byte aligned (a->vec), else NB_ERR_UNSUPPORTED. The caller merges splits (S > 1) with the merge kernel.
extern "C" nb_status nb_cuda_mla_wg_launch(const mla_args *a, int groups, int S, int device, cudaStream_t stream);

// One online-softmax step of a row held by a lane quad (8 of its scaled scores per lane): the
// scores become exp(s - new max) (0 for -inf), the row's max m and sum l are updated, and the
// factor that rescales the row's earlier accumulators is returned.
__device__ __forceinline__ float mla_softmax8(float *sv, float &m, float &l)
{
    float mx = sv[0];
#pragma unroll
    for (int i = 1; i < 8; i++) mx = fmaxf(mx, sv[i]);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(m, mx);
    const float cr = m == -INFINITY ? 0.0f : expf(m - mn);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        sv[i] = sv[i] == -INFINITY ? 0.0f : expf(sv[i] - mn);
        sum += sv[i];
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    l = l * cr + sum;
    m = mn;
    return cr;
}

// Waits until the mbarrier's phase of the given parity has completed (sm_90; the decode
// kernels' copy rings).
__device__ __forceinline__ void mla_mwait(uint64_t *bar, int parity)
{
    unsigned b = (unsigned)__cvta_generic_to_shared(bar), done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(b), "r"(parity)
                     : "memory");
}

#endif
