/* The small ops of a decode step on GLM-5's shapes (issue 9, third round): rope_n, norm_n and
 * set_rows_n of the MLA layer, their one-launch form norm_rope_set_n (fourth round; also on
 * unaligned rows, its three-launch fallback), the BF16 embedding, add_rmsnorm, the router
 * alone and the fused router gate + choice (moe_gate_route), each against its CPU op at 1 and 10 tokens
 * (and the legacy kernels of NIBBLE_CUDA_SMALL_OPS=legacy against the current ones: the same
 * bits where the arithmetic is the same). With --bench (or NB_SMALL_BENCH=1) it then times
 * each op per launch inside a CUDA graph of 100 launches: legacy, current without and with
 * programmatic dependent launch, side by side, with a near-empty launch (scale of 4 floats)
 * as the floor of a graph node.
 * Run on the GPU machine: test_cuda_small_ops [filter] [--bench] (exits 77 without a GPU). */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "cuda_test_util.h"
#include "format/numerics.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/device.h"
#include "ops/cuda/graph.h"

#define F32 NB_DTYPE_F32
#define H 6144

static int bench;

/* ---- timing: per-launch microseconds of `fn` replayed from a graph of 100 launches ------ */

typedef void (*op_fn)(void *arg);
#define BENCH_LAUNCHES 100
#define BENCH_REPLAYS 20

static double graph_us(op_fn fn, void *arg)
{
    fn(arg); /* eager once: lazily made tables, scratch */
    if (nb_ops_sync(tu_gpu) != NB_OK) return -1;
    nb_cuda_graph *g = NULL;
    if (nb_cuda_graph_begin(tu_gpu) != NB_OK) return -1;
    for (int i = 0; i < BENCH_LAUNCHES; i++) fn(arg);
    if (nb_cuda_graph_end(tu_gpu, 1, &g) != NB_OK || !g) return -1;
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        NB_CHECK_OK(nb_cuda_graph_launch(tu_gpu, g)); /* warm */
        NB_CHECK_OK(nb_ops_sync(tu_gpu));
        int64_t t0 = nb_now_ns();
        for (int r = 0; r < BENCH_REPLAYS; r++) NB_CHECK_OK(nb_cuda_graph_launch(tu_gpu, g));
        NB_CHECK_OK(nb_ops_sync(tu_gpu));
        double us = (double)(nb_now_ns() - t0) / 1e3 / (BENCH_REPLAYS * BENCH_LAUNCHES);
        if (us < best) best = us;
    }
    nb_cuda_graph_free(g);
    return best;
}

/* legacy, current without programmatic dependent launch, current, side by side */
static void bench_pair(const char *what, op_fn fn, void *arg)
{
    if (!bench) return;
    nb_cuda_small_ops_force_legacy(1);
    double a = graph_us(fn, arg);
    nb_cuda_small_ops_force_legacy(0);
    nb_cuda_pdl_force(0);
    double b = graph_us(fn, arg);
    nb_cuda_pdl_force(1);
    double c = graph_us(fn, arg);
    nb_cuda_pdl_force(-1);
    nb_cuda_small_ops_force_legacy(-1);
    printf("BENCH %-40s legacy %6.2f us  now %6.2f us, with PDL %6.2f us (x%.2f)\n", what, a, b, c, c > 0 ? a / c : 0.0);
    fflush(stdout);
}

typedef struct scale_arg {
    nb_tensor x;
} scale_arg;
static void run_scale(void *p) { NB_CHECK_OK(nb_op_scale(tu_gpu, &((scale_arg *)p)->x, 1.0f)); }

static void test_launch_floor(void)
{
    if (!bench) return;
    scale_arg a;
    a.x = nb_tensor_2d(tu_poisoned(16), F32, 1, 4);
    a.x.device = NB_DEVICE_CUDA;
    NB_CHECK_OK(nb_ops_memset(tu_gpu, a.x.data, 0, 16));
    printf("BENCH %-44s %7.2f us per graph node\n", "floor: scale [1 x 4]", graph_us(run_scale, &a));
    tu_free_all();
}

/* ---- rope_n: the MLA layer's four parts (q_pe of 64 heads, k_pe, indexer q of 32 heads,
 * indexer key), GLM-5 rope dims 64 -------------------------------------------------------- */

typedef struct rope_arg {
    int n;
    nb_tensor v[4];
    const int32_t *pos;
    const nb_rope *tabs[4];
} rope_arg;
static void run_rope(void *p)
{
    rope_arg *a = p;
    nb_tensor *x[4] = {&a->v[0], &a->v[1], &a->v[2], &a->v[3]};
    NB_CHECK_OK(nb_op_rope_n(tu_gpu, a->n, x, a->pos, a->tabs));
}

