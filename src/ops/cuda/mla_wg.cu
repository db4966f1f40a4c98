// MLA decode attention on Hopper's warpgroup MMA (sm_90a): the attention step of
// nb_cuda_mla_attention (mla.h NB_CUDA_MLA_WG) for many tokens, GLM-5 / DeepSeek-V3 shapes
// (kv_lora_rank 512, rope 64), in place of the mma.sync decode kernel (mla_decode.cu).
//
// One block of three warpgroups per (token, group of 64 heads, KV split), one block per SM:
//   warpgroup 0 (producer, few registers): reads each chunk of 64 attended float32 rows
//     [latent | k_pe] from global memory into registers (RB = 4 rows per warp in flight, or 2;
//     BF16 pool rows (--kv-cache-dtype bf16, RB 0): copied by cp.async in 16-byte pieces
//     straight into the swizzled tile, a warp's 16 rows of a chunk in flight at once;
//     pool row ids looked up two and three chunks ahead; with NIBBLE_CUDA_MLA_WG_PF=1 the chunk
//     after next also prefetched into L2 by the bulk-copy engine, which measured slower: mla.h),
//     converts them to BF16 and stores them into one of two
//     shared tiles, 128-byte swizzled: 9 k-tiles of [64 rows][64 dims] (8 KB each);
//     signals the tile full on an mbarrier and waits for it to be empty before reusing it.
//   warpgroups 1 and 2 (consumers): q of the 64 heads in BF16 in the same layout, loaded
//     once per block. Per chunk each computes S = q . rows^T (64 heads x 64 rows, 36 wgmma
//     m64n64k16 with both operands in shared memory; both consumers compute the same S, so
//     neither waits for the other; or, SHARE, each scores 32 of the rows and the two exchange
//     maxima and P through shared memory), the online softmax in registers (F32, exp2), and then
//     O[:, 256c .. 256c + 255] += P . latent with P as the register A operand (the
//     accumulator layout is the A fragment layout) and the same shared tile as the B operand
//     read MN-major (the transpose bit): 4 wgmma m64n256k16 per chunk, O in 128 registers.
// Error: q, the rows and P rounded to BF16, sums in F32 (as NB_CUDA_MLA_DEC: ~2e-3 against
// the CPU op). Outputs as the other kernels: F32, the BF16 hi/lo pair, or the split
// partials that k_mla_merge combines.
// Selected by nb_cuda_mla_kernel (mla.cu): NIBBLE_CUDA_MLA=wg. Checked and timed by
// tests/cuda_ops/test_cuda_mla_decode.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/mla_dev.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ARCH 1 /* this device pass can issue wgmma / setmaxnreg */
#else
#define WG_ARCH 0
#endif

#define WG_R 512
#define WG_ROPE 64
#define WG_C4 144              /* float4 per row: (512 + 64) / 4 */
#define WG_P 64                /* rows per chunk */
#define WG_TILE 8192           /* one k-tile: 64 rows x 64 BF16 (128 B) */
#define WG_OPND (9 * WG_TILE)  /* q, or one chunk of rows: 9 k-tiles */
#define WG_THREADS 384
#define WG_SMEM (3 * WG_OPND + 2 * WG_P * 4 + 4 * 8 + 1024) /* + alignment slack */
/* SHARE (the consumers split S's rows): + the row maxima / sums exchanged (2 x 64 floats) and
 * each warpgroup's P fragments of its 32 rows (2 x 8 registers x 128 threads) */
#define WG_XM_BYTES (2 * 64 * 4)
#define WG_XP_BYTES (2 * 8 * 128 * 4)
#define WG_SMEM_SHARE (WG_SMEM + WG_XM_BYTES + WG_XP_BYTES)
/* mla.h nb_cuda_mla_wg_force_share: unset, the consumers split S where the batch fills the GPU
 * without KV splits (S == 1: 1000 tokens at context 192 on an H100, the op 1.04x faster);
 * with splits the extra barriers cost more than the shared reads save (10 requests: +0.5 %) */
#define WG_SHARE_AUTO(S) ((S) == 1)
/* setmaxnreg: the block holds 168 x 384 registers from its launch (the __launch_bounds__ cap),
 * so producer + 2 x consumer must stay within 3 x 168 = 504, or the increase never returns */
#define WG_RB_DEFAULT 4      /* rows in flight per producer warp (mla.h nb_cuda_mla_wg_force_rows) */
#define WG_PERSIST_DEFAULT 1 /* one block per SM looping over the items (mla.h nb_cuda_mla_wg_force_persist) */
#define WG_LOG2E 1.4426950408889634f

// Byte offset of float4 c4 (dims 4c4 .. 4c4 + 3) of row `row` in a swizzled operand: k-tile
// c4 / 16, 16-byte unit (c4 % 16) / 2 XOR row % 8 (the 128-byte swizzle), half (c4 & 1).
__device__ __forceinline__ uint32_t wg_off(int row, int c4)
{
    return (uint32_t)((c4 >> 4) * WG_TILE + row * 128 + ((((c4 & 15) >> 1) ^ (row & 7)) << 4) + ((c4 & 1) << 3));
}

