// Kernel lab harness for the NVFP4 MoE kernels (tools/lab/moe_bench.h).
// Exercise: nibble bench-moe --tokens 1,64,2048 ; nibble bench-gemm ;
//   NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG=rs NIBBLE_MOE_WG=pc" nibble bench-moe (A/B)
// Weights are random bytes (every E2M1 code is valid; scales are drawn among normal E4M3
// values) generated on the device, so nothing but time is measured. Correctness of the same
// kernels on random data is tests/cuda_moe's job.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "ops/cuda/device.h"
#include "ops/cuda/gemm_lt.h"
#include "ops/cuda/moe.h"
#include "tools/lab/moe_bench.h"

#define BENCH_ID_SETS 16  // distinct routings cycled through the timed runs

// A/B runs in one process: NIBBLE_BENCH_MOE_VARIANTS="A=1,B=2 A=3" times every token point
// once per space-separated variant, with its comma-separated environment assignments set
// (every name any variant assigns is unset first), on the same weights and routings; the
// row ends with the variant. The kernels read their switches at each launch (graphs: at
// capture), and the timed runs go round-robin over the variants.
#define BENCH_MAX_VARIANTS 8
typedef struct {
    int n;
    char text[BENCH_MAX_VARIANTS][128];
} bench_variants;

static void variants_parse(bench_variants *v)
{
    memset(v, 0, sizeof *v);
    const char *e = getenv("NIBBLE_BENCH_MOE_VARIANTS");
    while (e && *e && v->n < BENCH_MAX_VARIANTS) {
        while (*e == ' ') e++;
        size_t len = strcspn(e, " ");
        if (!len) break;
        if (len >= sizeof v->text[0]) len = sizeof v->text[0] - 1;
        memcpy(v->text[v->n++], e, len);
        e += strcspn(e, " ");
    }
}

// Unsets every name of every variant (set != 0: then sets variant vi's assignments).
static void variants_apply(const bench_variants *v, int vi)
{
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < v->n; i++) {
            if (pass == 1 && i != vi) continue;
            char buf[128];
            memcpy(buf, v->text[i], sizeof buf);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                char *eq = strchr(tok, '=');
                if (!eq) continue;
                *eq = 0;
                if (pass == 0)
                    unsetenv(tok);
                else
                    setenv(tok, eq + 1, 1);
            }
        }
}

// Variant vi's switches set (and the stream kernel's cache of them dropped); nothing without
// variants.
static void variant_select(const bench_variants *v, int vi)
{
    if (!v->n) return;
    variants_apply(v, vi);
    nb_moe_stream_set(-1, 0, 0, 0);
}

// One step's descriptor on routing set s (ids and weights of set s, maxT * K apart).
static nb_moe_desc desc_of(int T, int K, nb_moe_kernel kern, void *x, void *out, void *wsp, size_t wsb, void *dids,
                           void *dw, int maxT, int s)
{
    nb_moe_desc d;
    memset(&d, 0, sizeof d);
    d.tokens = T, d.topk = K, d.x = (const uint16_t *)x, d.out = (float *)out, d.kernel = kern;
    d.workspace = wsp, d.workspace_bytes = wsb;
    d.ids = (const int32_t *)dids + (size_t)s * maxT * K;
    d.weights = (const float *)dw + (size_t)s * maxT * K;
    return d;
}

__device__ __forceinline__ uint32_t bench_hash(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)(x ^ (x >> 31));
}

// mode 0: random bytes; 1: E4M3 scales in [2^-3, 2^1) (normal codes 0x20..0x3F);
// 2: BF16 in [-1, 1).
__global__ void bench_fill(uint8_t *p, size_t n, uint64_t seed, int mode)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += step) {
        uint32_t h = bench_hash(seed * 0x100000001B3ull + i);
        if (mode == 0) {
            p[i] = (uint8_t)h;
        } else if (mode == 1) {
            p[i] = (uint8_t)(0x20 + (h & 31));
        } else if (i % 2 == 0 && i + 1 < n) {
            float f = (float)(h >> 8) / 8388608.0f - 1.0f;
            uint32_t u = __float_as_uint(f);
            uint16_t b = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
            p[i] = (uint8_t)b, p[i + 1] = (uint8_t)(b >> 8);
        }
    }
}