static void rope_views(float *base, int T, nb_tensor *v, nb_device dev)
{
    const size_t nq = (size_t)T * 64 * 192, nk = (size_t)T * 576, nqi = (size_t)T * 32 * 128;
    v[0] = nb_tensor_3d(base + 128, F32, T, 64, 192); /* q_pe: after the 128 nope dims */
    v[0].shape[2] = 64;
    v[1] = nb_tensor_3d(base + nq + 512, F32, T, 1, 64); /* k_pe after the latent */
    v[1].stride[0] = 576;
    v[2] = nb_tensor_3d(base + nq + nk, F32, T, 32, 128);
    v[2].shape[2] = 64;
    v[3] = nb_tensor_3d(base + nq + nk + nqi, F32, T, 1, 64);
    v[3].stride[0] = 128;
    for (int i = 0; i < 4; i++) v[i].device = dev;
}

static void rope_case(int T)
{
    nb_rope ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    ra.dim = rb.dim = 64;
    ra.interleave = 1;
    ra.attention_scaling = 1.0f;
    rb.attention_scaling = 1.0f;
    for (int i = 0; i < 32; i++) {
        ra.inv_freq[i] = powf(1000000.0f, -(float)(2 * i) / 64);
        rb.inv_freq[i] = powf(10000.0f, -(float)(2 * i) / 64);
    }
    const size_t n = (size_t)T * (64 * 192 + 576 + 32 * 128 + 128);
    float *h = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    tu_fill(h, n, 1.0f);
    float *d0 = tu_up(h, n * 4), *d1 = tu_up(h, n * 4);
    int32_t pos[16];
    for (int t = 0; t < T; t++) pos[t] = 127 + 37 * t + (t == 3 ? 150000 : 0); /* one far position */
    const int32_t *dpos = tu_up(pos, sizeof pos);
    rope_arg hx = {4, {{0}}, pos, {&ra, &ra, &rb, &rb}}, dx = hx, lx = hx;
    rope_views(h, T, hx.v, NB_DEVICE_CPU);
    rope_views(d0, T, dx.v, NB_DEVICE_CUDA);
    rope_views(d1, T, lx.v, NB_DEVICE_CUDA);
    dx.pos = lx.pos = dpos;
    nb_tensor *xh[4] = {&hx.v[0], &hx.v[1], &hx.v[2], &hx.v[3]};
    NB_CHECK_OK(nb_op_rope_n(tu_cpu, 4, xh, pos, hx.tabs));
    run_rope(&dx);
    nb_cuda_small_ops_force_legacy(1);
    run_rope(&lx);
    nb_cuda_small_ops_force_legacy(-1);
    NB_CHECK_OK(nb_ops_download(tu_gpu, b, d0, n * 4));
    NB_CHECK_OK(nb_ops_download(tu_gpu, c, d1, n * 4));
    char name[96];
    snprintf(name, sizeof name, "rope_n GLM-5 MLA parts, %d tok", T);
    tu_compare(name, h, b, n, NB_TOL_F32);
    NB_CHECK_MSG(!memcmp(b, c, n * 4), "rope_n %d tok: the legacy kernel's bits differ", T);
    snprintf(name, sizeof name, "rope_n [%d tok, 4 parts]", T);
    bench_pair(name, run_rope, &dx);
    free(h), free(b), free(c);
    tu_free_all();
}

static void test_rope(void)
{
    tu_seed(91);
    rope_case(1);
    rope_case(10);
}

/* ---- embedding: BF16 [vocab, 6144] ------------------------------------------------------- */

typedef struct emb_arg {
    const nb_weight *w;
    const int32_t *ids;
    int n;
    nb_tensor out;
} emb_arg;
static void run_emb(void *p)
{
    emb_arg *a = p;
    NB_CHECK_OK(nb_op_embedding(tu_gpu, a->w, a->ids, a->n, &a->out));
}

static void emb_case(nb_wfmt fmt, int vocab, int k, int T)
{
    tu_weight w;
    tu_weight_make(&w, fmt, vocab, k, 1.0f, 0);
    int32_t ids[16];
    for (int t = 0; t < T; t++) ids[t] = (int32_t)(tu_u32() % (uint32_t)vocab);
    ids[0] = vocab - 1;
    const size_t n = (size_t)T * k;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    nb_tensor ho = nb_tensor_2d(a, F32, T, k);
    NB_CHECK_OK(nb_op_embedding(tu_cpu, &w.h, ids, T, &ho));
    emb_arg g = {&w.d, tu_up(ids, sizeof ids), T, ho}, l;
    g.out.data = tu_poisoned(n * 4);
    g.out.device = NB_DEVICE_CUDA;
    l = g;
    l.out.data = tu_poisoned(n * 4);
    run_emb(&g);
    nb_cuda_small_ops_force_legacy(1);
    run_emb(&l);
    nb_cuda_small_ops_force_legacy(-1);
    tu_down(&g.out, b);
    tu_down(&l.out, c);
    char name[96];
    snprintf(name, sizeof name, "embedding %s [%d, %d], %d tok", tu_fmt_name(fmt), vocab, k, T);
    tu_compare(name, a, b, n, NB_TOL_F32);
    NB_CHECK_MSG(!memcmp(b, c, n * 4), "%s: the legacy kernel's bits differ", name);
    if (fmt == NB_WFMT_BF16 && k == H) bench_pair(name, run_emb, &g);
    free(a), free(b), free(c);
    tu_weight_free(&w);
    tu_free_all();
}

