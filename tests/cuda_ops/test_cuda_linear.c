/* The CUDA linear and MLP ops against the CPU op (split out of test_cuda_vs_cpu.c): every
 * route of the ladder in ops/cuda/linear.h (vector and generic GEMV, the mma skinny GEMM, the
 * register-fed mmr kernel, stream-K, cuBLASLt) on fresh random inputs, CUDA outputs poisoned
 * with NaN first, compared by normalized error: float32-arithmetic routes at NB_TOL_F32
 * (1e-5), routes that round activations to one BF16 term at NB_TOL_BF16 (1e-2, the issue's
 * bound for BF16 paths; the case name says so). Filter by case: test_cuda_linear linear_mmr.
 * Run on the GPU machine: ctest -L gpu (exits 77 without a GPU). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* the shared helpers this file does not need */
#include "cuda_test_util.h"
#pragma GCC diagnostic pop
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/device.h"
#include "ops/cuda/linear.h"

#define F32 NB_DTYPE_F32

/* ---- linear and mlp ------------------------------------------------------------------- */

/* The bound a call is held to: `tol`, or the BF16 bound (NB_TOL_BF16, 1e-2) when the route
 * rounds the activations to one BF16 term (mma or mmr with terms == 1: the bound for
 * BF16 paths, as the cuBLASLt path's one term above 16 tokens). */
static double lin_tol(const nb_weight *w, const float *x, int64_t ldx, int64_t T, double tol)
{
    const char *route = nb_cuda_linear_path_name(w, x, ldx, T);
    int terms = 2;
    if (!strcmp(route, "mmr")) terms = nb_cuda_mmr_plan_for(w, T, 132).terms;
    else if (!strcmp(route, "mma")) terms = nb_cuda_mma_plan_for(w, T, 132).terms;
    return terms == 1 && tol < NB_TOL_BF16 ? NB_TOL_BF16 : tol;
}

/* One linear call on both backends. flags go on the device weight (NB_WEIGHT_*); ldx_pad
 * widens the activation rows (4: aligned for 16-byte loads; 1: misaligned, generic path). */
static void linear_case_ex(nb_wfmt fmt, int T, int n, int k, int bias, unsigned flags, int ldx_pad, double tol)
{
    tu_weight w;
    tu_weight_make(&w, fmt, n, k, 0.1f, bias);
    w.d.flags = flags;
    size_t ldx = (size_t)k + (size_t)ldx_pad;
    float *x = malloc(T * ldx * 4), *y = malloc((size_t)T * n * 4), *yb = malloc((size_t)T * n * 4);
    tu_fill(x, T * ldx, 1.0f);
    nb_tensor hx = nb_tensor_2d(x, F32, T, k), hy = nb_tensor_2d(y, F32, T, n);
    hx.stride[0] = (int64_t)ldx;
    nb_tensor dx = tu_twin(&hx), dy = hy;
    dy.data = tu_poisoned((size_t)T * n * 4);
    dy.device = NB_DEVICE_CUDA;
    NB_CHECK_OK(nb_op_linear(tu_cpu, &hx, &w.h, &hy));
    NB_CHECK_OK(nb_op_linear(tu_gpu, &dx, &w.d, &dy));
    tu_down(&dy, yb);
    char name[160], path[48];
    const char *route = nb_cuda_linear_path_name(&w.d, (const float *)dx.data, (int64_t)ldx, T);
    const double tol_used = lin_tol(&w.d, (const float *)dx.data, (int64_t)ldx, T, tol);
    if (!strcmp(route, "mmr")) {
        nb_cuda_mmr_plan p = nb_cuda_mmr_plan_for(&w.d, T, 132);
        snprintf(path, sizeof path, "mmr %d term%s NT=%d W=%d U=%d", p.terms, p.terms > 1 ? "s" : "", p.token_tiles,
                 p.kw, p.unroll);
    } else if (!strcmp(route, "sk")) {
        nb_cuda_sk_plan p = nb_cuda_sk_plan_for(&w.d, T, 0, 132);
        snprintf(path, sizeof path, "sk %d terms NT=%d w=%lld", p.terms, p.token_tiles, (long long)p.warps);
    } else if (!strcmp(route, "mma")) {
        nb_cuda_mma_plan p = nb_cuda_mma_plan_for(&w.d, T, 132);
        snprintf(path, sizeof path, "mma %d terms NT=%d ks~%d", p.terms, p.token_tiles, p.ksplit);
    } else if (!strcmp(route, "lt")) {
        snprintf(path, sizeof path, "lt%s", flags & NB_WEIGHT_FEEDS_TOPK ? ", 2 terms" : "");
    } else {
        nb_cuda_gemv_plan p = nb_cuda_gemv_plan_for(&w.d, T, 132);
        const int ce = fmt == NB_WFMT_BF16 ? 8 : 32;
        if (p.vector && ldx_pad % 4 == 0 && (fmt == NB_WFMT_BF16 || fmt == NB_WFMT_NVFP4) && k % ce == 0)
            snprintf(path, sizeof path, "vec%s R=%d W=%d", p.staged ? " stg" : "", p.rows_per_warp, p.ksplit);
        else
            snprintf(path, sizeof path, "gemv");
    }
    snprintf(name, sizeof name, "linear %s T=%d [%d, %d]%s (%s)%s", tu_fmt_name(fmt), T, n, k, bias ? " +bias" : "",
             path, tol_used != tol ? " [one BF16 term: BF16 bound]" : "");
    tu_compare(name, y, yb, (size_t)T * n, tol_used);
    free(x), free(y), free(yb);
    tu_weight_free(&w);
    tu_free_all();
}

static void linear_case(nb_wfmt fmt, int T, int n, int k, int bias, double tol)
{
    linear_case_ex(fmt, T, n, k, bias, 0, 4, tol);
}

