/* MLA op timing on GLM-5's attention shapes (64 heads, nope 192, rope 64, v 256, rank 512,
 * BF16 kv_b as the checkpoints and synthetic:glm5 store it): one decode token per sequence
 * at context CTX (default 256), batches BATCHES (default 1,10,1000). A batch of up to 32
 * tokens runs seven ways on the same inputs (mla.h nb_cuda_mla_force_small, _f32_heads): the
 * batched-GEMM path (small path off) with the float32 attention kernel at 4 heads per warp
 * (as before 2026-11-30) and at 2; the small path of mla_small.cu (merge form by token count,
 * plain launches, 2 heads per warp); the same with 4 heads per warp; with programmatic
 * dependent launches; with the merge as its own kernel; with the merge folded into the output
 * step. Which of these runs by default at each token count is in mla.h. A larger batch runs
 * the float32 and the tensor-core attention kernel. Each is first checked against the CPU op (batches <= 32;
 * normalized error, the registry test's tolerance), then timed:
 * wall time of N calls through nb_op_mla_attention with a sync at the end (launch costs
 * included, as in an eager forward step), then as a captured CUDA graph replayed N times
 * (the device time of a decode step under graphs), printed with the bytes and FLOPs one call
 * must move.
 * Built against the library before the MLA rewrite with -DNB_MLA_TIMING_OLD (no
 * registration) for the before/after table in bench/RESULTS.md.
 * Run on the GPU machine: build-<name>/tests/test_cuda_vs_cpu_mla_timing [ctx [batches]],
 * e.g. `test_cuda_vs_cpu_mla_timing 256 1,2,10,32`. */
#include <cuda_runtime.h>
#include <string.h>

#include "base/clock.h"
#include "cuda_test_util.h"
#include "ops/cpu/cpu_ops.h" /* the context's stream, for the graph replay */
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/device.h"
#ifndef NB_MLA_TIMING_OLD
#include "ops/cuda/mla.h"
#endif

#define F32 NB_DTYPE_F32

/* One enqueue to time: the whole op, or (after the rewrite) its two absorption GEMMs alone
 * on buffers of the op's shapes and layouts (gemms_only 1), or the small path's two
 * absorption kernels alone (gemms_only 2: ql and o2 as q_lat and o_lat, [H][T][rank]). */
typedef struct mla_call {
    int gemms_only;
    const nb_mla_dims *d;
    const nb_tensor *q, *lat, *kpe;
    nb_tensor *out;
    const nb_weight *kv_b;
    const nb_attn_index *idx;
    float scale;
    int T;
    void *qb, *ob; /* BF16 [H][2T][nope], [H][2T][rank] */
    float *ql, *o2; /* F32 [H][2T][rank], [H][2T][v] */
} mla_call;

static nb_status enqueue(const mla_call *c)
{
    if (!c->gemms_only)
        return nb_op_mla_attention(tu_gpu, NB_MLA_ABSORBED, c->d, c->q, c->lat, c->kpe, c->kv_b, c->idx, NULL, c->scale,
                                   c->out);
#ifdef NB_MLA_TIMING_OLD
    return NB_ERR_UNSUPPORTED;
#else
    if (c->gemms_only == 2) {
        const nb_cuda_mla_w w = {c->kv_b->data, (void *)c->kv_b->data, 1, 0, 1.0f};
        NB_TRY(nb_cuda_mla_small_in(tu_gpu, c->d, &w, c->q, c->ql));
        return nb_cuda_mla_small_out(tu_gpu, c->d, &w, c->o2, NULL, 1, 0, c->out);
    }
    const int r = c->d->kv_lora_rank, nope = c->d->qk_nope, vd = c->d->v_dim, H = c->d->n_heads, T2 = 2 * c->T;
    const int64_t hs = nope + vd;
    NB_TRY(nb_cuda_mla_gemm(tu_gpu, 1, 0, r, T2, nope, c->kv_b->data, r, hs * r, c->qb, nope, (int64_t)T2 * nope, c->ql,
                            r, (int64_t)T2 * r, H, 1.0f));
    const uint16_t *w_uv = (const uint16_t *)c->kv_b->data + (int64_t)nope * r;
    return nb_cuda_mla_gemm(tu_gpu, 1, 1, vd, T2, r, w_uv, r, hs * r, c->ob, r, (int64_t)T2 * r, c->o2, vd,
                            (int64_t)T2 * vd, H, 1.0f);
#endif
}