static void test_embedding(void)
{
    tu_seed(92);
    emb_case(NB_WFMT_BF16, 2000, H, 1);
    emb_case(NB_WFMT_BF16, 2000, H, 10);
    emb_case(NB_WFMT_F32, 300, 264, 7); /* F32 rows: 4 per thread, a partial chunk */
    emb_case(NB_WFMT_BF16, 300, 200, 3); /* 400-byte rows: 16-byte aligned, 25 vectors */
    emb_case(NB_WFMT_BF16, 300, 100, 3); /* 200-byte rows: not 16-byte aligned, the loop kernel */
}

/* ---- add_rmsnorm [T, 6144] ------------------------------------------------------------- */

typedef struct norm_arg {
    nb_tensor x, res, out;
    const float *w;
} norm_arg;
static void run_norm(void *p)
{
    norm_arg *a = p;
    NB_CHECK_OK(nb_op_add_rmsnorm(tu_gpu, &a->x, &a->res, a->w, 1e-5f, &a->out));
}

static void norm_case(int T)
{
    const size_t n = (size_t)T * H;
    float *x = malloc(n * 4), *r = malloc(n * 4), *w = malloc(H * 4), *o = malloc(n * 4);
    float *b = malloc(n * 4), *c = malloc(n * 4), *rb = malloc(n * 4), *rc = malloc(n * 4);
    tu_fill(x, n, 1.0f);
    tu_fill(r, n, 3.0f);
    tu_fill(w, H, 1.0f);
    nb_tensor hx = nb_tensor_2d(x, F32, T, H), hr = nb_tensor_2d(r, F32, T, H), ho = nb_tensor_2d(o, F32, T, H);
    norm_arg g, l;
    l.x = g.x = tu_twin(&hx);
    g.res = tu_twin(&hr); /* before the CPU op adds into r */
    l.res = tu_twin(&hr);
    g.out = tu_twin(&ho);
    l.out = tu_twin(&ho);
    NB_CHECK_OK(nb_ops_memset(tu_gpu, g.out.data, 0xff, n * 4));
    NB_CHECK_OK(nb_ops_memset(tu_gpu, l.out.data, 0xff, n * 4));
    g.w = l.w = tu_up(w, H * 4);
    NB_CHECK_OK(nb_op_add_rmsnorm(tu_cpu, &hx, &hr, w, 1e-5f, &ho));
    run_norm(&g);
    nb_cuda_small_ops_force_legacy(1);
    run_norm(&l);
    nb_cuda_small_ops_force_legacy(-1);
    tu_down(&g.out, b);
    tu_down(&l.out, c);
    tu_down(&g.res, rb);
    tu_down(&l.res, rc);
    char name[96];
    snprintf(name, sizeof name, "add_rmsnorm [%d x %d]", T, H);
    tu_compare(name, o, b, n, NB_TOL_F32);
    tu_compare("add_rmsnorm: residual", r, rb, n, NB_TOL_F32);
    NB_CHECK_MSG(!memcmp(b, c, n * 4) && !memcmp(rb, rc, n * 4), "%s: the legacy kernel's bits differ", name);
    bench_pair(name, run_norm, &g);
    free(x), free(r), free(w), free(o), free(b), free(c), free(rb), free(rc);
    tu_free_all();
}

static void test_add_rmsnorm(void)
{
    tu_seed(93);
    norm_case(1);
    norm_case(10);
}

/* ---- norm_n: the MLA layer's norms of the concatenated projections' row [q_a 2048 | latent
 * 512 | k_pe 64 | index key 128 | index weights 32]: rms, rms, layer, scale ---------------- */

typedef struct normn_arg {
    nb_tensor v[4];
    nb_norm_part p[4];
} normn_arg;
static void normn_bind(normn_arg *a)
{
    for (int i = 0; i < 4; i++) a->p[i].x = a->p[i].out = &a->v[i];
}
static void run_normn(void *p)
{
    normn_arg *a = p;
    normn_bind(a);
    NB_CHECK_OK(nb_op_norm_n(tu_gpu, 4, a->p));
}

