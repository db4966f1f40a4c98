/* The fused launches of ops.h on the CPU against the ops they compose (bit-exact; also
 * norm_rope_set_n against norm_n, rope_n and set_rows_n in order), and the
 * concatenated attention projections of model/upload.c: one linear over the row-concatenated
 * weight, split by column views, equals the separate linears bit for bit (F32, BF16, NVFP4;
 * 1, 3 and 37 tokens), and moe_gate_route against linear then moe_route.
 * Run: ctest -R test_ops_fused (label unit). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/numerics.h"
#include "nbtest.h"
#include "ops/ops.h"

#define F32 NB_DTYPE_F32

static nb_ops_ctx *ctx;
static uint64_t rng = 88172645463325252ull;

static float frand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static uint8_t brand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint8_t)(rng >> 32);
}
static void fill(float *p, size_t n, float a)
{
    for (size_t i = 0; i < n; i++) p[i] = a * frand();
}

/* norm_n (rms, rms, layer, scale over column ranges of one buffer) == the four ops. */
static void test_norm_n(void)
{
    const int T = 3, W = 96 + 40 + 16 + 8, off[4] = {0, 96, 136, 152}, d[4] = {96, 32, 16, 8};
    float *a = malloc(T * W * 4), *b = malloc(T * W * 4), *wt = malloc(96 * 3 * 4);
    fill(a, T * W, 3.0f);
    fill(wt, 96 * 3, 1.0f);
    memcpy(b, a, T * W * 4);
    nb_tensor va[4], vb[4];
    for (int i = 0; i < 4; i++) {
        va[i] = nb_tensor_2d(a + off[i], F32, T, d[i]);
        vb[i] = nb_tensor_2d(b + off[i], F32, T, d[i]);
        va[i].stride[0] = vb[i].stride[0] = W;
    }
    nb_norm_part p[4] = {{NB_NORM_RMS, &va[0], &va[0], wt, NULL, 1e-6f, 1},
                         {NB_NORM_RMS, &va[1], &va[1], wt + 96, NULL, 1e-5f, 1},
                         {NB_NORM_LAYER, &va[2], &va[2], wt + 192, wt + 208, 1e-6f, 1},
                         {NB_NORM_SCALE, &va[3], &va[3], NULL, NULL, 0, 0.25f}};
    NB_CHECK_OK(nb_op_norm_n(ctx, 4, p));
    NB_CHECK_OK(nb_op_rmsnorm(ctx, &vb[0], wt, 1e-6f, &vb[0]));
    NB_CHECK_OK(nb_op_rmsnorm(ctx, &vb[1], wt + 96, 1e-5f, &vb[1]));
    NB_CHECK_OK(nb_op_layernorm(ctx, &vb[2], wt + 192, wt + 208, 1e-6f, &vb[2]));
    NB_CHECK_OK(nb_op_scale(ctx, &vb[3], 0.25f));
    NB_CHECK(memcmp(a, b, T * W * 4) == 0);
    /* a scale part that is not in place, and part counts out of range, are refused */
    nb_norm_part bad = {NB_NORM_SCALE, &va[3], &va[2], NULL, NULL, 0, 2.0f};
    NB_CHECK(nb_op_norm_n(ctx, 1, &bad) == NB_ERR_INVALID_ARG);
    NB_CHECK(nb_op_norm_n(ctx, 0, p) == NB_ERR_INVALID_ARG);
    NB_CHECK(nb_op_norm_n(ctx, NB_FUSED_MAX + 1, p) == NB_ERR_INVALID_ARG);
    free(a), free(b), free(wt);
}

