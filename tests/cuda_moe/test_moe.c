/* NVFP4 MoE kernels (ops/cuda/moe.h) against float64 CPU computations on the dequantized
 * ModelOpt weights, on fresh random inputs every run (seeded from the clock; the seed is
 * printed), with the workspace poisoned (NaN) first so unwritten intermediates fail.
 *   moe_*:    routed FFN, all three kernels (wgmma on sm_90 only), edge cases (empty
 *             experts, one hot expert over many tiles, ragged tiles, skipped ids,
 *             T = 16384 sampled, GLM-5 shapes), accumulate; the stream kernel's variants
 *             (small-step kernel, routing scans, forced tile widths)
 *             and the wgmma kernel's (tile widths, wgmma depth, accumulator chains,
 *             warps per block, old), its widths in steps of 8 (moe_wgmma_n8,
 *             NIBBLE_MOE_WG_N8=1), its wide form (moe_wgmma_wide, NIBBLE_MOE_WG_WIDE), and the
 *             producer/consumer wgmma kernel (moe_wgpc)
 *   shared:   the dense shared expert
 *   router_*: top-k router vs a CPU router written here (ids exact, weights 1e-5)
 * The repack round trip and the CPU op's agreement with the same float64 reference are
 * host-only: tests/cuda_moe/test_moe_host.c. Run on the GPU machine: ctest -L gpu (exits 77
 * without a GPU). */
#include <cuda_runtime_api.h>
#include <time.h>

#include "nbtest.h"
#include "moe_testlib.h"
#include "ops/cuda/device.h"
#include "ops/cuda/moe.h"

/* BF16 activations in, one BF16 rounding of the SwiGLU intermediate, F32 accumulation:
 * errors near 2^-9 relative; 1e-2 is the bound against float64. */
#define NB_TOL_NVFP4_MOE 1e-2
/* Router weights: float32 softmax/sigmoid on both sides, different exp implementations. */
#define NB_TOL_ROUTER_WEIGHT 1e-5

/* ---- routed FFN -------------------------------------------------------------------- */

typedef struct {
    host_experts h;
    nb_moe_weights_dev dev;
    void *d_w13, *d_s13, *d_w2, *d_s2, *d_g13, *d_g2;
} experts;

static int experts_make(experts *x, int E, int H, int I)
{
    memset(x, 0, sizeof *x);
    host_experts_make(&x->h, E, H, I);
    size_t b13 = nb_moe_packed_weight_bytes(2 * I, H), s13 = nb_moe_packed_scale_bytes(2 * I, H);
    size_t b2 = nb_moe_packed_weight_bytes(H, I), s2 = nb_moe_packed_scale_bytes(H, I);
    uint8_t *hw13 = malloc(b13 * E), *hs13 = malloc(s13 * E), *hw2 = malloc(b2 * E), *hs2 = malloc(s2 * E);
    for (int e = 0; e < E; e++)
        if (nb_moe_repack_nvfp4("w13", x->h.w13[e].codes, x->h.w13[e].scales, 2 * I, H, hw13 + b13 * e,
                                hs13 + s13 * e) ||
            nb_moe_repack_nvfp4("w2", x->h.w2[e].codes, x->h.w2[e].scales, H, I, hw2 + b2 * e, hs2 + s2 * e))
            return -1;
    int ok = cudaMalloc(&x->d_w13, b13 * E) == cudaSuccess && cudaMalloc(&x->d_s13, s13 * E) == cudaSuccess &&
             cudaMalloc(&x->d_w2, b2 * E) == cudaSuccess && cudaMalloc(&x->d_s2, s2 * E) == cudaSuccess &&
             cudaMalloc(&x->d_g13, 8 * E) == cudaSuccess && cudaMalloc(&x->d_g2, 4 * E) == cudaSuccess;
    if (ok) {
        cudaMemcpy(x->d_w13, hw13, b13 * E, cudaMemcpyHostToDevice);
        cudaMemcpy(x->d_s13, hs13, s13 * E, cudaMemcpyHostToDevice);
        cudaMemcpy(x->d_w2, hw2, b2 * E, cudaMemcpyHostToDevice);
        cudaMemcpy(x->d_s2, hs2, s2 * E, cudaMemcpyHostToDevice);
        cudaMemcpy(x->d_g13, x->h.g13, 8 * E, cudaMemcpyHostToDevice);
        cudaMemcpy(x->d_g2, x->h.g2, 4 * E, cudaMemcpyHostToDevice);
    }
    free(hw13), free(hs13), free(hw2), free(hs2);
    x->dev = (nb_moe_weights_dev){E, H, I, x->d_w13, x->d_s13, x->d_w2, x->d_s2, x->d_g13, x->d_g2};
    return ok ? 0 : -1;
}

static void experts_free(experts *x)
{
    host_experts_free(&x->h);
    cudaFree(x->d_w13), cudaFree(x->d_s13), cudaFree(x->d_w2), cudaFree(x->d_s2);
    cudaFree(x->d_g13), cudaFree(x->d_g2);
}

enum { ROUTE_UNIFORM, ROUTE_ONE_HOT, ROUTE_FEW, ROUTE_SKIP };

/* One case: T tokens, top-k, a routing pattern, a forced kernel. Checks at most `check`
 * tokens against float64 (all when check >= T); every output must be finite. */
