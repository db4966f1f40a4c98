// CUDA MoE ops: moe_route through the MoE engineer's GPU router (ops/cuda/moe.h), and
// moe_experts in two forms:
//   generic:  any nb_weight format; one warp per (token slot, output row) computes the
//             gate/up dot products with the weights dequantized in registers (float32, the
//             CPU op's arithmetic), then the down rows, then a per-token weighted sum over
//             the k slots in slot order (deterministic). Each slot re-reads its expert's
//             weights: right for tests and small batches, not for speed.
//   repacked: NVFP4 experts registered with nb_cuda_moe_register run nb_moe_forward (W4A16
//             tensor-core kernels; activations rounded to BF16).
// The per-expert nb_weight arrays are copied to the device once and found again by the
// host array's address and contents (a table of NB_CUDA_MOE_REG_MAX entries per context).
// moe_gate_route: the linear op then moe_route; the router gate GEMV and the choice in one
// launch (ops/cuda/moe_router.h) only when asked for (measured slower, see below).
// Exercised by tests/cuda_ops/test_cuda_vs_cpu.c (moe_route*, moe_experts*) and
// tests/cuda_ops/test_cuda_small_ops.c (moe_gate_route).
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/linear.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/moe_router.h"
#include "ops/cuda/synth_repack.h"

typedef struct nb_cuda_moe_reg {
    const nb_weight *key;  /* the host nb_weight array (gate) this entry describes */
    int E;
    nb_weight *snapshot;   /* host copy of gate, up, down [3E] at upload time */
    nb_weight *dev_table;  /* device copy [3E] for the generic kernels */
    int repacked;
    nb_moe_weights_dev rw; /* repacked weights (device) when repacked */
    void *rbuf;
} nb_cuda_moe_reg;

void nb_cuda_moe_release_all(nb_ops_ctx *ctx)
{
    nb_cuda_state *s = nb_cuda_st(ctx);
    for (int i = 0; i < s->n_moe; i++) {
        nb_cuda_moe_reg *r = s->moe[i];
        cudaFree(r->dev_table);
        cudaFree(r->rbuf);
        free(r->snapshot);
        free(r);
    }
    s->n_moe = 0;
}

static int reg_matches(const nb_cuda_moe_reg *r, const nb_moe_weights *w)
{
    if (r->key != w->gate || r->E != w->n_experts) return 0;
    size_t b = (size_t)w->n_experts * sizeof(nb_weight);
    return !memcmp(r->snapshot, w->gate, b) && !memcmp(r->snapshot + r->E, w->up, b) &&
           !memcmp(r->snapshot + 2 * r->E, w->down, b);
}

// The entry for w, created (and its table uploaded) when missing or stale.
static nb_status reg_get(nb_ops_ctx *ctx, const nb_moe_weights *w, nb_cuda_moe_reg **out)
{
    nb_cuda_state *s = nb_cuda_st(ctx);
    for (int i = 0; i < s->n_moe; i++)
        if (s->moe[i]->key == w->gate && s->moe[i]->E == w->n_experts) {
            if (reg_matches(s->moe[i], w)) {
                *out = s->moe[i];
                return NB_OK;
            }
            // Same address, new contents: the array was freed and reused. Drop the entry.
            nb_cuda_moe_reg *r = s->moe[i];
            cudaStreamSynchronize(s->stream);
            cudaFree(r->dev_table);
            cudaFree(r->rbuf);
            free(r->snapshot);
            free(r);
            s->moe[i] = s->moe[--s->n_moe];
            break;
        }
    if (s->n_moe == NB_CUDA_MOE_REG_MAX)
        return nb_error(NB_ERR_OUT_OF_MEMORY, "moe_experts: more than %d expert tables in one CUDA context",
                        NB_CUDA_MOE_REG_MAX);
    const int E = w->n_experts;
    nb_cuda_moe_reg *r = (nb_cuda_moe_reg *)calloc(1, sizeof *r);
    nb_weight *snap = (nb_weight *)malloc((size_t)3 * E * sizeof(nb_weight));
    if (!r || !snap) {
        free(r);
        free(snap);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "moe_experts: expert table");
    }
    memcpy(snap, w->gate, (size_t)E * sizeof(nb_weight));
    memcpy(snap + E, w->up, (size_t)E * sizeof(nb_weight));
    memcpy(snap + 2 * E, w->down, (size_t)E * sizeof(nb_weight));
    r->key = w->gate;
    r->E = E;
    r->snapshot = snap;
    if (cudaMalloc(&r->dev_table, (size_t)3 * E * sizeof(nb_weight)) != cudaSuccess ||
        cudaMemcpy(r->dev_table, snap, (size_t)3 * E * sizeof(nb_weight), cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(r->dev_table);
        free(snap);
        free(r);
        return nb_error(NB_ERR_CUDA, "moe_experts: uploading the expert table of %d experts", E);
    }
    s->moe[s->n_moe++] = r;
    *out = r;
    return NB_OK;
}