static void normn_case(int T)
{
    const int W = 2048 + 576 + 128 + 32, off[4] = {0, 2048, 2048 + 576, 2048 + 576 + 128}, d[4] = {2048, 512, 128, 32};
    const size_t n = (size_t)T * W;
    float *h = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4), *wt = malloc((2048 + 512 + 256) * 4);
    tu_fill(h, n, 2.0f);
    tu_fill(wt, 2048 + 512 + 256, 1.0f);
    float *dw = tu_up(wt, (2048 + 512 + 256) * 4), *d0 = tu_up(h, n * 4), *d1 = tu_up(h, n * 4);
    normn_arg ha, ga, la;
    float *bases[3] = {h, d0, d1};
    normn_arg *as[3] = {&ha, &ga, &la};
    for (int k = 0; k < 3; k++) {
        const float *w = k ? dw : wt;
        for (int i = 0; i < 4; i++) {
            as[k]->v[i] = nb_tensor_2d(bases[k] + off[i], F32, T, d[i]);
            as[k]->v[i].stride[0] = W;
            as[k]->v[i].device = k ? NB_DEVICE_CUDA : NB_DEVICE_CPU;
        }
        as[k]->p[0] = (nb_norm_part){NB_NORM_RMS, NULL, NULL, w, NULL, 1e-6f, 1.0f};
        as[k]->p[1] = (nb_norm_part){NB_NORM_RMS, NULL, NULL, w + 2048, NULL, 1e-6f, 1.0f};
        as[k]->p[2] = (nb_norm_part){NB_NORM_LAYER, NULL, NULL, w + 2560, w + 2688, 1e-6f, 1.0f};
        as[k]->p[3] = (nb_norm_part){NB_NORM_SCALE, NULL, NULL, NULL, NULL, 0.0f, 0.17677669f};
        normn_bind(as[k]);
    }
    NB_CHECK_OK(nb_op_norm_n(tu_cpu, 4, ha.p));
    run_normn(&ga);
    nb_cuda_small_ops_force_legacy(1);
    run_normn(&la);
    nb_cuda_small_ops_force_legacy(-1);
    NB_CHECK_OK(nb_ops_download(tu_gpu, b, d0, n * 4));
    NB_CHECK_OK(nb_ops_download(tu_gpu, c, d1, n * 4));
    char name[96];
    snprintf(name, sizeof name, "norm_n MLA [%d x 2048|512|128|32]", T);
    tu_compare(name, h, b, n, NB_TOL_F32);
    NB_CHECK_MSG(!memcmp(b, c, n * 4), "%s: the legacy kernel's bits differ", name);
    snprintf(name, sizeof name, "norm_n [%d rows, 4 parts]", T);
    bench_pair(name, run_normn, &ga);
    free(h), free(b), free(c), free(wt);
    tu_free_all();
}

static void test_norm_n(void)
{
    tu_seed(95);
    normn_case(1);
    normn_case(10);
}

/* ---- set_rows_n: the latent + k_pe row (576) and the index key (128) into a pool -------- */

typedef struct setn_arg {
    nb_tensor src[2], dst[2];
    const int32_t *rows;
} setn_arg;
static void run_setn(void *p)
{
    setn_arg *a = p;
    const nb_tensor *s[2] = {&a->src[0], &a->src[1]};
    nb_tensor *d[2] = {&a->dst[0], &a->dst[1]};
    NB_CHECK_OK(nb_op_set_rows_n(tu_gpu, 2, s, a->rows, d));
}

static void setn_case(int T)
{
    const int W = 2784, R = 4096, PW = 576 + 64 + 128; /* pool row: latent+k_pe, (a gap), index key */
    float *src = malloc((size_t)T * W * 4), *pool = malloc((size_t)R * PW * 4), *b = malloc((size_t)R * PW * 4);
    tu_fill(src, (size_t)T * W, 1.0f);
    tu_fill(pool, (size_t)R * PW, 1.0f);
    int32_t rows[16];
    for (int t = 0; t < T; t++) rows[t] = (int32_t)((tu_u32() % (R / 16)) * 16 + t);
    float *ds = tu_up(src, (size_t)T * W * 4), *dp = tu_up(pool, (size_t)R * PW * 4);
    setn_arg h, g;
    float *sb[2] = {src, ds}, *pb[2] = {pool, dp};
    setn_arg *as[2] = {&h, &g};
    for (int k = 0; k < 2; k++) {
        as[k]->src[0] = nb_tensor_2d(sb[k] + 2048, F32, T, 576);
        as[k]->src[1] = nb_tensor_2d(sb[k] + 2048 + 576, F32, T, 128);
        as[k]->dst[0] = nb_tensor_2d(pb[k], F32, R, 576);
        as[k]->dst[1] = nb_tensor_2d(pb[k] + 640, F32, R, 128);
        for (int i = 0; i < 2; i++) {
            as[k]->src[i].stride[0] = W;
            as[k]->dst[i].stride[0] = PW;
            as[k]->src[i].device = as[k]->dst[i].device = k ? NB_DEVICE_CUDA : NB_DEVICE_CPU;
        }
    }
    h.rows = rows;
    g.rows = tu_up(rows, sizeof rows);
    const nb_tensor *s2[2] = {&h.src[0], &h.src[1]};
    nb_tensor *d2[2] = {&h.dst[0], &h.dst[1]};
    NB_CHECK_OK(nb_op_set_rows_n(tu_cpu, 2, s2, rows, d2));
    run_setn(&g);
    NB_CHECK_OK(nb_ops_download(tu_gpu, b, dp, (size_t)R * PW * 4));
    NB_CHECK_MSG(!memcmp(pool, b, (size_t)R * PW * 4), "set_rows_n %d tok: pool differs from the CPU op's", T);
    char name[96];
    snprintf(name, sizeof name, "set_rows_n [%d rows, 576 + 128]", T);
    fprintf(stderr, "    %s: pool bit-exact\n", name);
    bench_pair(name, run_setn, &g);
    free(src), free(pool), free(b);
    tu_free_all();
}

