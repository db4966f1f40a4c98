/* GPU sampling (nb_op_sample on a CUDA context, ops/cuda/sample.cu) against the CPU op
 * (ops/cpu/sample.c) on the same rows: the drawn ids must be identical (greedy and seeded,
 * every filter, penalties, ties, -inf/NaN logits), the penalized logits bit-identical, the
 * log-probabilities within 1e-5. Then the timing at GLM-5's vocabulary (154880) for 1, 10 and
 * 1000 rows, beside what the host path costs (downloading the logits and sampling them on one
 * host thread, as the engine did). Label gpu; exits 77 without a GPU.
 * Run: build-smp/tests/test_cuda_sample [name-substring]   (bench: the "bench" test) */
#include <stdint.h>

#include "base/clock.h"
#include "nbtest.h"
#include "ops/cpu/sample.h"
#include "ops/cuda/device.h"
#include "ops/ops.h"
#include "ops/sample_math.h"

static nb_ops_ctx *g_gpu, *g_cpu;

static uint64_t g_rs = 1;
static uint64_t rnd(void) { return nb_sm_mix64(g_rs++); }
static double rnd_u(void) { return (double)(rnd() >> 11) * (1.0 / 9007199254740992.0); }
static float rnd_normal(void)
{
    double u = rnd_u() + 1e-300, v = rnd_u();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

enum { D_NORMAL, D_TIES, D_PEAKED, D_NONFINITE, D_FLAT, D_NDIST };
static const char *dist_name[] = {"normal", "ties", "peaked", "nonfinite", "flat"};

static void fill_row(float *x, int V, int dist)
{
    for (int i = 0; i < V; i++) {
        float g = rnd_normal() * 3.0f;
        switch (dist) {
        case D_TIES: x[i] = floorf(g * 2.0f) * 0.5f; break;
        case D_PEAKED: x[i] = g; break;
        case D_NONFINITE: {
            uint64_t r = rnd() % 100;
            x[i] = r < 10 ? -INFINITY : r == 10 ? NAN : g;
            break;
        }
        case D_FLAT: x[i] = 0.25f; break;
        default: x[i] = g;
        }
    }
    if (dist == D_PEAKED) x[rnd() % (uint64_t)V] = 25.0f;
}

static nb_sample_params random_params(void)
{
    static const float temps[] = {0, 0.3f, 0.7f, 1.0f, 1.5f};
    static const int topk[] = {-1, 1, 5, 50, 1000};
    static const float topp[] = {1.0f, 0.95f, 0.5f, 0.1f};
    static const float minp[] = {0, 0.05f, 0.2f};
    static const int ntop[] = {0, 1, 5, 20};
    nb_sample_params p;
    memset(&p, 0, sizeof p);
    p.temperature = temps[rnd() % 5];
    p.top_k = topk[rnd() % 5];
    p.top_p = topp[rnd() % 4];
    p.min_p = minp[rnd() % 3];
    p.repetition_penalty = 1.0f;
    if (rnd() % 3 == 0) {
        p.repetition_penalty = 1.0f + (float)(rnd() % 5) * 0.1f;
        p.frequency_penalty = (float)(rnd() % 5) * 0.2f;
        p.presence_penalty = (float)(rnd() % 3) * 0.3f;
    }
    p.n_top = ntop[rnd() % 4];
    p.want_logprob = (int)(rnd() % 2);
    p.skip = rnd() % 23 == 0;
    p.seed = rnd();
    p.k = rnd() % 4096;
    return p;
}

/* |a - b| <= 1e-5, NaN equal to NaN (rows with a NaN logit have a NaN log-sum-exp on both). */
static int lp_close(float a, float b, double *worst)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    double d = fabs((double)a - b);
    *worst = d > *worst ? d : *worst;
    return d <= 1e-5;
}