// Shared-memory matrix descriptors, 128-byte swizzle. K-major (q, and the rows as S's B):
// 8-row atoms 1024 B apart (stride byte offset), the leading offset unused. MN-major (the
// rows as P.latent's B, N = latent dims): lbo between 64-dim blocks, sbo between 8-row groups.
__device__ __forceinline__ uint64_t wg_desc_k(uint32_t saddr)
{
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}
__device__ __forceinline__ uint64_t wg_desc_mn(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
           ((uint64_t)1 << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Keeps a register in program order after a wgmma wait: the compiler does not know the
// asynchronous wgmma writes it, and could otherwise move a read or rescale above the wait.
__device__ __forceinline__ void wg_pin(float &r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void wg_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void wg_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"((unsigned)__cvta_generic_to_shared(bar)) : "memory");
}

// S (64 x 64, F32) += A . B^T, A and B K-major BF16 in shared memory.
__device__ __forceinline__ void wg_ss64(float (&d)[32], uint64_t adesc, uint64_t bdesc)
{
#if WG_ARCH
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
                     "%32, %33, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "l"(adesc), "l"(bdesc), "r"(1));
#endif
}

// S (64 x 32, F32) += A . B^T, the same operands for 32 rows (SHARE: each consumer its half).
__device__ __forceinline__ void wg_ss32(float (&d)[16], uint64_t adesc, uint64_t bdesc)
{
#if WG_ARCH
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
                     "%16, %17, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                     : "l"(adesc), "l"(bdesc), "r"(1));
#endif
}

// O (64 x 256, F32) += P . B, P the A operand in registers (m16n8k16 A fragment order per
// warp), B MN-major in shared memory (the transpose bit).
__device__ __forceinline__ void wg_rs256(float (&d)[128], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint64_t desc)
{
#if WG_ARCH
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
                     "{%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));
#endif
}

// L2 prefetch of one row: lanes 0-15 its latent, lanes 16-31 its k_pe (same row for lane
// and lane ^ 16); R16: of a BF16 pool.
template <int R16>
__device__ __forceinline__ void wg_prefetch(const mla_args &a, int row, int lane)
{
    if (row < 0) return;
    const int es = R16 ? 2 : 4;
    if (lane < 16) {
        const char *p = R16 ? (const char *)(a.lat16 + (int64_t)row * a.ls0) : (const char *)(a.lat + (int64_t)row * a.ls0);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(WG_R * es) : "memory");
    } else {
        const char *p = R16 ? (const char *)(a.kpe16 + (int64_t)row * a.ps0) : (const char *)(a.kpe + (int64_t)row * a.ps0);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(WG_ROPE * es) : "memory");
    }
}

// The 16 rows 16w .. 16w + 15 of a chunk from a BF16 pool (row ids in lanes 0-15's idA, -1:
// zeros) into the swizzled tile at shared address ts, by cp.async: 72 pieces of 16 bytes per
// row (64 of latent, 8 of k_pe; piece jj is float4s 2jj, 2jj + 1 of wg_off's layout), all of
// the warp's pieces in flight at once, no registers held for them. Asynchronous: completion is
// counted on the tile's full barrier (cp.async.mbarrier.arrive.noinc, the caller).
__device__ __forceinline__ void wg_copy_rows16(const mla_args &a, uint32_t ts, int idA, int w, int lane)
{
#pragma unroll 4
    for (int i = 0; i < 16; i++) {
        const int id = __shfl_sync(0xffffffffu, idA, i), row = 16 * w + i;
        const int64_t rw = id < 0 ? 0 : id;
        const uint16_t *lr = a.lat16 + rw * a.ls0, *pr = a.kpe16 + rw * a.ps0;
        for (int jj = lane; jj < (WG_R + WG_ROPE) / 8; jj += 32)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(ts + wg_off(row, 2 * jj)),
                         "l"(jj < WG_R / 8 ? lr + 8 * jj : pr + 8 * (jj - WG_R / 8)), "r"(id >= 0 ? 16 : 0)
                         : "memory");
    }
}

// One work item of a block: token t, heads h0 .. h0 + 63, KV split s of S, chunks [ch0, ch1).
struct wg_item {
    int t, h0, s, pos, n, sbase, ch0, ch1;
};

__device__ __forceinline__ wg_item wg_decode(const mla_args &a, int item, int groups, int S)
{
    wg_item x;
    const int tg = item / S;
    x.s = item - tg * S;
    x.t = tg / groups;
    x.h0 = (tg - x.t * groups) * MLA_DEC_G;
    x.pos = a.idx.pos[x.t];
    x.n = mla_count(a, x.t);
    x.sbase = a.idx.slot_base[x.t];
    const int nch = (x.n + WG_P - 1) / WG_P, cps = (nch + S - 1) / S;
    x.ch0 = x.s * cps;
    x.ch1 = min(nch, x.ch0 + cps);
    return x;
}