static void test_set_rows_n(void)
{
    tu_seed(96);
    setn_case(1);
    setn_case(10);
}

/* ---- norm_rope_set_n: the MLA layer's key side in one launch (norm_n of the four parts
 * above, ropes of k_pe and of the index key, pool writes of [latent | k_pe] and the index key)
 * against the CPU composition, and (--bench) against its three launches ------------------ */

typedef struct prep_arg {
    nb_tensor v[4], rx[2], src[2], dst[2];
    nb_norm_part p[4];
    const nb_rope *tabs[2];
    const int32_t *pos, *rows;
} prep_arg;
static void run_prep_on(nb_ops_ctx *ctx, prep_arg *a)
{
    normn_arg na;
    for (int i = 0; i < 4; i++) na.v[i] = a->v[i], na.p[i] = a->p[i];
    normn_bind(&na);
    nb_tensor *rx[2] = {&a->rx[0], &a->rx[1]};
    const nb_tensor *src[2] = {&a->src[0], &a->src[1]};
    nb_tensor *dst[2] = {&a->dst[0], &a->dst[1]};
    const nb_norm_rope_set q = {4, na.p, 2, rx, a->pos, a->tabs, 2, src, a->rows, dst};
    NB_CHECK_OK(nb_op_norm_rope_set_n(ctx, &q));
}
static void run_prep(void *p) { run_prep_on(tu_gpu, p); }

/* pad: floats added to the row stride (1: unaligned rows, the three-launch fallback) */
static void prep_case(int T, int pad)
{
    const int W = 2784 + pad, R = 4096, PW = 576 + 64 + 128;
    const int off[4] = {0, 2048, 2048 + 576, 2048 + 576 + 128}, d[4] = {2048, 512, 128, 32};
    nb_rope ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    ra.dim = rb.dim = 64;
    ra.interleave = 1;
    ra.attention_scaling = rb.attention_scaling = 1.0f;
    for (int i = 0; i < 32; i++) {
        ra.inv_freq[i] = powf(1000000.0f, -(float)(2 * i) / 64);
        rb.inv_freq[i] = powf(10000.0f, -(float)(2 * i) / 64);
    }
    const size_t n = (size_t)T * W, pn = (size_t)R * PW;
    float *h = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4), *wt = malloc((2048 + 512 + 256) * 4);
    float *pool = malloc(pn * 4), *pb = malloc(pn * 4), *pc = malloc(pn * 4);
    tu_fill(h, n, 2.0f);
    tu_fill(wt, 2048 + 512 + 256, 1.0f);
    tu_fill(pool, pn, 1.0f);
    int32_t pos[16], rows[16];
    for (int t = 0; t < T; t++) {
        pos[t] = 127 + 37 * t + (t == 3 ? 150000 : 0);
        rows[t] = (int32_t)((tu_u32() % (R / 16)) * 16 + t);
    }
    float *dw = tu_up(wt, (2048 + 512 + 256) * 4);
    float *rowb[3] = {h, tu_up(h, n * 4), tu_up(h, n * 4)}, *poolb[3] = {pool, tu_up(pool, pn * 4), tu_up(pool, pn * 4)};
    const int32_t *dpos = tu_up(pos, sizeof pos), *drows = tu_up(rows, sizeof rows);
    prep_arg a[3];
    for (int k = 0; k < 3; k++) {
        const nb_device dev = k ? NB_DEVICE_CUDA : NB_DEVICE_CPU;
        const float *w = k ? dw : wt;
        float *base = rowb[k];
        for (int i = 0; i < 4; i++) {
            a[k].v[i] = nb_tensor_2d(base + off[i], F32, T, d[i]);
            a[k].v[i].stride[0] = W;
            a[k].v[i].device = dev;
        }
        a[k].p[0] = (nb_norm_part){NB_NORM_RMS, NULL, NULL, w, NULL, 1e-6f, 1.0f};
        a[k].p[1] = (nb_norm_part){NB_NORM_RMS, NULL, NULL, w + 2048, NULL, 1e-6f, 1.0f};
        a[k].p[2] = (nb_norm_part){NB_NORM_LAYER, NULL, NULL, w + 2560, w + 2688, 1e-6f, 1.0f};
        a[k].p[3] = (nb_norm_part){NB_NORM_SCALE, NULL, NULL, NULL, NULL, 0.0f, 0.17677669f};
        a[k].rx[0] = nb_tensor_3d(base + 2560, F32, T, 1, 64); /* k_pe after the latent */
        a[k].rx[1] = nb_tensor_3d(base + 2624, F32, T, 1, 64); /* the index key's first 64 */
        a[k].src[0] = nb_tensor_2d(base + 2048, F32, T, 576);
        a[k].src[1] = nb_tensor_2d(base + 2624, F32, T, 128);
        a[k].dst[0] = nb_tensor_2d(poolb[k], F32, R, 576);
        a[k].dst[1] = nb_tensor_2d(poolb[k] + 640, F32, R, 128);
        for (int i = 0; i < 2; i++) {
            a[k].rx[i].stride[0] = a[k].src[i].stride[0] = W;
            a[k].dst[i].stride[0] = PW;
            a[k].rx[i].device = a[k].src[i].device = a[k].dst[i].device = dev;
        }
        a[k].tabs[0] = &ra, a[k].tabs[1] = &rb;
        a[k].pos = k ? dpos : pos;
        a[k].rows = k ? drows : rows;
    }
    run_prep_on(tu_cpu, &a[0]);
    run_prep(&a[1]);
    nb_cuda_norm_rope_set_force(0); /* the three launches */
    run_prep(&a[2]);
    nb_cuda_norm_rope_set_force(-1);
    NB_CHECK_OK(nb_ops_download(tu_gpu, b, rowb[1], n * 4));
    NB_CHECK_OK(nb_ops_download(tu_gpu, c, rowb[2], n * 4));
    NB_CHECK_OK(nb_ops_download(tu_gpu, pb, poolb[1], pn * 4));
    NB_CHECK_OK(nb_ops_download(tu_gpu, pc, poolb[2], pn * 4));
    char name[96];
    snprintf(name, sizeof name, "norm_rope_set_n %d tok%s: rows", T, pad ? " unaligned" : "");
    tu_compare(name, h, b, n, NB_TOL_F32);
    snprintf(name, sizeof name, "norm_rope_set_n %d tok%s: pool", T, pad ? " unaligned" : "");
    tu_compare(name, pool, pb, pn, NB_TOL_F32);
    snprintf(name, sizeof name, "  3 launches %d tok%s: rows", T, pad ? " unaligned" : "");
    tu_compare(name, h, c, n, NB_TOL_F32);
    snprintf(name, sizeof name, "  3 launches %d tok%s: pool", T, pad ? " unaligned" : "");
    tu_compare(name, pool, pc, pn, NB_TOL_F32);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += memcmp(&b[i], &c[i], 4) != 0;
    fprintf(stderr, "    norm_rope_set_n %d tok: %zu of %zu row values differ in bits from the 3 launches\n", T, diff,
            n);
    if (bench && !pad) {
        nb_cuda_norm_rope_set_force(1);
        const double f1 = graph_us(run_prep, &a[1]);
        nb_cuda_norm_rope_set_force(0);
        const double f0 = graph_us(run_prep, &a[1]);
        nb_cuda_norm_rope_set_force(-1);
        printf("BENCH norm_rope_set_n [%d tok] one launch %6.2f us, norm_n + rope_n + set_rows_n %6.2f us\n", T, f1,
               f0);
        fflush(stdout);
    }
    free(h), free(b), free(c), free(wt), free(pool), free(pb), free(pc);
    tu_free_all();
}

