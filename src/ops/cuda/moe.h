/* NVFP4 routed-expert FFN on the GPU (W4A16: 4-bit weights expanded to BF16 in registers,
 * BF16 tensor-core products, F32 accumulation), plus the shared (dense) expert through the
 * same kernels. One step:
 *   route (top-k ids/weights) -> permute slots by expert -> gate_up GEMM with SiLU(gate)*up
 *   fused in its epilogue -> down GEMM with the routing weight and the sum over the k
 *   slots fused in its epilogue (F32 atomics into out).
 * Weights are repacked once at load from the ModelOpt layout (nb_moe_repack_nvfp4) into
 * per-lane fragments of the mma.sync m16n8k16 A operand; docs/moe-kernels.md draws it.
 * Three kernels behind nb_moe_forward, chosen by nb_moe_pick_kernel (a ladder of named
 * predicates, forceable with NIBBLE_MOE_KERNEL=stream|mma|wgmma):
 *   stream: token tiles of 8 or 16 (1 or 2 n8 fragments per warp), each lane reading its
 *           token fragments from global memory (L2); each weight byte is read once per tile.
 *   mma:    token tiles of 32 or 64 (4 or 8 fragments per warp), each k-group of the tile
 *           staged once per block in shared memory; weights reused across the tile.
 *   wgmma:  (sm_90a, moe_wgmma.cu) token tiles of up to 64, wgmma m64nNk16 with N = 16..64
 *           per tile: weights expanded once per tile in registers (wgmma's A operand),
 *           tokens, codes and scales through a cp.async ring in shared memory; an expert's
 *           tiles run side by side so its weights come from HBM about once.
 *           NIBBLE_MOE_WG=pc runs its producer/consumer variant (moe_wgpc.cu: loads by a
 *           producer warpgroup through an mbarrier ring; measured no faster, not the default).
 * All run as one persistent kernel per step after a one-block routing kernel (steps of at most
 * 64 slots: the small-step stream kernel routes the ids itself and does not wait for it): blocks of 4
 * warps (8 or 16 for wgmma) take items (tile, row-tile pairs) from a counter, gate_up items first; K is split
 * over 1, 2 or 4 warps per pair depending on how many experts the step touches, so that
 * all touched experts' work covers every SM (NIBBLE_MOE_KSPLIT=1|2|4 forces the split).
 * Tests: tests/cuda_moe/test_moe.c (ctest -L gpu). Benchmark: nibble bench-moe. */
#ifndef NB_OPS_CUDA_MOE_H
#define NB_OPS_CUDA_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "nibble.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- repacked NVFP4 weights --------------------------------------------------------- */

/* The repacked layout needs n % 16 == 0 and k % 256 == 0 (a 16-row tile, a 256-wide
 * group of four 64-wide k-tiles whose scales one lane loads as 8 bytes). */
#define NB_MOE_ROW_TILE 16
#define NB_MOE_K_GROUP 256

/* Warps per block of the FFN kernel, and the mma regime's token fragments (n8) per warp
 * (a token tile is 8 * NT tokens; the mma regime uses NT and 2 * NT, the stream regime 1
 * and 2). */
#define NB_MOE_WARPS 4
#define NB_MOE_NT_MMA 4

/* Shared memory of one FFN block: the split-K partial sums (F32, 4 per lane per fragment,
 * two row tiles, one slot per warp) and, in the mma regime, two staging buffers of the
 * token tile ([8*nt tokens][256 k] BF16, rows padded to NB_MOE_B_ROW_BYTES against bank
 * conflicts). The launcher checks it against the device's opt-in limit; `nibble plan-tiles`
 * prints it. */
#define NB_MOE_B_ROW_BYTES 528
static inline size_t nb_moe_smem_bytes(int nt, int gate_up)
{
    size_t red = (size_t)NB_MOE_WARPS * (size_t)(gate_up ? 2 : 1) * (size_t)nt * 4u * 32u * sizeof(float);
    size_t stage = nt >= NB_MOE_NT_MMA ? 2u * 8u * (size_t)nt * NB_MOE_B_ROW_BYTES : 0;
    return red + stage;
}

/* The wgmma kernel (sm_90a; many tokens per expert): blocks of NB_MOE_WG_WARPS warps (two
 * warpgroups), token tiles of up to NB_MOE_WG_TILE tokens. Dynamic shared memory: a ring of
 * stages, each one 128-wide k-slice of the token tile ([nmax tokens][128 k] BF16, 128-byte
 * swizzled) plus every warp's NVFP4 codes (2 row tiles x 128 k x 0.5 B = 2 KB) and scales
 * (512 B) for it; with a_smem (the default: wgmma reads the expanded weights from shared
 * memory) 4 stages and two 32 KB buffers of one k-tile of BF16 weights (2 warpgroups x
 * gate/up x 64 rows x 64 k), else (A from registers) 5 stages; +1 KB for 1024-byte
 * alignment, plus nmax row offsets. */