static nb_status fill(void *p, size_t n, uint64_t seed, int mode)
{
    bench_fill<<<1024, 256>>>((uint8_t *)p, n, seed, mode);
    NB_CUDA_TRY(cudaGetLastError());
    return NB_OK;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof(float), cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    double copy_GBps, bf16_TFLOPs;
    char device[256];
} ceilings;

// Device-to-device copy of 2 GiB (bytes read + written) and an 8192^3 BF16 cuBLASLt matmul
// on random data, medians of 10 after warm-up.
static nb_status measure_ceilings(ceilings *c)
{
    NB_TRY(nb_cuda_device_describe(0, c->device, sizeof c->device));
    const size_t bytes = (size_t)2 << 30;
    void *a = NULL, *b = NULL;
    NB_CUDA_TRY(cudaMalloc(&a, bytes));
    NB_CUDA_TRY(cudaMalloc(&b, bytes));
    NB_TRY(fill(a, bytes, 1, 0));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float t[10];
    for (int i = 0; i < 13; i++) {
        cudaEventRecord(e0);
        cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1);
        NB_CUDA_TRY(cudaEventSynchronize(e1));
        if (i >= 3) cudaEventElapsedTime(&t[i - 3], e0, e1);
    }
    c->copy_GBps = 2.0 * bytes / (median(t, 10) * 1e-3) / 1e9;
    cudaFree(b);
    cudaFree(a);

    const int n = 8192;
    void *A, *W, *C;
    NB_CUDA_TRY(cudaMalloc(&A, (size_t)n * n * 2));
    NB_CUDA_TRY(cudaMalloc(&W, (size_t)n * n * 2));
    NB_CUDA_TRY(cudaMalloc(&C, (size_t)n * n * 2));
    NB_TRY(fill(A, (size_t)n * n * 2, 2, 2));
    NB_TRY(fill(W, (size_t)n * n * 2, 3, 2));
    nb_cuda_gemm *g;
    NB_TRY(nb_cuda_gemm_create(&g, (size_t)32 << 20));
    nb_cuda_gemm_set_warm(g, 0); // one shape, one M: no bucket warm-up (nor its kernel loads ahead of --lt-cold)
    nb_status st = NB_OK;
    for (int i = 0; i < 13 && st == NB_OK; i++) {
        cudaEventRecord(e0);
        st = nb_cuda_gemm_bf16(g, NULL, n, n, n, A, n, W, n, C, n, 0, 1.0f, 0.0f);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        if (i >= 3) cudaEventElapsedTime(&t[i - 3], e0, e1);
    }
    nb_cuda_gemm_destroy(g);
    cudaFree(A), cudaFree(W), cudaFree(C);
    NB_TRY(st);
    c->bf16_TFLOPs = 2.0 * n * n * (double)n / (median(t, 10) * 1e-3) / 1e12;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    printf("device: %s\nceilings: copy %.0f GB/s (2 GiB D2D, read+write), BF16 matmul %.0f TFLOP/s (cuBLASLt "
           "8192^3)\n",
           c->device, c->copy_GBps, c->bf16_TFLOPs);
    return NB_OK;
}

extern "C" nb_bench_moe_params nb_bench_moe_default_params(void)
{
    nb_bench_moe_params p;
    memset(&p, 0, sizeof p);
    p.hidden = 6144, p.inter = 2048, p.experts = 256, p.topk = 8;
    const int t[] = {1, 2, 10, 64, 256, 1024, 2048};
    p.n_tokens = 7;
    for (int i = 0; i < 7; i++) p.tokens[i] = t[i];
    p.iters = 30;
    p.kernel = "auto";
    return p;
}

static uint64_t host_rng = 0x1234567ull;
static uint32_t hrand(void)
{
    host_rng = host_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(host_rng >> 33);
}