static void moe_case(experts *x, int T, int topk, int pattern, nb_moe_kernel kern, int accumulate, int check)
{
    const int H = x->h.H, E = x->h.E;
    size_t nx = (size_t)T * H, ns = (size_t)T * topk;
    uint16_t *hx = malloc(nx * 2);
    float *xf = malloc(nx * 4), *hout = malloc(nx * 4), *prev = malloc(nx * 4), *hw = malloc(ns * 4);
    int32_t *ids = malloc(ns * 4);
    for (size_t i = 0; i < nx; i++) {
        hx[i] = nb_f32_to_bf16(2.0f * frand());
        xf[i] = nb_bf16_to_f32(hx[i]);
        prev[i] = frand();
    }
    for (int t = 0; t < T; t++)
        for (int j = 0; j < topk; j++) {
            int e;
            for (;;) { /* distinct experts per token, as a router picks them */
                if (pattern == ROUTE_ONE_HOT && j == 0)
                    e = 3 % E;
                else if (pattern == ROUTE_FEW)
                    e = (int)(rnd32() % (uint32_t)(topk + 1));
                else
                    e = (int)(rnd32() % (uint32_t)E);
                int dup = 0;
                for (int jj = 0; jj < j; jj++) dup |= ids[t * topk + jj] == e;
                if (!dup) break;
            }
            ids[t * topk + j] = (pattern == ROUTE_SKIP && rnd32() % 4 == 0) ? -1 : e;
            hw[t * topk + j] = 0.1f + 0.9f * (frand() * 0.5f + 0.5f);
        }
    void *dx, *dids, *dw, *dout, *dws;
    size_t wsb = nb_moe_workspace_bytes(&x->dev, T, topk);
    NB_CHECK(cudaMalloc(&dx, nx * 2) == cudaSuccess);
    NB_CHECK(cudaMalloc(&dids, ns * 4) == cudaSuccess);
    NB_CHECK(cudaMalloc(&dw, ns * 4) == cudaSuccess);
    NB_CHECK(cudaMalloc(&dout, nx * 4) == cudaSuccess);
    NB_CHECK(cudaMalloc(&dws, wsb) == cudaSuccess);
    cudaMemcpy(dx, hx, nx * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dids, ids, ns * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, hw, ns * 4, cudaMemcpyHostToDevice);
    cudaMemset(dws, 0xff, wsb); /* NaN poison */
    if (accumulate)
        cudaMemcpy(dout, prev, nx * 4, cudaMemcpyHostToDevice);
    else
        cudaMemset(dout, 0xff, nx * 4);
    nb_moe_desc d = {T, topk, dx, dids, dw, dout, accumulate, kern, dws, wsb};
    NB_CHECK_OK(nb_moe_forward(&x->dev, &d, NULL));
    cudaError_t ce = cudaDeviceSynchronize();
    NB_CHECK_MSG(ce == cudaSuccess, "%s", cudaGetErrorString(ce));
    cudaMemcpy(hout, dout, nx * 4, cudaMemcpyDeviceToHost);

    int nonfinite = 0;
    for (size_t i = 0; i < nx; i++) nonfinite += !isfinite(hout[i]);
    double err = 0, ref = 0;
    double *acc = malloc(sizeof(double) * H);
    int stride = check >= T ? 1 : T / check;
    for (int t = 0; t < T; t += stride) {
        for (int h = 0; h < H; h++) acc[h] = accumulate ? prev[(size_t)t * H + h] : 0.0;
        for (int j = 0; j < topk; j++)
            if (ids[t * topk + j] >= 0) ref_expert(&x->h, ids[t * topk + j], xf + (size_t)t * H, hw[t * topk + j], acc);
        for (int h = 0; h < H; h++) {
            double dd = hout[(size_t)t * H + h] - acc[h];
            err += dd * dd;
            ref += acc[h] * acc[h];
        }
    }
    double rel = ref > 0 ? sqrt(err / ref) : sqrt(err);
    /* Also against the CPU reference op on the same ModelOpt weights (ops/cpu/moe.c). */
    double rel_op = -1;
#ifndef NB_MOE_TEST_NO_CPU_OP
    if (check >= T && !accumulate) {
        float *cpu = malloc(nx * 4);
        double *cpud = malloc(nx * 8);
        NB_CHECK_OK(cpu_op_moe(&x->h, T, topk, xf, ids, hw, cpu));
        for (size_t i = 0; i < nx; i++) cpud[i] = cpu[i];
        rel_op = rel_l2(hout, cpud, nx);
        NB_CHECK_MSG(rel_op <= NB_TOL_NVFP4_MOE, "vs the CPU op: rel err %.3g > %g", rel_op, NB_TOL_NVFP4_MOE);
        free(cpu), free(cpud);
    }
#endif
    static const char *pn[] = {"uniform", "one-hot", "few", "skip"};
    fprintf(stderr, "  E=%d H=%d I=%d T=%d k=%d %s %s%s: rel err %.3g (vs CPU op %.3g), %d non-finite\n", E, H,
            x->h.I, T, topk, pn[pattern], nb_moe_kernel_name(kern), accumulate ? " accumulate" : "", rel, rel_op,
            nonfinite);
    NB_CHECK_MSG(nonfinite == 0, "%d outputs are not finite", nonfinite);
    NB_CHECK_MSG(rel <= NB_TOL_NVFP4_MOE, "rel err %.3g > %g", rel, NB_TOL_NVFP4_MOE);
    free(acc), free(hx), free(xf), free(hout), free(prev), free(hw), free(ids);
    cudaFree(dx), cudaFree(dids), cudaFree(dw), cudaFree(dout), cudaFree(dws);
}

static int gpu_or_skip(void)
{
    if (nb_cuda_test_require_gpu()) return 1;
    nb_test_skip("no CUDA device");
    return 0;
}

static void seed(void)
{
    rng = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ULL + (uint64_t)clock();
    fprintf(stderr, "  seed %llu\n", (unsigned long long)rng);
}