/* rope_n over q_pe / k_pe / index q / index key views with two tables == four ropes. */
static void test_rope_n(void)
{
    const int T = 4, nh = 3, qk = 24, dim = 16, kw = 40, ih = 2, id = 32;
    nb_rope ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    ra.dim = rb.dim = dim;
    ra.interleave = 1;
    ra.attention_scaling = 1.3f;
    rb.attention_scaling = 1.0f;
    for (int i = 0; i < dim / 2; i++) {
        ra.inv_freq[i] = powf(10000.0f, -(float)(2 * i) / dim);
        rb.inv_freq[i] = powf(300.0f, -(float)(2 * i) / dim);
    }
    const int n = T * nh * qk + T * kw + T * ih * id + T * id;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    fill(a, n, 1.0f);
    memcpy(b, a, n * 4);
    int32_t pos[4] = {0, 5, 1000, 77};
    nb_tensor v[2][4];
    for (int g = 0; g < 2; g++) {
        float *x = g ? b : a;
        v[g][0] = nb_tensor_3d(x + 8, F32, T, nh, qk);
        v[g][0].shape[2] = dim;
        v[g][1] = nb_tensor_3d(x + T * nh * qk + 24, F32, T, 1, dim);
        v[g][1].stride[0] = kw;
        v[g][2] = nb_tensor_3d(x + T * nh * qk + T * kw, F32, T, ih, id);
        v[g][2].shape[2] = dim;
        v[g][3] = nb_tensor_3d(x + T * nh * qk + T * kw + T * ih * id, F32, T, 1, dim);
        v[g][3].stride[0] = id;
    }
    nb_tensor *xs[] = {&v[0][0], &v[0][1], &v[0][2], &v[0][3]};
    const nb_rope *tabs[] = {&ra, &ra, &rb, &rb};
    NB_CHECK_OK(nb_op_rope_n(ctx, 4, xs, pos, tabs));
    for (int i = 0; i < 4; i++) NB_CHECK_OK(nb_op_rope(ctx, &v[1][i], pos, tabs[i]));
    NB_CHECK(memcmp(a, b, n * 4) == 0);
    free(a), free(b);
}

/* set_rows_n of two parts == two set_rows. */
static void test_set_rows_n(void)
{
    const int T = 3, rows_n = 10, w0 = 12, w1 = 5, ld = 20;
    float *src = malloc(T * (w0 + w1) * 4), *pa = malloc(rows_n * ld * 4), *pb = malloc(rows_n * ld * 4);
    fill(src, T * (w0 + w1), 1.0f);
    fill(pa, rows_n * ld, 1.0f);
    memcpy(pb, pa, rows_n * ld * 4);
    int32_t rows[3] = {9, 0, 4};
    nb_tensor s0 = nb_tensor_2d(src, F32, T, w0), s1 = nb_tensor_2d(src + T * w0, F32, T, w1);
    nb_tensor d[2][2];
    for (int g = 0; g < 2; g++) {
        d[g][0] = nb_tensor_2d(g ? pb : pa, F32, rows_n, w0);
        d[g][1] = nb_tensor_2d((g ? pb : pa) + 14, F32, rows_n, w1);
        d[g][0].stride[0] = d[g][1].stride[0] = ld;
    }
    const nb_tensor *ss[] = {&s0, &s1};
    nb_tensor *dd[] = {&d[0][0], &d[0][1]};
    NB_CHECK_OK(nb_op_set_rows_n(ctx, 2, ss, rows, dd));
    NB_CHECK_OK(nb_op_set_rows(ctx, &s0, rows, &d[1][0]));
    NB_CHECK_OK(nb_op_set_rows(ctx, &s1, rows, &d[1][1]));
    NB_CHECK(memcmp(pa, pb, rows_n * ld * 4) == 0);
    free(src), free(pa), free(pb);
}

/* set_rows into BF16 rows: each value rounded to nearest even (a tie, a value that rounds up,
 * NaN, infinities), a mixed set_rows_n (a BF16 part beside a float32 part of one row), and a
 * row outside the pool refused before anything is written. */