// Routing for T tokens: distinct experts per token, uniform or Zipf(1) popularity (ranks
// shuffled so hot experts are not the low ids). Returns the number of experts touched.
static int make_routing(int T, int E, int k, int zipf, const int *rank_of, const double *cdf, int32_t *ids,
                        float *w)
{
    char *seen = (char *)calloc((size_t)E, 1);
    int touched = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int e;
            for (;;) {
                if (zipf) {
                    double u = (hrand() + 0.5) / 2147483648.0;
                    int lo = 0, hi = E - 1;
                    while (lo < hi) {
                        int mid = (lo + hi) / 2;
                        if (cdf[mid] < u) lo = mid + 1;
                        else hi = mid;
                    }
                    e = rank_of[lo];
                } else {
                    e = (int)(hrand() % (uint32_t)E);
                }
                int dup = 0;
                for (int jj = 0; jj < j; jj++) dup |= ids[t * k + jj] == e;
                if (!dup) break;
            }
            ids[t * k + j] = e;
            w[t * k + j] = 1.0f / k;
            if (!seen[e]) seen[e] = 1, touched++;
        }
    free(seen);
    return touched;
}

typedef struct {
    nb_moe_weights_dev w;
    void *mem;
} wset;

static nb_status wset_make(wset *s, int E, int H, int I, uint64_t seed)
{
    size_t b13 = nb_moe_packed_weight_bytes(2 * I, H) * E, c13 = nb_moe_packed_scale_bytes(2 * I, H) * E;
    size_t b2 = nb_moe_packed_weight_bytes(H, I) * E, c2 = nb_moe_packed_scale_bytes(H, I) * E;
    size_t total = b13 + c13 + b2 + c2 + sizeof(float) * 3 * E;
    NB_CUDA_TRY(cudaMalloc(&s->mem, total));
    uint8_t *p = (uint8_t *)s->mem;
    s->w.experts = E, s->w.hidden = H, s->w.inter = I;
    s->w.w13 = p, s->w.s13 = p + b13, s->w.w2 = p + b13 + c13, s->w.s2 = p + b13 + c13 + b2;
    float *g = (float *)(p + b13 + c13 + b2 + c2);
    s->w.g13 = g, s->w.g2 = g + 2 * E;
    NB_TRY(fill(p, b13, seed, 0));
    NB_TRY(fill(p + b13, c13, seed + 1, 1));
    NB_TRY(fill(p + b13 + c13, b2, seed + 2, 0));
    NB_TRY(fill(p + b13 + c13 + b2, c2, seed + 3, 1));
    float *hg = (float *)malloc(sizeof(float) * 3 * E);
    for (int i = 0; i < 3 * E; i++) hg[i] = 0.01f;
    cudaMemcpy(g, hg, sizeof(float) * 3 * E, cudaMemcpyHostToDevice);
    free(hg);
    return NB_OK;
}

static nb_moe_kernel kernel_of(const char *s)
{
    return !strcmp(s, "stream")  ? NB_MOE_KERNEL_STREAM
           : !strcmp(s, "mma")   ? NB_MOE_KERNEL_MMA
           : !strcmp(s, "wgmma") ? NB_MOE_KERNEL_WGMMA
                                 : NB_MOE_KERNEL_AUTO;
}