/* The wgmma kernel runs on sm_90 devices only (H100/H200); elsewhere its cases are skipped
 * (said on stderr) and nb_moe_forward must refuse it. */
static int have_wgmma(void)
{
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (major == 9 && minor == 0) return 1;
    fprintf(stderr, "  sm_%d%d: wgmma kernel cases skipped\n", major, minor);
    return 0;
}

static void test_moe_small(void)
{
    if (!gpu_or_skip()) return;
    seed();
    experts x;
    NB_CHECK(experts_make(&x, 16, 512, 256) == 0);
    const nb_moe_kernel ks[] = {NB_MOE_KERNEL_STREAM, NB_MOE_KERNEL_MMA, NB_MOE_KERNEL_WGMMA};
    for (int ki = 0; ki < 2 + have_wgmma(); ki++) {
        moe_case(&x, 1, 4, ROUTE_UNIFORM, ks[ki], 0, 1 << 30);
        moe_case(&x, 5, 4, ROUTE_UNIFORM, ks[ki], 0, 1 << 30);  /* fills no tile */
        moe_case(&x, 3, 2, ROUTE_UNIFORM, ks[ki], 0, 1 << 30);  /* most experts empty */
        moe_case(&x, 77, 4, ROUTE_ONE_HOT, ks[ki], 0, 1 << 30); /* 77 tokens on expert 3 */
        moe_case(&x, 64, 4, ROUTE_FEW, ks[ki], 0, 1 << 30);     /* 5 hot experts, 11 empty */
        moe_case(&x, 40, 4, ROUTE_SKIP, ks[ki], 0, 1 << 30);    /* ids of -1 */
        moe_case(&x, 33, 4, ROUTE_UNIFORM, ks[ki], 1, 1 << 30); /* out += */
        moe_case(&x, 300, 3, ROUTE_ONE_HOT, ks[ki], 0, 1 << 30); /* 5 tiles of one expert side by side */
        moe_case(&x, 200, 8, ROUTE_UNIFORM, ks[ki], 0, 1 << 30); /* 100 per expert: 64 + 36 */
    }
    experts_free(&x);
}

static void test_moe_big_t(void)
{
    if (!gpu_or_skip()) return;
    seed();
    experts x;
    NB_CHECK(experts_make(&x, 16, 256, 256) == 0);
    moe_case(&x, 16384, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_MMA, 0, 48);
    moe_case(&x, 16384, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_STREAM, 0, 48);
    if (have_wgmma()) moe_case(&x, 16384, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 48);
    moe_case(&x, 2000, 8, ROUTE_ONE_HOT, NB_MOE_KERNEL_AUTO, 0, 40);
    experts_free(&x);
}

static void test_moe_glm5_shape(void)
{
    if (!gpu_or_skip()) return;
    seed();
    experts x;
    NB_CHECK(experts_make(&x, 4, 6144, 2048) == 0);
    moe_case(&x, 2, 2, ROUTE_UNIFORM, NB_MOE_KERNEL_STREAM, 0, 1 << 30);
    moe_case(&x, 3, 3, ROUTE_UNIFORM, NB_MOE_KERNEL_MMA, 0, 1 << 30);
    if (have_wgmma()) {
        moe_case(&x, 3, 3, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 1 << 30);
        moe_case(&x, 150, 2, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 30); /* ~75 per expert */
    }
    experts_free(&x);
}

/* The stream kernel's switches (nb_moe_stream_set): the first sessions' path, the small-step
 * kernel (routes for itself; at most 64 slots, larger steps fall back to the counter-driven
 * kernel) at 8- and 16-token tiles, the counter-driven kernel with the shuffle-scan routing at
 * forced 8- and 16-token tiles, all on the default k-group loop (2: lanes past the tile read
 * its first row instead of zeros, so a column the epilogue should not store would show); then
 * the last four on loops 0 and 1 (NIBBLE_MOE_STREAM_LOOP). */
static const struct {
    int small, nt, fast_route, loop;
    const char *name;
} stream_cfgs[] = {
    {0, 0, 0, NB_MOE_STREAM_LOOP_DEFAULT, "v1"},
    {1, 0, 1, NB_MOE_STREAM_LOOP_DEFAULT, "small-step kernel"},
    {1, 2, 1, NB_MOE_STREAM_LOOP_DEFAULT, "small-step kernel, 16-token tiles"},
    {0, 1, 1, NB_MOE_STREAM_LOOP_DEFAULT, "8-token tiles"},
    {0, 2, 1, NB_MOE_STREAM_LOOP_DEFAULT, "16-token tiles"},
    {1, 0, 1, 0, "small-step kernel, k-group loop 0 (NIBBLE_MOE_STREAM_LOOP=0)"},
    {1, 2, 1, 0, "small-step kernel, 16-token tiles, loop 0"},
    {0, 1, 1, 0, "8-token tiles, loop 0"},
    {0, 2, 1, 0, "16-token tiles, loop 0"},
    {1, 0, 1, 1, "small-step kernel, k-group loop 1"},
    {1, 2, 1, 1, "small-step kernel, 16-token tiles, loop 1"},
    {0, 1, 1, 1, "8-token tiles, loop 1"},
    {0, 2, 1, 1, "16-token tiles, loop 1"},
};