static void test_set_rows_bf16(void)
{
    enum { T = 2, W = 8, N = 4, LD = 16 }; /* a row: 8 BF16 (16 bytes), then 4 float32 at byte 16 */
    float src[T * W] = {1.0f, -2.5f, 3.14159f, 65504.0f, 0, -0.0f, 1e-30f, 3e38f};
    uint32_t tie = 0x3f808000u, up = 0x3f808001u, tie_odd = 0x3f818000u; /* ties to even, rounds up */
    memcpy(&src[W + 0], &tie, 4), memcpy(&src[W + 1], &up, 4), memcpy(&src[W + 2], &tie_odd, 4);
    src[W + 3] = NAN, src[W + 4] = INFINITY, src[W + 5] = -INFINITY, src[W + 6] = 1.0f / 3, src[W + 7] = -7e-39f;
    unsigned char pool[N * LD * 2];
    memset(pool, 0x5a, sizeof pool);
    int32_t rows[T] = {3, 1};
    nb_tensor st = nb_tensor_2d(src, F32, T, W), dt = nb_tensor_2d(pool, NB_DTYPE_BF16, N, W);
    dt.stride[0] = LD; /* 32 bytes a row in BF16 elements */
    NB_CHECK_OK(nb_op_set_rows(ctx, &st, rows, &dt));
    const nb_bf16 *p16 = (const nb_bf16 *)pool;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < W; j++) {
            nb_bf16 got = p16[rows[t] * LD + j], want = nb_f32_to_bf16(src[t * W + j]);
            NB_CHECK_MSG(got == want, "token %d col %d: %04x, want %04x", t, j, got, want);
        }
    NB_CHECK(p16[1 * LD + 0] == 0x3f80 && p16[1 * LD + 1] == 0x3f81 && p16[1 * LD + 2] == 0x3f82);
    NB_CHECK((p16[1 * LD + 3] & 0x7f80) == 0x7f80 && (p16[1 * LD + 3] & 0x7f) != 0); /* NaN stays NaN */
    for (int b = 0; b < (int)sizeof pool; b++) /* rows 0 and 2 and each row's tail untouched */
        if (!((b / (LD * 2) == 1 || b / (LD * 2) == 3) && b % (LD * 2) < W * 2)) NB_CHECK(pool[b] == 0x5a);
    /* mixed parts: BF16 [0, 8) and float32 at byte 16 of the same rows */
    float src2[T * 4] = {1, 2, 3, 4, 5, 6, 7, 8};
    nb_tensor s2 = nb_tensor_2d(src2, F32, T, 4), d2 = nb_tensor_2d(pool + 16, F32, N, 4);
    d2.stride[0] = LD / 2;
    memset(pool, 0, sizeof pool);
    const nb_tensor *ss[] = {&st, &s2};
    nb_tensor *dd[] = {&dt, &d2};
    NB_CHECK_OK(nb_op_set_rows_n(ctx, 2, ss, rows, dd));
    for (int t = 0; t < T; t++) {
        NB_CHECK(p16[rows[t] * LD + 2] == nb_f32_to_bf16(src[t * W + 2]));
        NB_CHECK(memcmp(pool + rows[t] * LD * 2 + 16, src2 + 4 * t, 16) == 0);
    }
    memset(pool, 0x5a, sizeof pool);
    int32_t bad[T] = {0, N};
    NB_CHECK_STATUS(nb_op_set_rows(ctx, &st, bad, &dt), NB_ERR_INVALID_ARG);
    for (int b = 0; b < (int)sizeof pool; b++) NB_CHECK(pool[b] == 0x5a);
    nb_tensor d16 = nb_tensor_2d(pool, NB_DTYPE_F16, N, W);
    NB_CHECK_STATUS(nb_op_set_rows(ctx, &st, rows, &d16), NB_ERR_INVALID_ARG);
}

/* norm_rope_set_n over one row [a 24 | latent 16 | k_pe 8 | key 16]: norms of a, the latent
 * and the key, ropes of k_pe and of the key's first 8 (two tables), pool writes of
 * [latent | k_pe] and the key == norm_n, rope_n, set_rows_n in that order; counts refused. */