static void test_linear_gemv(void)
{
    tu_seed(10);
    for (int f = 0; f < 4; f++) {
        linear_case((nb_wfmt)f, 1, 256, 512, 1, NB_TOL_F32);
        linear_case((nb_wfmt)f, 3, 130, 384, 0, NB_TOL_F32);
        linear_case((nb_wfmt)f, 16, 64, 1024, 1, NB_TOL_F32);
    }
    linear_case(NB_WFMT_BF16, 2, 33, 100, 1, NB_TOL_F32); /* k not a multiple of 16 */
    linear_case_ex(NB_WFMT_BF16, 3, 70, 256, 1, 0, 1, NB_TOL_F32);  /* misaligned rows of x: generic kernel */
    linear_case_ex(NB_WFMT_NVFP4, 2, 70, 256, 0, 0, 1, NB_TOL_F32);
}

/* The vector GEMV (linear_gemv.cu): every token tile, row counts that leave partial row
 * groups, K with a partial last step, each K split forced, and GLM-5-sized rows. */
static void test_linear_gemv_vec(void)
{
    tu_seed(13);
    nb_cuda_linear_force_mmr(0); /* nor the register-fed one (test_linear_mmr) */
    nb_cuda_linear_force_mma(1); /* BF16 from 3 tokens would take the skinny GEMM */
    nb_cuda_linear_force_sk(1);  /* and small BF16 weights the stream-K one from 1 */
    const int Ts[] = {1, 2, 3, 4, 5, 8, 10, 16};
    for (int f = NB_WFMT_BF16; f <= NB_WFMT_NVFP4; f++) {
        for (size_t i = 0; i < NB_ARRAY_LEN(Ts); i++) linear_case((nb_wfmt)f, Ts[i], 203, 2048, i % 2, NB_TOL_F32);
        linear_case((nb_wfmt)f, 10, 37, 4096 + 32 * 7, 1, NB_TOL_F32); /* last step partly out of the row */
        for (int ks = 1; ks <= 8; ks *= 2) {
            nb_cuda_linear_force_ksplit(ks);
            linear_case((nb_wfmt)f, 1 + ks, 45, 8192, 1, NB_TOL_F32);
            nb_cuda_linear_force_ksplit(0);
        }
        /* both activation paths (through shared memory or not) at every token tile */
        for (int stg = 1; stg <= 2; stg++) {
            nb_cuda_linear_force_staged(stg);
            for (size_t i = 0; i < NB_ARRAY_LEN(Ts); i++)
                linear_case((nb_wfmt)f, Ts[i], 77, 1024 + 32 * 3, 1, NB_TOL_F32);
            nb_cuda_linear_force_ksplit(4);
            linear_case((nb_wfmt)f, 2, 45, 8192, 0, NB_TOL_F32);
            nb_cuda_linear_force_ksplit(0);
            nb_cuda_linear_force_staged(0);
        }
    }
    linear_case(NB_WFMT_BF16, 10, 2048, 6144, 0, NB_TOL_F32);
    linear_case(NB_WFMT_NVFP4, 2, 1024, 6144, 1, NB_TOL_F32);
    nb_cuda_linear_force_mma(0);
    nb_cuda_linear_force_sk(0);
    nb_cuda_linear_force_mmr(-1);
}

/* The tensor-core skinny GEMM (linear_mma.cu) at the float32 tolerance: every T in 3..64
 * (each token tile, partial tiles; n <= 1024 takes it automatically up to 64), rows that are not a multiple of 16, K a multiple of 32
 * but not of the 256-wide chunk, split-K ranges with partial sums (small n, large k),
 * GLM-5-sized shapes, three terms, T = 1 and 2 when forced, and the shapes it does not
 * take (K % 32, misaligned activations) going to the GEMV / cuBLASLt instead. */
static void mlp_case(nb_wfmt fmt, int T, int H, int I, double tol);

static void linear_mma_case(int T, int n, int k, int bias, int ldx_pad, int want_mma)
{
    tu_weight probe; /* the route only depends on the format, shape and activation layout */
    tu_weight_make(&probe, NB_WFMT_BF16, n, k, 0.1f, 0);
    float *dxp = nb_ops_alloc(tu_gpu, (size_t)T * (size_t)(k + ldx_pad) * 4);
    const char *route = nb_cuda_linear_path_name(&probe.d, dxp, k + ldx_pad, T);
    NB_CHECK(!strcmp(route, "mma") == !!want_mma);
    nb_ops_free(tu_gpu, dxp);
    tu_weight_free(&probe);
    linear_case_ex(NB_WFMT_BF16, T, n, k, bias, 0, ldx_pad,
                   want_mma || T <= NB_CUDA_LINEAR_GEMV_MAX_TOKENS ? NB_TOL_F32 : NB_TOL_BF16);
}

static void test_linear_mma(void)
{
    tu_seed(15);
    nb_cuda_linear_force_sk(1); /* the stream-K kernel takes 1..16 tokens first: test_linear_sk */
    nb_cuda_linear_force_mmr(0); /* and the register-fed one when on: test_linear_mmr */
    for (int T = NB_CUDA_LINEAR_MMA_MIN_TOKENS; T <= NB_CUDA_LINEAR_MMA_MAX_TOKENS; T++)
        linear_mma_case(T, 200, 1024 + 32 * 3, T % 2, 4, 1);
    linear_mma_case(10, 40, 8192 + 32, 1, 4, 1);   /* 2.5 row tiles, many K ranges */
    linear_mma_case(37, 96, 16384, 0, 4, 1);
    linear_mma_case(10, 2048, 6144, 0, 4, 1);     /* q_a_proj */
    linear_mma_case(64, 576, 6144, 1, 4, 1);      /* kv_a_proj_with_mqa */
    linear_mma_case(16, 6144, 2048, 0, 4, 1);
    nb_cuda_linear_force_mma_terms(3);
    linear_mma_case(10, 200, 2048, 1, 4, 1);
    linear_mma_case(64, 130, 4096, 0, 4, 1);
    nb_cuda_linear_force_mma_terms(0);
    nb_cuda_linear_force_mma(2);
    linear_mma_case(1, 200, 2048, 1, 4, 1);
    linear_mma_case(2, 72, 4096, 0, 4, 1);
    nb_cuda_linear_force_mma(0);
    linear_mma_case(10, 64, 1000, 1, 4, 0);       /* K % 32: the GEMV */
    linear_mma_case(40, 64, 1000, 0, 4, 0);       /* K % 32: cuBLASLt */
    linear_mma_case(10, 64, 1024, 1, 1, 0);       /* misaligned activations */
    linear_mma_case(80, 64, 1024, 1, 4, 0);       /* past 64 tokens: cuBLASLt */
    mlp_case(NB_WFMT_BF16, 40, 256, 384, NB_TOL_F32); /* accumulate into the output */
    nb_cuda_linear_force_mma(2); /* gate/up have 1536 rows: cuBLASLt's unless forced */
    mlp_case(NB_WFMT_BF16, 64, 512, 1536, NB_TOL_F32);
    nb_cuda_linear_force_mma(0);
    linear_mma_case(32, 2048, 1024, 0, 4, 0);     /* more than 16 tokens on a large weight: cuBLASLt */
    nb_cuda_linear_force_sk(0);
    nb_cuda_linear_force_mmr(-1);
}