static void test_norm_rope_set(void)
{
    tu_seed(97);
    prep_case(1, 0);
    prep_case(10, 0);
    prep_case(3, 1);
}

/* ---- moe_route alone (logits given), GLM-5's router ---------------------------------- */

typedef struct mr_arg {
    nb_tensor lg, ids, w;
    nb_router_params p;
} mr_arg;
static void run_mr(void *p)
{
    mr_arg *a = p;
    NB_CHECK_OK(nb_op_moe_route(tu_gpu, &a->lg, &a->p, &a->ids, &a->w));
}

static void test_route_alone(void)
{
    tu_seed(97);
    const int T = 1, E = 256, K = 8;
    float lg[256], bias[256], w[8], w2[8];
    int32_t id[8], id2[8];
    tu_fill(lg, E, 3.0f);
    tu_fill(bias, E, 0.05f);
    mr_arg h = {nb_tensor_2d(lg, F32, T, E), nb_tensor_2d(id, NB_DTYPE_I32, T, K), nb_tensor_2d(w, F32, T, K),
                {E, K, NB_ROUTER_SIGMOID, NB_ROUTER_GROUP_TOP2, 1, 1, bias, 1, 2.5f}};
    NB_CHECK_OK(nb_op_moe_route(tu_cpu, &h.lg, &h.p, &h.ids, &h.w));
    mr_arg g = h;
    g.lg = tu_twin(&h.lg);
    g.ids.data = tu_poisoned(sizeof id);
    g.w.data = tu_poisoned(sizeof w);
    g.ids.device = g.w.device = NB_DEVICE_CUDA;
    g.p.correction_bias = tu_up(bias, sizeof bias);
    for (int legacy = 0; legacy < 2; legacy++) {
        nb_cuda_small_ops_force_legacy(legacy);
        run_mr(&g);
        nb_cuda_small_ops_force_legacy(-1);
        tu_down(&g.ids, id2);
        tu_down(&g.w, w2);
        NB_CHECK_MSG(!memcmp(id, id2, sizeof id), "moe_route GLM-5 (%s): ids differ", legacy ? "legacy" : "now");
        tu_compare(legacy ? "moe_route GLM-5 [1 x 256] legacy: weights" : "moe_route GLM-5 [1 x 256]: weights", w, w2, K,
                   NB_TOL_F32);
    }
    bench_pair("moe_route alone [1 x 256]", run_mr, &g);
    tu_free_all();
}