// ---- generic kernels ---------------------------------------------------------------------

#define NB_EXP_WARPS 4

__device__ __forceinline__ float row_dot(const nb_weight &w, int64_t row, const float *x)
{
    const int lane = threadIdx.x & 31;
    const int64_t nb = w.k / 16;
    float s = 0;
    for (int64_t b = lane; b < nb; b += 32) {
        float wv[16];
        nb_d_wload16(w, row, b * 16, wv);
#pragma unroll
        for (int i = 0; i < 16; i++) s += x[b * 16 + i] * wv[i];
    }
    for (int64_t j = nb * 16 + lane; j < w.k; j += 32) s += x[j] * nb_d_wload1(w, row, j);
    return nb_d_warp_sum(s);
}

__global__ void k_exp_gate_up(const nb_weight *table, int E, const float *x, int64_t ldx, const int32_t *ids,
                              int64_t ids_ld, int K, int I, float *h)
{
    const int a = blockIdx.x, t = a / K, j = a % K, lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.y * NB_EXP_WARPS + (threadIdx.x >> 5);
    if (row >= I) return;
    const int e = ids[(int64_t)t * ids_ld + j];
    float v = 0;
    if (e >= 0 && e < E) {
        const float *xr = x + (int64_t)t * ldx;
        float g = row_dot(table[e], row, xr), u = row_dot(table[E + e], row, xr);
        v = g / (1.0f + expf(-g)) * u;
    }
    if (lane == 0) h[(int64_t)a * I + row] = v;
}

__global__ void k_exp_down(const nb_weight *table, int E, const float *h, const int32_t *ids, int64_t ids_ld, int K,
                           int I, int H, float *y)
{
    const int a = blockIdx.x, t = a / K, j = a % K, lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.y * NB_EXP_WARPS + (threadIdx.x >> 5);
    if (row >= H) return;
    const int e = ids[(int64_t)t * ids_ld + j];
    float v = 0;
    if (e >= 0 && e < E) v = row_dot(table[2 * E + e], row, h + (int64_t)a * I);
    if (lane == 0) y[(int64_t)a * H + row] = v;
}

__global__ void k_exp_combine(const float *y, const int32_t *ids, int64_t ids_ld, const float *wt, int64_t w_ld, int K,
                              int E, int H, float *out, int64_t ldo, int accumulate)
{
    const int t = blockIdx.x;
    float *o = out + (int64_t)t * ldo;
    for (int c = threadIdx.x; c < H; c += blockDim.x) {
        float s = accumulate ? o[c] : 0.0f;
        for (int j = 0; j < K; j++) {
            int e = ids[(int64_t)t * ids_ld + j];
            if (e >= 0 && e < E) s += y[((int64_t)t * K + j) * H + c] * wt[(int64_t)t * w_ld + j];
        }
        o[c] = s;
    }
}

// ---- the ops -----------------------------------------------------------------------------