/* The stream-K skinny GEMM (linear_sk.cu) at the float32 tolerance: every T in 1..16 and 17
 * (past it: another route), GLM-5's row counts 256 / 2784 / 4096 with K not a multiple of
 * the 256-wide chunks, grids forced so that warp ranges split tiles in every way (one warp
 * for everything, ranges of a step, tiles shared by many warps), results repeatable to the
 * bit, the ladder's size rule at 1-2 tokens and its fallbacks. */
static void linear_sk_case(int T, int n, int k, int bias, int ldx_pad, int want_sk)
{
    tu_weight probe;
    tu_weight_make(&probe, NB_WFMT_BF16, n, k, 0.1f, 0);
    float *dxp = nb_ops_alloc(tu_gpu, (size_t)T * (size_t)(k + ldx_pad) * 4);
    const char *route = nb_cuda_linear_path_name(&probe.d, dxp, k + ldx_pad, T);
    if (!strcmp(route, "sk") != !!want_sk) fprintf(stderr, "    T=%d [%d, %d]: route %s\n", T, n, k, route);
    NB_CHECK(!strcmp(route, "sk") == !!want_sk);
    nb_ops_free(tu_gpu, dxp);
    tu_weight_free(&probe);
    linear_case_ex(NB_WFMT_BF16, T, n, k, bias, 0, ldx_pad, T <= NB_CUDA_LINEAR_GEMV_MAX_TOKENS ? NB_TOL_F32 : NB_TOL_BF16);
}

/* The same call twice on the GPU: bitwise equal (partial tiles are summed in a fixed order). */
static void linear_sk_repeat(int T, int n, int k)
{
    tu_weight w;
    tu_weight_make(&w, NB_WFMT_BF16, n, k, 0.1f, 1);
    float *x = malloc((size_t)T * k * 4), *y0 = malloc((size_t)T * n * 4), *y1 = malloc((size_t)T * n * 4);
    tu_fill(x, (size_t)T * k, 1.0f);
    nb_tensor hx = nb_tensor_2d(x, F32, T, k), hy = nb_tensor_2d(y0, F32, T, n);
    nb_tensor dx = tu_twin(&hx), dy = tu_twin(&hy);
    NB_CHECK_OK(nb_op_linear(tu_gpu, &dx, &w.d, &dy));
    tu_down(&dy, y0);
    NB_CHECK_OK(nb_op_linear(tu_gpu, &dx, &w.d, &dy));
    tu_down(&dy, y1);
    NB_CHECK(memcmp(y0, y1, (size_t)T * n * 4) == 0);
    fprintf(stderr, "    sk T=%d [%d, %d] twice: %s\n", T, n, k, memcmp(y0, y1, (size_t)T * n * 4) ? "differ" : "bitwise equal");
    free(x), free(y0), free(y1);
    tu_weight_free(&w);
    tu_free_all();
}

static void test_linear_sk(void)
{
    tu_seed(16);
    nb_cuda_linear_force_sk(3); /* the sk ladder: plain linears take it only on request */
    const int ns[] = {256, 2784, 4096};
    for (int T = 1; T <= NB_CUDA_LINEAR_SK_MAX_TOKENS + 1; T++)
        linear_sk_case(T, ns[T % 3], 1024 + 32 * 5, T % 2, 4, T <= NB_CUDA_LINEAR_SK_MAX_TOKENS);
    linear_sk_case(10, 2784, 6144, 0, 4, 1); /* GLM-5: q_a + kv_a + indexer wk + weights_proj */
    linear_sk_case(1, 4096, 2048, 1, 4, 1);  /* indexer wq_b */
    linear_sk_case(2, 256, 6144, 0, 4, 1);   /* mlp.gate */
    linear_sk_case(16, 6144, 2048, 1, 4, 1); /* shared expert down */
    /* Grids forced: one warp for all, few warps over many tiles, ranges shorter than a tile,
     * more warps than units (clamped: one step each). 200 rows: 7 tiles, the last partial. */
    const int warps[] = {1, 3, 7, 64, 1000, 100000};
    for (size_t i = 0; i < NB_ARRAY_LEN(warps); i++) {
        nb_cuda_linear_force_sk_warps(warps[i]);
        linear_sk_case(i % 2 ? 10 : 2, 200, 2048 + 32 * 3, 1, 4, 1);
        linear_sk_case(16, 45, 512 + 32, 0, 4, 1);
    }
    nb_cuda_linear_force_sk_warps(64);
    linear_sk_repeat(10, 2784, 6144);
    nb_cuda_linear_force_sk_warps(0);
    linear_sk_repeat(1, 4096, 2048);
    /* 1-2 tokens on a weight above NB_CUDA_LINEAR_SK_SMALL_MB: the float32 GEMV; forced: sk. */
    linear_sk_case(1, 16384, 4096, 0, 4, 0);
    nb_cuda_linear_force_sk(2);
    linear_sk_case(1, 16384, 4096, 1, 4, 1);
    linear_sk_case(2, 16384, 4096, 0, 4, 1);
    nb_cuda_linear_force_sk(3);
    linear_sk_case(10, 64, 1000, 1, 4, 0); /* K % 32 */
    linear_sk_case(10, 64, 1024, 1, 1, 0); /* misaligned activations */
    nb_cuda_linear_force_sk(1);            /* off: the ladder before it */
    linear_sk_case(10, 256, 1024, 0, 4, 0);
    nb_cuda_linear_force_sk(0);            /* the default policy: no plain linear */
    linear_sk_case(10, 2784, 6144, 0, 4, 0);
}