#define NB_MOE_WG_TILE 64
#define NB_MOE_WG_WARPS 8
#define NB_MOE_WG_STAGES 5
#define NB_MOE_WG_SS_STAGES 4
static inline size_t nb_moe_wg_smem_bytes(int nmax, int a_smem)
{
    size_t stage = 128u * 2u * (size_t)nmax + (size_t)NB_MOE_WG_WARPS * 2560u;
    return a_smem ? (size_t)NB_MOE_WG_SS_STAGES * stage + 2u * 32768u : (size_t)NB_MOE_WG_STAGES * stage;
}
/* All of a wgmma block's shared memory (what the launcher checks against the opt-in limit):
 * the dynamic part, its alignment slack, the row offsets, the two item slots and the down
 * epilogue's column table (a token and a weight per column of the widest tile, 1 KB). */
#define NB_MOE_WG_COLTAB_BYTES (8u * 128u)
static inline size_t nb_moe_wg_smem_total(int nmax, int a_smem)
{
    return nb_moe_wg_smem_bytes(nmax, a_smem) + 1024u + 8u * (size_t)nmax + 8u + NB_MOE_WG_COLTAB_BYTES;
}
/* The same for the wgmma kernel's 16-warp blocks (four warpgroups, A in registers, 4 stages
 * of 128 * 2 * nmax + 16 * 2560 bytes; moe_launch_wg uses them for 16-48-token tiles; 64
 * would fit sm_90 too, 225.5 KiB, but not 128 registers per thread). */
#define NB_MOE_WG16_STAGES 4
static inline size_t nb_moe_wg16_smem_total(int nmax)
{
    return (size_t)NB_MOE_WG16_STAGES * (128u * 2u * (size_t)nmax + 16u * 2560u) + 1024u + 8u * (size_t)nmax + 8u +
           NB_MOE_WG_COLTAB_BYTES;
}

/* The 16-warp blocks' wide form (one 16-row weight tile per warp, token tiles of up to
 * NB_MOE_WG_WIDE_TILE tokens multiplied at n64, n96 or n128, the narrowest covering each; 4
 * stages of 128 * 2 * nmax + 16 * 1280 bytes: 211 KiB in all at 128 tokens). NIBBLE_MOE_WG_WIDE picks
 * it (default NB_MOE_WG_WIDE_DEFAULT: 1, from 52 tokens per expert and 4 waves of items). */
#define NB_MOE_WG_WIDE_TILE 128
#define NB_MOE_WG_WIDE_DEFAULT 1
static inline size_t nb_moe_wgw_smem_total(int nmax)
{
    return (size_t)NB_MOE_WG16_STAGES * (128u * 2u * (size_t)nmax + 16u * 1280u) + 1024u + 8u * (size_t)nmax + 8u +
           NB_MOE_WG_COLTAB_BYTES;
}

/* Bytes of the repacked weight codes and scales of one [n, k] matrix (the same as the
 * ModelOpt tensors: n*k/2 and n*k/16). */
static inline size_t nb_moe_packed_weight_bytes(int n, int k) { return (size_t)n * (size_t)k / 2; }
static inline size_t nb_moe_packed_scale_bytes(int n, int k) { return (size_t)n * (size_t)k / 16; }

/* Host repack of one matrix from the ModelOpt layout: codes U8 [n, k/2] (low nibble = even
 * k), scales E4M3 [n, k/16]. Writes nb_moe_packed_weight_bytes / _scale_bytes into
 * out_w / out_s (host memory). `name` labels error messages. NB_ERR_INVALID_ARG when the
 * shape does not tile. */
nb_status nb_moe_repack_nvfp4(const char *name, const uint8_t *codes, const uint8_t *scales, int n, int k,
                              uint8_t *out_w, uint8_t *out_s);

/* Inverse, for tests and the lab: decode one element (row, col) of a repacked matrix to
 * its E2M1 code (0..15) and its E4M3 scale byte. */
void nb_moe_packed_get(const uint8_t *w, const uint8_t *s, int n, int k, int row, int col, uint8_t *code,
                       uint8_t *scale);

/* ---- the FFN ------------------------------------------------------------------------ */

typedef enum nb_moe_kernel {
    NB_MOE_KERNEL_AUTO = 0,
    NB_MOE_KERNEL_STREAM,
    NB_MOE_KERNEL_MMA,
    NB_MOE_KERNEL_WGMMA, /* sm_90 devices only (needs the sm_90a build target) */
} nb_moe_kernel;

/* Device pointers of E experts' repacked weights, experts back to back:
 *   w13/s13: [E][2*inter, hidden] (rows 0..inter-1 gate, inter..2*inter-1 up)
 *   w2/s2:   [E][hidden, inter]
 *   g13: F32 [E][2] weight_scale_2 of gate and up; g2: F32 [E] of down. */
typedef struct nb_moe_weights_dev {
    int experts, hidden, inter;
    const uint8_t *w13, *s13, *w2, *s2;
    const float *g13, *g2;
} nb_moe_weights_dev;