// q of heads h0 .. h0 + 63 of token t -> BF16 in the swizzled layout (the sum of the two q_lat
// terms when TWO), by the 256 consumer threads (ct); QB float4 of each term in flight per thread.
template <int QB, int TWO>
__device__ __forceinline__ void wg_load_q(const mla_args &a, char *qs, int t, int h0, int ct)
{
    const int T2 = TWO * a.T, total = MLA_DEC_G * WG_C4;
    for (int e0 = ct; e0 < total; e0 += 256 * QB) {
        float4 v[QB], u[QB];
#pragma unroll
        for (int k = 0; k < QB; k++) {
            const int e = e0 + 256 * k, hr = e / WG_C4, c4 = e - hr * WG_C4, h = h0 + hr;
            v[k] = u[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (e < total && h < a.H) {
                if (c4 < WG_R / 4) {
                    const float4 *ql = (const float4 *)(a.qlat + ((int64_t)h * T2 + t) * WG_R) + c4;
                    v[k] = ql[0];
                    if (TWO == 2) u[k] = ql[(int64_t)a.T * (WG_R / 4)];
                } else {
                    const float *qp = a.q + (int64_t)t * a.qs0 + (int64_t)h * a.qs1 + a.nope + 4 * (c4 - WG_R / 4);
                    v[k] = make_float4(qp[0], qp[1], qp[2], qp[3]);
                }
            }
        }
#pragma unroll
        for (int k = 0; k < QB; k++) {
            const int e = e0 + 256 * k, hr = e / WG_C4, c4 = e - hr * WG_C4;
            if (e < total)
                *(uint2 *)(qs + wg_off(hr, c4)) =
                    make_uint2(mma_pack(v[k].x + u[k].x, v[k].y + u[k].y), mma_pack(v[k].z + u[k].z, v[k].w + u[k].w));
        }
    }
}

// The same q already in BF16 (a.qlat16: [H][T][576], q_lat then q_pe): 64 rows x 72 pieces of
// 16 bytes copied by cp.async, 18 per consumer thread, heads past H zero-filled. Asynchronous:
// the caller waits (wg_q_wait) before the tile is read.
__device__ __forceinline__ void wg_copy_q(const mla_args &a, char *qs, int t, int h0, int ct)
{
    const uint32_t q0 = (uint32_t)__cvta_generic_to_shared(qs);
#pragma unroll
    for (int k = 0; k < 18; k++) {
        const int u = ct + 256 * k, hr = u / 72, j = u - hr * 72, h = h0 + hr;
        const bool ok = h < a.H;
        const uint16_t *src = a.qlat16 + ((int64_t)(ok ? h : 0) * a.T + t) * (WG_R + WG_ROPE) + 8 * j;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(q0 + wg_off(hr, 2 * j)), "l"(src),
                     "r"(ok ? 16 : 0)
                     : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// wg_copy_q for work item `item` when there is one (its token and head group only: no lookups).
__device__ __forceinline__ void wg_copy_next_q(const mla_args &a, char *qs, int item, int n_items, int groups, int S,
                                               int ct)
{
    if (item >= n_items) return;
    const int tg = item / S, t = tg / groups;
    wg_copy_q(a, qs, t, (tg - t * groups) * MLA_DEC_G, ct);
}

__device__ __forceinline__ void wg_q_wait() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// The one-term BF16 output of one consumer warpgroup (columns 256cw .. 256cw + 255 of 64 heads)
// through shared memory `st` (its own 4 k-tiles of the last chunk's tile, free once its
// P.latent is done and both warpgroups are past that chunk's S): rows of 512 bytes with their
// 16-byte units XOR row % 8 (no bank conflicts from the accumulator layout), then each row
// stored whole by one warp, 16 bytes per lane.
__device__ __forceinline__ void wg_put_staged(const mla_args &a, const float (&o)[128], float l0, float l1, char *st,
                                              const wg_item &x, int wt, int cw, int w4, int g4, int q4)
{
    /* column unit i = 8a + b lands at unit 8a + (b ^ g4) (row % 8 == g4 for both rows) */
    const float f0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, f1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    const uint32_t r0 = (uint32_t)__cvta_generic_to_shared(st) + (16 * w4 + g4) * 512 + 4 * q4;
#pragma unroll
    for (int b = 0; b < 8; b++) {
        const uint32_t p = r0 + ((b ^ g4) << 4);
#pragma unroll
        for (int a4 = 0; a4 < 4; a4++) {
            const int i = 8 * a4 + b;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(p + 128 * a4), "r"(mma_pack(o[4 * i] * f0, o[4 * i + 1] * f0))
                         : "memory");
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(p + 128 * a4 + 8 * 512),
                         "r"(mma_pack(o[4 * i + 2] * f1, o[4 * i + 3] * f1))
                         : "memory");
        }
    }
    if (cw) asm volatile("bar.sync 4, 128;\n" ::: "memory"); /* this warpgroup's stores */
    else asm volatile("bar.sync 3, 128;\n" ::: "memory");
#pragma unroll 4
    for (int k = 0; k < 16; k++) {
        const int u = wt + 128 * k, hr = u >> 5, j = u & 31, h = x.h0 + hr;
        const uint4 v = *(const uint4 *)(st + hr * 512 + ((j ^ (hr & 7)) << 4));
        if (h < a.H) *(uint4 *)(a.ob + ((int64_t)h * a.T + x.t) * WG_R + 256 * cw + 8 * j) = v;
    }
}

// The online softmax's pieces over NI column groups of a consumer's scores (the wgmma
// accumulator layout: sc[4i + e] row g4, sc[4i + 2 + e] row g4 + 8, column 8i + 2q4 + e), shared
// by the kernel's two chunk forms. Masks the unattended rows (rid < 0) to -inf and scales the
// rest by sl2 (log2 units); returns the rows' maxima over the quad in mx0, mx1.
template <int NI>
__device__ __forceinline__ void wg_mask_max(float (&sc)[4 * NI], const int *rid, float sl2, int q4, float &mx0,
                                            float &mx1)
{
    mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const bool ok = rid[8 * i + 2 * q4 + e] >= 0;
            sc[4 * i + e] = ok ? sc[4 * i + e] * sl2 : -INFINITY;
            sc[4 * i + 2 + e] = ok ? sc[4 * i + 2 + e] * sl2 : -INFINITY;
            mx0 = fmaxf(mx0, sc[4 * i + e]);
            mx1 = fmaxf(mx1, sc[4 * i + 2 + e]);
        }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
}