/* The fused gate+up launch of the MLP (SiLU(gate) * up in the epilogue, then down on the
 * linear ladder, accumulating into the output): every T in 1..17, partial pair tiles,
 * forced grids, GLM-5's shared expert, and the unfused route for comparison. */
static void mlp_fused_case(int T, int H, int I, int want_fused)
{
    tu_weight g, u;
    tu_weight_make(&g, NB_WFMT_BF16, I, H, 0.1f, 0);
    tu_weight_make(&u, NB_WFMT_BF16, I, H, 0.1f, 0);
    const int fused = nb_cuda_gate_up_sk_can(&g.d, &u.d, NULL, H, T);
    if (fused != want_fused) fprintf(stderr, "    mlp T=%d H=%d I=%d: fused %d\n", T, H, I, fused);
    NB_CHECK(fused == want_fused);
    tu_weight_free(&g), tu_weight_free(&u);
    mlp_case(NB_WFMT_BF16, T, H, I, T <= NB_CUDA_LINEAR_GEMV_MAX_TOKENS ? NB_TOL_F32 : NB_TOL_BF16);
}

/* The default policy's choice for a BF16 pair of I x H (the route depends on the format,
 * shape and alignment only: the weights' bytes are not made, the data a 16-byte aligned
 * device block that is never read). */
static int mlp_fused_default(int T, int H, int I)
{
    void *p = nb_ops_alloc(tu_gpu, 256);
    nb_weight w;
    memset(&w, 0, sizeof w);
    w.fmt = NB_WFMT_BF16;
    w.n = I, w.k = H;
    w.data = p;
    w.global_scale = 1.0f;
    w.device = NB_DEVICE_CUDA;
    const int fused = nb_cuda_gate_up_sk_can(&w, &w, NULL, H, T);
    nb_ops_free(tu_gpu, p);
    return fused;
}

static void test_mlp_fused(void)
{
    tu_seed(17);
    /* Default policy: GLM-5's dense pair (2 x [12288 x 6144], 302 MB) at 3..16 tokens only;
     * the shared expert's (50 MB) never. */
    NB_CHECK(mlp_fused_default(10, 6144, 12288) && mlp_fused_default(3, 6144, 12288));
    NB_CHECK(!mlp_fused_default(2, 6144, 12288) && !mlp_fused_default(17, 6144, 12288));
    NB_CHECK(!mlp_fused_default(10, 6144, 2048));
    nb_cuda_linear_force_sk(3); /* the sk ladder: every pair, so the small shapes below run fused */
    for (int T = 1; T <= NB_CUDA_LINEAR_SK_MAX_TOKENS + 1; T++)
        mlp_fused_case(T, 1024 + 32 * 3, T % 2 ? 200 : 384, T <= NB_CUDA_LINEAR_SK_MAX_TOKENS);
    mlp_fused_case(10, 6144, 2048, 1); /* GLM-5's shared expert */
    mlp_fused_case(1, 6144, 2048, 1);
    nb_cuda_linear_force_sk_warps(5);
    mlp_fused_case(3, 1024 + 32 * 3, 200, 1);
    nb_cuda_linear_force_sk_warps(0);
    nb_cuda_mlp_force_fused(0);
    mlp_fused_case(10, 1024 + 32 * 3, 200, 0);
    nb_cuda_mlp_force_fused(-1);
    nb_cuda_linear_force_sk(0);
}