/* ---- moe_gate_route: gate [E, 6144] BF16, GLM-5's router (sigmoid, correction bias,
 * top-8 of 256, norm_topk_prob, scaling 2.5) and a grouped softmax one ------------------- */

typedef struct route_arg {
    nb_tensor x, lg, ids, w;
    const nb_weight *gate;
    nb_router_params p;
} route_arg;
static void run_route(void *p)
{
    route_arg *a = p;
    NB_CHECK_OK(nb_op_moe_gate_route(tu_gpu, &a->x, a->gate, &a->lg, &a->p, &a->ids, &a->w));
}

/* ids equal, or a swap of experts whose selection scores the CPU's logits put within 1e-5
 * (a near-tie that float32 summation order may break either way; counted and printed) */
static int ids_agree(const char *name, const int32_t *a, const int32_t *b, const float *cpu_logits,
                     const nb_router_params *p, const float *bias, int T, int E, int K)
{
    int bad = 0, ties = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < K; j++) {
            int x = a[t * K + j], y = b[t * K + j];
            if (x == y) continue;
            if (y < 0 || y >= E) {
                bad++;
                continue;
            }
            float lx = cpu_logits[t * E + x], ly = cpu_logits[t * E + y];
            double sx = p->score == NB_ROUTER_SIGMOID ? 1 / (1 + exp(-lx)) : lx, sy = p->score == NB_ROUTER_SIGMOID ? 1 / (1 + exp(-ly)) : ly;
            if (bias) sx += bias[x], sy += bias[y];
            if (fabs(sx - sy) <= 1e-5 * (fabs(sx) + 1e-3)) {
                ties++;
            } else {
                if (bad < 8) fprintf(stderr, "      token %d slot %d: cpu expert %d cuda %d\n", t, j, x, y);
                bad++;
            }
        }
    fprintf(stderr, "    %s ids: %d mismatches (%d near-ties) of %d\n", name, bad + ties, ties, T * K);
    return bad == 0;
}

static void route_case(int T, int E, int K, nb_router_score score, nb_router_group group, int ng, int tg,
                       int use_bias, int force_legacy, int do_bench)
{
    tu_weight g;
    tu_weight_make(&g, NB_WFMT_BF16, E, H, 0.05f, 0);
    g.h.flags = g.d.flags = NB_WEIGHT_FEEDS_TOPK; /* as model/bind.c sets it on routers */
    const size_t nx = (size_t)T * H;
    float *x = malloc(nx * 4), *bias = malloc(E * 4), *lg = malloc((size_t)T * E * 4), *lg2 = malloc((size_t)T * E * 4);
    float *w = malloc(T * K * 4), *w2 = malloc(T * K * 4);
    int32_t *id = malloc(T * K * 4), *id2 = malloc(T * K * 4);
    tu_fill(x, nx, 1.0f);
    tu_fill(bias, E, 0.05f);
    nb_router_params p = {E, K, score, group, ng, tg, use_bias ? bias : NULL, 1, 2.5f};
    route_arg h = {nb_tensor_2d(x, F32, T, H), nb_tensor_2d(lg, F32, T, E), nb_tensor_2d(id, NB_DTYPE_I32, T, K),
                   nb_tensor_2d(w, F32, T, K), &g.h, p};
    NB_CHECK_OK(nb_op_moe_gate_route(tu_cpu, &h.x, h.gate, &h.lg, &h.p, &h.ids, &h.w));
    route_arg d = h;
    d.x = tu_twin(&h.x);
    d.gate = &g.d;
    d.p.correction_bias = use_bias ? tu_up(bias, E * 4) : NULL;
    d.lg.data = tu_poisoned((size_t)T * E * 4);
    d.ids.data = tu_poisoned(T * K * 4);
    d.w.data = tu_poisoned(T * K * 4);
    d.lg.device = d.ids.device = d.w.device = NB_DEVICE_CUDA;
    char name[128];
    /* the default two launches (linear, then the router), and the fused launch where it fits
     * (off by default: measured slower, see ops/cuda/cuda_ops.h) */
    for (int form = 0; form < (force_legacy ? 1 : 2); form++) {
        nb_cuda_small_ops_force_legacy(force_legacy);
        nb_cuda_moe_gate_route_force(form);
        snprintf(name, sizeof name, "moe_gate_route %s T=%d E=%d k=%d %s group %d (%d of %d)%s",
                 force_legacy ? "legacy" : form ? "fused" : "two-launch", T, E, K,
                 score == NB_ROUTER_SIGMOID ? "sigmoid" : "softmax", (int)group, tg, ng, use_bias ? " bias" : "");
        /* twice: the second fused launch finds the completion counter back at 0 */
        for (int rep = 0; rep < 2; rep++) {
            long long f0 = nb_cuda_moe_gate_route_fused_launches();
            run_route(&d);
            const int want_fused = form && T <= 16 && E <= 512;
            NB_CHECK_MSG((nb_cuda_moe_gate_route_fused_launches() - f0 == 1) == want_fused,
                         "%s: the %s path was not taken", name, want_fused ? "fused" : "two-launch");
            tu_down(&d.lg, lg2);
            tu_down(&d.ids, id2);
            tu_down(&d.w, w2);
            tu_compare(name, lg, lg2, (size_t)T * E, NB_TOL_F32);
            int same = ids_agree(name, id, id2, lg, &p, use_bias ? bias : NULL, T, E, K);
            NB_CHECK(same);
            if (same && !memcmp(id, id2, T * K * 4)) tu_compare("  weights", w, w2, (size_t)T * K, NB_TOL_F32);
        }
        nb_cuda_moe_gate_route_force(-1);
        nb_cuda_small_ops_force_legacy(-1);
    }
    if (do_bench && bench) {
        snprintf(name, sizeof name, "router gate+route [%d tok, %d x %d]", T, E, H);
        nb_cuda_small_ops_force_legacy(1);
        double a = graph_us(run_route, &d);
        nb_cuda_small_ops_force_legacy(-1);
        double b = graph_us(run_route, &d);
        nb_cuda_moe_gate_route_force(1);
        double c = graph_us(run_route, &d);
        nb_cuda_moe_gate_route_force(-1);
        printf("BENCH %-40s legacy %6.2f us  now (two launches) %6.2f us  fused %6.2f us\n", name, a, b, c);
        fflush(stdout);
        /* still right after 3 x 21 x 100 graph replays of each form */
        run_route(&d);
        tu_down(&d.ids, id2);
        NB_CHECK(ids_agree("after the graph replays", id, id2, lg, &p, use_bias ? bias : NULL, T, E, K));
    }
    free(x), free(bias), free(lg), free(lg2), free(w), free(w2), free(id), free(id2);
    tu_weight_free(&g);
    tu_free_all();
}