static void test_moe_stream_variants(void)
{
    if (!gpu_or_skip()) return;
    seed();
    experts x, big;
    NB_CHECK(experts_make(&x, 16, 512, 256) == 0);
    NB_CHECK(experts_make(&big, 4, 6144, 2048) == 0);
    for (size_t c = 0; c < NB_ARRAY_LEN(stream_cfgs); c++) {
        fprintf(stderr, "  stream variant: %s\n", stream_cfgs[c].name);
        nb_moe_stream_set(stream_cfgs[c].small, stream_cfgs[c].nt, stream_cfgs[c].fast_route, stream_cfgs[c].loop);
        moe_case(&x, 1, 4, ROUTE_UNIFORM, NB_MOE_KERNEL_STREAM, 0, 1 << 30);
        moe_case(&x, 16, 4, ROUTE_SKIP, NB_MOE_KERNEL_STREAM, 0, 1 << 30);    /* 64 slots: the small-step limit */
        moe_case(&x, 10, 6, ROUTE_FEW, NB_MOE_KERNEL_STREAM, 1, 1 << 30);     /* 60 slots on 7 experts, out += */
        moe_case(&x, 17, 4, ROUTE_ONE_HOT, NB_MOE_KERNEL_STREAM, 0, 1 << 30); /* 68 slots: past it */
        moe_case(&x, 120, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_STREAM, 0, 1 << 30); /* 60 per expert, 4-8 tiles */
        moe_case(&big, 2, 2, ROUTE_UNIFORM, NB_MOE_KERNEL_STREAM, 0, 1 << 30); /* K split 4 ways */
    }
    nb_moe_stream_set(-1, 0, 0, 0);
    experts_free(&x);
    experts_free(&big);
}

/* The wgmma kernel's compiled variants (ops/cuda/moe_wgmma.cu, chosen through the
 * environment for A/B runs): tile width (NIBBLE_MOE_WG_N), remainder width (_NS, -1: the
 * narrowest of four), k-steps in flight (_D), accumulator chains (_C), warps per block (_W),
 * and the second session's kernel (NIBBLE_MOE_WG=old, NIBBLE_MOE_WG_A=smem). The float64
 * reference costs ~3 ms per (token, expert) here, so larger cases check a sample of tokens
 * (all outputs must still be finite); GLM-5 shapes for the 16-warp widths. */
static const struct {
    const char *n, *ns, *d, *c, *w, *old, *a, *lean;
} wg_cfgs[] = {
    /* NIBBLE_MOE_WG_LEAN=0: the third session's slice loop (moe_wg_item) */
    {"64", "-1", "2", "1", "8", "old", "", "0"}, {"64", "-1", "2", "1", "8", "", "smem", "0"},
    {"16", "0", "2", "1", "8", "", "", "0"},     {"32", "0", "2", "1", "8", "", "", "0"},
    {"48", "0", "2", "1", "8", "", "", "0"},     {"48", "0", "4", "2", "8", "", "", "0"},
    {"64", "16", "2", "1", "8", "", "", "0"},    {"16", "0", "2", "1", "16", "", "", "0"},
    {"32", "0", "2", "1", "16", "", "", "0"},    {"48", "0", "2", "1", "16", "", "", "0"},
    {"32", "16", "2", "1", "16", "", "", "0"},   {"48", "32", "2", "1", "16", "", "", "0"},
    /* the lean loop (moe_wg_item_lean, the default) at every configuration it is built for */
    {"16", "0", "2", "1", "16", "", "", "1"},    {"32", "16", "2", "1", "16", "", "", "1"},
    {"48", "32", "2", "1", "16", "", "", "1"},   {"32", "0", "2", "1", "16", "", "", "1"},
    {"48", "0", "2", "1", "16", "", "", "1"},    {"64", "-1", "2", "1", "8", "", "", "1"},
    {"16", "0", "2", "1", "8", "", "", "1"},     {"32", "0", "2", "1", "8", "", "", "1"},
    {"48", "0", "2", "1", "8", "", "", "1"},
    /* NIBBLE_MOE_WG_N=128: the wide form (one row tile per warp, widths per tile) */
    {"128", "0", "2", "1", "16", "", "", "1"},
};

/* Every switch of the wgmma kernel these tests set, unset (the ladder's defaults). */
static void wg_env_clear(void)
{
    static const char *const names[] = {"NIBBLE_MOE_WG",    "NIBBLE_MOE_WG_A", "NIBBLE_MOE_WG_N",
                                        "NIBBLE_MOE_WG_NS", "NIBBLE_MOE_WG_D", "NIBBLE_MOE_WG_C",
                                        "NIBBLE_MOE_WG_W",  "NIBBLE_MOE_WG_LEAN", "NIBBLE_MOE_WG_N8",
                                        "NIBBLE_MOE_WG_WIDE", "NIBBLE_MOE_WG_WIDE_MID",
                                        "NIBBLE_MOE_WG_MBAR"};
    for (size_t i = 0; i < NB_ARRAY_LEN(names); i++) unsetenv(names[i]);
}

static void wg_env(size_t c)
{
    setenv("NIBBLE_MOE_WG_N", wg_cfgs[c].n, 1);
    setenv("NIBBLE_MOE_WG_NS", wg_cfgs[c].ns, 1);
    setenv("NIBBLE_MOE_WG_D", wg_cfgs[c].d, 1);
    setenv("NIBBLE_MOE_WG_C", wg_cfgs[c].c, 1);
    setenv("NIBBLE_MOE_WG_W", wg_cfgs[c].w, 1);
    setenv("NIBBLE_MOE_WG", wg_cfgs[c].old, 1);
    setenv("NIBBLE_MOE_WG_A", wg_cfgs[c].a, 1);
    setenv("NIBBLE_MOE_WG_LEAN", wg_cfgs[c].lean, 1);
    fprintf(stderr, "  wgmma variant: N %s NS %s D %s C %s W %s lean %s %s%s\n", wg_cfgs[c].n, wg_cfgs[c].ns,
            wg_cfgs[c].d, wg_cfgs[c].c, wg_cfgs[c].w, wg_cfgs[c].lean, wg_cfgs[c].old, wg_cfgs[c].a);
}