static void test_linear_lt(void)
{
    tu_seed(11);
    nb_cuda_linear_force_mma(1); /* BF16 weights at 17..64 tokens would take the skinny GEMM */
    for (int f = 0; f < 4; f++) {
        linear_case((nb_wfmt)f, 17, 256, 512, 1, NB_TOL_BF16); /* one BF16 activation term */
        linear_case((nb_wfmt)f, 200, 384, 256, 0, NB_TOL_BF16);
    }
    /* Weights feeding a top-k keep two terms: BF16-stored weights are then near float32. */
    linear_case_ex(NB_WFMT_BF16, 17, 256, 512, 1, NB_WEIGHT_FEEDS_TOPK, 4, NB_TOL_LT_BF16W);
    linear_case_ex(NB_WFMT_BF16, 200, 384, 256, 0, NB_WEIGHT_FEEDS_TOPK, 4, NB_TOL_LT_BF16W);
    nb_cuda_linear_force_terms(2);
    linear_case(NB_WFMT_BF16, 64, 128, 1024, 1, NB_TOL_LT_BF16W);
    nb_cuda_linear_force_terms(0);
    /* Warm-up of a new shape's buckets (issue 9): the first many-token call of [320 x 640]
     * queries and launches every bucket's algorithm once, into the handle's own buffer (the
     * result still matches); a later token count in another bucket queries nothing. Off: one
     * query per bucket, as before. */
    long q0, w0, q1, w1, q2, w2;
    nb_cuda_linear_gemm_stats(tu_gpu, 1, &q0, &w0);
    linear_case(NB_WFMT_BF16, 300, 320, 640, 1, NB_TOL_BF16);
    nb_cuda_linear_gemm_stats(tu_gpu, -1, &q1, &w1);
    linear_case(NB_WFMT_BF16, 900, 320, 640, 0, NB_TOL_BF16);
    nb_cuda_linear_gemm_stats(tu_gpu, 0, &q2, &w2);
    fprintf(stderr, "    warm-up: %ld queries, %ld launches on the first call; %ld queries on the second\n", q1 - q0,
            w1 - w0, q2 - q1);
    NB_CHECK(q1 - q0 >= 40 && w1 - w0 >= 40 && q2 == q1 && w2 == w1);
    linear_case(NB_WFMT_BF16, 300, 352, 640, 0, NB_TOL_BF16); /* warm-up off: one query, no launch */
    nb_cuda_linear_gemm_stats(tu_gpu, 1, &q0, &w0);
    NB_CHECK(q0 == q2 + 1 && w0 == w2);
    /* Two terms stacked as one GEMM of 2T rows and a summing pass (NIBBLE_CUDA_LINEAR_STACK):
     * with bias, and accumulating (the MLP's down projection adds into its output). */
    nb_cuda_linear_force_stack(1);
    linear_case_ex(NB_WFMT_BF16, 200, 384, 256, 1, NB_WEIGHT_FEEDS_TOPK, 4, NB_TOL_LT_BF16W);
    nb_cuda_linear_force_terms(2);
    mlp_case(NB_WFMT_BF16, 48, 256, 384, NB_TOL_LT_BF16W);
    nb_cuda_linear_force_terms(0);
    nb_cuda_linear_force_stack(-1);
    /* The activations' conversion: four floats per load where strides and pointers allow
     * (k % 4 == 0 above), one at a time where they do not (k = 258, a row stride of 262). */
    NB_CHECK(nb_cuda_to_bf16_vec((const float *)(uintptr_t)256, 260, 256, (const uint16_t *)(uintptr_t)512, NULL));
    NB_CHECK(!nb_cuda_to_bf16_vec((const float *)(uintptr_t)256, 262, 258, (const uint16_t *)(uintptr_t)512, NULL));
    linear_case_ex(NB_WFMT_BF16, 40, 100, 258, 1, 0, 4, NB_TOL_BF16);
    linear_case_ex(NB_WFMT_BF16, 40, 100, 258, 1, NB_WEIGHT_FEEDS_TOPK, 4, NB_TOL_LT_BF16W);
    nb_cuda_linear_force_mma(0);
}

/* A resident NVFP4 weight: the first lt call caches its BF16 expansion, the second reads
 * the cache; both agree with the CPU. The device copy is never freed (the flag promises
 * it lives as long as the context). */
static void test_linear_lt_cache(void)
{
    tu_seed(14);
    tu_weight w;
    tu_weight_make(&w, NB_WFMT_NVFP4, 320, 512, 0.1f, 1);
    nb_weight d = w.d;
    size_t db = (size_t)(320 * 512 / 2), sb = (size_t)(320 * 512 / 16);
    void *dd = nb_ops_alloc(tu_gpu, db), *ds = nb_ops_alloc(tu_gpu, sb);
    NB_CHECK_OK(nb_ops_upload(tu_gpu, dd, w.hdata, db));
    NB_CHECK_OK(nb_ops_upload(tu_gpu, ds, w.hscale, sb));
    d.data = dd, d.scale = ds, d.flags = NB_WEIGHT_RESIDENT;
    int e0 = 0, e1 = 0, e2 = 0;
    nb_cuda_linear_cache_stats(tu_gpu, &e0, NULL);
    for (int call = 0; call < 2; call++) {
        const int T = 40 + call;
        float *x = malloc((size_t)T * 512 * 4), *y = malloc((size_t)T * 320 * 4), *yb = malloc((size_t)T * 320 * 4);
        tu_fill(x, (size_t)T * 512, 1.0f);
        nb_tensor hx = nb_tensor_2d(x, F32, T, 512), hy = nb_tensor_2d(y, F32, T, 320);
        nb_tensor dx = tu_twin(&hx), dy = hy;
        dy.data = tu_poisoned((size_t)T * 320 * 4);
        dy.device = NB_DEVICE_CUDA;
        NB_CHECK_OK(nb_op_linear(tu_cpu, &hx, &w.h, &hy));
        NB_CHECK_OK(nb_op_linear(tu_gpu, &dx, &d, &dy));
        tu_down(&dy, yb);
        nb_cuda_linear_cache_stats(tu_gpu, call ? &e2 : &e1, NULL);
        tu_compare(call ? "linear nvfp4 lt, cached BF16 (hit)" : "linear nvfp4 lt, cached BF16 (fill)", y, yb,
                   (size_t)T * 320, NB_TOL_BF16);
        free(x), free(y), free(yb);
        tu_free_all();
    }
    fprintf(stderr, "    BF16 cache entries: %d before, %d after the first call, %d after the second\n", e0, e1, e2);
    NB_CHECK(e1 == e0 + 1 && e2 == e1);
    tu_weight_free(&w);
}

/* The MLP's bound: the BF16 bound when gate/up or down take a one-term route (lin_tol). The
 * activations of down are not x, but the routes only look at their alignment. */
static double mlp_tol(const nb_weight *gate, const nb_weight *down, const float *x, int64_t H, int64_t I, int64_t T,
                      double tol)
{
    const double a = lin_tol(gate, x, H, T, tol), b = lin_tol(down, x, I, T, tol);
    return a > b ? a : b;
}