// With the chunk's row maxima mx0, mx1: the new running maxima m0, m1, P = exp2(s - m) in sc,
// the row sums l0, l1 (this thread's columns) and o rescaled by the old-to-new factors.
template <int NI>
__device__ __forceinline__ void wg_softmax(float (&sc)[4 * NI], float (&o)[128], float mx0, float mx1, float &m0,
                                           float &m1, float &l0, float &l1)
{
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    const float c0 = m0 == -INFINITY ? 0.0f : exp2f(m0 - n0), c1 = m1 == -INFINITY ? 0.0f : exp2f(m1 - n1);
    m0 = n0, m1 = n1;
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float &y0 = sc[4 * i + e], &y1 = sc[4 * i + 2 + e];
            y0 = y0 == -INFINITY ? 0.0f : exp2f(y0 - n0);
            y1 = y1 == -INFINITY ? 0.0f : exp2f(y1 - n1);
            s0 += y0, s1 += y1;
        }
    l0 = l0 * c0 + s0, l1 = l1 * c1 + s1; /* this thread's part of the row sums */
#pragma unroll
    for (int i = 0; i < 32; i++) {
        o[4 * i] *= c0, o[4 * i + 1] *= c0;
        o[4 * i + 2] *= c1, o[4 * i + 3] *= c1;
    }
}

// P (sc, NJ k-steps of 16 columns) as BF16 A fragments of P.latent: the accumulator layout is
// the A fragment layout.
template <int NJ>
__device__ __forceinline__ void wg_pack_p(const float (&sc)[8 * NJ], uint32_t (&pa)[NJ][4])
{
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        pa[j][0] = mma_pack(sc[8 * j], sc[8 * j + 1]);
        pa[j][1] = mma_pack(sc[8 * j + 2], sc[8 * j + 3]);
        pa[j][2] = mma_pack(sc[8 * j + 4], sc[8 * j + 5]);
        pa[j][3] = mma_pack(sc[8 * j + 6], sc[8 * j + 7]);
    }
}

// One chunk's S and softmax with the rows split between the consumers (k_mla_wg SHARE):
// warpgroup cw scores rows 32cw .. 32cw + 31 (tile tb, row ids rid) for the 64 heads, the two
// exchange their row maxima (xm) so both rescale by the same new maximum, then their P
// fragments (xp: [cw][register][thread], conflict-free; a thread of either warpgroup holds the
// same heads and columns, so the other's fragments are its own k-steps 2(cw^1), 2(cw^1) + 1).
// Leaves pa[j] = the A operand of P.latent's k-step j (rows 16j .. 16j + 15), rescales o, and
// adds this warpgroup's rows to its sums l0, l1 (the two halves are added per item).
__device__ __forceinline__ void wg_share_chunk(float (&o)[128], uint32_t (&pa)[4][4], float &m0, float &m1, float &l0,
                                               float &l1, uint32_t qa, uint32_t tb, const int *rid, float *xm,
                                               uint32_t *xp, float sl2, int ct, int cw, int w4, int g4, int q4)
{
    float sc[16];
#pragma unroll
    for (int i = 0; i < 16; i++) sc[i] = 0.0f;
    wg_fence();
#pragma unroll
    for (int kt = 0; kt < 9; kt++)
#pragma unroll
        for (int ks = 0; ks < 4; ks++)
            wg_ss32(sc, wg_desc_k(qa + kt * WG_TILE + ks * 32), wg_desc_k(tb + kt * WG_TILE + cw * 4096 + ks * 32));
    wg_commit();
    wg_wait0();
#pragma unroll
    for (int i = 0; i < 16; i++) wg_pin(sc[i]);
    float mx0, mx1;
    wg_mask_max<4>(sc, rid + 32 * cw, sl2, q4, mx0, mx1);
    const int h0 = 16 * w4 + g4;
    if (q4 == 0) xm[cw * 64 + h0] = mx0, xm[cw * 64 + h0 + 8] = mx1;
    asm volatile("bar.sync 5, 256;\n" ::: "memory");
    mx0 = fmaxf(mx0, xm[(cw ^ 1) * 64 + h0]);
    mx1 = fmaxf(mx1, xm[(cw ^ 1) * 64 + h0 + 8]);
    wg_softmax<4>(sc, o, mx0, mx1, m0, m1, l0, l1);
    uint32_t pw[2][4];
    wg_pack_p<2>(sc, pw);
    uint32_t *mine = xp + cw * 1024 + (ct & 127);
    const uint32_t *theirs = xp + (cw ^ 1) * 1024 + (ct & 127);
#pragma unroll
    for (int r = 0; r < 8; r++) mine[128 * r] = pw[r >> 2][r & 3];
    asm volatile("bar.sync 5, 256;\n" ::: "memory");
    uint32_t ot[2][4];
#pragma unroll
    for (int r = 0; r < 8; r++) ot[r >> 2][r & 3] = theirs[128 * r];
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) pa[j][r] = (j >> 1) == cw ? pw[j & 1][r] : ot[j & 1][r];
}