extern "C" nb_status nb_cuda_moe_route(nb_ops_ctx *ctx, const nb_tensor *logits, const nb_router_params *p,
                                       nb_tensor *ids, nb_tensor *weights)
{
    NB_TRY(nb_cuda_check_f32("moe_route", "logits", logits, 2));
    NB_TRY(nb_cuda_check_f32("moe_route", "weights", weights, 2));
    if (!ids || ids->dtype != NB_DTYPE_I32 || ids->ndim != 2 || ids->device != NB_DEVICE_CUDA)
        return nb_error(NB_ERR_INVALID_ARG, "moe_route: ids must be I32 [T, k] in device memory");
    const int E = p->n_experts, K = p->top_k;
    const int64_t T = logits->shape[0];
    if (logits->shape[1] != E || ids->shape[0] != T || ids->shape[1] != K || weights->shape[0] != T ||
        weights->shape[1] != K)
        return nb_error(NB_ERR_INVALID_ARG, "moe_route: %d experts, top_k %d, logits [%lld, %lld], ids [%lld, %lld]", E,
                        K, (long long)T, (long long)logits->shape[1], (long long)ids->shape[0],
                        (long long)ids->shape[1]);
    if (!nb_tensor_is_contiguous(logits) || !nb_tensor_is_contiguous(ids) || !nb_tensor_is_contiguous(weights))
        return nb_error(NB_ERR_UNSUPPORTED, "moe_route: the CUDA router needs dense logits, ids and weights");
    nb_moe_router_desc d;
    memset(&d, 0, sizeof d);
    d.tokens = (int)T;
    d.experts = E;
    d.topk = K;
    d.score = p->score == NB_ROUTER_SIGMOID ? 1 : 0;
    d.group = p->group == NB_ROUTER_GREEDY ? 0 : p->group == NB_ROUTER_GROUP_MAX ? 1 : 2;
    d.n_group = p->group == NB_ROUTER_GREEDY ? 1 : p->n_group;
    d.topk_group = p->group == NB_ROUTER_GREEDY ? 1 : p->topk_group;
    d.norm_topk_prob = p->norm_topk_prob;
    d.routed_scaling_factor = p->routed_scaling_factor;
    d.logits = (const float *)logits->data;
    d.bias = p->correction_bias;
    d.ids = (int32_t *)ids->data;
    d.weights = (float *)weights->data;
    return nb_moe_router(&d, nb_cuda_stream(ctx));
}

// The fused gate + route launch's counter slot of this context (ops/cuda/moe_router.h), or -1
// when every slot is held by another context. A slot stays with its context's address: a
// context freed and another made at the same address reuse it, which is safe because the
// counter is back at 0 after every completed launch.
static long long gate_route_fused; // launches of the fused form, for tests
static int gate_route_force = -1;  // nb_cuda_moe_gate_route_force

extern "C" void nb_cuda_moe_gate_route_force(int fused) { gate_route_force = fused < 0 ? -1 : fused ? 1 : 0; }

// The fused launch only when asked for (NIBBLE_CUDA_GATE_ROUTE=fused or the force above): on
// the H200 it measured slower than the linear op's GEMV then the router at every T tried
// (1 token: 12.0 vs 10.9 us per graph node; 10: 66 vs 13.6), its GEMV being bound by
// dependent loads of x (bench/RESULTS.md).
static int gate_route_fused_wanted(void)
{
    static int env = -1; // read once; a benign race between threads reads the same value
    if (gate_route_force >= 0) return gate_route_force;
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_GATE_ROUTE");
        env = e && !strcmp(e, "fused");
    }
    return env;
}

static int gate_route_slot(nb_ops_ctx *ctx)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static const void *owner[NB_GATE_ROUTE_SLOTS];
    int slot = -1;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < NB_GATE_ROUTE_SLOTS && slot < 0; i++)
        if (owner[i] == ctx) slot = i;
    for (int i = 0; i < NB_GATE_ROUTE_SLOTS && slot < 0; i++)
        if (!owner[i]) owner[i] = ctx, slot = i;
    pthread_mutex_unlock(&mu);
    return slot;
}