static void mlp_case(nb_wfmt fmt, int T, int H, int I, double tol)
{
    tu_weight g, u, d;
    tu_weight_make(&g, fmt, I, H, 0.1f, 0);
    tu_weight_make(&u, fmt, I, H, 0.1f, 0);
    tu_weight_make(&d, fmt, H, I, 0.1f, 0);
    float *x = malloc((size_t)T * H * 4), *o = malloc((size_t)T * H * 4), *ob = malloc((size_t)T * H * 4);
    tu_fill(x, (size_t)T * H, 1.0f);
    tu_fill(o, (size_t)T * H, 1.0f);
    nb_tensor hx = nb_tensor_2d(x, F32, T, H), ho = nb_tensor_2d(o, F32, T, H);
    nb_tensor dx = tu_twin(&hx), dout = tu_twin(&ho); /* accumulate into the same start */
    NB_CHECK_OK(nb_op_mlp(tu_cpu, &hx, &g.h, &u.h, &d.h, 1, &ho));
    NB_CHECK_OK(nb_op_mlp(tu_gpu, &dx, &g.d, &u.d, &d.d, 1, &dout));
    tu_down(&dout, ob);
    const double t2 = mlp_tol(&g.d, &d.d, (const float *)dx.data, H, I, T, tol);
    char name[128];
    snprintf(name, sizeof name, "mlp %s T=%d H=%d I=%d accumulate%s", tu_fmt_name(fmt), T, H, I,
             t2 != tol ? " [one BF16 term: BF16 bound]" : "");
    tu_compare(name, o, ob, (size_t)T * H, t2);
    free(x), free(o), free(ob);
    tu_weight_free(&g), tu_weight_free(&u), tu_weight_free(&d);
    tu_free_all();
}

/* gate and up as adjacent rows of one BF16 allocation, as the device twin lays them out
 * (model/upload.c): the CUDA op runs them as one [2I, H] linear (ops/cuda/linear.cu). */
static void mlp_adjacent_case(int T, int H, int I, double tol)
{
    tu_weight gu, d;
    tu_weight_make(&gu, NB_WFMT_BF16, 2 * I, H, 0.1f, 0);
    tu_weight_make(&d, NB_WFMT_BF16, H, I, 0.1f, 0);
    nb_weight gh = gu.h, uh = gu.h, gd = gu.d, ud = gu.d;
    gh.n = uh.n = gd.n = ud.n = I;
    uh.data = (char *)gu.h.data + (size_t)I * H * 2;
    ud.data = (char *)gu.d.data + (size_t)I * H * 2;
    float *x = malloc((size_t)T * H * 4), *o = malloc((size_t)T * H * 4), *ob = malloc((size_t)T * H * 4);
    tu_fill(x, (size_t)T * H, 1.0f);
    tu_fill(o, (size_t)T * H, 1.0f);
    nb_tensor hx = nb_tensor_2d(x, F32, T, H), ho = nb_tensor_2d(o, F32, T, H);
    nb_tensor dx = tu_twin(&hx), dout = tu_twin(&ho);
    NB_CHECK_OK(nb_op_mlp(tu_cpu, &hx, &gh, &uh, &d.h, 1, &ho));
    NB_CHECK_OK(nb_op_mlp(tu_gpu, &dx, &gd, &ud, &d.d, 1, &dout));
    tu_down(&dout, ob);
    nb_weight gud = gu.d; /* the route of the pair as one [2I, H] linear */
    const double t2 = mlp_tol(&gud, &d.d, (const float *)dx.data, H, I, T, tol);
    char name[128];
    snprintf(name, sizeof name, "mlp bf16 gate|up adjacent T=%d H=%d I=%d accumulate%s", T, H, I,
             t2 != tol ? " [one BF16 term: BF16 bound]" : "");
    tu_compare(name, o, ob, (size_t)T * H, t2);
    free(x), free(o), free(ob);
    tu_weight_free(&gu), tu_weight_free(&d);
    tu_free_all();
}

static void test_mlp(void)
{
    tu_seed(12);
    for (int f = 0; f < 4; f++) {
        mlp_case((nb_wfmt)f, 5, 256, 384, NB_TOL_F32);
        mlp_case((nb_wfmt)f, 40, 256, 384, NB_TOL_BF16);
    }
    /* every linear path: gemv (1, 2), mma (3..16), lt (40) */
    const int ts[] = {1, 2, 5, 10, 16};
    for (size_t i = 0; i < NB_ARRAY_LEN(ts); i++) mlp_adjacent_case(ts[i], 512, 384, NB_TOL_F32);
    mlp_adjacent_case(40, 256, 384, NB_TOL_BF16);
    /* The pair's SiLU pass (NIBBLE_CUDA_MLP_SILU4): 2 writes the cuBLASLt down projection's
     * BF16 input itself, 1 four pairs per thread in F32, 0 one pair per thread; I = 198 is not
     * a multiple of 4 and takes the one-pair kernel whatever the mode. */
    for (int m = 2; m >= 0; m--) {
        nb_cuda_mlp_force_silu4(m);
        mlp_adjacent_case(40, 256, 384, NB_TOL_BF16);
        mlp_adjacent_case(300, 512, 2048, NB_TOL_BF16);
        mlp_adjacent_case(40, 256, 198, NB_TOL_BF16);
    }
    nb_cuda_mlp_force_silu4(-1);
}

/* The register-fed tensor-core kernel (linear_mmr.cu): every T in 1..16 (two terms at 1-2
 * tokens: the float32 bound; one from 3: the BF16 bound; two again when forced or for a
 * weight feeding a top-k), rows that are not a multiple of 16, every K split forced (more
 * warps than groups included), two steps per group, GLM-5's shapes, PDL on and off, the
 * MLP through it, and the shapes it cannot take going elsewhere. */
static void linear_mmr_case(int T, int n, int k, int bias, int ldx_pad, int want, double tol)
{
    tu_weight probe;
    tu_weight_make(&probe, NB_WFMT_BF16, n, k, 0.1f, 0);
    float *dxp = nb_ops_alloc(tu_gpu, (size_t)T * (size_t)(k + ldx_pad) * 4);
    const char *route = nb_cuda_linear_path_name(&probe.d, dxp, k + ldx_pad, T);
    if (!strcmp(route, "mmr") != !!want) fprintf(stderr, "    T=%d [%d, %d]: route %s\n", T, n, k, route);
    NB_CHECK(!strcmp(route, "mmr") == !!want);
    nb_ops_free(tu_gpu, dxp);
    tu_weight_free(&probe);
    linear_case_ex(NB_WFMT_BF16, T, n, k, bias, 0, ldx_pad, tol);
}