/* Run rows through both backends; returns the number of token mismatches. */
static int compare(const char *name, int rows, int V, int dist, int print)
{
    size_t n = (size_t)rows * (size_t)V;
    float *x = malloc(n * sizeof *x), *xc = malloc(n * sizeof *xc), *xg = malloc(n * sizeof *xg);
    nb_sample_params *p = calloc((size_t)rows, sizeof *p);
    int32_t *off = calloc((size_t)rows + 1, sizeof *off);
    int cap = rows * 64;
    int32_t *tok = malloc((size_t)cap * sizeof *tok), *cnt = malloc((size_t)cap * sizeof *cnt);
    nb_sample_out *oc = calloc((size_t)rows, sizeof *oc), *og = calloc((size_t)rows, sizeof *og);
    for (int r = 0; r < rows; r++) {
        fill_row(x + (size_t)r * V, V, dist);
        p[r] = random_params();
        int h = (int)(rnd() % 64);
        if (h > V) h = V;
        off[r + 1] = off[r];
        int start = (int)(rnd() % (uint64_t)V);
        for (int j = 0; j < h; j++) { /* distinct: consecutive ids from a random start */
            tok[off[r + 1]] = (start + j) % V;
            cnt[off[r + 1]++] = (int)(rnd() % 4);
        }
    }
    int nnz = off[rows];
    memcpy(xc, x, n * sizeof *x);
    nb_tensor tc = nb_tensor_2d(xc, NB_DTYPE_F32, rows, V);
    nb_sample_hist hc = {off, tok, cnt, nnz, NULL};
    NB_CHECK_OK(nb_op_sample(g_cpu, &tc, p, &hc, oc));

    size_t pb = (size_t)rows * sizeof *p, ob = (size_t)rows * sizeof *og;
    float *dx = nb_ops_alloc(g_gpu, n * sizeof *x);
    nb_sample_params *dp = nb_ops_alloc(g_gpu, pb);
    int32_t *doff = nb_ops_alloc(g_gpu, ((size_t)rows + 1) * 4), *dtok = nb_ops_alloc(g_gpu, (size_t)nnz * 4 + 4),
            *dcnt = nb_ops_alloc(g_gpu, (size_t)nnz * 4 + 4);
    nb_sample_out *dout = nb_ops_alloc(g_gpu, ob);
    NB_CHECK_OK(nb_ops_upload(g_gpu, dx, x, n * sizeof *x));
    NB_CHECK_OK(nb_ops_upload(g_gpu, dp, p, pb));
    NB_CHECK_OK(nb_ops_upload(g_gpu, doff, off, ((size_t)rows + 1) * 4));
    NB_CHECK_OK(nb_ops_upload(g_gpu, dtok, tok, (size_t)nnz * 4));
    NB_CHECK_OK(nb_ops_upload(g_gpu, dcnt, cnt, (size_t)nnz * 4));
    NB_CHECK_OK(nb_ops_memset(g_gpu, dout, 0, ob));
    nb_tensor tg = nb_tensor_2d(dx, NB_DTYPE_F32, rows, V);
    tg.device = NB_DEVICE_CUDA;
    nb_sample_hist hg = {doff, dtok, dcnt, nnz, NULL};
    NB_CHECK_OK(nb_op_sample(g_gpu, &tg, dp, &hg, dout));
    NB_CHECK_OK(nb_ops_download(g_gpu, og, dout, ob));
    NB_CHECK_OK(nb_ops_download(g_gpu, xg, dx, n * sizeof *x));

    int bad = 0, badlp = 0, sampled = 0, greedy = 0;
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        if (p[r].skip) continue;
        sampled++;
        greedy += !(p[r].temperature > 0);
        const nb_sample_out *a = &oc[r], *b = &og[r];
        if (a->token != b->token) {
            if (bad++ < print)
                fprintf(stderr,
                        "  %s row %d: cpu %d gpu %d (T %g k %d p %g minp %g rep %g freq %g pres %g seed %llu k %llu)\n",
                        name, r, a->token, b->token, p[r].temperature, p[r].top_k, p[r].top_p, p[r].min_p,
                        p[r].repetition_penalty, p[r].frequency_penalty, p[r].presence_penalty,
                        (unsigned long long)p[r].seed, (unsigned long long)p[r].k);
        }
        int lpbad = 0;
        if (p[r].want_logprob) lpbad |= !lp_close(a->logprob, b->logprob, &worst);
        lpbad |= a->n_top != b->n_top;
        for (int j = 0; j < a->n_top && j < b->n_top; j++)
            lpbad |= a->top_id[j] != b->top_id[j] || !lp_close(a->top_logprob[j], b->top_logprob[j], &worst);
        if (lpbad && badlp++ < print)
            fprintf(stderr, "  %s row %d: logprobs differ (n_top %d/%d, lp %g/%g)\n", name, r, a->n_top, b->n_top,
                    a->logprob, b->logprob);
    }
    /* bit-identical, except that a NaN may come back with another payload (CUDA's division
     * returns the canonical NaN, x86 keeps the operand's) */
    int xdiff = 0;
    for (size_t i = 0; i < n && !xdiff; i++)
        xdiff = memcmp(&xc[i], &xg[i], sizeof *xc) != 0 && !(isnan(xc[i]) && isnan(xg[i]));
    fprintf(stderr, "  %-22s rows %4d vocab %6d: %d sampled (%d greedy), %d id mismatches, %d logprob mismatches, "
                    "max |dlogprob| %.2e, penalized logits %s\n",
            name, rows, V, sampled, greedy, bad, badlp, worst, xdiff ? "DIFFER" : "identical");
    NB_CHECK_MSG(bad == 0, "%s: %d of %d drawn ids differ", name, bad, sampled);
    NB_CHECK_MSG(badlp == 0, "%s: %d rows' log-probabilities differ", name, badlp);
    NB_CHECK_MSG(!xdiff, "%s: penalized logits differ", name);
    nb_ops_free(g_gpu, dx);
    nb_ops_free(g_gpu, dp);
    nb_ops_free(g_gpu, doff);
    nb_ops_free(g_gpu, dtok);
    nb_ops_free(g_gpu, dcnt);
    nb_ops_free(g_gpu, dout);
    free(x);
    free(xc);
    free(xg);
    free(p);
    free(off);
    free(tok);
    free(cnt);
    free(oc);
    free(og);
    return bad;
}