extern "C" nb_status nb_cuda_moe_gate_route(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *gate,
                                            nb_tensor *logits, const nb_router_params *p, nb_tensor *ids,
                                            nb_tensor *weights)
{
    NB_TRY(nb_cuda_check_f32("moe_gate_route", "x", x, 2));
    NB_TRY(nb_cuda_check_f32("moe_gate_route", "logits", logits, 2));
    NB_TRY(nb_cuda_check_weight("moe_gate_route", gate));
    const int64_t T = x->shape[0];
    if (!ids || ids->dtype != NB_DTYPE_I32 || ids->ndim != 2 || ids->device != NB_DEVICE_CUDA)
        return nb_error(NB_ERR_INVALID_ARG, "moe_gate_route: ids must be I32 [T, k] in device memory");
    NB_TRY(nb_cuda_check_f32("moe_gate_route", "weights", weights, 2));
    const int K = p->top_k;
    if (ids->shape[0] != T || ids->shape[1] != K || weights->shape[0] != T || weights->shape[1] != K)
        return nb_error(NB_ERR_INVALID_ARG, "moe_gate_route: top_k %d, %lld tokens, ids [%lld, %lld], weights [%lld, %lld]",
                        K, (long long)T, (long long)ids->shape[0], (long long)ids->shape[1],
                        (long long)weights->shape[0], (long long)weights->shape[1]);
    const int64_t row_bytes = gate->row_stride ? gate->row_stride : gate->k * 2;
    nb_moe_gate_router_desc d;
    memset(&d, 0, sizeof d);
    d.x = (const float *)x->data;
    d.ldx = x->stride[0];
    d.hidden = (int)gate->k;
    d.gate = (const uint16_t *)gate->data;
    d.gate_ld = row_bytes / 2;
    d.gate_bias = gate->bias;
    d.r.tokens = (int)T;
    d.r.experts = p->n_experts;
    const int want = !nb_cuda_small_ops_legacy() && gate_route_fused_wanted();
    d.slot = want ? gate_route_slot(ctx) : -1; // no slot (and no lock) on the default path
    const int fused = want && gate->fmt == NB_WFMT_BF16 && row_bytes % 16 == 0 &&
                      nb_tensor_is_contiguous(logits) && nb_tensor_is_contiguous(ids) &&
                      nb_tensor_is_contiguous(weights) && nb_moe_gate_router_fits(&d);
    if (!fused) {
        nb_status st = nb_cuda_linear(ctx, x, gate, logits);
        if (st != NB_OK) return nb_error_wrap(st, "moe_gate_route: gate");
        return nb_cuda_moe_route(ctx, logits, p, ids, weights);
    }
    d.r.topk = K;
    d.r.score = p->score == NB_ROUTER_SIGMOID ? 1 : 0;
    d.r.group = p->group == NB_ROUTER_GREEDY ? 0 : p->group == NB_ROUTER_GROUP_MAX ? 1 : 2;
    d.r.n_group = p->group == NB_ROUTER_GREEDY ? 1 : p->n_group;
    d.r.topk_group = p->group == NB_ROUTER_GREEDY ? 1 : p->topk_group;
    d.r.norm_topk_prob = p->norm_topk_prob;
    d.r.routed_scaling_factor = p->routed_scaling_factor;
    d.r.logits = (const float *)logits->data;
    d.r.bias = p->correction_bias;
    d.r.ids = (int32_t *)ids->data;
    d.r.weights = (float *)weights->data;
    NB_TRY(nb_moe_gate_router(&d, nb_cuda_stream(ctx)));
    __atomic_fetch_add(&gate_route_fused, 1, __ATOMIC_RELAXED);
    return NB_OK;
}

extern "C" long long nb_cuda_moe_gate_route_fused_launches(void)
{
    return __atomic_load_n(&gate_route_fused, __ATOMIC_RELAXED);
}

static nb_status experts_repacked(nb_ops_ctx *ctx, const nb_cuda_moe_reg *r, const nb_tensor *x, const nb_tensor *ids,
                                  const nb_tensor *weights, int accumulate, nb_tensor *out)
{
    const int T = (int)x->shape[0], K = (int)ids->shape[1], H = r->rw.hidden;
    if (ids->stride[0] != K || weights->stride[0] != K || out->stride[0] != H)
        return nb_error(NB_ERR_UNSUPPORTED, "moe_experts: the repacked path needs dense ids, weights and out");
    cudaStream_t s = nb_cuda_stream(ctx);
    uint16_t *xb = (uint16_t *)nb_cuda_scratch(ctx, 2, (size_t)T * H * 2);
    if (!xb) return NB_ERR_OUT_OF_MEMORY;
    nb_cuda_to_bf16(s, (const float *)x->data, x->stride[0], T, H, xb, NULL);
    NB_CUDA_LAUNCHED("moe_experts (to bf16)");
    size_t wsb = nb_moe_workspace_bytes(&r->rw, T, K);
    void *ws = nb_cuda_scratch(ctx, 3, wsb);
    if (!ws) return NB_ERR_OUT_OF_MEMORY;
    nb_moe_desc d;
    memset(&d, 0, sizeof d);
    d.tokens = T;
    d.topk = K;
    d.x = xb;
    d.ids = (const int32_t *)ids->data;
    d.weights = (const float *)weights->data;
    d.out = (float *)out->data;
    d.accumulate = accumulate;
    d.kernel = NB_MOE_KERNEL_AUTO;
    d.workspace = ws;
    d.workspace_bytes = wsb;
    return nb_moe_forward(&r->rw, &d, s);
}