static void test_norm_rope_set_n(void)
{
    const int T = 3, W = 24 + 16 + 8 + 16, R = 7, PW = 24 + 16 + 2;
    nb_rope ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    ra.dim = rb.dim = 8;
    ra.interleave = 1;
    ra.attention_scaling = rb.attention_scaling = 1.0f;
    for (int i = 0; i < 4; i++) {
        ra.inv_freq[i] = powf(10000.0f, -(float)(2 * i) / 8);
        rb.inv_freq[i] = powf(500.0f, -(float)(2 * i) / 8);
    }
    float *x[2], *pool[2], *wt = malloc(64 * 4);
    x[0] = malloc(T * W * 4), x[1] = malloc(T * W * 4), pool[0] = malloc(R * PW * 4), pool[1] = malloc(R * PW * 4);
    fill(x[0], T * W, 2.0f);
    memcpy(x[1], x[0], T * W * 4);
    fill(pool[0], R * PW, 1.0f);
    memcpy(pool[1], pool[0], R * PW * 4);
    fill(wt, 64, 1.0f);
    int32_t pos[3] = {3, 90, 7}, rows[3] = {6, 1, 2};
    nb_tensor nv[2][3], rv[2][2], sv[2][2], dv[2][2];
    nb_norm_part np[2][3];
    for (int g = 0; g < 2; g++) {
        const int off[3] = {0, 24, 48}, d[3] = {24, 16, 16};
        for (int i = 0; i < 3; i++) {
            nv[g][i] = nb_tensor_2d(x[g] + off[i], F32, T, d[i]);
            nv[g][i].stride[0] = W;
        }
        np[g][0] = (nb_norm_part){NB_NORM_RMS, &nv[g][0], &nv[g][0], wt, NULL, 1e-6f, 1};
        np[g][1] = (nb_norm_part){NB_NORM_RMS, &nv[g][1], &nv[g][1], wt + 24, NULL, 1e-6f, 1};
        np[g][2] = (nb_norm_part){NB_NORM_LAYER, &nv[g][2], &nv[g][2], wt + 40, wt + 48, 1e-6f, 1};
        rv[g][0] = nb_tensor_3d(x[g] + 40, F32, T, 1, 8);
        rv[g][1] = nb_tensor_3d(x[g] + 48, F32, T, 1, 8);
        sv[g][0] = nb_tensor_2d(x[g] + 24, F32, T, 24);
        sv[g][1] = nb_tensor_2d(x[g] + 48, F32, T, 16);
        dv[g][0] = nb_tensor_2d(pool[g], F32, R, 24);
        dv[g][1] = nb_tensor_2d(pool[g] + 26, F32, R, 16);
        for (int i = 0; i < 2; i++) rv[g][i].stride[0] = sv[g][i].stride[0] = W, dv[g][i].stride[0] = PW;
    }
    const nb_rope *tabs[] = {&ra, &rb};
    nb_tensor *rx0[] = {&rv[0][0], &rv[0][1]}, *rx1[] = {&rv[1][0], &rv[1][1]};
    const nb_tensor *s0[] = {&sv[0][0], &sv[0][1]}, *s1[] = {&sv[1][0], &sv[1][1]};
    nb_tensor *d0[] = {&dv[0][0], &dv[0][1]}, *d1[] = {&dv[1][0], &dv[1][1]};
    const nb_norm_rope_set q = {3, np[0], 2, rx0, pos, tabs, 2, s0, rows, d0};
    NB_CHECK_OK(nb_op_norm_rope_set_n(ctx, &q));
    NB_CHECK_OK(nb_op_norm_n(ctx, 3, np[1]));
    NB_CHECK_OK(nb_op_rope_n(ctx, 2, rx1, pos, tabs));
    NB_CHECK_OK(nb_op_set_rows_n(ctx, 2, s1, rows, d1));
    NB_CHECK(memcmp(x[0], x[1], T * W * 4) == 0);
    NB_CHECK(memcmp(pool[0], pool[1], R * PW * 4) == 0);
    /* the write saw the rotated k_pe: pool row 6 holds token 0's roped k_pe */
    NB_CHECK(memcmp(pool[0] + 6 * PW + 16, x[0] + 40, 8 * 4) == 0);
    const nb_norm_rope_set none = {0, np[0], 0, rx0, pos, tabs, 0, s0, rows, d0};
    NB_CHECK(nb_op_norm_rope_set_n(ctx, &none) == NB_ERR_INVALID_ARG);
    const nb_norm_rope_set many = {NB_FUSED_MAX + 1, np[0], 0, rx0, pos, tabs, 0, s0, rows, d0};
    NB_CHECK(nb_op_norm_rope_set_n(ctx, &many) == NB_ERR_INVALID_ARG);
    free(x[0]), free(x[1]), free(pool[0]), free(pool[1]), free(wt);
}