static int setup(void)
{
    if (!g_gpu && nb_ops_ctx_new_cuda(0, &g_gpu) != NB_OK) return 0;
    if (!g_cpu && nb_ops_ctx_new_cpu(0, &g_cpu) != NB_OK) return 0;
    return 1;
}

static void test_vs_cpu(void)
{
    if (!setup()) return nb_test_skip("no CUDA context");
    /* both kernels: the cluster one (8 or 16 blocks per row, the default on sm_90+ from two
     * 1024-id chunks) and the one-block one; uneven slices and blocks left without ids too */
    static const char *modes[] = {"", "block", "8", "16"};
    for (size_t mi = 0; mi < NB_ARRAY_LEN(modes); mi++) {
        if (*modes[mi])
            setenv("NIBBLE_CUDA_SAMPLE", modes[mi], 1);
        else
            unsetenv("NIBBLE_CUDA_SAMPLE");
        fprintf(stderr, "  kernel: %s\n", *modes[mi] ? modes[mi] : "default");
        g_rs = 12345;
        for (int d = 0; d < D_NDIST; d++) {
            char nm[64];
            snprintf(nm, sizeof nm, "small %s", dist_name[d]);
            compare(nm, 300, 1000, d, 5);
            snprintf(nm, sizeof nm, "glm5 vocab %s", dist_name[d]);
            compare(nm, d == D_NORMAL ? 200 : 40, 154880, d, 5);
        }
        compare("tiny vocab", 200, 37, D_NORMAL, 5);
        compare("vocab 1", 20, 1, D_NORMAL, 5);
        compare("odd vocab", 50, 1025, D_TIES, 5);
        compare("vocab 5000", 60, 5000, D_PEAKED, 5);
        compare("vocab 33001 (empty blocks)", 60, 33001, D_NORMAL, 5);
        compare("vocab 33001 ties", 30, 33001, D_TIES, 5);
    }
    unsetenv("NIBBLE_CUDA_SAMPLE");
}

/* A plain sampler on a small vocabulary drawn many times on the GPU: the frequencies follow
 * the filtered distribution the CPU op samples (both are checked against each other above;
 * this guards against a shared mistake in the id-order walk by counting draws). */