extern "C" nb_status nb_cuda_moe_experts(nb_ops_ctx *ctx, const nb_tensor *x, const nb_tensor *ids,
                                         const nb_tensor *weights, const nb_moe_weights *w, int accumulate,
                                         nb_tensor *out)
{
    NB_TRY(nb_cuda_check_f32("moe_experts", "x", x, 2));
    NB_TRY(nb_cuda_check_f32("moe_experts", "weights", weights, 2));
    NB_TRY(nb_cuda_check_f32("moe_experts", "out", out, 2));
    if (!ids || ids->dtype != NB_DTYPE_I32 || ids->ndim != 2 || ids->device != NB_DEVICE_CUDA)
        return nb_error(NB_ERR_INVALID_ARG, "moe_experts: ids must be I32 [T, k] in device memory");
    const int64_t T = x->shape[0], H = w->hidden, I = w->inter, K = ids->shape[1];
    for (int e = 0; e < w->n_experts; e++) {
        const nb_weight *g = &w->gate[e], *u = &w->up[e], *dn = &w->down[e];
        if (g->n != I || g->k != H || u->n != I || u->k != H || dn->n != H || dn->k != I)
            return nb_error(NB_ERR_INVALID_ARG, "moe_experts: expert %d weights do not match hidden %lld, inter %lld", e,
                            (long long)H, (long long)I);
    }
    if (T == 0) {
        return NB_OK;
    }
    nb_cuda_moe_reg *r;
    NB_TRY(reg_get(ctx, w, &r));
    if (r->repacked) return experts_repacked(ctx, r, x, ids, weights, accumulate, out);
    for (int e = 0; e < w->n_experts; e++) {
        NB_TRY(nb_cuda_check_weight("moe_experts gate", &w->gate[e]));
        NB_TRY(nb_cuda_check_weight("moe_experts up", &w->up[e]));
        NB_TRY(nb_cuda_check_weight("moe_experts down", &w->down[e]));
    }
    float *hbuf = (float *)nb_cuda_scratch(ctx, 2, (size_t)(T * K * I) * sizeof(float));
    float *ybuf = (float *)nb_cuda_scratch(ctx, 3, (size_t)(T * K * H) * sizeof(float));
    if (!hbuf || !ybuf) return NB_ERR_OUT_OF_MEMORY;
    cudaStream_t s = nb_cuda_stream(ctx);
    dim3 g1((unsigned)(T * K), (unsigned)((I + NB_EXP_WARPS - 1) / NB_EXP_WARPS));
    k_exp_gate_up<<<g1, 32 * NB_EXP_WARPS, 0, s>>>(r->dev_table, w->n_experts, (const float *)x->data, x->stride[0],
                                                  (const int32_t *)ids->data, ids->stride[0], (int)K, (int)I, hbuf);
    NB_CUDA_LAUNCHED("moe_experts (gate_up)");
    dim3 g2((unsigned)(T * K), (unsigned)((H + NB_EXP_WARPS - 1) / NB_EXP_WARPS));
    k_exp_down<<<g2, 32 * NB_EXP_WARPS, 0, s>>>(r->dev_table, w->n_experts, hbuf, (const int32_t *)ids->data,
                                               ids->stride[0], (int)K, (int)I, (int)H, ybuf);
    NB_CUDA_LAUNCHED("moe_experts (down)");
    k_exp_combine<<<(unsigned)T, 256, 0, s>>>(ybuf, (const int32_t *)ids->data, ids->stride[0],
                                             (const float *)weights->data, weights->stride[0], (int)K, w->n_experts,
                                             (int)H, (float *)out->data, out->stride[0], accumulate);
    NB_CUDA_LAUNCHED("moe_experts (combine)");
    return NB_OK;
}

// ---- registration of repacked NVFP4 experts ------------------------------------------------

// Copy rows of a host NVFP4 weight (codes and scales) into dense buffers.
static void host_rows(const nb_weight *w, uint8_t *codes, uint8_t *scales)
{
    const int64_t rb = w->k / 2, sb = w->k / 16;
    const int64_t rs = w->row_stride ? w->row_stride : rb, ss = w->scale_row_stride ? w->scale_row_stride : sb;
    for (int64_t r = 0; r < w->n; r++) {
        memcpy(codes + r * rb, (const uint8_t *)w->data + r * rs, (size_t)rb);
        memcpy(scales + r * sb, (const uint8_t *)w->scale + r * ss, (size_t)sb);
    }
}