/* ms per replay of the call captured once as a CUDA graph; -1 when it cannot be captured */
static double graph_ms(const mla_call *c, int iters)
{
    double gms = -1;
    cudaStream_t st = (cudaStream_t)tu_gpu->stream;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        nb_status cs = enqueue(c);
        cudaError_t ce = cudaStreamEndCapture(st, &graph);
        if (cs == NB_OK && ce == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
            cudaGraphLaunch(exec, st);
            cudaStreamSynchronize(st);
            int64_t g0 = nb_now_ns();
            for (int i = 0; i < iters; i++) cudaGraphLaunch(exec, st);
            if (cudaStreamSynchronize(st) == cudaSuccess) gms = (double)(nb_now_ns() - g0) / 1e6 / iters;
        }
        cudaGetLastError();
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    return gms;
}

/* small: 0 the batched-GEMM path; 1 the small path (merge form by token count, plain
 * launches); 2 the same with programmatic dependent launches; 3 with the merge kernel; 4 with
 * the merge folded; -1 (larger batches, old library) none.
 * hpw: the float32 attention kernel's heads per warp (2 or 4). */
static void time_batch(int B, int ctx, nb_wfmt fmt, int kernel, int small, int hpw)
{
    const nb_mla_dims d = {64, 192, 64, 256, 512};
    const int qk = d.qk_nope + d.qk_rope, rw = d.kv_lora_rank + d.qk_rope;
    const int64_t rows = (int64_t)B * ctx;
    tu_seed(1000 + B);
    tu_weight kvb;
    tu_weight_make(&kvb, fmt, (int64_t)d.n_heads * (d.qk_nope + d.v_dim), d.kv_lora_rank, 0.05f, 0);
    float *pool = malloc((size_t)rows * rw * 4), *q = malloc((size_t)B * d.n_heads * qk * 4);
    tu_fill(pool, (size_t)rows * rw, 1.0f);
    tu_fill(q, (size_t)B * d.n_heads * qk, 1.0f);
    int32_t *pos = malloc((size_t)B * 4), *base = malloc((size_t)B * 4), *table = malloc((size_t)rows * 4);
    for (int i = 0; i < B; i++) {
        pos[i] = ctx - 1;
        base[i] = i * ctx;
    }
    /* rows of a sequence in pages of 64 scattered over the pool, as the paged KV pool places them */
    const int64_t pages = rows / 64;
    int64_t *perm = malloc((size_t)(pages > 0 ? pages : 1) * sizeof *perm);
    for (int64_t i = 0; i < pages; i++) perm[i] = i;
    for (int64_t i = pages - 1; i > 0; i--) {
        int64_t j = (int64_t)(tu_u32() % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int64_t r = 0; r < rows; r++) table[r] = (int32_t)(r / 64 < pages ? perm[r / 64] * 64 + r % 64 : r);
    nb_attn_index hi = {B, pos, base, table, 0, 0};
    nb_attn_index di = {B, tu_up(pos, (size_t)B * 4), tu_up(base, (size_t)B * 4), tu_up(table, (size_t)rows * 4), 0, 0};
    float *dpool = tu_up(pool, (size_t)rows * rw * 4);
    nb_tensor hq = nb_tensor_3d(q, F32, B, d.n_heads, qk), dq = tu_twin(&hq);
    nb_tensor hl = nb_tensor_2d(pool, F32, rows, d.kv_lora_rank);
    nb_tensor hp = nb_tensor_2d(pool + d.kv_lora_rank, F32, rows, d.qk_rope);
    hl.stride[0] = hp.stride[0] = rw;
    nb_tensor dl = hl, dp = hp;
    dl.data = dpool;
    dp.data = dpool + d.kv_lora_rank;
    dl.device = dp.device = NB_DEVICE_CUDA;
    const size_t on = (size_t)B * d.n_heads * d.v_dim;
    float *o = malloc(on * 4), *ob = malloc(on * 4);
    nb_tensor ho = nb_tensor_3d(o, F32, B, d.n_heads, d.v_dim), dout = ho;
    dout.data = tu_poisoned(on * 4);
    dout.device = NB_DEVICE_CUDA;
    const float scale = 0.0625f;
    char kname[48] = "";
    int is_small = 0, is_mma = 0;
#ifndef NB_MLA_TIMING_OLD
    NB_CHECK_OK(nb_cuda_mla_register(tu_gpu, &kvb.d, &d));
    nb_cuda_mla_force_kernel(kernel);
    nb_cuda_mla_force_f32_heads(hpw);
    if (small >= 0)
        nb_cuda_mla_force_small(small ? NB_CUDA_MLA_SMALL_MAX : 0,
                                small == 3   ? NB_CUDA_MLA_MERGE_KERNEL
                                : small == 4 ? NB_CUDA_MLA_MERGE_FOLD
                                             : -1,
                                small == 2 ? 1 : -1);
    is_mma = nb_cuda_mla_uses_mma(tu_gpu, &d, B);
    int merge = 0, pdl = 0;
    is_small = nb_cuda_mla_uses_small(&d, kvb.d.data, B, &merge, &pdl);
    snprintf(kname, sizeof kname, " %s%s%s%s%s", is_mma ? "mma" : "f32", is_mma ? "" : hpw == 4 ? "/h4" : "/h2",
             is_small ? " small" : B <= NB_CUDA_MLA_SMALL_MAX ? " gemm" : "",
             is_small ? (merge == NB_CUDA_MLA_MERGE_KERNEL ? "+merge" : "+fold") : "", is_small && pdl ? "+pdl" : "");
#else
    (void)kernel, (void)small, (void)hpw;
#endif
    NB_CHECK_OK(nb_op_mla_attention(tu_gpu, NB_MLA_ABSORBED, &d, &dq, &dl, &dp, &kvb.d, &di, NULL, scale, &dout));
    if (B <= 32) {
        NB_CHECK_OK(nb_op_mla_attention(tu_cpu, NB_MLA_ABSORBED, &d, &hq, &hl, &hp, &kvb.h, &hi, NULL, scale, &ho));
        tu_down(&dout, ob);
        char name[96];
        snprintf(name, sizeof name, "mla timing check%s B=%d ctx %d kv_b %s", kname, B, ctx, tu_fmt_name(fmt));
        /* the small path is float32 throughout with BF16 weights taken exactly */
        tu_compare(name, o, ob, on, is_mma ? NB_TOL_BF16 : is_small ? NB_TOL_F32 : NB_TOL_LT_BF16W);
    }
    const int iters = B >= 1000 ? 10 : 50;
    for (int i = 0; i < 3; i++)
        NB_CHECK_OK(nb_op_mla_attention(tu_gpu, NB_MLA_ABSORBED, &d, &dq, &dl, &dp, &kvb.d, &di, NULL, scale, &dout));
    NB_CHECK_OK(nb_ops_sync(tu_gpu));
    int64_t t0 = nb_now_ns();
    for (int i = 0; i < iters; i++)
        NB_CHECK_OK(nb_op_mla_attention(tu_gpu, NB_MLA_ABSORBED, &d, &dq, &dl, &dp, &kvb.d, &di, NULL, scale, &dout));
    NB_CHECK_OK(nb_ops_sync(tu_gpu));
    double ms = (double)(nb_now_ns() - t0) / 1e6 / iters;
    /* the same call captured once and replayed */
    mla_call call = {0, &d, &dq, &dl, &dp, &dout, &kvb.d, &di, scale, B, NULL, NULL, NULL, NULL};
    const double gms = graph_ms(&call, iters);
    /* what one call must at least move and compute: the latent rows (F32 pool) and kv_b once;
     * scores over [latent | rope] and the weighted sum, plus the two absorption GEMMs */
    double wbytes = (double)kvb.h.n * nb_weight_row_bytes(fmt, kvb.h.k);
    double bytes = (double)rows * rw * 4 + wbytes;
    double flops = 2.0 * B * d.n_heads * ((double)ctx * (rw + d.kv_lora_rank) +
                                          (double)d.kv_lora_rank * (d.qk_nope + d.v_dim));
    fprintf(stderr,
            "    mla time%s B=%-5d ctx %d kv_b %s: %8.3f ms/call, graph %8.3f ms  "
            "(%.1f MB, %.2f GFLOP: %.0f GB/s, %.1f TFLOP/s in the graph)\n",
            kname, B, ctx, tu_fmt_name(fmt), ms, gms, bytes / 1e6, flops / 1e9, gms > 0 ? bytes / (gms * 1e-3) / 1e9 : 0.0,
            gms > 0 ? flops / (gms * 1e-3) / 1e12 : 0.0);
#ifndef NB_MLA_TIMING_OLD
    /* the two absorption GEMMs alone: the rest of the graph time is the attention kernel,
     * the split merge and the BF16 split / sum kernels */
    if (is_small) {
        /* the two absorption kernels alone (no merge): the rest is the attention kernel */
        call.gemms_only = 2;
        call.ql = tu_poisoned((size_t)d.n_heads * B * d.kv_lora_rank * 4);
        call.o2 = tu_poisoned((size_t)d.n_heads * B * d.kv_lora_rank * 4);
        NB_CHECK_OK(nb_ops_memset(tu_gpu, call.o2, 0, (size_t)d.n_heads * B * d.kv_lora_rank * 4));
        fprintf(stderr, "    mla time%s B=%-5d of which the two absorption kernels alone: %8.3f ms (graph)\n", kname, B,
                graph_ms(&call, iters));
        nb_cuda_mla_force_small(-1, -1, -1);
        nb_cuda_mla_force_f32_heads(0);
        nb_cuda_mla_force_kernel(-1);
        nb_cuda_mla_release(tu_gpu);
        goto done;
    }
    const int64_t T2 = 2 * (int64_t)B;
    call.gemms_only = 1;
    call.qb = tu_poisoned((size_t)(d.n_heads * T2 * d.qk_nope * 2));
    call.ob = tu_poisoned((size_t)(d.n_heads * T2 * d.kv_lora_rank * 2));
    call.ql = tu_poisoned((size_t)(d.n_heads * T2 * d.kv_lora_rank * 4));
    call.o2 = tu_poisoned((size_t)(d.n_heads * T2 * d.v_dim * 4));
    NB_CHECK_OK(nb_ops_memset(tu_gpu, call.qb, 0, (size_t)(d.n_heads * T2 * d.qk_nope * 2)));
    NB_CHECK_OK(nb_ops_memset(tu_gpu, call.ob, 0, (size_t)(d.n_heads * T2 * d.kv_lora_rank * 2)));
    const double gemm_ms = graph_ms(&call, iters);
    fprintf(stderr, "    mla time%s B=%-5d of which the two batched GEMMs alone: %8.3f ms (graph)\n", kname, B, gemm_ms);
    nb_cuda_mla_force_small(-1, -1, -1);
    nb_cuda_mla_force_f32_heads(0);
    nb_cuda_mla_force_kernel(-1);
    nb_cuda_mla_release(tu_gpu);
done:
#endif
    free(pool), free(q), free(pos), free(base), free(table), free(perm), free(o), free(ob);
    tu_weight_free(&kvb);
    tu_free_all();
}

int main(int argc, char **argv)
{
    (void)tu_index_make; /* the shared helpers' batch builder: this file builds its own */
    if (!nb_cuda_test_require_gpu()) return 77;
    const int ctx = argc > 1 ? atoi(argv[1]) : 256;
    if (ctx < 64 || ctx % 64) {
        fprintf(stderr, "context must be a multiple of 64\n");
        return 2;
    }
    if (!tu_open()) return 1;
    int batches[16], nb = 0;
    for (const char *p = argc > 2 ? argv[2] : "1,10,1000"; *p && nb < 16;) {
        batches[nb] = atoi(p);
        if (batches[nb] < 1) {
            fprintf(stderr, "batches: a comma-separated list of positive counts\n");
            return 2;
        }
        nb++;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    for (int i = 0; i < nb; i++) {
#ifndef NB_MLA_TIMING_OLD
        if (batches[i] <= NB_CUDA_MLA_SMALL_MAX) {
            /* the batched GEMMs (before), the small path (after) and its variants */
            time_batch(batches[i], ctx, NB_WFMT_BF16, 0, 0, 4);
            time_batch(batches[i], ctx, NB_WFMT_BF16, 0, 0, 2);
            time_batch(batches[i], ctx, NB_WFMT_BF16, 0, 1, 2);
            time_batch(batches[i], ctx, NB_WFMT_BF16, 0, 1, 4);
            for (int sm = 2; sm < 5; sm++) time_batch(batches[i], ctx, NB_WFMT_BF16, 0, sm, 2);
        } else {
            /* the float32 kernel (before) and the tensor-core kernel (after) on the same inputs */
            time_batch(batches[i], ctx, NB_WFMT_BF16, 0, -1, 0);
            time_batch(batches[i], ctx, NB_WFMT_BF16, 1, -1, 0);
        }
#else
        time_batch(batches[i], ctx, NB_WFMT_BF16, 0, -1, 0);
#endif
    }
    tu_close();
    fprintf(stderr, "%s\n", nb_test_failures_ ? "FAILED" : "ok");
    return nb_test_failures_ ? 1 : 0;
}