static void test_moe_wgmma_variants(void)
{
    if (!gpu_or_skip() || !have_wgmma()) return;
    seed();
    experts x, big;
    NB_CHECK(experts_make(&x, 16, 512, 256) == 0);
    NB_CHECK(experts_make(&big, 4, 6144, 2048) == 0);
    /* Every row with the ring's block barrier per slice (NIBBLE_MOE_WG_MBAR=0), then the lean
     * loop's mbarrier ring (the default) where it is built: the 16-warp defaults (N 16 / NS 0,
     * 32 / 16, 48 / 32). */
    for (size_t k = 0; k < 2 * NB_ARRAY_LEN(wg_cfgs); k++) {
        const size_t c = k % NB_ARRAY_LEN(wg_cfgs);
        const int mb = k >= NB_ARRAY_LEN(wg_cfgs);
        if (mb && !(!strcmp(wg_cfgs[c].lean, "1") && !strcmp(wg_cfgs[c].w, "16") &&
                    atoi(wg_cfgs[c].ns) == (atoi(wg_cfgs[c].n) == 16 ? 0 : atoi(wg_cfgs[c].n) - 16)))
            continue;
        wg_env(c);
        setenv("NIBBLE_MOE_WG_MBAR", mb ? "1" : "0", 1);
        if (mb) fprintf(stderr, "  (NIBBLE_MOE_WG_MBAR=1)\n");
        moe_case(&x, 5, 4, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 1 << 30); /* fills no tile */
        moe_case(&x, 77, 4, ROUTE_ONE_HOT, NB_MOE_KERNEL_WGMMA, 0, 20);     /* ragged last tile */
        moe_case(&x, 40, 4, ROUTE_SKIP, NB_MOE_KERNEL_WGMMA, 1, 16);        /* ids of -1, out += */
        moe_case(&x, 300, 3, ROUTE_ONE_HOT, NB_MOE_KERNEL_WGMMA, 0, 16);    /* tiles side by side */
        moe_case(&x, 200, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 16);    /* 100 per expert */
        if (!strcmp(wg_cfgs[c].w, "16") && !strcmp(wg_cfgs[c].ns, "0"))
            moe_case(&big, 150, 2, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 3); /* ~75 per expert */
    }
    wg_env_clear();
    experts_free(&x);
    experts_free(&big);
}

/* NIBBLE_MOE_WG_N8=1 (ops/cuda/moe_wgmma.cu, moe_wg_item_n8): the wgmma instruction width of
 * each tile is its token count rounded up to 8 (n8..n64), at every tile width and warp count
 * that has such an instance, and at the ladder's own choice (N and W unset). One expert takes
 * T = 1..NW + 8 tokens (top-1, one hot) at 8j + 1 and 8j + 8, so each width runs with its
 * narrowest and fullest tile, next to a full tile plus a remainder; then mixed counts (~31 per
 * expert), skipped ids with out +=, and GLM-5 shapes at ~31 tokens per expert. */
static const struct {
    const char *n, *w;
} wg_n8_cfgs[] = {{"16", "16"}, {"32", "16"}, {"48", "16"}, {"16", "8"}, {"32", "8"},
                  {"48", "8"},  {"64", "8"},  {"", ""}};

static void test_moe_wgmma_n8(void)
{
    if (!gpu_or_skip() || !have_wgmma()) return;
    seed();
    experts x, big;
    NB_CHECK(experts_make(&x, 16, 512, 256) == 0);
    NB_CHECK(experts_make(&big, 4, 6144, 2048) == 0);
    wg_env_clear();
    setenv("NIBBLE_MOE_WG_N8", "1", 1);
    for (size_t c = 0; c < NB_ARRAY_LEN(wg_n8_cfgs); c++) {
        setenv("NIBBLE_MOE_WG_N", wg_n8_cfgs[c].n, 1);
        setenv("NIBBLE_MOE_WG_W", wg_n8_cfgs[c].w, 1);
        const int nw = *wg_n8_cfgs[c].n ? atoi(wg_n8_cfgs[c].n) : 64;
        fprintf(stderr, "  wgmma n8: N %s W %s\n", *wg_n8_cfgs[c].n ? wg_n8_cfgs[c].n : "(ladder)",
                *wg_n8_cfgs[c].w ? wg_n8_cfgs[c].w : "(ladder)");
        for (int j = 0; j < nw / 8; j++) {
            moe_case(&x, 8 * j + 1, 1, ROUTE_ONE_HOT, NB_MOE_KERNEL_WGMMA, 0, 16);
            moe_case(&x, 8 * j + 8, 1, ROUTE_ONE_HOT, NB_MOE_KERNEL_WGMMA, 0, 16);
        }
        moe_case(&x, nw + 5, 1, ROUTE_ONE_HOT, NB_MOE_KERNEL_WGMMA, 0, 12); /* full tile + 5 */
        moe_case(&x, 62, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 12);     /* ~31 per expert, mixed */
        moe_case(&x, 40, 4, ROUTE_SKIP, NB_MOE_KERNEL_WGMMA, 1, 8);         /* ids of -1, out += */
        if (strcmp(wg_n8_cfgs[c].w, "8"))
            moe_case(&big, 124, 1, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 3); /* ~31 per expert */
    }
    wg_env_clear();
    experts_free(&x);
    experts_free(&big);
}