extern "C" int nb_cuda_moe_is_registered(nb_ops_ctx *ctx, const nb_moe_weights *w)
{
    nb_cuda_state *s = nb_cuda_st(ctx);
    for (int i = 0; i < s->n_moe; i++)
        if (reg_matches(s->moe[i], w)) return s->moe[i]->repacked;
    return 0;
}

// The repack from the device copies (no host copy: synthetic models generated on the GPU),
// into r->rbuf laid out as below; ops/cuda/synth_repack.h.
static nb_status register_from_device(nb_ops_ctx *ctx, nb_cuda_moe_reg *r, const nb_moe_weights *dev, size_t total)
{
    const int E = dev->n_experts, H = dev->hidden, I = dev->inter;
    const size_t w13 = nb_moe_packed_weight_bytes(2 * I, H), s13 = nb_moe_packed_scale_bytes(2 * I, H);
    const size_t w2 = nb_moe_packed_weight_bytes(H, I), s2 = nb_moe_packed_scale_bytes(H, I);
    float *g = (float *)malloc((size_t)E * 3 * sizeof(float));
    if (!g) return nb_error(NB_ERR_OUT_OF_MEMORY, "moe register: global scales");
    if (cudaMalloc(&r->rbuf, total) != cudaSuccess) {
        cudaGetLastError();
        free(g);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "moe register: %zu bytes of repacked experts on the device", total);
    }
    uint8_t *W13 = (uint8_t *)r->rbuf, *S13 = W13 + w13 * E, *W2 = S13 + s13 * E, *S2 = W2 + w2 * E;
    cudaStream_t s = nb_cuda_stream(ctx);
    nb_status st = NB_OK;
    for (int e = 0; e < E && st == NB_OK; e++) {
        const nb_weight *ga = &dev->gate[e], *up = &dev->up[e], *dn = &dev->down[e];
        nb_nvfp4_dev_rows a = {(const uint8_t *)ga->data, (const uint8_t *)ga->scale, ga->row_stride,
                                 ga->scale_row_stride, I};
        nb_nvfp4_dev_rows b = {(const uint8_t *)up->data, (const uint8_t *)up->scale, up->row_stride,
                                 up->scale_row_stride, I};
        nb_nvfp4_dev_rows d = {(const uint8_t *)dn->data, (const uint8_t *)dn->scale, dn->row_stride,
                                 dn->scale_row_stride, H};
        st = nb_moe_repack_nvfp4_cuda("gate_up", &a, &b, 2 * I, H, W13 + w13 * e, S13 + s13 * e, s);
        if (st == NB_OK) st = nb_moe_repack_nvfp4_cuda("down", &d, NULL, H, I, W2 + w2 * e, S2 + s2 * e, s);
        g[2 * e] = ga->global_scale;
        g[2 * e + 1] = up->global_scale;
        g[2 * E + e] = dn->global_scale;
    }
    if (st == NB_OK &&
        (cudaMemcpyAsync(S2 + s2 * E, g, (size_t)E * 3 * sizeof(float), cudaMemcpyHostToDevice, s) != cudaSuccess ||
         cudaStreamSynchronize(s) != cudaSuccess)) {
        cudaGetLastError();
        st = nb_error(NB_ERR_CUDA, "moe register: repacking %d experts on the device", E);
    }
    free(g);
    if (st != NB_OK) {
        cudaFree(r->rbuf);
        r->rbuf = NULL;
    }
    return st;
}