extern "C" nb_status nb_bench_moe_run(const nb_bench_moe_params *p)
{
    const int E = p->experts, H = p->hidden, I = p->inter, K = p->topk;
    if (p->iters < 20) return nb_error(NB_ERR_INVALID_ARG, "bench-moe: --iters %d (at least 20)", p->iters);
    if (E < 1 || K < 1 || K > E || H % NB_MOE_K_GROUP || I % NB_MOE_K_GROUP)
        return nb_error(NB_ERR_INVALID_ARG, "bench-moe: experts %d, topk %d, hidden %d, inter %d", E, K, H, I);
    if (nb_cuda_device_count() < 1) return nb_error(NB_ERR_CUDA, "bench-moe: no CUDA device");
    ceilings c;
    NB_TRY(measure_ceilings(&c));

    const double expert_bytes = 3.0 * H * I * (0.5 + 1.0 / 16);  // codes + E4M3 scales
    int maxT = 0;
    for (int i = 0; i < p->n_tokens; i++) maxT = p->tokens[i] > maxT ? p->tokens[i] : maxT;
    int sets = p->weight_sets;
    if (sets <= 0) {
        int dev = 0, l2 = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
        // enough copies that one step's touched experts of all sets exceed 4x L2
        sets = (int)ceil(4.0 * l2 / (expert_bytes * (K < E ? K : E)));
        sets = sets < 2 ? 2 : sets > 8 ? 8 : sets;
    }
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    while (sets > 1 && sets * expert_bytes * E > 0.6 * (double)free_b) sets--;
    wset *ws = (wset *)calloc((size_t)sets, sizeof(wset));
    for (int s = 0; s < sets; s++) NB_TRY(wset_make(&ws[s], E, H, I, 100 + 10 * (uint64_t)s));
    printf("experts: %d x [%d x %d] NVFP4 (%.1f MB each), top-%d, %s routing, %d weight sets (%.2f GB), %d "
           "routings\n",
           E, H, I, expert_bytes / 1e6, K, p->zipf ? "zipf" : "uniform", sets, sets * expert_bytes * E / 1e9,
           BENCH_ID_SETS);

    void *x, *out, *wsp, *dids, *dw;
    size_t wsb = nb_moe_workspace_bytes(&ws[0].w, maxT, K);
    NB_CUDA_TRY(cudaMalloc(&x, (size_t)maxT * H * 2));
    NB_CUDA_TRY(cudaMalloc(&out, (size_t)maxT * H * 4));
    NB_CUDA_TRY(cudaMalloc(&wsp, wsb));
    NB_CUDA_TRY(cudaMalloc(&dids, (size_t)BENCH_ID_SETS * maxT * K * 4));
    NB_CUDA_TRY(cudaMalloc(&dw, (size_t)BENCH_ID_SETS * maxT * K * 4));
    NB_TRY(fill(x, (size_t)maxT * H * 2, 7, 2));

    int *rank_of = (int *)malloc(sizeof(int) * E);
    double *cdf = (double *)malloc(sizeof(double) * E);
    for (int e = 0; e < E; e++) rank_of[e] = e;
    for (int e = E - 1; e > 0; e--) {
        int j = (int)(hrand() % (uint32_t)(e + 1)), tmp = rank_of[e];
        rank_of[e] = rank_of[j], rank_of[j] = tmp;
    }
    double z = 0;
    for (int e = 0; e < E; e++) z += 1.0 / (e + 1);
    for (int e = 0; e < E; e++) cdf[e] = (e ? cdf[e - 1] : 0.0) + 1.0 / (e + 1) / z;

    FILE *jf = p->json ? fopen(p->json, "w") : NULL;
    if (p->json && !jf) return nb_error(NB_ERR_IO, "bench-moe: cannot write %s", p->json);
    if (jf)
        fprintf(jf,
                "{\"device\": \"%s\", \"copy_GBps\": %.1f, \"bf16_TFLOPs\": %.1f, \"hidden\": %d, \"inter\": %d, "
                "\"experts\": %d, \"topk\": %d, \"routing\": \"%s\", \"weight_sets\": %d, \"rows\": [",
                c.device, c.copy_GBps, c.bf16_TFLOPs, H, I, E, K, p->zipf ? "zipf" : "uniform", sets);
    printf("\n%7s %7s %9s %9s %8s %9s %9s %9s %9s %10s\n", "tokens", "kernel", "ms", "ms(nogr)", "experts", "GB/s",
           "TFLOP/s", "floor ms", "bound", "time/floor");

    bench_variants var;
    variants_parse(&var);
    const int nv = var.n ? var.n : 1;
    cudaEvent_t *ev = (cudaEvent_t *)malloc(sizeof(cudaEvent_t) * 2 * p->iters * nv);
    for (int i = 0; i < 2 * p->iters * nv; i++) cudaEventCreate(&ev[i]);
    float *tg = (float *)malloc(sizeof(float) * p->iters * nv), *ts = (float *)malloc(sizeof(float) * p->iters * nv);
    cudaGraphExec_t *graphs = (cudaGraphExec_t *)calloc((size_t)nv * BENCH_ID_SETS, sizeof(cudaGraphExec_t));
    nb_moe_kernel kerns[BENCH_MAX_VARIANTS];
    int n_graphs = 0;
    int32_t *hids = (int32_t *)malloc(sizeof(int32_t) * maxT * K);
    float *hw = (float *)malloc(sizeof(float) * maxT * K);
    cudaStream_t st;
    NB_CUDA_TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    nb_status status = NB_OK;
    int sm_arch = 90;  // the ladder's input: this device's compute capability
    {
        int dev = 0, major = 9, minor = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
        sm_arch = 10 * major + minor;
    }

    int rows = 0;
    for (int ti = 0; ti < p->n_tokens && status == NB_OK; ti++) {
        const int T = p->tokens[ti];
        double touched = 0;
        for (int s = 0; s < BENCH_ID_SETS; s++) {
            touched += make_routing(T, E, K, p->zipf, rank_of, cdf, hids, hw);
            cudaMemcpy((int32_t *)dids + (size_t)s * maxT * K, hids, sizeof(int32_t) * T * K, cudaMemcpyHostToDevice);
            cudaMemcpy((float *)dw + (size_t)s * maxT * K, hw, sizeof(float) * T * K, cudaMemcpyHostToDevice);
        }
        touched /= BENCH_ID_SETS;
        // Every variant's graphs first (its switches are read at capture), then the timed runs
        // round-robin over the variants: a drift of the machine during the point (clocks,
        // power cap, HBM temperature) falls on all of them alike. Before the eleventh session
        // each variant ran its runs in a block, and a 64-token point of one binary read 1.14 ms
        // as the first variant and 1.37 ms as the seventh (bench/RESULTS.md, issue 8).
        for (int vi = 0; vi < nv && status == NB_OK; vi++) {
            variant_select(&var, vi);
            nb_moe_kernel kern = kernel_of(p->kernel);
            if (kern == NB_MOE_KERNEL_AUTO) kern = nb_moe_pick_kernel(T, K, E, H, I, sm_arch);
            kerns[vi] = kern;
            nb_moe_desc d = desc_of(T, K, kern, x, out, wsp, wsb, dids, dw, maxT, 0);
            // Un-captured first call: lazy module loading and the launcher's one-time queries.
            if ((status = nb_moe_forward(&ws[0].w, &d, st)) != NB_OK) break;
            // One graph per (routing, weight set) pair used; the timed loop cycles through them.
            for (int s = 0; s < BENCH_ID_SETS && status == NB_OK; s++) {
                d = desc_of(T, K, kern, x, out, wsp, wsb, dids, dw, maxT, s);
                cudaGraph_t gr;
                if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
                    status = nb_error(NB_ERR_CUDA, "bench-moe: cannot capture a graph");
                    break;
                }
                status = nb_moe_forward(&ws[s % sets].w, &d, st);
                cudaError_t ce = cudaStreamEndCapture(st, &gr);
                if (status == NB_OK && ce != cudaSuccess) status = nb_error(NB_ERR_CUDA, "bench-moe: capture failed");
                if (status == NB_OK && cudaGraphInstantiate(&graphs[vi * BENCH_ID_SETS + s], gr, 0) != cudaSuccess)
                    status = nb_error(NB_ERR_CUDA, "bench-moe: graph instantiate failed");
                if (status == NB_OK) cudaGraphDestroy(gr);
                if (status == NB_OK) n_graphs = vi * BENCH_ID_SETS + s + 1;
            }
        }
        if (status == NB_OK) {
            for (int g = 0; g < nv * BENCH_ID_SETS; g++) cudaGraphLaunch(graphs[g], st);  // warm-up
            for (int i = 0; i < p->iters; i++)
                for (int vi = 0; vi < nv; vi++) {
                    const int e = 2 * (i * nv + vi);
                    cudaEventRecord(ev[e], st);
                    cudaGraphLaunch(graphs[vi * BENCH_ID_SETS + i % BENCH_ID_SETS], st);
                    cudaEventRecord(ev[e + 1], st);
                }
            if (cudaStreamSynchronize(st) != cudaSuccess)
                status = nb_error(NB_ERR_CUDA, "bench-moe: T=%d: %s", T, cudaGetErrorString(cudaGetLastError()));
            for (int i = 0; i < p->iters && status == NB_OK; i++)
                for (int vi = 0; vi < nv; vi++)
                    cudaEventElapsedTime(&tg[vi * p->iters + i], ev[2 * (i * nv + vi)], ev[2 * (i * nv + vi) + 1]);
        }
        // Plain stream launches, round-robin likewise (the variant's switches set before each).
        for (int i = 0; i < p->iters && status == NB_OK; i++)
            for (int vi = 0; vi < nv && status == NB_OK; vi++) {
                if (nv > 1) variant_select(&var, vi);
                const int s = i % BENCH_ID_SETS, e = 2 * (i * nv + vi);
                nb_moe_desc d = desc_of(T, K, kerns[vi], x, out, wsp, wsb, dids, dw, maxT, s);
                cudaEventRecord(ev[e], st);
                status = nb_moe_forward(&ws[s % sets].w, &d, st);
                cudaEventRecord(ev[e + 1], st);
            }
        if (cudaStreamSynchronize(st) != cudaSuccess && status == NB_OK)
            status = nb_error(NB_ERR_CUDA, "bench-moe: T=%d: %s", T, cudaGetErrorString(cudaGetLastError()));
        for (int g = 0; g < n_graphs; g++) cudaGraphExecDestroy(graphs[g]);
        n_graphs = 0;
        if (status != NB_OK) break;
        for (int i = 0; i < p->iters; i++)
            for (int vi = 0; vi < nv; vi++)
                cudaEventElapsedTime(&ts[vi * p->iters + i], ev[2 * (i * nv + vi)], ev[2 * (i * nv + vi) + 1]);
        for (int vi = 0; vi < nv; vi++) {
            const nb_moe_kernel kern = kerns[vi];
            double ms = median(tg + vi * p->iters, p->iters), ms_s = median(ts + vi * p->iters, p->iters);
            double bytes = touched * expert_bytes + (double)T * H * (2 + 4);
            double flops = 6.0 * T * K * (double)H * I;
            double fb = bytes / (c.copy_GBps * 1e9) * 1e3, ff = flops / (c.bf16_TFLOPs * 1e12) * 1e3;
            double floor_ms = fb > ff ? fb : ff;
            printf("%7d %7s %9.4f %9.4f %8.1f %9.0f %9.1f %9.4f %9s %10.2f%s%s\n", T, nb_moe_kernel_name(kern), ms, ms_s,
                   touched, bytes / (ms * 1e-3) / 1e9, flops / (ms * 1e-3) / 1e12, floor_ms, fb > ff ? "memory" : "compute",
                   ms / floor_ms, var.n ? "  " : "", var.n ? var.text[vi] : "");
            fflush(stdout);
            if (jf)
                fprintf(jf,
                        "%s\n  {\"tokens\": %d, \"kernel\": \"%s\", \"ms\": %.5f, \"ms_no_graph\": %.5f, \"experts_touched\": "
                        "%.2f, \"bytes\": %.0f, \"flops\": %.0f, \"GBps\": %.1f, \"TFLOPs\": %.2f, \"floor_ms\": %.5f, "
                        "\"bound\": \"%s\", \"time_over_floor\": %.3f, \"variant\": \"%s\"}",
                        rows++ ? "," : "", T, nb_moe_kernel_name(kern), ms, ms_s, touched, bytes, flops,
                        bytes / (ms * 1e-3) / 1e9, flops / (ms * 1e-3) / 1e12, floor_ms, fb > ff ? "memory" : "compute",
                        ms / floor_ms, var.n ? var.text[vi] : "");
        }
    }
    if (var.n) {
        variants_apply(&var, -1);
        nb_moe_stream_set(-1, 0, 0, 0);
    }
    if (jf) {
        fprintf(jf, "\n]}\n");
        fclose(jf);
    }
    for (int i = 0; i < 2 * p->iters * nv; i++) cudaEventDestroy(ev[i]);
    free(graphs);
    cudaStreamDestroy(st);
    free(ev), free(tg), free(ts), free(hids), free(hw), free(rank_of), free(cdf);
    for (int s = 0; s < sets; s++) cudaFree(ws[s].mem);
    free(ws);
    cudaFree(x), cudaFree(out), cudaFree(wsp), cudaFree(dids), cudaFree(dw);
    return status;
}