/* The wide form of the 16-warp wgmma kernel (ops/cuda/moe_wgmma_wide.cuh, NIBBLE_MOE_WG_WIDE=2:
 * 128-token tiles, one row tile per warp, each tile at n64, n96 or n128). One expert takes
 * T = 16 j + 1 and 16 j + 16 tokens (top-1), so each width runs with its narrowest and fullest
 * tile; then a full tile plus a remainder, an expert's tiles side by
 * side, mixed counts, skipped ids with out +=, GLM-5 shapes (~75 and ~150 per expert: the
 * epilogue's gate/up hand-off at H 6144), 16384 tokens x top-8 (64 tiles per expert), and the
 * ladder's own choice (NIBBLE_MOE_WG_WIDE=1) at ~100 tokens per expert. x's 2 and 4 slices per
 * item move the ring's mbarrier phases off the item boundaries. */
static void test_moe_wgmma_wide(void)
{
    if (!gpu_or_skip() || !have_wgmma()) return;
    seed();
    experts x, big;
    NB_CHECK(experts_make(&x, 16, 512, 256) == 0);
    NB_CHECK(experts_make(&big, 4, 6144, 2048) == 0);
    wg_env_clear();
    setenv("NIBBLE_MOE_WG_WIDE", "2", 1);
    /* Both middle widths (n80 and n96) at every 16-token boundary; the rest at the launcher's
     * pick. */
    static const char *const mids[] = {"80", "96"};
    for (int m = 0; m < 2; m++) {
        fprintf(stderr, "  wide form, middle width %s\n", mids[m]);
        setenv("NIBBLE_MOE_WG_WIDE_MID", mids[m], 1);
        for (int j = 0; j < NB_MOE_WG_WIDE_TILE / 16; j++) {
            moe_case(&x, 16 * j + 1, 1, ROUTE_ONE_HOT, NB_MOE_KERNEL_WGMMA, 0, 16);
            moe_case(&x, 16 * j + 16, 1, ROUTE_ONE_HOT, NB_MOE_KERNEL_WGMMA, 0, 16);
        }
        moe_case(&x, 160, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 16); /* ~80 per expert, mixed widths */
        moe_case(&big, 150, 2, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 3); /* ~75 per expert */
    }
    unsetenv("NIBBLE_MOE_WG_WIDE_MID");
    moe_case(&x, NB_MOE_WG_WIDE_TILE + 5, 1, ROUTE_ONE_HOT, NB_MOE_KERNEL_WGMMA, 0, 12); /* full tile + 5 */
    moe_case(&x, 300, 3, ROUTE_ONE_HOT, NB_MOE_KERNEL_WGMMA, 0, 16); /* 3 tiles side by side */
    moe_case(&x, 200, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 16); /* ~100 per expert */
    moe_case(&x, 62, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 12);  /* ~31 per expert, mixed */
    moe_case(&x, 5, 4, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 1 << 30); /* fills no tile */
    moe_case(&x, 40, 4, ROUTE_SKIP, NB_MOE_KERNEL_WGMMA, 1, 8);     /* ids of -1, out += */
    moe_case(&big, 150, 2, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 3); /* ~75 per expert */
    moe_case(&big, 300, 2, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 3); /* ~150: 128 + remainder */
    moe_case(&x, 16384, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 48);
    setenv("NIBBLE_MOE_WG_WIDE", "1", 1);
    moe_case(&x, 200, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_AUTO, 0, 16);
    wg_env_clear();
    experts_free(&x);
    experts_free(&big);
}

/* The producer/consumer wgmma kernel (ops/cuda/moe_wgpc.cu, NIBBLE_MOE_WG=pc) at each compiled
 * tile width / remainder width, and at the ladder's own width (N unset), with the producer's
 * cp.async loads and (bulk "1") its cp.async.bulk variant: the edge cases of moe_small, GLM-5
 * shapes (sampled tokens), and 16384 tokens x top-8 at the ladder's width. */
static const struct {
    const char *n, *ns, *bulk;
} pc_cfgs[] = {{"", "", ""},     {"16", "0", ""},  {"32", "16", ""}, {"32", "0", ""},
               {"48", "0", ""},  {"48", "32", ""}, {"16", "0", "1"}, {"32", "16", "1"}};

static void test_moe_wgpc(void)
{
    if (!gpu_or_skip() || !have_wgmma()) return;
    seed();
    experts x, big;
    NB_CHECK(experts_make(&x, 16, 512, 256) == 0);
    NB_CHECK(experts_make(&big, 4, 6144, 2048) == 0);
    setenv("NIBBLE_MOE_WG", "pc", 1);
    for (size_t c = 0; c < NB_ARRAY_LEN(pc_cfgs); c++) {
        setenv("NIBBLE_MOE_WG_N", pc_cfgs[c].n, 1);
        setenv("NIBBLE_MOE_WG_NS", pc_cfgs[c].ns, 1);
        setenv("NIBBLE_MOE_WG_PC_BULK", pc_cfgs[c].bulk, 1);
        fprintf(stderr, "  producer/consumer variant: N %s NS %s bulk %s\n", pc_cfgs[c].n, pc_cfgs[c].ns,
                pc_cfgs[c].bulk);
        moe_case(&x, 1, 4, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 1 << 30);
        moe_case(&x, 5, 4, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 1 << 30);   /* fills no tile */
        moe_case(&x, 3, 2, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 1 << 30);   /* most experts empty */
        moe_case(&x, 77, 4, ROUTE_ONE_HOT, NB_MOE_KERNEL_WGMMA, 0, 1 << 30);  /* 77 tokens on expert 3 */
        moe_case(&x, 64, 4, ROUTE_FEW, NB_MOE_KERNEL_WGMMA, 0, 1 << 30);      /* 5 hot experts, 11 empty */
        moe_case(&x, 40, 4, ROUTE_SKIP, NB_MOE_KERNEL_WGMMA, 1, 1 << 30);     /* ids of -1, out += */
        moe_case(&x, 300, 3, ROUTE_ONE_HOT, NB_MOE_KERNEL_WGMMA, 0, 60);      /* tiles side by side */
        moe_case(&x, 200, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 50);      /* 100 per expert */
        moe_case(&x, 62, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 1 << 30);  /* ~31 per expert */
        moe_case(&big, 3, 3, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 1 << 30); /* GLM-5 shapes */
        moe_case(&big, 124, 1, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 3);     /* ~31 per expert */
    }
    unsetenv("NIBBLE_MOE_WG_N"), unsetenv("NIBBLE_MOE_WG_NS"), unsetenv("NIBBLE_MOE_WG_PC_BULK");
    moe_case(&x, 16384, 8, ROUTE_UNIFORM, NB_MOE_KERNEL_WGMMA, 0, 48);
    moe_case(&x, 2000, 8, ROUTE_ONE_HOT, NB_MOE_KERNEL_WGMMA, 0, 40);
    unsetenv("NIBBLE_MOE_WG");
    experts_free(&x);
    experts_free(&big);
}