// The original host repack: stage every expert's repacked bytes in host memory, upload.
static nb_status register_from_host(nb_cuda_moe_reg *r, const nb_moe_weights *host, size_t total)
{
    const int E = host->n_experts, H = host->hidden, I = host->inter;
    const size_t w13 = nb_moe_packed_weight_bytes(2 * I, H), s13 = nb_moe_packed_scale_bytes(2 * I, H);
    const size_t w2 = nb_moe_packed_weight_bytes(H, I), s2 = nb_moe_packed_scale_bytes(H, I);
    uint8_t *hbuf = (uint8_t *)malloc(total);
    uint8_t *tc = (uint8_t *)malloc(w13 + s13);
    if (!hbuf || !tc) {
        free(hbuf);
        free(tc);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "moe register: %zu bytes of host staging", total);
    }
    // Layout: all w13, all s13, all w2, all s2, then g13 [E][2], g2 [E].
    uint8_t *W13 = hbuf, *S13 = W13 + w13 * E, *W2 = S13 + s13 * E, *S2 = W2 + w2 * E;
    float *G13 = (float *)(S2 + s2 * E), *G2 = G13 + 2 * E;
    nb_status st = NB_OK;
    for (int e = 0; e < E && st == NB_OK; e++) {
        uint8_t *codes = tc, *scales = tc + w13;
        host_rows(&host->gate[e], codes, scales);
        host_rows(&host->up[e], codes + (size_t)I * H / 2, scales + (size_t)I * H / 16);
        st = nb_moe_repack_nvfp4("gate_up", codes, scales, 2 * I, H, W13 + w13 * e, S13 + s13 * e);
        if (st != NB_OK) break;
        host_rows(&host->down[e], codes, scales);
        st = nb_moe_repack_nvfp4("down", codes, scales, H, I, W2 + w2 * e, S2 + s2 * e);
        G13[2 * e] = host->gate[e].global_scale;
        G13[2 * e + 1] = host->up[e].global_scale;
        G2[e] = host->down[e].global_scale;
    }
    free(tc);
    if (st == NB_OK) {
        if (cudaMalloc(&r->rbuf, total) != cudaSuccess ||
            cudaMemcpy(r->rbuf, hbuf, total, cudaMemcpyHostToDevice) != cudaSuccess) {
            cudaGetLastError();
            st = nb_error(NB_ERR_CUDA, "moe register: uploading %zu bytes of repacked experts", total);
        }
    }
    free(hbuf);
    return st;
}

extern "C" nb_status nb_cuda_moe_register(nb_ops_ctx *ctx, const nb_moe_weights *dev, const nb_moe_weights *host)
{
    const nb_moe_weights *src = host ? host : dev; // no host copy: repack on the device
    const int E = src->n_experts, H = src->hidden, I = src->inter;
    if (dev->n_experts != E || dev->hidden != H || dev->inter != I)
        return nb_error(NB_ERR_INVALID_ARG, "moe register: host and device expert shapes differ");
    for (int e = 0; e < E; e++)
        if (src->gate[e].fmt != NB_WFMT_NVFP4 || src->up[e].fmt != NB_WFMT_NVFP4 || src->down[e].fmt != NB_WFMT_NVFP4)
            return nb_error(NB_ERR_UNSUPPORTED, "moe register: expert %d is not NVFP4", e);
    if (I % NB_MOE_ROW_TILE || H % NB_MOE_ROW_TILE || H % NB_MOE_K_GROUP || I % NB_MOE_K_GROUP)
        return nb_error(NB_ERR_UNSUPPORTED, "moe register: hidden %d / inter %d do not tile the repacked layout (%d, %d)",
                        H, I, NB_MOE_ROW_TILE, NB_MOE_K_GROUP);
    nb_cuda_moe_reg *r;
    NB_TRY(reg_get(ctx, dev, &r));
    if (r->repacked) return NB_OK;
    const size_t w13 = nb_moe_packed_weight_bytes(2 * I, H), s13 = nb_moe_packed_scale_bytes(2 * I, H);
    const size_t w2 = nb_moe_packed_weight_bytes(H, I), s2 = nb_moe_packed_scale_bytes(H, I);
    const size_t per = w13 + s13 + w2 + s2;
    const size_t total = per * (size_t)E + (size_t)E * 3 * sizeof(float);
    NB_TRY(host ? register_from_host(r, host, total) : register_from_device(ctx, r, dev, total));
    uint8_t *d = (uint8_t *)r->rbuf;
    r->rw.experts = E;
    r->rw.hidden = H;
    r->rw.inter = I;
    r->rw.w13 = d;
    r->rw.s13 = d + w13 * E;
    r->rw.w2 = d + (w13 + s13) * E;
    r->rw.s2 = d + (w13 + s13 + w2) * E;
    r->rw.g13 = (const float *)(d + per * E);
    r->rw.g2 = r->rw.g13 + 2 * E;
    r->repacked = 1;
    return NB_OK;
}