static void test_draw_frequencies(void)
{
    if (!setup()) return nb_test_skip("no CUDA context");
    enum { R = 20000, V = 8 };
    float x[V] = {1.0f, 0.5f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f, -3.0f};
    float *h = malloc((size_t)R * V * sizeof *h);
    nb_sample_params *p = calloc(R, sizeof *p);
    for (int r = 0; r < R; r++) {
        memcpy(h + (size_t)r * V, x, sizeof x);
        p[r].temperature = 1.0f;
        p[r].top_p = 1.0f;
        p[r].top_k = 4; /* keeps ids 3, 6, 0 and one of the two 0.5s: the lower id, 1 */
        p[r].repetition_penalty = 1.0f;
        p[r].seed = 99;
        p[r].k = (uint64_t)r;
    }
    float *dx = nb_ops_alloc(g_gpu, sizeof x * R);
    nb_sample_params *dp = nb_ops_alloc(g_gpu, (size_t)R * sizeof *p);
    nb_sample_out *dout = nb_ops_alloc(g_gpu, (size_t)R * sizeof(nb_sample_out));
    nb_sample_out *o = malloc((size_t)R * sizeof *o);
    NB_CHECK_OK(nb_ops_upload(g_gpu, dx, h, sizeof x * R));
    NB_CHECK_OK(nb_ops_upload(g_gpu, dp, p, (size_t)R * sizeof *p));
    nb_tensor t = nb_tensor_2d(dx, NB_DTYPE_F32, R, V);
    t.device = NB_DEVICE_CUDA;
    NB_CHECK_OK(nb_op_sample(g_gpu, &t, dp, NULL, dout));
    NB_CHECK_OK(nb_ops_download(g_gpu, o, dout, (size_t)R * sizeof *o));
    int count[V] = {0};
    for (int r = 0; r < R; r++) count[o[r].token]++;
    double z = exp(2.0) + exp(1.5) + exp(1.0) + exp(0.5), chi = 0;
    const int kept[4] = {3, 6, 0, 1};
    for (int j = 0; j < 4; j++) {
        double ex = R * exp((double)x[kept[j]]) / z;
        chi += (count[kept[j]] - ex) * (count[kept[j]] - ex) / ex;
    }
    fprintf(stderr,
            "  top_k 4 over 20000 GPU draws: %d %d %d %d (ids 3 6 0 1), others %d, chi2 %.2f (df 3, crit 21.1)\n",
            count[3], count[6], count[0], count[1], R - count[3] - count[6] - count[0] - count[1], chi);
    NB_CHECK(count[2] + count[4] + count[5] + count[7] == 0);
    NB_CHECK(chi < 21.1);
    nb_ops_free(g_gpu, dx);
    nb_ops_free(g_gpu, dp);
    nb_ops_free(g_gpu, dout);
    free(h);
    free(p);
    free(o);
}

static double now_ms(void) { return (double)nb_now_ns() * 1e-6; }

