// Lab timing of the CUDA linear op (tools/lab/linear_bench.h).
// Exercise: nibble bench-linear [--tokens 1,2,10,64] [--lt-tokens 512,4096] [--sweep] [--lt-host] [--lt-cold] [--ab]
// --ab: the BF16 decode rows as "old:" (the kernels before the fourth session, no PDL) against
// each new variant in the same process (lb_ab_knobs), the MLP rows likewise.
// Decode rows: the automatic route, "old:" the route before the stream-K kernel where that
// differs (the same binary with it off), "forced:" the stream-K kernel where the ladder does
// not take it; then the MLP op (shared expert, dense layer): automatic, "old:", "sk:" (the sk
// ladder, NIBBLE_CUDA_LINEAR_SK=1).
// Weights are random bits generated on the device (BF16 drawn in [-2, 2], NVFP4 codes any,
// E4M3 scales normal), so only time is measured here; tests/cuda_ops checks the values.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemm_lt.h"
#include "ops/cuda/linear.h"
#include "tools/lab/linear_bench.h"
#include "tools/lab/moe_bench.h"

typedef struct {
    const char *name;
    int64_t n, k;
} lb_shape;

// GLM-5's dense layers (hidden 6144) as the model runs them: out x in.
static const lb_shape lb_shapes[] = {
    {"attn_in 6144->2784", 2784, 6144}, // q_a + kv_a + indexer wk + weights_proj, concatenated
    {"q_b 2048->16384", 16384, 2048},
    {"idx_wq_b 2048->4096", 4096, 2048},
    {"o 16384->6144", 6144, 16384},
    {"router 6144->256", 256, 6144}, // mlp.gate
    {"sh_down 2048->6144", 6144, 2048},
    {"down 12288->6144", 6144, 12288},
    {"lm_head 6144->154880", 154880, 6144},
    {"sh_gate_up 6144->4096", 4096, 6144},  // shared expert, gate|up adjacent (one linear)
    {"gate_up 6144->24576", 24576, 6144},   // dense MLP, gate|up adjacent
};
#define LB_NSHAPES ((int)(sizeof lb_shapes / sizeof lb_shapes[0]))

// The many-token (cuBLASLt) rows and --lt-cold: GLM-5's linears as the model runs them at
// hundreds of tokens (issue 9), in a layer's order. The lm_head is left out (its output alone is GBs).
static const lb_shape lb_lt_shapes[] = {
    {"attn_in 6144->2784", 2784, 6144},   // q_a + kv_a + indexer wk + weights_proj, concatenated
    {"q_b 2048->16384", 16384, 2048},
    {"idx_wq_b 2048->4096", 4096, 2048},
    {"o 16384->6144", 6144, 16384},
    {"gate_up 6144->24576", 24576, 6144}, // dense MLP
    {"down 12288->6144", 6144, 12288},
    {"sh_gate_up 6144->4096", 4096, 6144}, // shared expert
    {"sh_down 2048->6144", 6144, 2048},
};
#define LB_LT_NSHAPES ((int)(sizeof lb_lt_shapes / sizeof lb_lt_shapes[0]))

__device__ __forceinline__ uint32_t lb_hash(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)(x ^ (x >> 31));
}

// mode 0: random bytes; 1: E4M3 scales 0x20..0x3F; 2: BF16 pairs in [-2, 2); 3: F32 in [-1, 1).
__global__ void lb_fill(uint8_t *p, size_t n, uint64_t seed, int mode)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += step) {
        uint32_t h = lb_hash(seed * 0x100000001B3ull + i);
        if (mode == 0) p[i] = (uint8_t)h;
        else if (mode == 1) p[i] = (uint8_t)(0x20 + (h & 31));
        else if (mode == 2) p[i] = (i & 1) ? (uint8_t)(0x3f + ((h >> 8) & 0x80)) : (uint8_t)h; // |v| in [0.5, 2)
        else if (i % 4 == 0 && i + 3 < n) {
            float f = (float)(h >> 8) / 8388608.0f - 1.0f;
            memcpy(p + i, &f, 4);
        }
    }
}

static nb_status lb_fill_dev(void *p, size_t n, uint64_t seed, int mode)
{
    lb_fill<<<2048, 256>>>((uint8_t *)p, n, seed, mode);
    NB_CUDA_TRY(cudaGetLastError());
    return NB_OK;
}

static int lb_cmp(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float lb_median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof(float), lb_cmp);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    double copy_GBps, bf16_TFLOPs;
    nb_ops_ctx *ctx;
    int l2_bytes, sm_count, iters;
    float *x, *y; // activations and outputs, sized for the largest point
} lb_env;

// The call a timed point repeats: copy i of its weights at T tokens.
typedef nb_status (*lb_call_fn)(lb_env *E, const void *arg, int i, int64_t T);

typedef struct {
    const nb_weight *ws;
} lb_linear_arg;