// Items item = blockIdx.x, + gridDim.x, ... of n_items = T x head groups x S (s fastest): one
// per block (grid = n_items), or a persistent grid of one block per SM, where the producer
// streams the next item's rows while the consumers finish the last one and load its q.
// RB: rows per producer warp in flight (2 or 4) from F32 pool rows, or 0: BF16 pool rows
// (a.lat16) copied by cp.async (wg_copy_rows16); PREG / CREG: the producer's and consumers'
// registers (setmaxnreg; ptxas allocates each role's code within its figure: with none, the
// consumers spill at the launch cap of 168).
// Q16: q in BF16 (a.qlat16), copied by cp.async during the previous item (2: and the outputs
// staged, a.wgst); 0: loaded from F32 and converted between items (a separate instantiation, so
// that form compiles as before).
// SHARE: the consumers split each chunk's S by rows (warpgroup cw rows 32cw .. 32cw + 31: 36
// m64n32k16 each instead of 36 m64n64k16 each for the same 64 x 64), exchange their row
// maxima and P fragments through shared memory (two 256-thread barriers per chunk) and their
// row sums once per item; P.latent is as before (each its 256 columns, all 64 rows).
template <int RB, int PREG, int CREG, int Q16, int SHARE>
__global__ void __launch_bounds__(WG_THREADS, 1) k_mla_wg(mla_args a, int S, int n_items)
{
#if WG_ARCH
    extern __shared__ float4 wsh[];
    char *base = (char *)wsh;
    base += (1024 - ((uint32_t)__cvta_generic_to_shared(base) & 1023)) & 1023; /* swizzle atoms 1024-aligned */
    char *qs = base, *kv = base + WG_OPND;                                 /* q; two chunk tiles */
    int *ring = (int *)(base + 3 * WG_OPND);                                /* [2][64] pool rows of the tiles */
    uint64_t *full = (uint64_t *)(ring + 2 * WG_P), *empty = full + 2;
    float *xm = (float *)(empty + 2);                /* SHARE: [2][64] row maxima, then row sums */
    uint32_t *xp = (uint32_t *)(xm + 2 * 64);        /* SHARE: [2][8][128] P fragments */
    const int groups = (a.H + MLA_DEC_G - 1) / MLA_DEC_G;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    /* full: the 128 producer threads' arrivals; BF16 rows (RB 0): their 128 asynchronous
     * arrivals (cp.async.mbarrier.arrive.noinc, when each thread's copies have landed) and 64
     * plain ones, of the threads that wrote the tile's row ids (below) */
    if (tid == 0) {
        for (int i = 0; i < 2; i++) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"((unsigned)__cvta_generic_to_shared(full + i)),
                         "r"(RB ? 128 : 192));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"((unsigned)__cvta_generic_to_shared(empty + i)),
                         "r"(256));
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (w < 4) {
        // ---- producer: rows 16w .. 16w + 15 of every chunk; lane l (and l ^ 16) looks up row 16w + l % 16
        if (PREG) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PREG));
        const int rr = 16 * w + (lane & 15);
        int gc = 0; /* chunks of this block so far: tile gc & 1, its fill / use count gc >> 1 */
        for (int item = blockIdx.x; item < n_items; item += gridDim.x) {
            const wg_item x = wg_decode(a, item, groups, S);
            // the item's first four chunks' positions (independent loads), then their pool
            // rows; the first two chunks' rows go to L2 at once
            int pp[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int j = (x.ch0 + k) * WG_P + rr;
                pp[k] = -1;
                if (x.ch0 + k < x.ch1 && j < x.n) pp[k] = a.sel_pos ? a.sel_pos[(int64_t)x.t * a.sel_stride + j] : j;
            }
            int id3[3];
#pragma unroll
            for (int k = 0; k < 3; k++) {
                id3[k] = -1;
                if (pp[k] >= 0 && pp[k] <= x.pos) {
                    const int64_t row = a.idx.slot_table[x.sbase + pp[k]];
                    id3[k] = row >= 0 && row < a.pool_rows ? (int)row : -1;
                }
            }
            int idA = id3[0], idB = id3[1], idC = id3[2], pD = pp[3];
            if (a.l2pf) {
                wg_prefetch<RB == 0>(a, idA, lane);
                wg_prefetch<RB == 0>(a, idB, lane);
            }
            for (int c = x.ch0; c < x.ch1; c++, gc++) {
                const int b = gc & 1;
                char *tile = kv + b * WG_OPND;
                if (RB == 0) {
                    if (a.l2pf) wg_prefetch<1>(a, idC, lane);                   /* chunk c + 2 */
                    if (gc >= 2) mla_mwait(empty + b, ((gc >> 1) + 1) & 1); /* its last use consumed */
                    wg_copy_rows16(a, (uint32_t)__cvta_generic_to_shared(tile), idA, w, lane);
                    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(
                                     (unsigned)__cvta_generic_to_shared(full + b))
                                 : "memory");
                    /* The row ids: plain stores, which the asynchronous arrival above does not
                     * order (it is no release of this thread's earlier stores: the phase could
                     * complete, and be seen, before them). So the threads that stored one also arrive
                     * normally (mbarrier.arrive: release at CTA scope) after it; the phase
                     * completes only with these 64 arrivals and the 128 asynchronous ones
                     * (the barrier's count, 192), and the consumers' wait (acquire) then sees
                     * the ids as well as the copies' data. The copies are writes of the
                     * generic proxy the tensor cores (async proxy) read: the consumers fence
                     * the proxies after their wait, since this thread cannot fence copies
                     * that are still in flight. */
                    if (lane < 16) {
                        ring[b * WG_P + rr] = idA;
                        wg_arrive(full + b);
                    }
                } else {
                    constexpr int RF = RB ? RB : 1; /* F32 rows in flight (never 0 here) */
#pragma unroll 1
                    for (int rb = 0; rb < 16 / RF; rb++) {
                        float4 v[RF][5];
#pragma unroll
                        for (int k = 0; k < RF; k++) {
                            const int id = __shfl_sync(0xffffffffu, idA, RF * rb + k);
                            const float4 *lr = (const float4 *)(a.lat + (int64_t)(id < 0 ? 0 : id) * a.ls0);
                            const float4 *pr = (const float4 *)(a.kpe + (int64_t)(id < 0 ? 0 : id) * a.ps0);
#pragma unroll
                            for (int i = 0; i < 5; i++) {
                                const int c4 = lane + 32 * i;
                                v[k][i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                                if (id >= 0 && c4 < WG_C4) v[k][i] = __ldg(c4 < WG_R / 4 ? lr + c4 : pr + (c4 - WG_R / 4));
                            }
                        }
                        if (rb == 0) {
                            if (a.l2pf) wg_prefetch<0>(a, idC, lane);                   /* chunk c + 2 */
                            if (gc >= 2) mla_mwait(empty + b, ((gc >> 1) + 1) & 1); /* its last use consumed */
                        }
#pragma unroll
                        for (int k = 0; k < RF; k++) {
                            const int row = 16 * w + RF * rb + k;
#pragma unroll
                            for (int i = 0; i < 5; i++) {
                                const int c4 = lane + 32 * i;
                                if (c4 < WG_C4)
                                    *(uint2 *)(tile + wg_off(row, c4)) =
                                        make_uint2(mma_pack(v[k][i].x, v[k][i].y), mma_pack(v[k][i].z, v[k][i].w));
                            }
                        }
                    }
                    if (lane < 16) ring[b * WG_P + rr] = idA;
                    wg_proxy(); /* this thread's tile stores, before the tensor cores read them */
                    wg_arrive(full + b);
                }
                // the lookups move one chunk on: slot of chunk c + 3 (its position loaded an
                // iteration ago), position of chunk c + 4
                idA = idB, idB = idC, idC = -1;
                const int j = (c + 3) * WG_P + rr;
                if (pD >= 0 && pD <= x.pos && c + 3 < x.ch1 && j < x.n) {
                    const int64_t row = a.idx.slot_table[x.sbase + pD];
                    idC = row >= 0 && row < a.pool_rows ? (int)row : -1;
                }
                const int j4 = j + WG_P;
                pD = -1;
                if (c + 4 < x.ch1 && j4 < x.n) pD = a.sel_pos ? a.sel_pos[(int64_t)x.t * a.sel_stride + j4] : j4;
            }
        }
        return;
    }

    // ---- consumers: warpgroup cw = 0, 1 owns output columns 256cw .. 256cw + 255
    if (CREG) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CREG));
    const int ct = tid - 128, cw = ct >> 7, w4 = (ct >> 5) & 3, g4 = lane >> 2, q4 = lane & 3;
    const float sl2 = a.scale * WG_LOG2E;
    const uint32_t qa = (uint32_t)__cvta_generic_to_shared(qs), ka = (uint32_t)__cvta_generic_to_shared(kv);
    int gc = 0;
    for (int item = blockIdx.x; item < n_items; item += gridDim.x) {
        const wg_item x = wg_decode(a, item, groups, S);
        if (Q16) {
            /* BF16 q: copied asynchronously, for a later item since the last one's final S
             * wgmmas (below); here only its arrival */
            if (item == (int)blockIdx.x) wg_copy_q(a, qs, x.t, x.h0, ct);
            wg_q_wait();
        } else {
            /* a later item: both consumer warpgroups are past the last one's S wgmmas (q is free) */
            if (item != (int)blockIdx.x) asm volatile("bar.sync 1, 256;\n" ::: "memory");
            if (a.two == 2) wg_load_q<9, 2>(a, qs, x.t, x.h0, ct);
            else wg_load_q<18, 1>(a, qs, x.t, x.h0, ct);
        }
        wg_proxy();
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        bool q_next = false; /* BF16 q: the next item's copies issued */
        /* outputs staged in the last chunk's tile and stored in whole rows (Q16, one term, no
         * KV split, a.wgst): that tile is released after them, not after its P.latent */
        const bool staged = Q16 == 2 && x.ch1 > x.ch0; /* Q16 2: S 1, one BF16 term (the launcher) */

        float o[128];
#pragma unroll
        for (int i = 0; i < 128; i++) o[i] = 0.0f;
        float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* rows g4, g4 + 8; m in log2 units */
        for (int c = x.ch0; c < x.ch1; c++, gc++) {
            const int b = gc & 1;
            const uint32_t tb = ka + b * WG_OPND;
            mla_mwait(full + b, (gc >> 1) & 1);
            if (RB == 0) wg_proxy(); /* BF16 rows: the tile came by cp.async (generic proxy); wgmma reads it */
            uint32_t pa[4][4];
            if (SHARE) {
                wg_share_chunk(o, pa, m0, m1, l0, l1, qa, tb, ring + b * WG_P, xm, xp, sl2, ct, cw, w4, g4, q4);
            } else {
                float sc[32];
#pragma unroll
                for (int i = 0; i < 32; i++) sc[i] = 0.0f;
                wg_fence();
#pragma unroll
                for (int kt = 0; kt < 9; kt++)
#pragma unroll
                    for (int ks = 0; ks < 4; ks++)
                        wg_ss64(sc, wg_desc_k(qa + kt * WG_TILE + ks * 32), wg_desc_k(tb + kt * WG_TILE + ks * 32));
                wg_commit();
                wg_wait0();
#pragma unroll
                for (int i = 0; i < 32; i++) wg_pin(sc[i]);
                // scores of rows g4 / g4 + 8 (heads 16w4 + ...) at columns 8i + 2q4 + e; unattended -inf
                float mx0, mx1;
                wg_mask_max<8>(sc, ring + b * WG_P, sl2, q4, mx0, mx1);
                wg_softmax<8>(sc, o, mx0, mx1, m0, m1, l0, l1);
                wg_pack_p<4>(sc, pa);
            }
            wg_fence();
#pragma unroll
            for (int j = 0; j < 4; j++)
                wg_rs256(o, pa[j][0], pa[j][1], pa[j][2], pa[j][3],
                         wg_desc_mn(tb + 4 * cw * WG_TILE + j * 2048, WG_TILE, 1024));
            wg_commit();
            if (Q16 && c == x.ch1 - 1) {
                /* past the item's last S in both warpgroups: q takes the next item's copies,
                 * which land during this P.latent and the outputs */
                asm volatile("bar.sync 2, 256;\n" ::: "memory");
                wg_copy_next_q(a, qs, item + gridDim.x, n_items, groups, S, ct);
                q_next = true;
            }
            wg_wait0();
#pragma unroll
            for (int i = 0; i < 128; i++) wg_pin(o[i]);
            /* P stays allocated until the wait: the copies above must not reuse its registers
             * while the tensor cores still read them */
            if (Q16)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    asm volatile("" ::"r"(pa[j][0]), "r"(pa[j][1]), "r"(pa[j][2]), "r"(pa[j][3]) : "memory");
            if (!(staged && c == x.ch1 - 1)) wg_arrive(empty + b);
        }

        if (Q16 && !q_next) { /* an item without chunks: q was never read */
            asm volatile("bar.sync 2, 256;\n" ::: "memory");
            wg_copy_next_q(a, qs, item + gridDim.x, n_items, groups, S, ct);
        }
        // outputs straight from the accumulators: row g4 / g4 + 8, columns 256cw + 8i + 2q4 + 0/1
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        if (SHARE) { /* each warpgroup summed its own rows: add the other's */
            if (q4 == 0) xm[cw * 64 + 16 * w4 + g4] = l0, xm[cw * 64 + 16 * w4 + g4 + 8] = l1;
            asm volatile("bar.sync 5, 256;\n" ::: "memory");
            l0 += xm[(cw ^ 1) * 64 + 16 * w4 + g4], l1 += xm[(cw ^ 1) * 64 + 16 * w4 + g4 + 8];
        }
        if (Q16 == 2) {
            if (staged) {
                wg_put_staged(a, o, l0, l1, kv + ((gc - 1) & 1) * WG_OPND + 4 * cw * WG_TILE, x, ct & 127, cw, w4, g4,
                              q4);
                wg_arrive(empty + ((gc - 1) & 1));
            } else { /* nothing attended: zero rows */
                for (int u = ct & 127; u < 64 * 32; u += 128) {
                    const int h = x.h0 + (u >> 5);
                    if (h < a.H)
                        *(uint4 *)(a.ob + ((int64_t)h * a.T + x.t) * WG_R + 256 * cw + 8 * (u & 31)) = make_uint4(0, 0, 0, 0);
                }
            }
        }
        /* the direct stores (none in the staged form) */
#pragma unroll
        for (int hf = 0; hf < (Q16 == 2 ? 0 : 2); hf++) {
            const int h = x.h0 + 16 * w4 + g4 + 8 * hf;
            if (h >= a.H) continue;
            const float l = hf ? l1 : l0, m = hf ? m1 : m0;
            const int cb = 256 * cw + 2 * q4;
            if (S > 1) {
                float *pr = a.part + (((int64_t)x.t * a.H + h) * S + x.s) * (2 + WG_R);
                if (cw == 0 && q4 == 0) pr[0] = m == -INFINITY ? m : m / WG_LOG2E, pr[1] = l;
#pragma unroll
                for (int i = 0; i < 32; i++)
                    *(float2 *)(pr + 2 + cb + 8 * i) = make_float2(o[4 * i + 2 * hf], o[4 * i + 2 * hf + 1]);
            } else {
                const float f = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
                for (int i = 0; i < 32; i++) {
                    const float y0 = o[4 * i + 2 * hf] * f, y1 = o[4 * i + 2 * hf + 1] * f;
                    const int col = cb + 8 * i;
                    if (a.ob) {
                        const uint16_t hx = nb_d_to_bf16(y0), hy = nb_d_to_bf16(y1);
                        const uint16_t lx = nb_d_to_bf16(y0 - nb_d_bf16(hx)), ly = nb_d_to_bf16(y1 - nb_d_bf16(hy));
                        uint16_t *oh = a.ob + ((int64_t)h * (a.ob1 ? 1 : 2) * a.T + x.t) * WG_R + col;
                        *(uint32_t *)oh = hx | (uint32_t)hy << 16;
                        if (!a.ob1) *(uint32_t *)(oh + (int64_t)a.T * WG_R) = lx | (uint32_t)ly << 16;
                    } else {
                        *(float2 *)(a.o32 + ((int64_t)h * a.T + x.t) * WG_R + col) = make_float2(y0, y1);
                    }
                }
            }
        }
    }