/* A weight of n rows of format fmt over k in fresh memory (scale too for NVFP4). */
static nb_weight make_weight(nb_wfmt fmt, int64_t n, int64_t k, void **keep_data, void **keep_scale)
{
    nb_weight w = {.fmt = fmt, .n = n, .k = k, .global_scale = fmt == NB_WFMT_NVFP4 ? 0.02f : 1.0f};
    size_t rb = (size_t)nb_weight_row_bytes(fmt, k);
    uint8_t *d = malloc((size_t)n * rb);
    if (fmt == NB_WFMT_F32) {
        fill((float *)d, (size_t)(n * k), 1.0f);
    } else if (fmt == NB_WFMT_BF16) {
        for (int64_t i = 0; i < n * k; i++) ((nb_bf16 *)d)[i] = nb_f32_to_bf16(frand());
    } else {
        for (size_t i = 0; i < (size_t)n * rb; i++) d[i] = brand();
        uint8_t *sc = malloc((size_t)(n * k / 16));
        for (int64_t i = 0; i < n * k / 16; i++) sc[i] = (uint8_t)(0x28 + brand() % 0x20); /* E4M3 ~0.03..0.5 */
        w.scale = sc;
        *keep_scale = sc;
    }
    w.data = d;
    *keep_data = d;
    return w;
}

/* The attention input projections (q_a, kv_a, indexer wk and weights_proj shapes, scaled
 * down): one linear over their row concatenation, split by column views, against each. */
static void test_concat_linear(void)
{
    const int64_t k = 256, ns[4] = {64, 40, 16, 8}, N = 64 + 40 + 16 + 8;
    const nb_wfmt fmts[3] = {NB_WFMT_F32, NB_WFMT_BF16, NB_WFMT_NVFP4};
    const int Ts[3] = {1, 3, 37};
    for (int f = 0; f < 3; f++) {
        void *dk[4] = {0}, *sk[4] = {0};
        nb_weight parts[4];
        for (int i = 0; i < 4; i++) parts[i] = make_weight(fmts[f], ns[i], k, &dk[i], &sk[i]);
        const size_t rb = (size_t)nb_weight_row_bytes(fmts[f], k), sb = fmts[f] == NB_WFMT_NVFP4 ? (size_t)k / 16 : 0;
        uint8_t *cd = malloc((size_t)N * rb), *cs = sb ? malloc((size_t)N * sb) : NULL;
        int64_t r0 = 0;
        for (int i = 0; i < 4; i++) {
            memcpy(cd + r0 * rb, parts[i].data, (size_t)ns[i] * rb);
            if (sb) memcpy(cs + r0 * sb, parts[i].scale, (size_t)ns[i] * sb);
            r0 += ns[i];
        }
        nb_weight cat = parts[0];
        cat.n = N;
        cat.data = cd;
        cat.scale = cs;
        for (int ti = 0; ti < 3; ti++) {
            const int T = Ts[ti];
            float *x = malloc(T * k * 4), *yc = malloc(T * N * 4), *ys = malloc(T * 64 * 4);
            fill(x, (size_t)(T * k), 1.0f);
            nb_tensor xt = nb_tensor_2d(x, F32, T, k), yct = nb_tensor_2d(yc, F32, T, N);
            NB_CHECK_OK(nb_op_linear(ctx, &xt, &cat, &yct));
            int64_t c0 = 0;
            for (int i = 0; i < 4; i++) {
                nb_tensor yst = nb_tensor_2d(ys, F32, T, ns[i]);
                NB_CHECK_OK(nb_op_linear(ctx, &xt, &parts[i], &yst));
                int same = 1;
                double err = 0, mag = 0;
                for (int t = 0; t < T; t++) {
                    same &= memcmp(yc + t * N + c0, ys + t * ns[i], (size_t)ns[i] * 4) == 0;
                    for (int64_t j = 0; j < ns[i]; j++) {
                        err = fmax(err, fabs((double)yc[t * N + c0 + j] - ys[t * ns[i] + j]));
                        mag = fmax(mag, fabs((double)ys[t * ns[i] + j]));
                    }
                }
                /* Up to a few tokens OpenBLAS computes each output with the same dot product
                 * whatever the matrix width: bit-exact. For wider batches its kernels depend on
                 * the shape (a narrow part takes another kernel than the concatenation), so the
                 * sums are reordered: float32 rounding only. */
                if (T <= 3)
                    NB_CHECK_MSG(same, "fmt %d, T %d, part %d: the concatenated linear's columns differ", f, T, i);
                else
                    NB_CHECK_MSG(err <= 1e-5 * mag, "fmt %d, T %d, part %d: error %g of %g", f, T, i, err, mag);
                if (!same && T > 3) fprintf(stderr, "  fmt %d, T %d, part %d: not bit-exact (max error %.3g of %.3g)\n", f, T, i, err, mag);
                c0 += ns[i];
            }
            free(x), free(yc), free(ys);
        }
        for (int i = 0; i < 4; i++) free(dk[i]), free(sk[i]);
        free(cd), free(cs);
    }
}