static void test_gate_route(void)
{
    tu_seed(94);
    /* GLM-5 (and GLM-4.5): noaux_tc over one group, so the group stage keeps every expert */
    const int Ts[] = {1, 2, 5, 10, 16};
    for (size_t i = 0; i < NB_ARRAY_LEN(Ts); i++)
        route_case(Ts[i], 256, 8, NB_ROUTER_SIGMOID, NB_ROUTER_GROUP_TOP2, 1, 1, 1, 0, 1);
    route_case(17, 256, 8, NB_ROUTER_SIGMOID, NB_ROUTER_GROUP_TOP2, 1, 1, 1, 0, 0); /* above the fused launch */
    route_case(3, 256, 8, NB_ROUTER_SIGMOID, NB_ROUTER_GROUP_TOP2, 1, 1, 1, 1, 0);  /* the legacy two-op path */
    route_case(4, 256, 8, NB_ROUTER_SIGMOID, NB_ROUTER_GROUP_TOP2, 8, 4, 1, 0, 0);  /* DeepSeek-V3's groups */
    route_case(4, 256, 8, NB_ROUTER_SIGMOID, NB_ROUTER_GROUP_TOP2, 8, 4, 1, 1, 0);  /* ... legacy */
    route_case(7, 64, 6, NB_ROUTER_SOFTMAX, NB_ROUTER_GROUP_TOP2, 8, 3, 0, 0, 0);
    route_case(4, 512, 8, NB_ROUTER_SOFTMAX, NB_ROUTER_GROUP_MAX, 8, 4, 1, 0, 0);
    route_case(6, 128, 8, NB_ROUTER_SOFTMAX, NB_ROUTER_GREEDY, 1, 1, 0, 0, 0); /* Qwen3-MoE's */
}

static const nb_test tests[] = {
    {"launch_floor", test_launch_floor},
    {"rope", test_rope},
    {"embedding", test_embedding},
    {"add_rmsnorm", test_add_rmsnorm},
    {"norm_n", test_norm_n},
    {"set_rows_n", test_set_rows_n},
    {"norm_rope_set", test_norm_rope_set},
    {"route_alone", test_route_alone},
    {"gate_route", test_gate_route},
};

int main(int argc, char **argv)
{
    (void)tu_index_make; /* cuda_test_util.h's attention helper: not used here */
    if (!nb_cuda_test_require_gpu()) return 77;
    const char *e = getenv("NB_SMALL_BENCH");
    bench = e && *e == '1';
    int n = 1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--bench")) bench = 1;
        else argv[n++] = argv[i];
    if (!tu_open()) return 1;
    int rc = nb_test_main(tests, NB_ARRAY_LEN(tests), n, argv);
    tu_close();
    return rc;
}