#else
    __trap(); // launched only on sm_90 devices of an sm_90a build (nb_cuda_mla_wg_ok: compute capability 9)
#endif
}

// The build must carry sm_90a code for such a device (NIBBLE_CUDA_ARCHS holds 90a by default):
// a plain sm_90 / PTX build traps in the kernel instead of computing (same as the MoE wgmma
// kernels).
extern "C" int nb_cuda_mla_wg_ok(int r, int rope, int cc_major, int max_smem)
{
    return r == WG_R && rope == WG_ROPE && cc_major == 9 && max_smem >= WG_SMEM;
}

static int g_rb; /* nb_cuda_mla_wg_force_rows; 0: NIBBLE_CUDA_MLA_WG_RB, else WG_RB_DEFAULT */

extern "C" void nb_cuda_mla_wg_force_rows(int rb) { g_rb = rb == 2 || rb == 4 ? rb : 0; }

static int g_persist = -1; /* nb_cuda_mla_wg_force_persist; -1: NIBBLE_CUDA_MLA_WG_PERSIST, else default */

extern "C" void nb_cuda_mla_wg_force_persist(int on) { g_persist = on == 0 || on == 1 ? on : -1; }

static int g_share = -1; /* nb_cuda_mla_wg_force_share; -1: NIBBLE_CUDA_MLA_WG_SHARE, else WG_SHARE_AUTO */