typedef struct nb_moe_desc {
    int tokens, topk;
    const uint16_t *x;       /* BF16 [tokens, hidden] */
    const int32_t *ids;      /* I32 [tokens, topk]; an id < 0 is skipped. NULL: dense mode,
                                every token to expert 0 with weight 1 (the shared expert) */
    const float *weights;    /* F32 [tokens, topk] routing weights; NULL: all 1 */
    float *out;              /* F32 [tokens, hidden] */
    int accumulate;          /* 0: out is overwritten; 1: out += result */
    nb_moe_kernel kernel;    /* AUTO: nb_moe_pick_kernel */
    void *workspace;         /* device memory of nb_moe_workspace_bytes() */
    size_t workspace_bytes;
} nb_moe_desc;

/* Device workspace for up to `tokens` tokens (permutation, tiles, the intermediate, and a
 * copy of x in the wgmma kernel's K order). */
size_t nb_moe_workspace_bytes(const nb_moe_weights_dev *w, int tokens, int topk);

/* Enqueue one step on `stream` (a cudaStream_t; NULL = default). No host synchronization
 * (capturable in a CUDA graph). NB_ERR_INVALID_ARG names the bad field; NB_ERR_CUDA a
 * failed launch. Without `accumulate`, out is zeroed first. Results are exact up to F32
 * summation order: the k slots of a token are summed with atomics, so the last bits of
 * out may differ between runs. */
nb_status nb_moe_forward(const nb_moe_weights_dev *w, const nb_moe_desc *d, void *stream);

/* The shared expert: a dense NVFP4 SwiGLU FFN over all tokens, out (+)= ffn(x); `w` holds
 * one expert. Same kernels as the routed path in dense mode. */
nb_status nb_moe_shared_forward(const nb_moe_weights_dev *w, const uint16_t *x, int tokens, float *out,
                                int accumulate, void *workspace, size_t workspace_bytes, void *stream);

/* ---- the ladder ------------------------------------------------------------------------ */

/* Few tokens per expert: weight bytes dominate, stream them once over all SMs. n = inter,
 * k = hidden; sm = 90 only when the wgmma kernel could take the step (should_use_wgmma),
 * which then keeps the stream kernel to <= 4 tokens per expert on shapes its 16-warp variant
 * takes (inter % 256 == 0, hidden % 512 == 0); else <= 12. */
int nb_moe_should_use_stream(double tokens_per_expert, int n, int k, int sm);
/* Many tokens per expert on an sm_90 device, with enough work items to fill the GPU: the
 * wgmma kernel. */
int nb_moe_should_use_wgmma(int tokens, int topk, int experts, int hidden, int inter, int sm);
/* Which kernel nb_moe_forward runs for this step: NIBBLE_MOE_KERNEL=stream|mma|wgmma forces
 * one; else stream when should_use_stream (mean tokens per expert, tokens*topk/experts),
 * wgmma when should_use_wgmma, else mma. `sm` is the device's compute capability x 10 (the
 * forward path reads it from the device). The choice is logged at debug level, tag "cuda". */
nb_moe_kernel nb_moe_pick_kernel(int tokens, int topk, int experts, int hidden, int inter, int sm);
const char *nb_moe_kernel_name(nb_moe_kernel k);

/* The stream kernel's switches for A/B runs and tests (else read once from the environment:
 * NIBBLE_MOE_SMALL, NIBBLE_MOE_NT, and NIBBLE_MOE_STREAM=v1 for the first sessions' path;
 * docs/moe-kernels.md): small = steps of at most 64 slots (tokens x top-k) on the small-step
 * kernel, which routes the ids itself and starts without waiting for the routing kernel;
 * nt = 1 or 2 forces the token fragments per warp (0: by tokens per expert); fast_route = the
 * routing kernel's shuffle scans; loop = the k-group loop (NIBBLE_MOE_STREAM_LOOP: 0 the one
 * before the seventh session, 1 load pointers advanced by constants, 2 that with two k-groups
 * per trip and no zero rows). small < 0: back to the environment's values. Not thread-safe:
 * call it between steps. */
void nb_moe_stream_set(int small, int nt, int fast_route, int loop);
/* The stream kernel's default k-group loop (above). */
#define NB_MOE_STREAM_LOOP_DEFAULT 2

/* ---- router ------------------------------------------------------------------------- */

/* GPU top-k router: logits F32 [T, E] -> ids I32 [T, k] (descending selection score) and
 * weights F32 [T, k]. score: 0 softmax, 1 sigmoid. group: 0 greedy, 1 groups ranked by
 * their max, 2 by the sum of their two best (noaux_tc). bias: F32 [E] added to the score
 * for the choice only, or NULL. Matches nb_op_moe_route's semantics (ops/ops.h); ties
 * go to the lower expert index. Needs E <= 1024, E % n_group == 0, k <= 32. */
typedef struct nb_moe_router_desc {
    int tokens, experts, topk, score, group, n_group, topk_group, norm_topk_prob;
    float routed_scaling_factor;
    const float *logits, *bias;
    int32_t *ids;
    float *weights;
} nb_moe_router_desc;
nb_status nb_moe_router(const nb_moe_router_desc *d, void *stream);

#ifdef __cplusplus
}
#endif
#endif