/* The dense shared expert, T tokens: accumulating into out, or overwriting a NaN-poisoned
 * out. T <= 12 runs the stream kernel, T <= 64 its small-step kernel in dense mode. */
static void shared_case(experts *x, int T, int accumulate)
{
    const int H = x->h.H;
    uint16_t *hx = malloc((size_t)T * H * 2);
    float *xf = malloc((size_t)T * H * 4), *hout = malloc((size_t)T * H * 4), *prev = malloc((size_t)T * H * 4);
    for (int i = 0; i < T * H; i++) {
        hx[i] = nb_f32_to_bf16(frand());
        xf[i] = nb_bf16_to_f32(hx[i]);
        prev[i] = frand();
    }
    void *dx, *dout, *dws;
    size_t wsb = nb_moe_workspace_bytes(&x->dev, T, 1);
    NB_CHECK(cudaMalloc(&dx, (size_t)T * H * 2) == cudaSuccess);
    NB_CHECK(cudaMalloc(&dout, (size_t)T * H * 4) == cudaSuccess);
    NB_CHECK(cudaMalloc(&dws, wsb) == cudaSuccess);
    cudaMemcpy(dx, hx, (size_t)T * H * 2, cudaMemcpyHostToDevice);
    if (accumulate)
        cudaMemcpy(dout, prev, (size_t)T * H * 4, cudaMemcpyHostToDevice);
    else
        cudaMemset(dout, 0xff, (size_t)T * H * 4);
    cudaMemset(dws, 0xff, wsb);
    NB_CHECK_OK(nb_moe_shared_forward(&x->dev, dx, T, dout, accumulate, dws, wsb, NULL));
    NB_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(hout, dout, (size_t)T * H * 4, cudaMemcpyDeviceToHost);
    double err = 0, ref = 0, *acc = malloc(sizeof(double) * H);
    int nonfinite = 0;
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) acc[h] = accumulate ? prev[t * H + h] : 0.0;
        ref_expert(&x->h, 0, xf + (size_t)t * H, 1.0, acc);
        for (int h = 0; h < H; h++) {
            double dd = hout[t * H + h] - acc[h];
            nonfinite += !isfinite(hout[t * H + h]);
            err += dd * dd, ref += acc[h] * acc[h];
        }
    }
    double rel = sqrt(err / ref);
    fprintf(stderr, "  shared expert T=%d H=%d I=%d%s: rel err %.3g, %d non-finite\n", T, H, x->h.I,
            accumulate ? " accumulate" : "", rel, nonfinite);
    NB_CHECK_MSG(nonfinite == 0, "%d outputs are not finite", nonfinite);
    NB_CHECK_MSG(rel <= NB_TOL_NVFP4_MOE, "rel err %.3g", rel);
    free(acc), free(hx), free(xf), free(hout), free(prev);
    cudaFree(dx), cudaFree(dout), cudaFree(dws);
}

static void test_shared(void)
{
    if (!gpu_or_skip()) return;
    seed();
    experts x;
    NB_CHECK(experts_make(&x, 1, 512, 512) == 0);
    shared_case(&x, 37, 1);
    shared_case(&x, 3, 1); /* the small-step kernel in dense mode */
    shared_case(&x, 2, 0);
    experts_free(&x);
}

/* ---- router ---------------------------------------------------------------------------- */

/* CPU router in float64 scores (the GPU's float32 picks the same ids unless two scores
 * are within rounding, which random logits make vanishingly rare). */