// ---- bench-gemm: one dense expert, M tokens --------------------------------------------

extern "C" nb_bench_gemm_params nb_bench_gemm_default_params(void)
{
    nb_bench_gemm_params p;
    memset(&p, 0, sizeof p);
    p.hidden = 6144, p.inter = 2048, p.iters = 30;
    const int m[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
    p.n_m = 14;
    for (int i = 0; i < 14; i++) p.m[i] = m[i];
    return p;
}

extern "C" nb_status nb_bench_gemm_run(const nb_bench_gemm_params *p)
{
    const int H = p->hidden, I = p->inter;
    if (p->iters < 20) return nb_error(NB_ERR_INVALID_ARG, "bench-gemm: --iters %d (at least 20)", p->iters);
    if (nb_cuda_device_count() < 1) return nb_error(NB_ERR_CUDA, "bench-gemm: no CUDA device");
    ceilings c;
    NB_TRY(measure_ceilings(&c));
    int maxM = 0;
    for (int i = 0; i < p->n_m; i++) maxM = p->m[i] > maxM ? p->m[i] : maxM;
    // 16 copies of the NVFP4 expert (>= 4x L2 at GLM-5 shapes) and 4 of the BF16 one.
    enum { NSETS = 16, NBF = 4 };
    wset ws[NSETS];
    for (int s = 0; s < NSETS; s++) NB_TRY(wset_make(&ws[s], 1, H, I, 500 + 10 * (uint64_t)s));
    void *x, *out, *wsp, *act, *bw[NBF], *hbuf;
    size_t wsb = nb_moe_workspace_bytes(&ws[0].w, maxM, 1);
    NB_CUDA_TRY(cudaMalloc(&x, (size_t)maxM * H * 2));
    NB_CUDA_TRY(cudaMalloc(&out, (size_t)maxM * H * 4));
    NB_CUDA_TRY(cudaMalloc(&act, (size_t)maxM * 2 * I * 2));
    NB_CUDA_TRY(cudaMalloc(&hbuf, (size_t)maxM * H * 2));
    NB_CUDA_TRY(cudaMalloc(&wsp, wsb));
    NB_TRY(fill(x, (size_t)maxM * H * 2, 9, 2));
    for (int s = 0; s < NBF; s++) {
        NB_CUDA_TRY(cudaMalloc(&bw[s], (size_t)3 * H * I * 2));
        NB_TRY(fill(bw[s], (size_t)3 * H * I * 2, 900 + (uint64_t)s, 2));
    }
    nb_cuda_gemm *g;
    NB_TRY(nb_cuda_gemm_create(&g, (size_t)32 << 20));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float *t = (float *)malloc(sizeof(float) * p->iters), *tb = (float *)malloc(sizeof(float) * p->iters);
    const double wbytes = 3.0 * H * I * (0.5 + 1.0 / 16);
    FILE *jf = p->json ? fopen(p->json, "w") : NULL;
    if (jf) fprintf(jf, "{\"device\": \"%s\", \"hidden\": %d, \"inter\": %d, \"rows\": [", c.device, H, I);
    printf("\none dense SwiGLU expert: gate_up %d x %d then down %d x %d (M tokens x N x K), NVFP4 (nibble) vs BF16 "
           "(cuBLASLt)\n%6s %10s %9s %8s %10s %10s %9s %10s\n",
           2 * I, H, H, I, "M", "nibble ms", "TFLOP/s", "%floor", "floor ms", "cublas ms", "TFLOP/s", "ratio");
    nb_status st = NB_OK;
    for (int mi = 0; mi < p->n_m && st == NB_OK; mi++) {
        const int M = p->m[mi];
        for (int i = -3; i < p->iters && st == NB_OK; i++) {
            cudaEventRecord(e0);
            st = nb_moe_shared_forward(&ws[(i + 3) % NSETS].w, (const uint16_t *)x, M, (float *)out, 0, wsp, wsb, NULL);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            if (i >= 0) cudaEventElapsedTime(&t[i], e0, e1);
        }
        for (int i = -3; i < p->iters && st == NB_OK; i++) {
            const uint8_t *w = (const uint8_t *)bw[(i + 3) % NBF];
            cudaEventRecord(e0);
            st = nb_cuda_gemm_bf16(g, NULL, M, 2 * I, H, x, H, w, H, act, 2 * I, 0, 1.0f, 0.0f);
            if (st == NB_OK)
                st = nb_cuda_gemm_bf16(g, NULL, M, H, I, act, 2 * I, w + (size_t)2 * I * H * 2, I, hbuf, H, 0, 1.0f,
                                       0.0f);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            if (i >= 0) cudaEventElapsedTime(&tb[i], e0, e1);
        }
        if (cudaGetLastError() != cudaSuccess && st == NB_OK) st = nb_error(NB_ERR_CUDA, "bench-gemm: M=%d failed", M);
        if (st != NB_OK) break;
        double ms = median(t, p->iters), msb = median(tb, p->iters);
        double flops = 6.0 * M * (double)H * I;
        double bytes = wbytes + (double)M * (H * 2 + H * 4 + 2 * I * 2);
        double fb = bytes / (c.copy_GBps * 1e9) * 1e3, ff = flops / (c.bf16_TFLOPs * 1e12) * 1e3;
        double fl = fb > ff ? fb : ff;
        printf("%6d %10.4f %9.1f %7.0f%% %10.4f %10.4f %9.1f %9.2fx\n", M, ms, flops / (ms * 1e-3) / 1e12,
               100.0 * fl / ms, fl, msb, flops / (msb * 1e-3) / 1e12, msb / ms);
        if (jf)
            fprintf(jf,
                    "%s\n  {\"M\": %d, \"ms\": %.5f, \"TFLOPs\": %.2f, \"pct_floor\": %.1f, \"floor_ms\": %.5f, "
                    "\"cublas_bf16_ms\": %.5f}",
                    mi ? "," : "", M, ms, flops / (ms * 1e-3) / 1e12, 100.0 * fl / ms, fl, msb);
    }
    if (jf) {
        fprintf(jf, "\n]}\n");
        fclose(jf);
    }
    nb_cuda_gemm_destroy(g);
    free(t), free(tb);
    for (int s = 0; s < NSETS; s++) cudaFree(ws[s].mem);
    for (int s = 0; s < NBF; s++) cudaFree(bw[s]);
    cudaFree(x), cudaFree(out), cudaFree(act), cudaFree(hbuf), cudaFree(wsp);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return st;
}

// The ceilings alone, for other benchmarks' floors (nibble bench-offline).
extern "C" nb_status nb_bench_ceilings(double *copy_GBps, double *bf16_TFLOPs, char *device, int cap)
{
    ceilings c;
    NB_TRY(measure_ceilings(&c));
    *copy_GBps = c.copy_GBps;
    *bf16_TFLOPs = c.bf16_TFLOPs;
    if (device && cap > 0) snprintf(device, (size_t)cap, "%s", c.device);
    return NB_OK;
}