static nb_status lb_linear_call(lb_env *E, const void *arg, int i, int64_t T)
{
    const nb_weight *w = &((const lb_linear_arg *)arg)->ws[i];
    nb_tensor x = nb_tensor_2d(E->x, NB_DTYPE_F32, T, w->k), y = nb_tensor_2d(E->y, NB_DTYPE_F32, T, w->n);
    x.device = y.device = NB_DEVICE_CUDA;
    return nb_op_linear(E->ctx, &x, w, &y);
}

// One point: `reps` calls over rotating copies captured in a CUDA graph (plain launches
// when capture fails), one warm-up call outside the graph (grows scratch, fills caches).
// Returns the median time per call in microseconds, or a negative value on error.
static double lb_time_fn(lb_env *E, lb_call_fn fn, const void *arg, int copies, int64_t T, int *graphed)
{
    nb_ops_ctx *ctx = E->ctx;
    cudaStream_t s = nb_cuda_stream(ctx);
    if (fn(E, arg, 0, T) != NB_OK) return -1;
    if (cudaStreamSynchronize(s) != cudaSuccess) return -1;
    const int reps = copies * ((8 + copies - 1) / copies);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    *graphed = 0;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        int ok = 1;
        for (int i = 0; i < reps && ok; i++) ok = fn(E, arg, i % copies, T) == NB_OK;
        if (cudaStreamEndCapture(s, &graph) == cudaSuccess && ok &&
            cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess)
            *graphed = 1;
        cudaGetLastError();
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float t[64];
    const int iters = E->iters < 64 ? E->iters : 64;
    int bad = 0;
    for (int it = -2; it < iters && !bad; it++) {
        cudaEventRecord(e0, s);
        if (*graphed) bad = cudaGraphLaunch(exec, s) != cudaSuccess;
        else
            for (int i = 0; i < reps && !bad; i++) bad = fn(E, arg, i % copies, T) != NB_OK;
        cudaEventRecord(e1, s);
        if (cudaEventSynchronize(e1) != cudaSuccess) bad = 1;
        if (it >= 0) cudaEventElapsedTime(&t[it], e0, e1);
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (bad || cudaGetLastError() != cudaSuccess) return -1;
    return lb_median(t, iters) * 1e3 / reps;
}

static double lb_time(lb_env *E, const nb_weight *ws, int copies, int64_t T, int *graphed)
{
    lb_linear_arg a = {ws};
    return lb_time_fn(E, lb_linear_call, &a, copies, T, graphed);
}

static void lb_print(lb_env *E, const char *fmt, const lb_shape *sh, int64_t T, const char *path, double wbytes,
                     double us, int graphed)
{
    if (us < 0) {
        printf("%-6s %-22s %5lld  %-22s  failed: %s\n", fmt, sh->name, (long long)T, path, nb_last_error());
        return;
    }
    const double bytes = wbytes + (double)T * sh->k * 4 + (double)T * sh->n * 4;
    const double gbs = bytes / (us * 1e-6) / 1e9, tf = 2.0 * T * sh->n * sh->k / (us * 1e-6) / 1e12;
    printf("%-6s %-22s %5lld  %-22s %10.2f %9.0f %6.1f%% %9.1f %6.1f%%%s\n", fmt, sh->name, (long long)T, path, us, gbs,
           100.0 * gbs / E->copy_GBps, tf, 100.0 * tf / E->bf16_TFLOPs, graphed ? "" : "  (no graph)");
    fflush(stdout);
}

// Weight copies of one shape and format: enough that their bytes exceed 3x L2.
static nb_status lb_weights(lb_env *E, int nvfp4, const lb_shape *sh, nb_weight *ws, int *copies, void **data,
                            void **scale, double *wbytes)
{
    const size_t db = nvfp4 ? (size_t)(sh->n * sh->k / 2) : (size_t)(sh->n * sh->k * 2);
    const size_t sb = nvfp4 ? (size_t)(sh->n * sh->k / 16) : 0;
    int c = (int)((3.0 * E->l2_bytes + db + sb - 1) / (double)(db + sb));
    c = c < 1 ? 1 : c > 16 ? 16 : c;
    *copies = c;
    *wbytes = (double)(db + sb);
    *data = *scale = NULL;
    NB_CUDA_TRY(cudaMalloc(data, db * c));
    if (sb) NB_CUDA_TRY(cudaMalloc(scale, sb * c));
    NB_TRY(lb_fill_dev(*data, db * c, 7 + (uint64_t)sh->n, nvfp4 ? 0 : 2));
    if (sb) NB_TRY(lb_fill_dev(*scale, sb * c, 11 + (uint64_t)sh->k, 1));
    for (int i = 0; i < c; i++) {
        nb_weight w;
        memset(&w, 0, sizeof w);
        w.fmt = nvfp4 ? NB_WFMT_NVFP4 : NB_WFMT_BF16;
        w.n = sh->n;
        w.k = sh->k;
        w.data = (uint8_t *)*data + db * i;
        w.scale = sb ? (uint8_t *)*scale + sb * i : NULL;
        w.global_scale = nvfp4 ? 1.0f / 64 : 1.0f;
        w.block_k = nvfp4 ? 16 : 0;
        w.device = NB_DEVICE_CUDA;
        ws[i] = w;
    }
    return NB_OK;
}

// The label of the route a call takes now (after the forcing knobs are set).
static void lb_route(lb_env *E, const nb_weight *w, int64_t T, const char *tag, char *path, size_t len)
{
    const char *route = nb_cuda_linear_path_name(w, E->x, w->k, T);
    nb_cuda_gemv_plan pl = nb_cuda_gemv_plan_for(w, T, E->sm_count);
    if (!strcmp(route, "sk")) {
        nb_cuda_sk_plan sp = nb_cuda_sk_plan_for(w, T, 0, E->sm_count);
        snprintf(path, len, "%ssk %dt w=%lld", tag, sp.terms, (long long)sp.warps);
    } else if (!strcmp(route, "mma")) {
        nb_cuda_mma_plan mp = nb_cuda_mma_plan_for(w, T, E->sm_count);
        snprintf(path, len, "%smma %dt ks=%d", tag, mp.terms, mp.ksplit);
    } else if (!strcmp(route, "lt")) {
        snprintf(path, len, "%slt 1 term", tag);
    } else if (pl.vector) {
        snprintf(path, len, "%sgemv%s R=%d W=%d", tag, pl.staged ? " stg" : "", pl.rows_per_warp, pl.ksplit);
    } else {
        snprintf(path, len, "%sgemv generic", tag);
    }
}

static void lb_gemv_rows(lb_env *E, int nvfp4, const lb_shape *sh, const nb_bench_linear_params *p, nb_weight *ws,
                         int copies, double wbytes)
{
    const char *fmt = nvfp4 ? "nvfp4" : "bf16";
    for (int ti = 0; ti < p->n_tokens; ti++) {
        const int64_t T = p->tokens[ti];
        // v = 0: the automatic route; 1: the route before the stream-K kernel ("old:",
        // NIBBLE_CUDA_LINEAR_SK=0); 2: the stream-K kernel forced where the ladder does not
        // take it; 3..10 with --sweep: every GEMV K split with and without staging.
        for (int v = 0; v <= (p->sweep ? 10 : 2); v++) {
            const int ks = v > 2 ? 1 << ((v - 3) / 2) : 0, stg = v > 2 ? 1 + (v - 3) % 2 : 0;
            nb_cuda_linear_force_sk(v == 1 || v > 2 ? 1 : v == 2 ? 2 : 0);
            nb_cuda_linear_force_mma(v > 2 ? 1 : 0);
            nb_cuda_linear_force_ksplit(ks);
            nb_cuda_linear_force_staged(stg);
            const char *route = nb_cuda_linear_path_name(&ws[0], E->x, ws[0].k, T);
            nb_cuda_gemv_plan pl = nb_cuda_gemv_plan_for(&ws[0], T, E->sm_count);
            if (v > 2 && (strcmp(route, "gemv") || !pl.vector || pl.ksplit != ks || pl.staged != (stg == 2)))
                continue; // does not fit
            if (v == 1) {
                nb_cuda_linear_force_sk(0);
                const int auto_sk = !strcmp(nb_cuda_linear_path_name(&ws[0], E->x, ws[0].k, T), "sk");
                nb_cuda_linear_force_sk(1);
                if (!auto_sk) continue; // the same route as the automatic row
            }
            if (v == 2) {
                nb_cuda_linear_force_sk(0);
                const int auto_sk = !strcmp(nb_cuda_linear_path_name(&ws[0], E->x, ws[0].k, T), "sk");
                nb_cuda_linear_force_sk(2);
                if (auto_sk || strcmp(route, "sk")) continue; // already timed, or cannot run
            }
            char path[48];
            lb_route(E, &ws[0], T, v == 1 ? "old: " : v == 2 ? "forced: " : v > 2 ? "sweep: " : "", path, sizeof path);
            int graphed = 0;
            double us = lb_time(E, ws, copies, T, &graphed);
            lb_print(E, fmt, sh, T, path, wbytes, us, graphed);
        }
        nb_cuda_linear_force_sk(0);
        nb_cuda_linear_force_mma(0);
        nb_cuda_linear_force_ksplit(0);
        nb_cuda_linear_force_staged(0);
    }
}

// Every knob of the decode linears back to the automatic choice.
static void lb_knobs_auto(void)
{
    nb_cuda_linear_force_sk(0);
    nb_cuda_linear_force_mma(0);
    nb_cuda_linear_force_mma_terms(0);
    nb_cuda_linear_force_ksplit(0);
    nb_cuda_linear_force_staged(0);
    nb_cuda_linear_force_mmr(-1);
    nb_cuda_linear_force_mmr_kw(0);
    nb_cuda_linear_force_mmr_terms(0);
    nb_cuda_linear_force_mmr_unroll(0);
    nb_cuda_linear_force_pdl(-1);
    nb_cuda_linear_force_gemv_v2(-1);
    nb_cuda_linear_force_gemv_r4(-1);
    nb_cuda_mlp_force_fused(-1);
    nb_cuda_mlp_force_silu_fused(-1);
}

// The knobs of A/B variant v (lb_ab_rows); 0 when the variant does not apply at T tokens.
// Variants: 0 old (the kernels before the fourth session: GEMV v1, mma with two terms, no
// PDL, no mmr), 1 automatic (this build's defaults), 2 GEMV v2 two rows per warp + PDL, 3 GEMV
// v2 four rows + PDL, 4 GEMV v2 two rows without PDL, 5 mma one term + PDL, 6 mma one term
// without PDL, 7 mma two terms + PDL, 8 mmr + PDL, 9.. mmr K split 1, 2, 4, 8, 16 (sweep).
#define LB_AB_VARIANTS 14
static int lb_ab_knobs(int v, int64_t T, char *tag, size_t len)
{
    lb_knobs_auto();
    switch (v) {
    case 0:
        nb_cuda_linear_force_mmr(0), nb_cuda_linear_force_gemv_v2(0), nb_cuda_linear_force_pdl(0);
        nb_cuda_linear_force_gemv_r4(0), nb_cuda_linear_force_mma_terms(2), nb_cuda_mlp_force_silu_fused(0);
        snprintf(tag, len, "old: ");
        return 1;
    case 1: snprintf(tag, len, "auto: "); return 1;
    case 2:
    case 3:
    case 4:
        if (T > 2) return 0;
        nb_cuda_linear_force_mmr(0), nb_cuda_linear_force_gemv_v2(1), nb_cuda_linear_force_pdl(v != 4);
        nb_cuda_linear_force_gemv_r4(v == 3 ? 2 : 0);
        snprintf(tag, len, "v2%s: ", v == 4 ? "" : "+pdl");
        return 1;
    case 5:
    case 6:
    case 7:
        if (T < 3) return 0;
        nb_cuda_linear_force_mmr(0), nb_cuda_linear_force_pdl(v != 6), nb_cuda_linear_force_mma_terms(v == 7 ? 2 : 1);
        snprintf(tag, len, "%s: ", v == 6 ? "nopdl" : "pdl");
        return 1;
    default:
        nb_cuda_linear_force_mmr(1), nb_cuda_linear_force_pdl(1);
        if (v >= 9) nb_cuda_linear_force_mmr_kw(1 << (v - 9));
        snprintf(tag, len, "%s", v >= 9 ? "sweep: " : "");
        return 1;
    }
}

// --ab: BF16 decode rows of one shape, old kernels against each new variant, same binary.
static void lb_ab_rows(lb_env *E, const lb_shape *sh, const nb_bench_linear_params *p, nb_weight *ws, int copies,
                       double wbytes)
{
    for (int ti = 0; ti < p->n_tokens; ti++) {
        const int64_t T = p->tokens[ti];
        if (T > 16) continue;
        for (int v = 0; v < (p->sweep ? LB_AB_VARIANTS : 9); v++) {
            char tag[16], path[64];
            if (!lb_ab_knobs(v, T, tag, sizeof tag)) continue;
            const char *route = nb_cuda_linear_path_name(&ws[0], E->x, ws[0].k, T);
            if (!strcmp(route, "mmr")) {
                nb_cuda_mmr_plan mp = nb_cuda_mmr_plan_for(&ws[0], T, E->sm_count);
                snprintf(path, sizeof path, "%smmr %dt W=%d U=%d", tag, mp.terms, mp.kw, mp.unroll);
            } else {
                lb_route(E, &ws[0], T, tag, path, sizeof path);
            }
            int graphed = 0;
            double us = lb_time(E, ws, copies, T, &graphed);
            lb_print(E, "bf16", sh, T, path, wbytes, us, graphed);
        }
        lb_knobs_auto();
    }
}

// The SwiGLU MLP op (nb_op_mlp, accumulating into its output as the shared expert does):
// gate, up [I x H], down [H x I], BF16.
typedef struct {
    const nb_weight *g, *u, *d; // copies
} lb_mlp_arg;

static nb_status lb_mlp_call(lb_env *E, const void *arg, int i, int64_t T)
{
    const lb_mlp_arg *m = (const lb_mlp_arg *)arg;
    const int64_t H = m->d[i].n;
    nb_tensor x = nb_tensor_2d(E->x, NB_DTYPE_F32, T, H), y = nb_tensor_2d(E->y, NB_DTYPE_F32, T, H);
    x.device = y.device = NB_DEVICE_CUDA;
    return nb_op_mlp(E->ctx, &x, &m->g[i], &m->u[i], &m->d[i], 1, &y);
}

static nb_status lb_mlp_rows(lb_env *E, const nb_bench_linear_params *p, const char *name, int64_t H, int64_t I)
{
    const size_t mb = (size_t)(I * H) * 2; // bytes of one matrix
    int copies = (int)((3.0 * E->l2_bytes + 3 * mb - 1) / (double)(3 * mb));
    copies = copies < 1 ? 1 : copies > 16 ? 16 : copies;
    void *data = NULL;
    NB_CUDA_TRY(cudaMalloc(&data, 3 * mb * copies));
    nb_status st = lb_fill_dev(data, 3 * mb * copies, 31 + (uint64_t)I, 2);
    nb_weight g[16], u[16], d[16];
    for (int i = 0; i < copies; i++) {
        nb_weight w;
        memset(&w, 0, sizeof w);
        w.fmt = NB_WFMT_BF16;
        w.global_scale = 1.0f;
        w.device = NB_DEVICE_CUDA;
        w.n = I, w.k = H;
        w.data = (uint8_t *)data + 3 * mb * i;
        g[i] = w;
        w.data = (uint8_t *)data + 3 * mb * i + mb;
        u[i] = w;
        w.n = H, w.k = I;
        w.data = (uint8_t *)data + 3 * mb * i + 2 * mb;
        d[i] = w;
    }
    lb_mlp_arg a = {g, u, d};
    const lb_shape sh = {name, H, I};
    for (int ti = 0; ti < p->n_tokens && st == NB_OK; ti++) {
        const int64_t T = p->tokens[ti];
        if (T > NB_CUDA_LINEAR_GEMV_MAX_TOKENS) continue;
        // 0: automatic; 1: before the stream-K kernel (NIBBLE_CUDA_LINEAR_SK=0), where the
        // automatic route differs; 2: the sk ladder (NIBBLE_CUDA_LINEAR_SK=1: fused gate+up and
        // the down projection on the stream-K kernel too).
        if (p->ab) {
            // old; automatic; automatic with the fused gate+up off where it runs; automatic
            // with four GEMV rows per warp at 1-2 tokens; automatic with the separate SiLU pass.
            for (int v = 0; v < 5; v++) {
                char tag[16], path[64];
                lb_ab_knobs(v == 0 ? 0 : 1, T, tag, sizeof tag);
                if (v == 4) nb_cuda_mlp_force_silu_fused(0), snprintf(tag, sizeof tag, "silu pass: ");
                const int auto_fused = nb_cuda_gate_up_sk_can(&g[0], &u[0], E->x, H, T);
                if (v == 2 && !auto_fused) continue;
                if (v == 2) nb_cuda_mlp_force_fused(0), snprintf(tag, sizeof tag, "unfused: ");
                if (v == 3 && T > 2) continue;
                if (v == 3) nb_cuda_linear_force_gemv_r4(2), snprintf(tag, sizeof tag, "R=4: ");
                const int fused = nb_cuda_gate_up_sk_can(&g[0], &u[0], E->x, H, T);
                nb_weight gu = g[0];
                gu.n = 2 * I;
                snprintf(path, sizeof path, "%s%s + %s", tag, fused ? "gate_up sk" : nb_cuda_linear_path_name(&gu, E->x, H, T),
                         nb_cuda_linear_path_name(&d[0], E->x, I, T));
                int graphed = 0;
                double us = lb_time_fn(E, lb_mlp_call, &a, copies, T, &graphed);
                lb_print(E, "mlp", &sh, T, path, 3.0 * mb, us, graphed);
            }
            lb_knobs_auto();
            continue;
        }
        nb_cuda_linear_force_sk(0);
        const int auto_fused = nb_cuda_gate_up_sk_can(&g[0], &u[0], E->x, H, T);
        for (int v = 0; v < 3; v++) {
            if (v == 1 && !auto_fused) continue; // the same route as the automatic row
            nb_cuda_linear_force_sk(v == 1 ? 1 : v == 2 ? 3 : 0);
            const int fused = nb_cuda_gate_up_sk_can(&g[0], &u[0], E->x, H, T);
            char path[48];
            snprintf(path, sizeof path, "%s%s + down %s", v == 1 ? "old: " : v == 2 ? "sk: " : "",
                     fused ? "gate_up fused" : "gate, up",
                     nb_cuda_linear_path_name(&d[0], E->x, I, T));
            int graphed = 0;
            double us = lb_time_fn(E, lb_mlp_call, &a, copies, T, &graphed);
            lb_print(E, "mlp", &sh, T, path, 3.0 * mb, us, graphed);
        }
    }
    nb_cuda_mlp_force_fused(-1);
    nb_cuda_linear_force_sk(0);
    cudaFree(data);
    return st;
}

static double lb_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

// Host cost of the cuBLASLt path when the token count changes every call, as in a
// continuous-batching decode above the graph sizes: eager calls at T = t0 .. t0 + count - 1
// on one weight, host time to enqueue each (mean) and wall time per call (one sync at the
// end), with algorithms keyed by exact T (before) and by T bucket (cold, then warm).
static void lb_lt_host(lb_env *E, const lb_shape *sh, const nb_weight *w, int t0, int count)
{
    nb_cuda_gemm *g = nb_cuda_st(E->ctx)->gemm;
    cudaStream_t s = nb_cuda_stream(E->ctx);
    nb_cuda_linear_force_terms(1);
    {
        // Grow the activation scratch to the largest T first, so no pass pays for that.
        const int64_t T = t0 + count - 1;
        nb_tensor x = nb_tensor_2d(E->x, NB_DTYPE_F32, T, sh->k), y = nb_tensor_2d(E->y, NB_DTYPE_F32, T, sh->n);
        x.device = y.device = NB_DEVICE_CUDA;
        if (nb_op_linear(E->ctx, &x, w, &y) != NB_OK) nb_error_clear();
    }
    for (int pass = 0; pass < 3; pass++) {
        nb_cuda_gemm_force_exact(g, pass == 0);
        const long q0 = nb_cuda_gemm_queries(g);
        double host = 0;
        int bad = 0;
        cudaStreamSynchronize(s);
        const double w0 = lb_now_us();
        for (int i = 0; i < count && !bad; i++) {
            const int64_t T = t0 + i;
            nb_tensor x = nb_tensor_2d(E->x, NB_DTYPE_F32, T, sh->k), y = nb_tensor_2d(E->y, NB_DTYPE_F32, T, sh->n);
            x.device = y.device = NB_DEVICE_CUDA;
            const double h0 = lb_now_us();
            bad = nb_op_linear(E->ctx, &x, w, &y) != NB_OK;
            host += lb_now_us() - h0;
        }
        bad |= cudaStreamSynchronize(s) != cudaSuccess;
        const double wall = lb_now_us() - w0;
        if (bad) {
            printf("lt host  %-22s T=%d..%d  failed: %s\n", sh->name, t0, t0 + count - 1, nb_last_error());
            break;
        }
        printf("lt host  %-22s T=%d..%d  %-18s host %8.1f us/call  wall %8.1f us/call  heuristic queries %ld\n",
               sh->name, t0, t0 + count - 1, pass == 0 ? "exact-T keys" : pass == 1 ? "T buckets (cold)" : "T buckets (warm)",
               host / count, wall / count, nb_cuda_gemm_queries(g) - q0);
        fflush(stdout);
    }
    nb_cuda_gemm_force_exact(g, 0);
    nb_cuda_linear_force_terms(0);
}

// First-use cost of the cuBLASLt path as an eager decode step sees it (issue 9): the eight
// shapes in a layer's order, 8 "layers" per step, steps at T = 808, 744, 680, 616 (the
// profiled steps of bench/h200-2026-11-30/profile-final.log), two BF16 terms, each call
// bracketed by two events on the stream as the per-op profiler does (device time between
// them, which includes device idle while the host queries the heuristic or loads a kernel
// module). Two passes over the same sequence: the first from a fresh process and handle
// (cold), the second with everything cached. Per (step, shape): mean and max ms per call.
static nb_status lb_lt_cold(lb_env *E)
{
    static const int steps[] = {808, 744, 680, 616};
    enum { NSTEP = 4, LAYERS = 8, CALLS = LAYERS * LB_LT_NSHAPES };
    nb_ops_ctx *ctx = E->ctx;
    cudaStream_t s = nb_cuda_stream(ctx);
    nb_cuda_gemm *g = nb_cuda_st(ctx)->gemm;
    void *data[LB_LT_NSHAPES] = {0};
    nb_weight ws[LB_LT_NSHAPES];
    cudaEvent_t ev[2 * CALLS];
    nb_status st = NB_OK;
    for (int i = 0; i < 2 * CALLS; i++) NB_CUDA_TRY(cudaEventCreate(&ev[i]));
    for (int i = 0; i < LB_LT_NSHAPES && st == NB_OK; i++) {
        const lb_shape *sh = &lb_lt_shapes[i];
        if (cudaMalloc(&data[i], (size_t)(sh->n * sh->k) * 2) != cudaSuccess) {
            st = nb_error(NB_ERR_OUT_OF_MEMORY, "bench-linear --lt-cold: weight %s", sh->name);
            break;
        }
        st = lb_fill_dev(data[i], (size_t)(sh->n * sh->k) * 2, 21 + (uint64_t)i, 2);
        memset(&ws[i], 0, sizeof ws[i]);
        ws[i].fmt = NB_WFMT_BF16;
        ws[i].n = sh->n;
        ws[i].k = sh->k;
        ws[i].data = data[i];
        ws[i].global_scale = 1.0f;
        ws[i].device = NB_DEVICE_CUDA;
    }
    // The model's prefill has grown the activation scratch long before: so does this.
    if (st == NB_OK && !nb_cuda_scratch(ctx, 0, (size_t)2 * 1000 * 16384 * 2))
        st = nb_error(NB_ERR_OUT_OF_MEMORY, "bench-linear --lt-cold: activation scratch");
    if (st == NB_OK && cudaDeviceSynchronize() != cudaSuccess) st = nb_error(NB_ERR_CUDA, "bench-linear --lt-cold: fill");
    nb_cuda_linear_force_terms(2);
    const char *warm = getenv("NIBBLE_CUDA_GEMM_WARM");
    printf("lt cold: eager steps at T = 808, 744, 680, 616, %d layers x %d shapes, 2 BF16 terms, warm-up %s\n", LAYERS,
           LB_LT_NSHAPES, warm && !strcmp(warm, "0") ? "off (NIBBLE_CUDA_GEMM_WARM=0)" : "on");
    for (int pass = 0; pass < 2 && st == NB_OK; pass++) {
        for (int si = 0; si < NSTEP && st == NB_OK; si++) {
            const int64_t T = steps[si];
            const long q0 = nb_cuda_gemm_queries(g), w0 = nb_cuda_gemm_warm_launches(g);
            const double qu0 = nb_cuda_gemm_query_us(g), h0 = lb_now_us();
            for (int c = 0; c < CALLS && st == NB_OK; c++) {
                const nb_weight *w = &ws[c % LB_LT_NSHAPES];
                nb_tensor x = nb_tensor_2d(E->x, NB_DTYPE_F32, T, w->k), y = nb_tensor_2d(E->y, NB_DTYPE_F32, T, w->n);
                x.device = y.device = NB_DEVICE_CUDA;
                cudaEventRecord(ev[2 * c], s);
                st = nb_op_linear(ctx, &x, w, &y);
                cudaEventRecord(ev[2 * c + 1], s);
            }
            if (st == NB_OK && cudaStreamSynchronize(s) != cudaSuccess) st = nb_error(NB_ERR_CUDA, "lt cold: sync");
            if (st != NB_OK) break;
            const double wall = lb_now_us() - h0;
            double total = 0;
            for (int i = 0; i < LB_LT_NSHAPES; i++) {
                const lb_shape *sh = &lb_lt_shapes[i];
                float sum = 0, mx = 0, first = 0;
                for (int l = 0; l < LAYERS; l++) {
                    float ms = 0;
                    cudaEventElapsedTime(&ms, ev[2 * (l * LB_LT_NSHAPES + i)], ev[2 * (l * LB_LT_NSHAPES + i) + 1]);
                    sum += ms;
                    mx = ms > mx ? ms : mx;
                    if (l == 0) first = ms;
                }
                total += sum;
                const double us = 1e3 * sum / LAYERS;
                printf("lt cold  pass %d  T=%4lld  %-22s  mean %8.1f us/call (%6.1f TFLOP/s of 2 terms)  first %8.1f us  "
                       "max %8.1f us\n",
                       pass + 1, (long long)T, sh->name, us, 2.0 * 2.0 * T * sh->n * sh->k / (us * 1e-6) / 1e12,
                       1e3 * first, 1e3 * mx);
            }
            printf("lt cold  pass %d  T=%4lld  step: %.2f ms in the events, wall %.2f ms; heuristic queries %ld (%.2f ms host), "
                   "warm-up launches %ld\n",
                   pass + 1, (long long)T, total, wall * 1e-3, nb_cuda_gemm_queries(g) - q0,
                   (nb_cuda_gemm_query_us(g) - qu0) * 1e-3, nb_cuda_gemm_warm_launches(g) - w0);
            fflush(stdout);
        }
    }
    nb_cuda_linear_force_terms(0);
    for (int i = 0; i < 2 * CALLS; i++) cudaEventDestroy(ev[i]);
    for (int i = 0; i < LB_LT_NSHAPES; i++) cudaFree(data[i]);
    return st;
}

static void lb_lt_rows(lb_env *E, int nvfp4, const lb_shape *sh, const nb_bench_linear_params *p, nb_weight *ws,
                       int copies, double wbytes)
{
    const char *fmt = nvfp4 ? "nvfp4" : "bf16";
    for (int ti = 0; ti < p->n_lt_tokens; ti++) {
        const int64_t T = p->lt_tokens[ti];
        for (int v = 1; v <= 3; v++) { // 1 term, 2 terms (two GEMMs), 2 terms stacked (one GEMM of 2T rows)
            const int terms = v == 1 ? 1 : 2;
            if (v == 3 && nvfp4) continue;
            nb_cuda_linear_force_stack(v == 3);
            for (int resident = nvfp4; resident >= 0; resident--) {
                nb_cuda_linear_force_terms(terms);
                for (int i = 0; i < copies; i++) ws[i].flags = resident ? NB_WEIGHT_RESIDENT : 0;
                char path[48];
                snprintf(path, sizeof path, "lt %d term%s%s%s", terms, terms > 1 ? "s" : "",
                         v == 3 ? " stacked" : "", !nvfp4 ? "" : resident ? ", cached" : ", expand");
                int graphed = 0;
                double us = lb_time(E, ws, copies, T, &graphed);
                lb_print(E, fmt, sh, T, path, wbytes, us, graphed);
            }
        }
    }
    nb_cuda_linear_force_terms(0);
    nb_cuda_linear_force_stack(-1);
    for (int i = 0; i < copies; i++) ws[i].flags = 0;
}

extern "C" nb_bench_linear_params nb_bench_linear_default_params(void)
{
    nb_bench_linear_params p;
    memset(&p, 0, sizeof p);
    p.tokens[0] = 1, p.tokens[1] = 2, p.tokens[2] = 10;
    p.n_tokens = 3;
    p.lt_tokens[0] = 512, p.lt_tokens[1] = 4096;
    p.n_lt_tokens = 2;
    p.bf16 = p.nvfp4 = 1;
    p.iters = 10;
    return p;
}

extern "C" nb_status nb_bench_linear_run(const nb_bench_linear_params *p)
{
    lb_env E;
    memset(&E, 0, sizeof E);
    E.iters = p->iters > 0 ? p->iters : 10;
    char dev[256];
    NB_TRY(nb_cuda_device_describe(0, dev, sizeof dev));
    NB_CUDA_TRY(cudaSetDevice(0));
    cudaDeviceGetAttribute(&E.l2_bytes, cudaDevAttrL2CacheSize, 0);
    NB_TRY(nb_bench_ceilings(&E.copy_GBps, &E.bf16_TFLOPs, NULL, 0)); // prints the device and both
    NB_TRY(nb_ops_ctx_new_cuda(0, &E.ctx));
    E.sm_count = nb_cuda_st(E.ctx)->sm_count;
    int64_t maxT = p->lt_host || p->lt_cold ? 1000 : 16, maxk = 0, maxn = 0, gemv_T = 16;
    for (int i = 0; i < p->n_tokens; i++) gemv_T = p->tokens[i] > gemv_T ? p->tokens[i] : gemv_T;
    maxT = gemv_T > maxT ? gemv_T : maxT;
    for (int i = 0; i < p->n_lt_tokens; i++) maxT = p->lt_tokens[i] > maxT ? p->lt_tokens[i] : maxT;
    int64_t maxn_gemv = 0; // the widest decode shape (the lm_head), whatever its place in the list
    for (int i = 0; i < LB_NSHAPES; i++) {
        maxk = lb_shapes[i].k > maxk ? lb_shapes[i].k : maxk;
        maxn_gemv = lb_shapes[i].n > maxn_gemv ? lb_shapes[i].n : maxn_gemv;
    }
    for (int i = 0; i < LB_LT_NSHAPES; i++) {
        maxk = lb_lt_shapes[i].k > maxk ? lb_lt_shapes[i].k : maxk;
        maxn = lb_lt_shapes[i].n > maxn ? lb_lt_shapes[i].n : maxn;
    }
    const size_t xb = (size_t)(maxT * maxk) * 4;
    const size_t yb = (size_t)NB_MAX(maxT * maxn, gemv_T * maxn_gemv) * 4;
    nb_status st = NB_OK;
    if (cudaMalloc((void **)&E.x, xb) != cudaSuccess || cudaMalloc((void **)&E.y, yb) != cudaSuccess) {
        st = nb_error(NB_ERR_OUT_OF_MEMORY, "bench-linear: activations of %zu + %zu bytes", xb, yb);
        goto done;
    }
    if ((st = lb_fill_dev(E.x, xb, 5, 3)) != NB_OK) goto done;
    printf("%-6s %-22s %5s  %-22s %10s %9s %7s %9s %7s\n", "format", "shape (in->out)", "T", "path", "us/call", "GB/s",
           "%copy", "TFLOP/s", "%bf16");
    if (p->lt_cold && (st = lb_lt_cold(&E)) != NB_OK) goto done;
    for (int f = 0; f < 2 && st == NB_OK; f++) {
        if ((f == 0 && !p->bf16) || (f == 1 && !p->nvfp4)) continue;
        // GEMV / skinny GEMM rows on lb_shapes, then the cuBLASLt rows on lb_lt_shapes.
        for (int si = 0; si < LB_NSHAPES + LB_LT_NSHAPES && st == NB_OK; si++) {
            const int is_lt = si >= LB_NSHAPES;
            const lb_shape *sh = is_lt ? &lb_lt_shapes[si - LB_NSHAPES] : &lb_shapes[si];
            if (is_lt ? !p->n_lt_tokens : !p->n_tokens && !(p->lt_host && f == 0 && si == 0)) continue;
            if (p->only[0] && !strstr(sh->name, p->only)) continue;
            nb_weight ws[16];
            int copies = 0;
            void *data = NULL, *scale = NULL;
            double wbytes = 0;
            st = lb_weights(&E, f, sh, ws, &copies, &data, &scale, &wbytes);
            if (st == NB_OK && p->lt_host && f == 0 && si == 0) lb_lt_host(&E, sh, &ws[0], 600, 200);
            if (st == NB_OK) {
                if (is_lt) lb_lt_rows(&E, f, sh, p, ws, copies, wbytes);
                else if (p->ab && f == 0) lb_ab_rows(&E, sh, p, ws, copies, wbytes);
                else lb_gemv_rows(&E, f, sh, p, ws, copies, wbytes);
            }
            // Cached expansions are keyed by these pointers: drop them with a fresh context.
            nb_ops_ctx_free(E.ctx);
            E.ctx = NULL;
            cudaFree(data);
            cudaFree(scale);
            if (st == NB_OK) st = nb_ops_ctx_new_cuda(0, &E.ctx);
        }
    }
    // The MLP op at decode token counts: GLM-5's shared expert and dense-layer MLP.
    if (st == NB_OK && p->bf16 && p->n_tokens && (!p->only[0] || strstr("shared mlp", p->only)))
        st = lb_mlp_rows(&E, p, "shared mlp 6144x2048", 6144, 2048);
    if (st == NB_OK && p->bf16 && p->n_tokens && (!p->only[0] || strstr("dense mlp", p->only)))
        st = lb_mlp_rows(&E, p, "dense mlp 6144x12288", 6144, 12288);
done:
    if (E.ctx) nb_ops_ctx_free(E.ctx);
    cudaFree(E.x);
    cudaFree(E.y);
    return st;
}