static void test_linear_mmr(void)
{
    tu_seed(18);
    nb_cuda_linear_force_sk(1);
    nb_cuda_linear_force_mmr(1);
    for (int pdl = 1; pdl >= 0; pdl--) {
        nb_cuda_linear_force_pdl(pdl);
        for (int T = 1; T <= 16; T++) linear_mmr_case(T, 200, 1024 + 32 * 3, T % 2, 4, 1, NB_TOL_F32);
    }
    nb_cuda_linear_force_pdl(1);
    nb_cuda_linear_force_mmr_terms(2); /* two terms at every T: the float32 bound, no exception */
    for (int T = 3; T <= 16; T += 3) linear_mmr_case(T, 77, 2048 + 32, 1, 4, 1, NB_TOL_F32);
    nb_cuda_linear_force_mmr_terms(0);
    for (int kw = 1; kw <= 16; kw *= 2) {
        nb_cuda_linear_force_mmr_kw(kw);
        linear_mmr_case(10, 40, 8192 + 32, 1, 4, 1, NB_TOL_F32);
        linear_mmr_case(2, 45, 512 + 32 * 5, 0, 4, 1, NB_TOL_F32); /* fewer groups than warps */
        nb_cuda_linear_force_mmr_unroll(2);
        linear_mmr_case(16, 33, 4096 + 32 * 3, 1, 4, 1, NB_TOL_F32);
        nb_cuda_linear_force_mmr_unroll(0);
    }
    nb_cuda_linear_force_mmr_kw(0);
    linear_mmr_case(10, 2784, 6144, 0, 4, 1, NB_TOL_F32);  /* GLM-5: q_a + kv_a + indexer wk + weights_proj */
    linear_mmr_case(2, 6144, 2048, 1, 4, 1, NB_TOL_F32);   /* shared expert down */
    linear_mmr_case(1, 4096, 6144, 0, 4, 1, NB_TOL_F32);   /* shared expert gate|up */
    linear_mmr_case(16, 1024, 16384, 0, 4, 1, NB_TOL_F32); /* o_proj's K */
    /* A weight feeding a top-k keeps two terms: the float32 bound at 10 tokens. */
    linear_case_ex(NB_WFMT_BF16, 10, 256, 2048, 1, NB_WEIGHT_FEEDS_TOPK, 4, NB_TOL_F32);
    {
        tu_weight w;
        tu_weight_make(&w, NB_WFMT_BF16, 256, 2048, 0.1f, 0);
        w.d.flags = NB_WEIGHT_FEEDS_TOPK;
        NB_CHECK(nb_cuda_mmr_plan_for(&w.d, 10, 132).terms == 2);
        w.d.flags = 0;
        NB_CHECK(nb_cuda_mmr_plan_for(&w.d, 10, 132).terms == 1);
        NB_CHECK(nb_cuda_mmr_plan_for(&w.d, 2, 132).terms == 2);
        tu_weight_free(&w);
    }
    /* The MLP through it: the pair as one linear, accumulating; separate gate and up. */
    nb_cuda_mlp_force_fused(0);
    const int ts[] = {1, 2, 5, 10, 16};
    for (size_t i = 0; i < NB_ARRAY_LEN(ts); i++) mlp_adjacent_case(ts[i], 512, 384, NB_TOL_F32);
    mlp_case(NB_WFMT_BF16, 7, 1024, 2048, NB_TOL_F32);
    nb_cuda_mlp_force_fused(-1);
    /* Not for it: K % 32, misaligned activations, more than 16 tokens, NVFP4. */
    linear_mmr_case(10, 64, 1000, 1, 4, 0, NB_TOL_F32);
    linear_mmr_case(10, 64, 1024, 1, 1, 0, NB_TOL_F32);
    linear_mmr_case(17, 64, 1024, 1, 4, 0, NB_TOL_F32);
    linear_case(NB_WFMT_NVFP4, 10, 64, 1024, 1, NB_TOL_F32);
    /* Mode 3: 1-2 tokens keep the GEMV. */
    nb_cuda_linear_force_mmr(3);
    linear_mmr_case(2, 200, 1024, 1, 4, 0, NB_TOL_F32);
    linear_mmr_case(3, 200, 1024, 1, 4, 1, NB_TOL_F32);
    nb_cuda_linear_force_mmr(-1);
    nb_cuda_linear_force_pdl(-1);
    nb_cuda_linear_force_sk(0);
}

/* The second GEMV version (PDL-aware, 64 registers at 1-2 BF16 tokens, four rows per warp
 * when forced) and the mma kernel with PDL and with one BF16 term, each with PDL forced on
 * and off, split-K included. */