static void ref_router(const nb_moe_router_desc *d, const float *logits, const float *bias, int t, int32_t *oid,
                       double *ow)
{
    const int E = d->experts, ng = d->group ? d->n_group : 1, tg = d->group ? d->topk_group : 1, per = E / ng;
    double score[1024], choice[1024], gscore[32];
    int mask[1024], gmask[32];
    const float *l = logits + (size_t)t * E;
    if (d->score == 0) {
        double m = -INFINITY, sum = 0;
        for (int e = 0; e < E; e++) m = l[e] > m ? l[e] : m;
        for (int e = 0; e < E; e++) sum += score[e] = exp(l[e] - m);
        for (int e = 0; e < E; e++) score[e] /= sum;
    } else {
        for (int e = 0; e < E; e++) score[e] = 1.0 / (1.0 + exp(-(double)l[e]));
    }
    for (int e = 0; e < E; e++) choice[e] = score[e] + (bias ? bias[e] : 0.0);
    for (int g = 0; g < ng; g++) {
        const double *c = choice + g * per;
        int a = 0;
        for (int i = 1; i < per; i++) a = c[i] > c[a] ? i : a;
        if (d->group == 2 && per >= 2) {
            int b = a == 0 ? 1 : 0;
            for (int i = 0; i < per; i++)
                if (i != a && c[i] > c[b]) b = i;
            gscore[g] = c[a] + c[b];
        } else {
            gscore[g] = c[a];
        }
        gmask[g] = 1;
    }
    for (int e = 0; e < E; e++) mask[e] = 0;
    for (int s = 0; s < tg; s++) {
        int best = -1;
        for (int g = 0; g < ng; g++)
            if (gmask[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
        gmask[best] = 0;
        for (int i = 0; i < per; i++) mask[best * per + i] = 1;
    }
    double sum = 0;
    for (int s = 0; s < d->topk; s++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (mask[e] && (best < 0 || choice[e] > choice[best])) best = e;
        mask[best] = 0;
        oid[s] = best;
        ow[s] = score[best];
        sum += score[best];
    }
    for (int s = 0; s < d->topk; s++) {
        if (d->norm_topk_prob) ow[s] /= sum + 1e-20;
        ow[s] *= d->routed_scaling_factor;
    }
}

static void router_case(int T, int E, int k, int score, int group, int ng, int tg, int norm, float rsf, int use_bias)
{
    float *logits = malloc(sizeof(float) * T * E), *bias = malloc(sizeof(float) * E), *w = malloc(sizeof(float) * T * k);
    int32_t *ids = malloc(sizeof(int32_t) * T * k);
    for (int i = 0; i < T * E; i++) logits[i] = 4.0f * frand();
    for (int e = 0; e < E; e++) bias[e] = 0.1f * frand();
    void *dl, *db, *di, *dw;
    NB_CHECK(cudaMalloc(&dl, sizeof(float) * T * E) == cudaSuccess);
    NB_CHECK(cudaMalloc(&db, sizeof(float) * E) == cudaSuccess);
    NB_CHECK(cudaMalloc(&di, sizeof(int32_t) * T * k) == cudaSuccess);
    NB_CHECK(cudaMalloc(&dw, sizeof(float) * T * k) == cudaSuccess);
    cudaMemcpy(dl, logits, sizeof(float) * T * E, cudaMemcpyHostToDevice);
    cudaMemcpy(db, bias, sizeof(float) * E, cudaMemcpyHostToDevice);
    cudaMemset(di, 0xff, sizeof(int32_t) * T * k);
    cudaMemset(dw, 0xff, sizeof(float) * T * k);
    nb_moe_router_desc d = {T, E, k, score, group, ng, tg, norm, rsf, dl, use_bias ? db : NULL, di, dw};
    NB_CHECK_OK(nb_moe_router(&d, NULL));
    NB_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(ids, di, sizeof(int32_t) * T * k, cudaMemcpyDeviceToHost);
    cudaMemcpy(w, dw, sizeof(float) * T * k, cudaMemcpyDeviceToHost);
    int bad_ids = 0;
    double maxrel = 0;
    for (int t = 0; t < T; t++) {
        int32_t rid[32];
        double rw[32];
        ref_router(&d, logits, use_bias ? bias : NULL, t, rid, rw);
        for (int s = 0; s < k; s++) {
            if (rid[s] != ids[t * k + s]) {
                if (bad_ids < 3) fprintf(stderr, "  token %d pick %d: id %d, want %d\n", t, s, ids[t * k + s], rid[s]);
                bad_ids++;
            }
            double r = fabs(w[t * k + s] - rw[s]) / fabs(rw[s]);
            if (!(r <= maxrel)) maxrel = isnan(r) ? INFINITY : r;
        }
    }
    fprintf(stderr, "  router T=%d E=%d k=%d score=%d group=%d (%d/%d) norm=%d: %d id mismatches, weight rel %.3g\n", T,
            E, k, score, group, tg, ng, norm, bad_ids, maxrel);
    NB_CHECK(bad_ids == 0);
    NB_CHECK_MSG(maxrel <= NB_TOL_ROUTER_WEIGHT, "weight rel err %.3g", maxrel);
    free(logits), free(bias), free(w), free(ids);
    cudaFree(dl), cudaFree(db), cudaFree(di), cudaFree(dw);
}

static void test_router(void)
{
    if (!gpu_or_skip()) return;
    seed();
    router_case(300, 256, 8, 1, 2, 8, 4, 1, 2.5f, 1); /* DeepSeek-V3 / GLM noaux_tc */
    router_case(77, 256, 8, 1, 0, 1, 1, 1, 2.5f, 1);  /* GLM-5: one group */
    router_case(50, 128, 8, 0, 0, 1, 1, 0, 1.0f, 0);  /* Qwen3-MoE softmax */
    router_case(40, 64, 6, 0, 1, 8, 3, 1, 1.0f, 0);   /* group_limited_greedy */
    router_case(1, 1024, 32, 1, 0, 1, 1, 1, 1.0f, 1); /* widest */
}

static const nb_test tests[] = {
    {"moe_small", test_moe_small}, {"moe_big_t", test_moe_big_t},
    {"moe_glm5_shape", test_moe_glm5_shape}, {"moe_stream_variants", test_moe_stream_variants},
    {"moe_wgmma_variants", test_moe_wgmma_variants}, {"moe_wgmma_n8", test_moe_wgmma_n8},
    {"moe_wgmma_wide", test_moe_wgmma_wide}, {"moe_wgpc", test_moe_wgpc},
    {"shared", test_shared},   {"router", test_router},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