extern "C" void nb_cuda_mla_wg_force_share(int on) { g_share = on == 0 || on == 1 ? on : -1; }

template <int RB, int PREG, int CREG, int Q16, int SHARE = 0>
static nb_status wg_launch(const mla_args *a, int n_items, int S, int grid, int device, cudaStream_t stream)
{
    static int attr_dev = -1; /* the opt-in shared memory, set once per process and device */
    const int smem = SHARE ? WG_SMEM_SHARE : WG_SMEM;
    if (attr_dev != device) {
        NB_CUDA_TRY(cudaFuncSetAttribute(k_mla_wg<RB, PREG, CREG, Q16, SHARE>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        NB_CUDA_TRY(cudaFuncSetAttribute(k_mla_wg<RB, PREG, CREG, Q16, SHARE>, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
        attr_dev = device;
    }
    k_mla_wg<RB, PREG, CREG, Q16, SHARE><<<(unsigned)grid, WG_THREADS, smem, stream>>>(*a, S, n_items);
    NB_CUDA_LAUNCHED("mla_attention wg");
    return NB_OK;
}

extern "C" nb_status nb_cuda_mla_wg_launch(const mla_args *a, int groups, int S, int device, cudaStream_t stream)
{
    if (a->r != WG_R || a->rope != WG_ROPE || !a->vec)
        return nb_error(NB_ERR_UNSUPPORTED, "mla_attention wg: rank %d / rope %d / unaligned rows not taken", a->r,
                        a->rope);
    int rb = g_rb;
    if (!rb) {
        const char *e = getenv("NIBBLE_CUDA_MLA_WG_RB");
        rb = e && !strcmp(e, "2") ? 2 : e && !strcmp(e, "4") ? 4 : WG_RB_DEFAULT;
    }
    int persist = g_persist;
    if (persist < 0) {
        const char *e = getenv("NIBBLE_CUDA_MLA_WG_PERSIST");
        persist = e && (!strcmp(e, "0") || !strcmp(e, "1")) ? e[0] - '0' : WG_PERSIST_DEFAULT;
    }
    int share = g_share;
    if (share < 0) {
        const char *e = getenv("NIBBLE_CUDA_MLA_WG_SHARE");
        share = e && (!strcmp(e, "0") || !strcmp(e, "1")) ? e[0] - '0' : WG_SHARE_AUTO(S);
    }
    static int sm_dev = -1, sms = 0, max_smem = 0;
    if (sm_dev != device) {
        NB_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        NB_CUDA_TRY(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        sm_dev = device;
    }
    const int64_t n_items = (int64_t)a->T * groups * S;
    if (n_items > 0x7fffffff) return nb_error(NB_ERR_UNSUPPORTED, "mla_attention wg: %lld work items", (long long)n_items);
    const int grid = persist && n_items > sms ? sms : (int)n_items;
    /* registers: 168 x 3 per (producer, 2 consumer) thread triple; the consumers need 177-192 */
    /* BF16 pool rows (RB 0): the producer holds no rows in registers, so the consumers get
     * RB 2's 216 (ptxas -v: the BF16-q instance spilled 8 bytes at 120 / 192, none at 72 / 216) */
    if (a->lat16) {
        if (a->qlat16 && a->wgst && S == 1 && a->ob && a->ob1)
            return wg_launch<0, 72, 216, 2>(a, (int)n_items, S, grid, device, stream);
        /* the split S: this instance only (BF16 rows and q, direct outputs), where it fits */
        if (a->qlat16 && share && max_smem >= WG_SMEM_SHARE)
            return wg_launch<0, 72, 216, 1, 1>(a, (int)n_items, S, grid, device, stream);
        if (a->qlat16) return wg_launch<0, 72, 216, 1>(a, (int)n_items, S, grid, device, stream);
        return wg_launch<0, 72, 216, 0>(a, (int)n_items, S, grid, device, stream);
    }
    /* staged outputs: 2 producer rows only (at 4 the consumers' 192 registers spill) */
    if (a->qlat16 && a->wgst && S == 1 && a->ob && a->ob1)
        return wg_launch<2, 72, 216, 2>(a, (int)n_items, S, grid, device, stream);
    if (a->qlat16) {
        if (rb == 2) return wg_launch<2, 72, 216, 1>(a, (int)n_items, S, grid, device, stream);
        return wg_launch<4, 120, 192, 1>(a, (int)n_items, S, grid, device, stream);
    }
    if (rb == 2) return wg_launch<2, 72, 216, 0>(a, (int)n_items, S, grid, device, stream);
    return wg_launch<4, 120, 192, 0>(a, (int)n_items, S, grid, device, stream);
}