/* moe_gate_route == linear then moe_route (bit-exact), sigmoid with a correction bias and
 * softmax with groups; shapes the op refuses. */
static void test_moe_gate_route(void)
{
    const int T = 5, H = 64, E = 32, K = 4;
    void *dk = NULL, *sk = NULL;
    nb_weight g = make_weight(NB_WFMT_BF16, E, H, &dk, &sk);
    float *x = malloc(T * H * 4), *bias = malloc(E * 4), *la = malloc(T * E * 4), *lb = malloc(T * E * 4);
    float *wa = malloc(T * K * 4), *wb = malloc(T * K * 4);
    int32_t *ia = malloc(T * K * 4), *ib = malloc(T * K * 4);
    fill(x, T * H, 2.0f);
    fill(bias, E, 0.1f);
    for (int v = 0; v < 2; v++) {
        nb_router_params p = {E, K, v ? NB_ROUTER_SOFTMAX : NB_ROUTER_SIGMOID, v ? NB_ROUTER_GROUP_TOP2 : NB_ROUTER_GREEDY,
                              v ? 4 : 1, v ? 2 : 1, v ? NULL : bias, 1, 2.5f};
        nb_tensor xt = nb_tensor_2d(x, F32, T, H), lat = nb_tensor_2d(la, F32, T, E), lbt = nb_tensor_2d(lb, F32, T, E);
        nb_tensor wat = nb_tensor_2d(wa, F32, T, K), wbt = nb_tensor_2d(wb, F32, T, K);
        nb_tensor iat = nb_tensor_2d(ia, NB_DTYPE_I32, T, K), ibt = nb_tensor_2d(ib, NB_DTYPE_I32, T, K);
        NB_CHECK_OK(nb_op_moe_gate_route(ctx, &xt, &g, &lat, &p, &iat, &wat));
        NB_CHECK_OK(nb_op_linear(ctx, &xt, &g, &lbt));
        NB_CHECK_OK(nb_op_moe_route(ctx, &lbt, &p, &ibt, &wbt));
        NB_CHECK(memcmp(la, lb, T * E * 4) == 0);
        NB_CHECK(memcmp(ia, ib, T * K * 4) == 0);
        NB_CHECK(memcmp(wa, wb, T * K * 4) == 0);
        /* a gate of another number of experts, or logits of another shape, are refused */
        nb_router_params bad = p;
        bad.n_experts = E / 2;
        NB_CHECK(nb_op_moe_gate_route(ctx, &xt, &g, &lat, &bad, &iat, &wat) == NB_ERR_INVALID_ARG);
        nb_tensor short_l = nb_tensor_2d(la, F32, T - 1, E);
        NB_CHECK(nb_op_moe_gate_route(ctx, &xt, &g, &short_l, &p, &iat, &wat) == NB_ERR_INVALID_ARG);
    }
    free(dk), free(sk), free(x), free(bias), free(la), free(lb), free(wa), free(wb), free(ia), free(ib);
}

static const nb_test tests[] = {
    {"moe_gate_route", test_moe_gate_route},
    {"norm_n", test_norm_n},
    {"rope_n", test_rope_n},
    {"set_rows_n", test_set_rows_n},
    {"set_rows_bf16", test_set_rows_bf16},
    {"norm_rope_set_n", test_norm_rope_set_n},
    {"concat_linear", test_concat_linear},
};

int main(int argc, char **argv)
{
    if (nb_ops_ctx_new_cpu(2, &ctx) != NB_OK) return 1;
    int rc = nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
    nb_ops_ctx_free(ctx);
    return rc;
}