static void test_bench(void)
{
    if (!setup()) return nb_test_skip("no CUDA context");
    enum { V = 154880, RMAX = 1000, DISTINCT = 32 };
    size_t n = (size_t)RMAX * V;
    float *x = malloc(n * sizeof *x);
    g_rs = 777;
    for (int r = 0; r < DISTINCT; r++) fill_row(x + (size_t)r * V, V, D_NORMAL);
    for (int r = DISTINCT; r < RMAX; r++) memcpy(x + (size_t)r * V, x + (size_t)(r % DISTINCT) * V, (size_t)V * 4);
    float *dx = nb_ops_alloc(g_gpu, n * sizeof *x);
    nb_sample_params *p = calloc(RMAX, sizeof *p), *dp = nb_ops_alloc(g_gpu, RMAX * sizeof *p);
    nb_sample_out *o = calloc(RMAX, sizeof *o), *dout = nb_ops_alloc(g_gpu, RMAX * sizeof *o);
    NB_CHECK_OK(nb_ops_upload(g_gpu, dx, x, n * sizeof *x));
    struct {
        const char *name;
        float t, top_p;
        int top_k, n_top;
    } cfg[] = {{"greedy", 0, 1, -1, 0},
               {"T1 (no filter)", 1, 1, -1, 0},
               {"T0.7 top_k 50 top_p 0.9", 0.7f, 0.9f, 50, 0},
               {"T0.7 top_p 0.95", 0.7f, 0.95f, -1, 0},
               {"T0.7 top_p 0.9 + top-5 logprobs", 0.7f, 0.9f, -1, 5}};
    const int rows_list[] = {1, 10, 100, 1000};
    static const char *modes[] = {"", "block"};
    for (size_t mi = 0; mi < NB_ARRAY_LEN(modes); mi++) {
        if (*modes[mi])
            setenv("NIBBLE_CUDA_SAMPLE", modes[mi], 1);
        else
            unsetenv("NIBBLE_CUDA_SAMPLE");
        fprintf(stderr, "  GPU sampling, vocab %d, kernel %s (ms per step, wall incl. launch, mean of N)\n", V,
                *modes[mi] ? modes[mi] : "default (cluster of blocks per row)");
        for (size_t c = 0; c < NB_ARRAY_LEN(cfg); c++) {
            for (int r = 0; r < RMAX; r++) {
                memset(&p[r], 0, sizeof p[r]);
                p[r].temperature = cfg[c].t;
                p[r].top_p = cfg[c].top_p;
                p[r].top_k = cfg[c].top_k;
                p[r].n_top = cfg[c].n_top;
                p[r].want_logprob = cfg[c].n_top > 0;
                p[r].repetition_penalty = 1.0f;
                p[r].seed = (uint64_t)r;
                p[r].k = 1;
            }
            NB_CHECK_OK(nb_ops_upload(g_gpu, dp, p, RMAX * sizeof *p));
            for (size_t ri = 0; ri < NB_ARRAY_LEN(rows_list); ri++) {
                int R = rows_list[ri], N = R >= 1000 ? 10 : 50;
                nb_tensor t = nb_tensor_2d(dx, NB_DTYPE_F32, R, V);
                t.device = NB_DEVICE_CUDA;
                for (int w = 0; w < 3; w++) NB_CHECK_OK(nb_op_sample(g_gpu, &t, dp, NULL, dout));
                NB_CHECK_OK(nb_ops_sync(g_gpu));
                double t0 = now_ms();
                for (int it = 0; it < N; it++) NB_CHECK_OK(nb_op_sample(g_gpu, &t, dp, NULL, dout));
                NB_CHECK_OK(nb_ops_download(g_gpu, o, dout, (size_t)R * sizeof *o));
                double ms = (now_ms() - t0) / N;
                fprintf(stderr, "    %-34s rows %4d: %8.3f ms  (results back: %zu B; logits not moved: %.1f MB)\n",
                        cfg[c].name, R, ms, (size_t)R * sizeof *o, (double)R * V * 4 / 1e6);
            }
        }
    }
    unsetenv("NIBBLE_CUDA_SAMPLE");
    /* what the host path costs for the same step: logits down + one host thread sampling */
    fprintf(stderr,
            "  host path (before): download [rows, %d] F32 + nb_cpu_sample_row on one thread, T0.7 top_k 50 top_p 0.9\n",
            V);
    uint64_t *scr = malloc(NB_CPU_SAMPLE_SCRATCH(V) * sizeof *scr);
    float *hx = malloc(n * sizeof *hx);
    nb_sample_params hp = p[0];
    hp.temperature = 0.7f;
    hp.top_p = 0.9f;
    hp.top_k = 50;
    hp.n_top = 0;
    hp.want_logprob = 0;
    for (size_t ri = 0; ri < NB_ARRAY_LEN(rows_list); ri++) {
        int R = rows_list[ri];
        NB_CHECK_OK(nb_ops_sync(g_gpu));
        double t0 = now_ms();
        NB_CHECK_OK(nb_ops_download(g_gpu, hx, dx, (size_t)R * V * sizeof *hx));
        double t1 = now_ms();
        for (int r = 0; r < R; r++) {
            nb_sample_out so;
            nb_cpu_sample_row(hx + (size_t)r * V, V, &hp, NULL, NULL, 0, scr, &so);
        }
        double t2 = now_ms();
        fprintf(stderr, "    rows %4d: download %8.3f ms (%.1f MB) + host sampling %8.3f ms = %8.3f ms\n", R, t1 - t0,
                (double)R * V * 4 / 1e6, t2 - t1, t2 - t0);
    }
    free(scr);
    free(hx);
    nb_ops_free(g_gpu, dx);
    nb_ops_free(g_gpu, dp);
    nb_ops_free(g_gpu, dout);
    free(x);
    free(p);
    free(o);
}

static const nb_test tests[] = {
    {"vs_cpu", test_vs_cpu},
    {"draw_frequencies", test_draw_frequencies},
    {"bench", test_bench},
};

int main(int argc, char **argv)
{
    if (!nb_cuda_test_require_gpu()) return 77;
    int rc = nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
    nb_ops_ctx_free(g_gpu);
    nb_ops_ctx_free(g_cpu);
    return rc;
}