static void test_linear_v2(void)
{
    tu_seed(19);
    nb_cuda_linear_force_sk(1);
    nb_cuda_linear_force_mmr(0);
    for (int pdl = 1; pdl >= 0; pdl--) {
        nb_cuda_linear_force_pdl(pdl);
        nb_cuda_linear_force_gemv_v2(1);
        nb_cuda_linear_force_mma(1);
        const int Ts[] = {1, 2, 3, 10, 16};
        for (int f = NB_WFMT_BF16; f <= NB_WFMT_NVFP4; f++)
            for (size_t i = 0; i < NB_ARRAY_LEN(Ts); i++) linear_case((nb_wfmt)f, Ts[i], 203, 2048 + 32, i % 2, NB_TOL_F32);
        linear_case(NB_WFMT_BF16, 2, 6144, 16384, 0, NB_TOL_F32); /* o_proj */
        linear_case(NB_WFMT_BF16, 1, 2784, 6144, 1, NB_TOL_F32);
        nb_cuda_linear_force_ksplit(8);
        linear_case(NB_WFMT_BF16, 2, 45, 8192, 1, NB_TOL_F32);
        nb_cuda_linear_force_ksplit(0);
        /* the automatic choice: four rows above 1024 rows (not the router's 256) */
        NB_CHECK(nb_cuda_gemv_plan_for(&(nb_weight){.fmt = NB_WFMT_BF16, .n = 256, .k = 6144}, 2, 132).rows_per_warp == 2);
        if (!getenv("NIBBLE_CUDA_GEMV_R4"))
            NB_CHECK(nb_cuda_gemv_plan_for(&(nb_weight){.fmt = NB_WFMT_BF16, .n = 2784, .k = 6144}, 1, 132)
                         .rows_per_warp == (NB_CUDA_GEMV_R4_DEFAULT >= 1 ? 4 : 2));
        /* four rows per warp at 1-2 tokens: row counts that leave 1-3 rows in the last group */
        nb_cuda_linear_force_gemv_r4(2);
        for (int T = 1; T <= 2; T++) {
            NB_CHECK(nb_cuda_gemv_plan_for(&(nb_weight){.fmt = NB_WFMT_BF16, .n = 203, .k = 2048}, T, 132).rows_per_warp == 4);
            linear_case(NB_WFMT_BF16, T, 203, 2048 + 32, T - 1, NB_TOL_F32);
            linear_case(NB_WFMT_BF16, T, 45, 8192 + 8, 1, NB_TOL_F32); /* a partial last step */
            linear_case(NB_WFMT_BF16, T, 6144, 16384, 0, NB_TOL_F32);
            nb_cuda_linear_force_ksplit(8);
            linear_case(NB_WFMT_BF16, T, 46, 8192, 1, NB_TOL_F32);
            nb_cuda_linear_force_ksplit(0);
        }
        mlp_adjacent_case(2, 512, 384, NB_TOL_F32);
        nb_cuda_linear_force_gemv_r4(-1);
        nb_cuda_linear_force_mma(0);
        for (int terms = 1; terms <= 2; terms++) {
            nb_cuda_linear_force_mma_terms(terms);
            linear_mma_case(10, 40, 8192 + 32, 1, 4, 1); /* split-K with partial sums */
            linear_mma_case(16, 6144, 2048, 0, 4, 1);
            linear_mma_case(3, 2784, 6144, 1, 4, 1);
        }
        nb_cuda_linear_force_mma_terms(0);
        mlp_adjacent_case(10, 512, 384, NB_TOL_F32);
    }
    nb_cuda_linear_force_mma_terms(1); /* a top-k weight keeps two terms on the mma kernel too */
    linear_case_ex(NB_WFMT_BF16, 10, 256, 2048, 1, NB_WEIGHT_FEEDS_TOPK, 4, NB_TOL_F32);
    nb_cuda_linear_force_mma_terms(0);
    nb_cuda_linear_force_gemv_v2(-1);
    nb_cuda_linear_force_pdl(-1);
    nb_cuda_linear_force_mmr(-1);
    nb_cuda_linear_force_sk(0);
}

/* The MLP's down projection reading SiLU(gate) * up from the adjacent pairs (linear.cu): on
 * the vector GEMV (1-2 tokens; forced to every T), the mma kernel (3..16 tokens, one and two
 * terms), with PDL on and off, and the separate pass (fused off; GEMV v1 where the fused
 * GEMV cannot run) for comparison. */
static void test_mlp_silu(void)
{
    tu_seed(20);
    nb_cuda_linear_force_sk(1);
    nb_cuda_linear_force_mmr(0);
    const int ts[] = {1, 2, 3, 5, 10, 16};
    for (int pdl = 1; pdl >= 0; pdl--) {
        nb_cuda_linear_force_pdl(pdl);
        for (int fused = 1; fused >= 0; fused--) {
            nb_cuda_mlp_force_silu_fused(fused);
            for (size_t i = 0; i < NB_ARRAY_LEN(ts); i++) mlp_adjacent_case(ts[i], 512 + 32 * (int)i, 384, NB_TOL_F32);
        }
    }
    nb_cuda_linear_force_pdl(-1);
    nb_cuda_mlp_force_silu_fused(2); /* the mma route only: 1-2 tokens keep the separate pass */
    for (size_t i = 0; i < NB_ARRAY_LEN(ts); i++) mlp_adjacent_case(ts[i], 640, 384, NB_TOL_F32);
    nb_cuda_mlp_force_silu_fused(1);
    nb_cuda_linear_force_mma_terms(2);
    mlp_adjacent_case(10, 6144, 2048, NB_TOL_F32); /* GLM-5's shared expert, split-K mma */
    nb_cuda_linear_force_mma_terms(0);
    mlp_adjacent_case(10, 6144, 2048, NB_TOL_F32);
    mlp_adjacent_case(2, 6144, 2048, NB_TOL_F32);
    nb_cuda_linear_force_mma(1); /* every T on the GEMV (the fused read at 3..16 tokens too) */
    for (size_t i = 0; i < NB_ARRAY_LEN(ts); i++) mlp_adjacent_case(ts[i], 1024, 200, NB_TOL_F32);
    nb_cuda_linear_force_gemv_r4(0);
    mlp_adjacent_case(2, 1024, 200, NB_TOL_F32);
    nb_cuda_linear_force_gemv_r4(-1);
    nb_cuda_linear_force_gemv_v2(0); /* the first GEMV version: the separate pass */
    mlp_adjacent_case(2, 1024, 200, NB_TOL_F32);
    nb_cuda_linear_force_gemv_v2(-1);
    nb_cuda_linear_force_mma(0);
    nb_cuda_mlp_force_silu_fused(-1);
    nb_cuda_linear_force_mmr(-1);
    nb_cuda_linear_force_sk(0);
}

static const nb_test tests[] = {
    {"linear_gemv", test_linear_gemv},
    {"linear_gemv_vec", test_linear_gemv_vec},
    {"linear_mma", test_linear_mma},
    {"linear_sk", test_linear_sk},
    {"linear_lt", test_linear_lt},
    {"linear_lt_cache", test_linear_lt_cache},
    {"mlp", test_mlp},
    {"mlp_fused", test_mlp_fused},
    {"linear_mmr", test_linear_mmr},
    {"linear_v2", test_linear_v2},
    {"mlp_silu", test_mlp_silu},
};

int main(int argc, char **argv)
{
    if (!nb_cuda_test_require_gpu()) return 77;
    if (!tu_open()) return 1;
    int rc = nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
    tu_close();
    return rc;
}
