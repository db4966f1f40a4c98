/* The registry test of the CUDA backend: every op of ops.h runs through nb_op_* on a CUDA
 * context and on a CPU context with the same fresh random inputs (CUDA outputs poisoned with
 * NaN first), and the results are compared by normalized error (tolerances in
 * cuda_test_util.h), exactly for integer outputs (top-k ids; DSA selections modulo measured
 * near-ties). Filter by op: test_cuda_vs_cpu mla. Run on the GPU machine: ctest -L gpu
 * (exits 77 without a GPU). The linear and MLP cases are in test_cuda_linear.c. */
#include <cuda_runtime.h>

#include "base/clock.h"
#include "cuda_test_util.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/device.h"
#include "ops/cuda/graph.h"
#include "ops/cuda/mla.h"

#define F32 NB_DTYPE_F32

/* ---- rows: embedding, norms, add, scale, set/get rows ------------------------------------ */

static void test_embedding(void)
{
    for (int f = 0; f < 4; f++) {
        tu_seed(100 + f);
        tu_weight w;
        tu_weight_make(&w, (nb_wfmt)f, 300, 256, 1.0f, 0);
        int32_t ids[7] = {0, 299, 5, 5, 123, 42, 7};
        float *a = malloc(7 * 256 * 4), *b = malloc(7 * 256 * 4);
        nb_tensor ho = nb_tensor_2d(a, F32, 7, 256), dout = ho;
        dout.data = tu_poisoned(7 * 256 * 4);
        dout.device = NB_DEVICE_CUDA;
        NB_CHECK_OK(nb_op_embedding(tu_cpu, &w.h, ids, 7, &ho));
        NB_CHECK_OK(nb_op_embedding(tu_gpu, &w.d, tu_up(ids, sizeof ids), 7, &dout));
        tu_down(&dout, b);
        char name[64];
        snprintf(name, sizeof name, "embedding %s [300, 256] x 7 ids", tu_fmt_name((nb_wfmt)f));
        tu_compare(name, a, b, 7 * 256, NB_TOL_F32);
        free(a);
        free(b);
        tu_weight_free(&w);
        tu_free_all();
    }
}

static void norm_case(int rows, int d, int which)
{
    /* which: 0 rmsnorm, 1 add_rmsnorm, 2 layernorm (bias), 3 layernorm (no bias), 4 add, 5 scale */
    size_t ld = (size_t)d + 8; /* a row stride wider than the row */
    float *x = malloc(rows * ld * 4), *res = malloc(rows * ld * 4), *wt = malloc(d * 4), *bias = malloc(d * 4);
    float *o = malloc(rows * ld * 4), *b = malloc(rows * ld * 4), *rb = malloc(rows * ld * 4);
    tu_fill(x, rows * ld, 3.0f);
    tu_fill(res, rows * ld, 2.0f);
    tu_fill(wt, d, 1.0f);
    tu_fill(bias, d, 1.0f);
    memset(o, 0, rows * ld * 4);
    nb_tensor hx = nb_tensor_2d(x, F32, rows, d), hr = nb_tensor_2d(res, F32, rows, d), ho = nb_tensor_2d(o, F32, rows, d);
    hx.stride[0] = hr.stride[0] = ho.stride[0] = (int64_t)ld;
    nb_tensor dx = tu_twin(&hx), dr = tu_twin(&hr), dout = ho;
    dout.data = tu_poisoned(tu_span(&ho));
    dout.device = NB_DEVICE_CUDA;
    float *dw = tu_up(wt, d * 4), *db = tu_up(bias, d * 4);
    const char *names[] = {"rmsnorm", "add_rmsnorm", "layernorm+bias", "layernorm", "add", "scale"};
    switch (which) {
    case 0:
        NB_CHECK_OK(nb_op_rmsnorm(tu_cpu, &hx, wt, 1e-6f, &ho));
        NB_CHECK_OK(nb_op_rmsnorm(tu_gpu, &dx, dw, 1e-6f, &dout));
        break;
    case 1:
        NB_CHECK_OK(nb_op_add_rmsnorm(tu_cpu, &hx, &hr, wt, 1e-5f, &ho));
        NB_CHECK_OK(nb_op_add_rmsnorm(tu_gpu, &dx, &dr, dw, 1e-5f, &dout));
        break;
    case 2:
    case 3:
        NB_CHECK_OK(nb_op_layernorm(tu_cpu, &hx, wt, which == 2 ? bias : NULL, 1e-6f, &ho));
        NB_CHECK_OK(nb_op_layernorm(tu_gpu, &dx, dw, which == 2 ? db : NULL, 1e-6f, &dout));
        break;
    case 4:
        NB_CHECK_OK(nb_op_add(tu_cpu, &hx, &hr));
        NB_CHECK_OK(nb_op_add(tu_gpu, &dx, &dr));
        break;
    case 5:
        NB_CHECK_OK(nb_op_scale(tu_cpu, &hr, 0.37f));
        NB_CHECK_OK(nb_op_scale(tu_gpu, &dr, 0.37f));
        break;
    }
    char name[64];
    snprintf(name, sizeof name, "%s [%d, %d] ld %zu", names[which], rows, d, ld);
    if (which <= 3) {
        tu_down(&dout, b);
        for (int r = 0; r < rows; r++) tu_compare(r == 0 ? name : "  (next row)", o + r * ld, b + r * ld, d, NB_TOL_F32);
    }
    if (which == 1 || which >= 4) {
        tu_down(&dr, rb);
        for (int r = 0; r < rows; r++) tu_compare(which == 1 ? "  residual" : name, res + r * ld, rb + r * ld, d, NB_TOL_F32);
    }
    free(x), free(res), free(wt), free(bias), free(o), free(b), free(rb);
    tu_free_all();
}

static void test_norms(void)
{
    tu_seed(7);
    for (int which = 0; which < 6; which++) {
        norm_case(3, 512, which);
        norm_case(2, 6144, which);
        norm_case(3, 37, which);   /* rows not a multiple of 4 floats: the global-memory path */
        norm_case(1, 40000, which); /* wider than the registers hold: the same path */
    }
}

static void test_rows(void)
{
    tu_seed(8);
    const int T = 5, w = 96, n = 40, ldp = 128;
    float *src = malloc(T * w * 4), *pool = malloc(n * ldp * 4), *pool2 = malloc(n * ldp * 4);
    tu_fill(src, T * w, 1.0f);
    tu_fill(pool, n * ldp, 1.0f);
    int32_t rows[5] = {3, 39, 0, 17, 22};
    nb_tensor hs = nb_tensor_2d(src, F32, T, w), hp = nb_tensor_2d(pool + 16, F32, n, w);
    hp.stride[0] = ldp;
    nb_tensor ds = tu_twin(&hs);
    float *dpool = tu_up(pool, n * ldp * 4);
    nb_tensor dp = hp;
    dp.data = dpool + 16;
    dp.device = NB_DEVICE_CUDA;
    int32_t *drows = tu_up(rows, sizeof rows);
    NB_CHECK_OK(nb_op_set_rows(tu_cpu, &hs, rows, &hp));
    NB_CHECK_OK(nb_op_set_rows(tu_gpu, &ds, drows, &dp));
    NB_CHECK_OK(nb_ops_download(tu_gpu, pool2, dpool, n * ldp * 4));
    tu_compare("set_rows 5 rows of 96 into a pool view", pool, pool2, n * ldp, 0.0);
    float *g = malloc(T * w * 4), *g2 = malloc(T * w * 4);
    nb_tensor hg = nb_tensor_2d(g, F32, T, w), dg = hg;
    dg.data = tu_poisoned(T * w * 4);
    dg.device = NB_DEVICE_CUDA;
    NB_CHECK_OK(nb_op_get_rows(tu_cpu, &hp, rows, &hg));
    NB_CHECK_OK(nb_op_get_rows(tu_gpu, &dp, drows, &dg));
    tu_down(&dg, g2);
    tu_compare("get_rows 5 rows of 96", g, g2, T * w, 0.0);
    free(src), free(pool), free(pool2), free(g), free(g2);
    tu_free_all();
}

/* ---- rope ----------------------------------------------------------------------------- */

static void test_rope(void)
{
    tu_seed(9);
    for (int il = 0; il < 2; il++) {
        for (int yarn = 0; yarn < 2; yarn++) {
            const int T = 4, nh = 3, qk = 48, off = 16, dim = 32;
            nb_rope rope;
            memset(&rope, 0, sizeof rope);
            rope.dim = dim;
            rope.interleave = il;
            rope.attention_scaling = yarn ? 1.2f : 1.0f;
            for (int i = 0; i < dim / 2; i++) rope.inv_freq[i] = powf(10000.0f, -(float)(2 * i) / dim) * (yarn && i > 4 ? 0.25f : 1.0f);
            float *x = malloc(T * nh * qk * 4), *b = malloc(T * nh * qk * 4);
            tu_fill(x, T * nh * qk, 1.0f);
            int32_t pos[4] = {0, 1, 4095, 77};
            nb_tensor hx = nb_tensor_3d(x + off, F32, T, nh, qk); /* the rope part of a [T, nh, qk] view */
            hx.shape[2] = dim;
            hx.stride[0] = nh * qk;
            hx.stride[1] = qk;
            float *dx = tu_up(x, T * nh * qk * 4);
            nb_tensor dt = hx;
            dt.data = dx + off;
            dt.device = NB_DEVICE_CUDA;
            NB_CHECK_OK(nb_op_rope(tu_cpu, &hx, pos, &rope));
            NB_CHECK_OK(nb_op_rope(tu_gpu, &dt, tu_up(pos, sizeof pos), &rope));
            NB_CHECK_OK(nb_ops_download(tu_gpu, b, dx, T * nh * qk * 4));
            char name[64];
            snprintf(name, sizeof name, "rope %s%s, strided view", il ? "interleaved" : "half-split", yarn ? ", yarn-like" : "");
            tu_compare(name, x, b, T * nh * qk, NB_TOL_F32);
            free(x), free(b);
            tu_free_all();
        }
    }
}

/* ---- fused launches (ops.h): one kernel against the CPU's composition -------------------- */

/* The MLA layer's use: q_pe, k_pe (model table), index q and key (indexer table) in one launch. */
static void rope_n_case(int heads_form)
{
    nb_cuda_rope_force_heads(heads_form); /* cuda_ops.h: per head, per 8 heads, by token count */
    tu_seed(19);
    const int T = 5, nh = 4, qk = 48, dim = 32, kw = 80, ih = 3, id = 64;
    nb_rope ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    ra.dim = rb.dim = dim;
    ra.interleave = 1;
    ra.attention_scaling = 1.1f;
    rb.attention_scaling = 1.0f;
    for (int i = 0; i < dim / 2; i++) {
        ra.inv_freq[i] = powf(10000.0f, -(float)(2 * i) / dim);
        rb.inv_freq[i] = powf(500.0f, -(float)(2 * i) / dim);
    }
    const size_t nq = (size_t)T * nh * qk, nk = (size_t)T * kw, nqi = (size_t)T * ih * id, nki = (size_t)T * id;
    float *h = malloc((nq + nk + nqi + nki) * 4), *b = malloc((nq + nk + nqi + nki) * 4);
    tu_fill(h, nq + nk + nqi + nki, 1.0f);
    float *dh = tu_up(h, (nq + nk + nqi + nki) * 4);
    int32_t pos[5] = {0, 1, 4095, 77, 300};
    nb_tensor v[2][4];
    for (int g = 0; g < 2; g++) {
        float *base = g ? dh : h;
        v[g][0] = nb_tensor_3d(base + 16, F32, T, nh, qk);
        v[g][0].shape[2] = dim;
        v[g][1] = nb_tensor_3d(base + nq + 48, F32, T, 1, dim);
        v[g][1].stride[0] = kw;
        v[g][2] = nb_tensor_3d(base + nq + nk, F32, T, ih, id);
        v[g][2].shape[2] = dim;
        v[g][3] = nb_tensor_3d(base + nq + nk + nqi, F32, T, 1, dim);
        v[g][3].stride[0] = id;
        for (int i = 0; i < 4; i++) v[g][i].device = g ? NB_DEVICE_CUDA : NB_DEVICE_CPU;
    }
    nb_tensor *hx[] = {&v[0][0], &v[0][1], &v[0][2], &v[0][3]}, *dx[] = {&v[1][0], &v[1][1], &v[1][2], &v[1][3]};
    const nb_rope *tabs[] = {&ra, &ra, &rb, &rb};
    NB_CHECK_OK(nb_op_rope_n(tu_cpu, 4, hx, pos, tabs));
    NB_CHECK_OK(nb_op_rope_n(tu_gpu, 4, dx, tu_up(pos, sizeof pos), tabs));
    NB_CHECK_OK(nb_ops_download(tu_gpu, b, dh, (nq + nk + nqi + nki) * 4));
    tu_compare("rope_n: q_pe, k_pe, index q, index key in one launch", h, b, nq + nk + nqi + nki, NB_TOL_F32);
    const nb_rope *three[] = {&ra, &rb, &ra};
    nb_rope rc = ra;
    three[2] = &rc;
    NB_CHECK(nb_op_rope_n(tu_gpu, 3, dx, tu_up(pos, sizeof pos), three) == NB_ERR_UNSUPPORTED);
    free(h), free(b);
    tu_free_all();
    nb_cuda_rope_force_heads(-1);
}

static void test_rope_n(void)
{
    for (int f = -1; f < 2; f++) rope_n_case(f);
}

/* The MLA layer's norms over one row of the four projections [q_a | kv_a | wk | weights]:
 * rmsnorm, rmsnorm of the latent (k_pe left alone), layernorm, scale; then the same at an
 * odd offset (unaligned rows: the global-memory path). */
static void test_norm_n(void)
{
    tu_seed(20);
    for (int odd = 0; odd < 2; odd++) {
        const int T = 3, W = 2048 + 576 + 128 + 32, ld = W + 4;
        const int off[4] = {0, 2048, 2624, 2752}, d[4] = {2048, 512, 128, 32};
        const size_t n = (size_t)T * ld + 4;
        float *h = malloc(n * 4), *b = malloc(n * 4), *wt = malloc(2048 * 4 * 3);
        tu_fill(h, n, 2.0f);
        tu_fill(wt, 2048 * 3, 1.0f);
        float *dh = tu_up(h, n * 4), *dw = tu_up(wt, 2048 * 4 * 3);
        nb_tensor v[2][4];
        nb_norm_part parts[2][4];
        for (int g = 0; g < 2; g++) {
            float *base = (g ? dh : h) + odd, *w = g ? dw : wt;
            for (int i = 0; i < 4; i++) {
                v[g][i] = nb_tensor_2d(base + off[i], F32, T, d[i]);
                v[g][i].stride[0] = ld;
                v[g][i].device = g ? NB_DEVICE_CUDA : NB_DEVICE_CPU;
            }
            parts[g][0] = (nb_norm_part){NB_NORM_RMS, &v[g][0], &v[g][0], w, NULL, 1e-6f, 1.0f};
            parts[g][1] = (nb_norm_part){NB_NORM_RMS, &v[g][1], &v[g][1], w + 2048, NULL, 1e-6f, 1.0f};
            parts[g][2] = (nb_norm_part){NB_NORM_LAYER, &v[g][2], &v[g][2], w + 4096, w + 4096 + 512, 1e-6f, 1.0f};
            parts[g][3] = (nb_norm_part){NB_NORM_SCALE, &v[g][3], &v[g][3], NULL, NULL, 0.0f, 0.1767767f};
        }
        NB_CHECK_OK(nb_op_norm_n(tu_cpu, 4, parts[0]));
        NB_CHECK_OK(nb_op_norm_n(tu_gpu, 4, parts[1]));
        NB_CHECK_OK(nb_ops_download(tu_gpu, b, dh, n * 4));
        tu_compare(odd ? "norm_n: rms, rms, layer, scale parts of one row, unaligned" : "norm_n: rms, rms, layer, scale parts of one row",
                   h, b, n, NB_TOL_F32);
        free(h), free(b), free(wt);
        tu_free_all();
    }
}

static void test_set_rows_n(void)
{
    tu_seed(21);
    const int T = 4, n = 30, w0 = 576, w1 = 128, ldp = 800;
    float *src = malloc(T * (w0 + w1) * 4), *pool = malloc(n * ldp * 4), *pool2 = malloc(n * ldp * 4);
    tu_fill(src, T * (w0 + w1), 1.0f);
    tu_fill(pool, n * ldp, 1.0f);
    int32_t rows[4] = {3, 29, 0, 17};
    float *ds = tu_up(src, T * (w0 + w1) * 4), *dpool = tu_up(pool, n * ldp * 4);
    nb_tensor s[2][2], dd[2][2];
    for (int g = 0; g < 2; g++) {
        float *sb = g ? ds : src, *pb = g ? dpool : pool;
        s[g][0] = nb_tensor_2d(sb, F32, T, w0);
        s[g][1] = nb_tensor_2d(sb + T * w0, F32, T, w1);
        dd[g][0] = nb_tensor_2d(pb, F32, n, w0);
        dd[g][1] = nb_tensor_2d(pb + 640, F32, n, w1);
        for (int i = 0; i < 2; i++) {
            dd[g][i].stride[0] = ldp;
            s[g][i].device = dd[g][i].device = g ? NB_DEVICE_CUDA : NB_DEVICE_CPU;
        }
    }
    const nb_tensor *hs[] = {&s[0][0], &s[0][1]}, *dsv[] = {&s[1][0], &s[1][1]};
    nb_tensor *hd[] = {&dd[0][0], &dd[0][1]}, *ddv[] = {&dd[1][0], &dd[1][1]};
    NB_CHECK_OK(nb_op_set_rows_n(tu_cpu, 2, hs, rows, hd));
    NB_CHECK_OK(nb_op_set_rows_n(tu_gpu, 2, dsv, tu_up(rows, sizeof rows), ddv));
    NB_CHECK_OK(nb_ops_download(tu_gpu, pool2, dpool, n * ldp * 4));
    tu_compare("set_rows_n: latent and index key rows into two pool views", pool, pool2, n * ldp, 0.0);
    free(src), free(pool), free(pool2);
    tu_free_all();
}

/* ---- set rows into BF16 rows (ops.h nb_op_set_rows: the KV pool's --kv-cache-dtype bf16) ---- */

/* Host float with these bits. */
static float rb_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* T rows of src ([T, ld_src] floats; row 0 of special values: NaNs, a value that rounds up,
 * ties to even both ways, one that rounds to infinity, -0, infinity, a subnormal). */
static void rb_fill(float *src, int T, int w)
{
    tu_fill(src, (size_t)T * w, 3.0f);
    const uint32_t sp[] = {0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x3f808001u, 0x3f808000u, 0x3f818000u,
                           0xbf818000u, 0x7f7fffffu, 0x80000000u, 0x7f800000u, 0x00012345u, 0x3f80ffffu};
    for (int i = 0; i < (int)NB_ARRAY_LEN(sp) && i < w; i++) src[i] = rb_bits(sp[i]);
}

/* A pool image against the expected one, every byte (untouched rows and bytes keep their
 * pattern). */
static void rb_check(const char *what, const uint8_t *want, const uint8_t *got, size_t bytes)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < bytes; i++)
        if (want[i] != got[i] && !bad++) first = i;
    fprintf(stderr, "    %s: %zu bytes differ of %zu%s\n", what, bad, bytes, bad ? "  <-- FAIL" : "");
    if (bad) fprintf(stderr, "      first at byte %zu: want 0x%02x got 0x%02x\n", first, want[first], got[first]);
    NB_CHECK(bad == 0);
}

/* The expected image of writing src rows t (width w, F32) to pool rows rows[t] at byte offset
 * off of each pitch-byte row, as BF16 (bf16) or F32. */
static void rb_expect(uint8_t *img, size_t pitch, size_t off, const float *src, int64_t lds, const int32_t *rows, int T,
                      int w, int bf16)
{
    for (int t = 0; t < T; t++) {
        uint8_t *d = img + (size_t)rows[t] * pitch + off;
        for (int j = 0; j < w; j++) {
            if (bf16) {
                const nb_bf16 h = nb_f32_to_bf16(src[t * lds + j]);
                memcpy(d + 2 * (size_t)j, &h, 2);
            } else {
                memcpy(d + 4 * (size_t)j, &src[t * lds + j], 4);
            }
        }
    }
}

/* set_rows, set_rows_n (a BF16 part beside an F32 part: the pool's latent + k_pe and its index
 * keys) and norm_rope_set_n's writes (fused kernel and separate launches) into BF16 rows,
 * bit for bit against nb_f32_to_bf16 on the host; aligned rows (4 values per store in the
 * fused kernel) and rows of odd BF16 offsets. */
static void test_rows_bf16(void)
{
    tu_seed(23);
    const int T = 5, w0 = 576, w1 = 128, n = 40;
    const size_t pitch = 1792; /* bytes: 576 BF16 + 128 F32 + 128 bytes of padding */
    int32_t rows[5] = {3, 39, 0, 17, 22};
    float *src = malloc((size_t)T * (w0 + w1) * 4);
    uint8_t *img = malloc(n * pitch), *want = malloc(n * pitch), *got = malloc(n * pitch);
    rb_fill(src, T, w0 + w1);
    for (size_t i = 0; i < n * pitch; i++) img[i] = (uint8_t)(tu_u32() >> 24);
    float *dsrc = tu_up(src, (size_t)T * (w0 + w1) * 4);
    int32_t *drows = tu_up(rows, sizeof rows);
    for (int odd = 0; odd < 2; odd++) {
        /* odd: the BF16 part 2 bytes into the row (no 8-byte stores) */
        const size_t off0 = odd ? 2 : 0, off1 = 1152 + 64;
        /* set_rows: one BF16 part */
        uint8_t *dpool = tu_up(img, n * pitch);
        nb_tensor s0 = nb_tensor_2d(dsrc, F32, T, w0), d0 = nb_tensor_2d(dpool + off0, NB_DTYPE_BF16, n, w0);
        s0.stride[0] = w0 + w1;
        d0.stride[0] = (int64_t)pitch / 2;
        s0.device = d0.device = NB_DEVICE_CUDA;
        NB_CHECK_OK(nb_op_set_rows(tu_gpu, &s0, drows, &d0));
        NB_CHECK_OK(nb_ops_download(tu_gpu, got, dpool, n * pitch));
        memcpy(want, img, n * pitch);
        rb_expect(want, pitch, off0, src, w0 + w1, rows, T, w0, 1);
        rb_check(odd ? "set_rows into BF16 rows (odd offset)" : "set_rows into BF16 rows", want, got, n * pitch);
        /* set_rows_n and norm_rope_set_n: BF16 latent part + F32 index-key part */
        nb_tensor s1 = nb_tensor_2d(dsrc + w0, F32, T, w1), d1 = nb_tensor_2d(dpool + off1, F32, n, w1);
        s1.stride[0] = w0 + w1;
        d1.stride[0] = (int64_t)pitch / 4;
        s1.device = d1.device = NB_DEVICE_CUDA;
        const nb_tensor *sv[2] = {&s0, &s1};
        nb_tensor *dv[2] = {&d0, &d1};
        memcpy(want, img, n * pitch);
        rb_expect(want, pitch, off0, src, w0 + w1, rows, T, w0, 1);
        rb_expect(want, pitch, off1, src + w0, w0 + w1, rows, T, w1, 0);
        for (int form = 0; form < 3; form++) { /* set_rows_n, norm_rope_set_n fused, separate */
            NB_CHECK_OK(nb_ops_upload(tu_gpu, dpool, img, n * pitch));
            if (form == 0) {
                NB_CHECK_OK(nb_op_set_rows_n(tu_gpu, 2, sv, drows, dv));
            } else {
                nb_cuda_norm_rope_set_force(form == 1);
                const nb_norm_rope_set q = {0, NULL, 0, NULL, NULL, NULL, 2, sv, drows, dv};
                NB_CHECK_OK(nb_op_norm_rope_set_n(tu_gpu, &q));
                nb_cuda_norm_rope_set_force(-1);
            }
            NB_CHECK_OK(nb_ops_download(tu_gpu, got, dpool, n * pitch));
            char name[128];
            snprintf(name, sizeof name, "%s: BF16 latent part + F32 key part%s",
                     form == 0 ? "set_rows_n" : form == 1 ? "norm_rope_set_n (fused)" : "norm_rope_set_n (separate)",
                     odd ? ", odd BF16 offset" : "");
            rb_check(name, want, got, n * pitch);
        }
        /* the CPU op on the same image, where it takes BF16 rows (ops.h) */
        uint8_t *cpu = malloc(n * pitch);
        memcpy(cpu, img, n * pitch);
        nb_tensor hs0 = s0, hs1 = s1, hd0 = d0, hd1 = d1;
        hs0.data = src, hs1.data = src + w0, hd0.data = cpu + off0, hd1.data = cpu + off1;
        hs0.device = hs1.device = hd0.device = hd1.device = NB_DEVICE_CPU;
        const nb_tensor *hsv[2] = {&hs0, &hs1};
        nb_tensor *hdv[2] = {&hd0, &hd1};
        NB_CHECK_OK(nb_op_set_rows_n(tu_cpu, 2, hsv, rows, hdv));
        rb_check("the CPU op's set_rows_n, same image", want, cpu, n * pitch);
        free(cpu);
    }
    free(src), free(img), free(want), free(got);
    tu_free_all();
}

/* ---- attention ------------------------------------------------------------------------ */

/* A random selection per token: up to `stride` distinct positions <= pos. */
static void make_sel(const tu_index *ix, int stride, int32_t *sp, int32_t *sc)
{
    for (int i = 0; i < ix->T; i++) {
        int n = ix->pos[i] + 1, m = n < stride ? n : stride;
        int c = 0;
        for (int p = 0; p < n && c < m; p++)
            if ((int)(tu_u32() % (uint32_t)(n - p)) < m - c) sp[i * stride + c++] = p;
        sc[i] = c;
    }
}

static void gqa_case(int sparse)
{
    const int nh = 8, nkv = 2, hd = 128, vd = 128, rows = 600, rw = 2 * nkv * hd + 5;
    int n_new[3] = {1, 7, 1}, n_past[3] = {40, 0, 300};
    tu_index ix;
    tu_index_make(&ix, 3, n_new, n_past, rows);
    const int T = ix.T;
    float *pool = malloc((size_t)rows * rw * 4), *q = malloc(T * nh * hd * 4);
    float *o = malloc(T * nh * vd * 4), *ob = malloc(T * nh * vd * 4);
    tu_fill(pool, (size_t)rows * rw, 1.0f);
    tu_fill(q, T * nh * hd, 1.0f);
    float *dpool = tu_up(pool, (size_t)rows * rw * 4);
    nb_tensor hq = nb_tensor_3d(q, F32, T, nh, hd), ho = nb_tensor_3d(o, F32, T, nh, vd);
    nb_tensor hk = nb_tensor_3d(pool + 3, F32, rows, nkv, hd), hv = nb_tensor_3d(pool + 3 + nkv * hd, F32, rows, nkv, vd);
    hk.stride[0] = hv.stride[0] = rw;
    nb_tensor dq = tu_twin(&hq), dk = hk, dv = hv, dout = ho;
    dk.data = dpool + 3;
    dv.data = dpool + 3 + nkv * hd;
    dk.device = dv.device = NB_DEVICE_CUDA;
    dout.data = tu_poisoned(T * nh * vd * 4);
    dout.device = NB_DEVICE_CUDA;
    int32_t sp[16 * 64], sc[16];
    nb_attn_select hs = {sp, sc, 64}, ds;
    if (sparse) {
        make_sel(&ix, 64, sp, sc);
        ds = (nb_attn_select){tu_up(sp, sizeof sp), tu_up(sc, sizeof sc), 64};
    }
    NB_CHECK_OK(nb_op_attention(tu_cpu, &hq, &hk, &hv, &ix.h, sparse ? &hs : NULL, 0.088f, &ho));
    NB_CHECK_OK(nb_op_attention(tu_gpu, &dq, &dk, &dv, &ix.d, sparse ? &ds : NULL, 0.088f, &dout));
    tu_down(&dout, ob);
    tu_compare(sparse ? "attention gqa 8/2 heads x 128, 3 seqs, sparse" : "attention gqa 8/2 heads x 128, 3 seqs, causal", o,
               ob, T * nh * vd, NB_TOL_F32);
    free(pool), free(q), free(o), free(ob);
    tu_free_all();
}

static void test_attention(void)
{
    tu_seed(13);
    gqa_case(0);
    gqa_case(1);
}

/* One MLA call on both backends. Batches: 0: two sequences, 6 tokens (the decode-sized batch:
 * KV splits merged); 1: three sequences, 141 tokens (one block per token and head group);
 * 2: three single-token sequences up to position 300 (decode); 3: 32 tokens (16 + 15 new
 * after 0 and 40, one decode at 300: the small path's largest bucket); 4: one decode token at
 * position 500. reg: kv_b registered first (resident form) instead of prepared per call.
 * BF16 and NVFP4 kv_b run the BF16 GEMMs with two-term activations (NB_TOL_LT_BF16W), F32 and
 * FP8 the F32 GEMMs (NB_TOL_F32); the small path (mla.h) is float32 with the weights taken
 * exactly, so NB_TOL_F32 for every format. */
static int g_pool16; /* mla_case_ex: BF16 pools on the GPU (test_mla_bf16) */

static void mla_case_ex(nb_mla_mode mode, int sparse, nb_wfmt kvfmt, nb_mla_dims d, int batch, int reg)
{
    /* registered cases use 16-byte aligned pool rows (the kernel's 16-byte copies), the
     * others rows of an odd width (4-byte copies) */
    const int rows = 1000, rw = d.kv_lora_rank + d.qk_rope + (reg ? 8 : 7), qk = d.qk_nope + d.qk_rope;
    int n_new[5][3] = {{5, 1, 0}, {100, 40, 1}, {1, 1, 1}, {16, 15, 1}, {1, 0, 0}},
        n_past[5][3] = {{3, 200, 0}, {0, 60, 700}, {0, 37, 300}, {0, 40, 300}, {500, 0, 0}};
    const int nseq = batch == 0 ? 2 : batch == 4 ? 1 : 3;
    tu_index ix;
    tu_index_make(&ix, nseq, n_new[batch], n_past[batch], rows);
    const int T = ix.T;
    tu_weight kvb;
    tu_weight_make(&kvb, kvfmt, (int64_t)d.n_heads * (d.qk_nope + d.v_dim), d.kv_lora_rank, 0.05f, 0);
    const size_t qn = (size_t)T * d.n_heads * qk, on = (size_t)T * d.n_heads * d.v_dim;
    float *pool = malloc((size_t)rows * rw * 4), *q = malloc(qn * 4), *o = malloc(on * 4), *ob = malloc(on * 4);
    tu_fill(pool, (size_t)rows * rw, 1.0f);
    tu_fill(q, qn, 1.0f);
    /* g_pool16: the GPU reads a BF16 pool, the CPU the same values in F32 (the BF16 rows widened:
     * the same function), so the difference is the kernels' arithmetic alone; registered cases
     * have 16-byte rows (the kernels' 16-byte copies), the others rows of an odd BF16 width */
    uint16_t *pool16 = g_pool16 ? malloc((size_t)rows * rw * 2) : NULL;
    for (size_t i = 0; pool16 && i < (size_t)rows * rw; i++)
        pool16[i] = nb_f32_to_bf16(pool[i]), pool[i] = nb_bf16_to_f32(pool16[i]);
    void *dpool = pool16 ? tu_up(pool16, (size_t)rows * rw * 2) : tu_up(pool, (size_t)rows * rw * 4);
    const size_t pes = pool16 ? 2 : 4;
    nb_tensor hq = nb_tensor_3d(q, F32, T, d.n_heads, qk), ho = nb_tensor_3d(o, F32, T, d.n_heads, d.v_dim);
    nb_tensor hl = nb_tensor_2d(pool, F32, rows, d.kv_lora_rank);
    nb_tensor hp = nb_tensor_2d(pool + d.kv_lora_rank, F32, rows, d.qk_rope);
    hl.stride[0] = hp.stride[0] = rw;
    nb_tensor dq = tu_twin(&hq), dl = hl, dp = hp, dout = ho;
    dl.data = dpool;
    dp.data = (char *)dpool + (size_t)d.kv_lora_rank * pes;
    if (pool16) dl.dtype = dp.dtype = NB_DTYPE_BF16;
    dl.device = dp.device = NB_DEVICE_CUDA;
    dout.data = tu_poisoned(on * 4);
    dout.device = NB_DEVICE_CUDA;
    int32_t *sp = malloc((size_t)T * 32 * 4), *sc = malloc((size_t)T * 4);
    nb_attn_select hs = {sp, sc, 32}, ds;
    if (sparse) {
        make_sel(&ix, 32, sp, sc);
        ds = (nb_attn_select){tu_up(sp, (size_t)T * 32 * 4), tu_up(sc, (size_t)T * 4), 32};
    }
    if (reg) NB_CHECK_OK(nb_cuda_mla_register(tu_gpu, &kvb.d, &d));
    NB_CHECK_OK(nb_op_mla_attention(tu_cpu, mode, &d, &hq, &hl, &hp, &kvb.h, &ix.h, sparse ? &hs : NULL, 0.07f, &ho));
    NB_CHECK_OK(nb_op_mla_attention(tu_gpu, mode, &d, &dq, &dl, &dp, &kvb.d, &ix.d, sparse ? &ds : NULL, 0.07f, &dout));
    tu_down(&dout, ob);
    char name[128];
    const int mma = nb_cuda_mla_uses_mma(tu_gpu, &d, T);
    int merge = 0, pdl = 0;
    const int small = nb_cuda_mla_uses_small(&d, kvb.d.data, T, &merge, &pdl);
    snprintf(name, sizeof name, "mla%s%s%s%s%s %s%s kv_b %s%s, %d heads, rank %d, T=%d", pool16 ? " (BF16 pool)" : "",
             mma ? " mma" : "",
             small ? " small" : "", small ? (merge == NB_CUDA_MLA_MERGE_KERNEL ? "+merge" : "+fold") : "",
             small && pdl ? "+pdl" : "",
             mode == NB_MLA_NAIVE ? "naive" : "absorbed", sparse ? " sparse" : "", tu_fmt_name(kvfmt),
             reg ? " (registered)" : "", d.n_heads, d.kv_lora_rank, T);
    const int bf16_gemm = kvfmt == NB_WFMT_BF16 || kvfmt == NB_WFMT_NVFP4;
    /* the tensor-core kernel rounds q, the latent rows and the probabilities to BF16 */
    tu_compare(name, o, ob, on, mma ? NB_TOL_BF16 : bf16_gemm && !small ? NB_TOL_LT_BF16W : NB_TOL_F32);
    /* registered forms are keyed by the weight's address, which tu_free_all hands back */
    if (reg) nb_cuda_mla_release(tu_gpu);
    free(pool16);
    free(pool), free(q), free(o), free(ob), free(sp), free(sc);
    tu_weight_free(&kvb);
    tu_free_all();
}

static void mla_case(nb_mla_mode mode, int sparse, nb_wfmt kvfmt)
{
    const nb_mla_dims d = {8, 64, 32, 64, 512};
    mla_case_ex(mode, sparse, kvfmt, d, 0, 0);
}

/* Every case on one attention kernel (mla.h: NB_CUDA_MLA_F32 / NB_CUDA_MLA_MMA) and one
 * absorption path (small: 0 the batched GEMMs, 1 the small path up to 32 tokens; merge:
 * NB_CUDA_MLA_MERGE_* or -1 automatic; pdl: programmatic dependent launches or plain). */
static void mla_cases(int kernel, int small, int merge, int pdl)
{
    nb_cuda_mla_force_kernel(kernel);
    nb_cuda_mla_force_f32_heads(0);
    nb_cuda_mla_force_small(small ? NB_CUDA_MLA_SMALL_MAX : 0, merge, pdl);
    tu_seed(14);
    mla_case(NB_MLA_ABSORBED, 0, NB_WFMT_BF16);
    mla_case(NB_MLA_NAIVE, 0, NB_WFMT_BF16);
    mla_case(NB_MLA_ABSORBED, 1, NB_WFMT_BF16);
    mla_case(NB_MLA_ABSORBED, 0, NB_WFMT_NVFP4);
    mla_case(NB_MLA_ABSORBED, 0, NB_WFMT_F32);
    mla_case(NB_MLA_ABSORBED, 1, NB_WFMT_FP8_BLOCK);
    const nb_mla_dims d8 = {8, 64, 32, 64, 512}, glm5 = {64, 192, 64, 256, 512}, tiny = {4, 32, 16, 24, 32};
    mla_case_ex(NB_MLA_ABSORBED, 0, NB_WFMT_BF16, d8, 1, 0);  /* no KV split */
    mla_case_ex(NB_MLA_ABSORBED, 1, NB_WFMT_NVFP4, d8, 1, 1);
    mla_case_ex(NB_MLA_ABSORBED, 0, NB_WFMT_BF16, glm5, 2, 1); /* GLM-5's shapes, decode */
    mla_case_ex(NB_MLA_ABSORBED, 0, NB_WFMT_NVFP4, glm5, 2, 1);
    mla_case_ex(NB_MLA_ABSORBED, 1, NB_WFMT_FP8_BLOCK, glm5, 0, 1);
    mla_case_ex(NB_MLA_ABSORBED, 0, NB_WFMT_BF16, tiny, 1, 0); /* the fixtures' shapes */
    mla_case_ex(NB_MLA_ABSORBED, 0, NB_WFMT_F32, glm5, 1, 0);  /* GLM-5's shapes, 141 tokens */
    mla_case_ex(NB_MLA_ABSORBED, 0, NB_WFMT_BF16, glm5, 3, 1); /* 32 tokens */
    mla_case_ex(NB_MLA_ABSORBED, 1, NB_WFMT_NVFP4, glm5, 3, 0);
    mla_case_ex(NB_MLA_ABSORBED, 0, NB_WFMT_BF16, glm5, 4, 1); /* one token: 64 KV splits */
    mla_case_ex(NB_MLA_ABSORBED, 0, NB_WFMT_F32, glm5, 4, 0);
    /* the op in token tiles of 50 (as a long prefill runs): 141 tokens in three passes */
    nb_cuda_mla_force_token_tile(50);
    mla_case_ex(NB_MLA_ABSORBED, 1, NB_WFMT_NVFP4, d8, 1, 1);
    mla_case_ex(NB_MLA_ABSORBED, 0, NB_WFMT_F32, glm5, 1, 0);
    nb_cuda_mla_force_token_tile(0);
    nb_cuda_mla_force_kernel(-1);
    nb_cuda_mla_force_small(-1, -1, -1);
}

static void test_mla(void)
{
    mla_cases(NB_CUDA_MLA_F32, 0, -1, 0);
    mla_cases(NB_CUDA_MLA_MMA, 0, -1, 0); /* tiny's rank 32 and every other shape here take it */
    mla_cases(NB_CUDA_MLA_F32, 1, NB_CUDA_MLA_MERGE_FOLD, 1);
    mla_cases(NB_CUDA_MLA_F32, 1, NB_CUDA_MLA_MERGE_KERNEL, 1);
    mla_cases(NB_CUDA_MLA_F32, 1, -1, 0);
    mla_cases(NB_CUDA_MLA_MMA, 1, -1, 1);
    /* the small path's chained and early launch modes (mla.h NB_CUDA_MLA_PDL_CHAIN, _EARLY) */
    mla_cases(NB_CUDA_MLA_F32, 1, -1, NB_CUDA_MLA_PDL_CHAIN);
    mla_cases(NB_CUDA_MLA_F32, 1, -1, NB_CUDA_MLA_PDL_EARLY);
    /* the float32 kernel at 4 and 8 heads per block (mla.h nb_cuda_mla_force_f32_group) */
    for (int g = 4; g <= 8; g *= 2) {
        nb_cuda_mla_force_f32_group(g);
        mla_cases(NB_CUDA_MLA_F32, 0, -1, 0);
        mla_cases(NB_CUDA_MLA_F32, 1, -1, 0);
    }
    nb_cuda_mla_force_f32_group(0);
    /* the float32 kernel with 4 heads per warp (the others ran its default, 2) */
    nb_cuda_mla_force_f32_heads(4);
    mla_case(NB_MLA_ABSORBED, 1, NB_WFMT_BF16);
    nb_cuda_mla_force_kernel(NB_CUDA_MLA_F32);
    mla_case_ex(NB_MLA_ABSORBED, 0, NB_WFMT_F32, (nb_mla_dims){64, 192, 64, 256, 512}, 1, 0);
    nb_cuda_mla_force_small(0, -1, -1);
    mla_case_ex(NB_MLA_ABSORBED, 0, NB_WFMT_BF16, (nb_mla_dims){64, 192, 64, 256, 512}, 2, 1);
    nb_cuda_mla_force_small(-1, -1, -1);
    nb_cuda_mla_force_kernel(-1);
    nb_cuda_mla_force_f32_heads(0);
}

/* BF16 pools (ops.h nb_op_mla_attention, --kv-cache-dtype bf16) through every kernel: the
 * float32 kernel (its head groups, heads per warp, the small path's launch modes), mma, wg and
 * dec forced (dec falls back to mma on BF16 rows, wg to mma on unaligned rows or other shapes);
 * each against the CPU op on the same values in F32 pools. Then a mixed pair is refused. */
static void test_mla_bf16(void)
{
    tu_seed(24);
    g_pool16 = 1;
    mla_cases(NB_CUDA_MLA_F32, 0, -1, 0);
    mla_cases(NB_CUDA_MLA_MMA, 0, -1, 0);
    mla_cases(NB_CUDA_MLA_WG, 0, -1, 0);
    mla_cases(NB_CUDA_MLA_DEC, 0, -1, 0);
    mla_cases(NB_CUDA_MLA_F32, 1, -1, 0);
    mla_cases(NB_CUDA_MLA_F32, 1, -1, NB_CUDA_MLA_PDL_CHAIN); /* rows copied before the wait */
    for (int g = 4; g <= 8; g *= 2) {
        nb_cuda_mla_force_f32_group(g);
        mla_cases(NB_CUDA_MLA_F32, 1, -1, 0);
    }
    nb_cuda_mla_force_f32_group(0);
    nb_cuda_mla_force_f32_heads(4);
    nb_cuda_mla_force_kernel(NB_CUDA_MLA_F32);
    mla_case_ex(NB_MLA_ABSORBED, 1, NB_WFMT_BF16, (nb_mla_dims){64, 192, 64, 256, 512}, 2, 1);
    nb_cuda_mla_force_kernel(-1);
    nb_cuda_mla_force_f32_heads(0);
    g_pool16 = 0;
    /* the kernel choice (mla.h nb_cuda_mla_kernel_pool): never dec on BF16 rows */
    const nb_mla_dims glm5 = {64, 192, 64, 256, 512};
    for (int k = NB_CUDA_MLA_F32; k <= NB_CUDA_MLA_WG; k++) {
        nb_cuda_mla_force_kernel(k);
        NB_CHECK(nb_cuda_mla_kernel_pool(tu_gpu, &glm5, 1000, 1) != NB_CUDA_MLA_DEC);
    }
    nb_cuda_mla_force_kernel(-1);
    NB_CHECK(nb_cuda_mla_kernel_pool(tu_gpu, &glm5, 1000, 1) != NB_CUDA_MLA_DEC);
    /* latent BF16 and k_pe F32: NB_ERR_INVALID_ARG */
    const int rows = 64, T = 1;
    int n_new[1] = {1}, n_past[1] = {10};
    tu_index ix;
    tu_index_make(&ix, 1, n_new, n_past, rows);
    tu_weight kvb;
    tu_weight_make(&kvb, NB_WFMT_BF16, (int64_t)glm5.n_heads * (glm5.qk_nope + glm5.v_dim), glm5.kv_lora_rank, 0.05f, 0);
    nb_tensor dq = nb_tensor_3d(tu_poisoned((size_t)T * 64 * 256 * 4), F32, T, 64, 256);
    nb_tensor dout = nb_tensor_3d(tu_poisoned((size_t)T * 64 * 256 * 4), F32, T, 64, 256);
    nb_tensor dl = nb_tensor_2d(tu_poisoned((size_t)rows * 512 * 2), NB_DTYPE_BF16, rows, 512);
    nb_tensor dp = nb_tensor_2d(tu_poisoned((size_t)rows * 64 * 4), F32, rows, 64);
    dq.device = dout.device = dl.device = dp.device = NB_DEVICE_CUDA;
    NB_CHECK(nb_op_mla_attention(tu_gpu, NB_MLA_ABSORBED, &glm5, &dq, &dl, &dp, &kvb.d, &ix.d, NULL, 0.07f, &dout) ==
             NB_ERR_INVALID_ARG);
    tu_weight_free(&kvb);
    tu_free_all();
}

/* Host recomputation of a DSA score in double, to judge a disagreement as a near-tie. */
/* The score in double; *mag (if not NULL): the sum of its terms' magnitudes, sum_h |w_h| relu(d_h),
 * the scale float32 rounding errors follow (the weights have both signs, so a score can be far
 * smaller than its terms). */
static double dsa_score_mag(const float *q, const float *w, int nh, int hd, float sm, const float *k, double *mag)
{
    double tot = 0, m = 0;
    for (int h = 0; h < nh; h++) {
        double d = 0;
        for (int c = 0; c < hd; c++) d += (double)q[h * hd + c] * k[c];
        d *= sm;
        if (d > 0) tot += d * w[h], m += d * fabs((double)w[h]);
    }
    if (mag) *mag = m;
    return tot;
}


/* A dsa_select case: sequences s < 3 with fresh[s] > 0 new tokens after past[s] positions,
 * each position on its own pool row (random order). */
typedef struct dsa_spec {
    int topk, nh;  /* nh 0: 32 */
    int form;      /* scoring form (nb_cuda_dsa_force_form: 0 warp, 1 lanes, 2 mma) */
    int unaligned; /* key rows at a 4-byte offset with an odd stride (lanes falls back to warp) */
    int split;     /* nb_cuda_dsa_force_split: 0 one block per token; 1 automatic; G >= 2 G splits.
                      Not 0: also checked id for id against the unsplit op on the GPU */
    int fresh[3], past[3];
    int zeros;     /* 15 of 16 key rows negative against positive queries: those score exactly 0 */
    int outside;   /* every third past position's row is outside the pool (-1 or rows + 5): never
                      selected. The CPU op refuses such an index: a host reference skips them */
    int tile;      /* the prefill form forced on (nb_cuda_dsa_force_tile): 1 k_dsa_tile (the mma
                      form's scores: checked id for id against it, one block per token), 2
                      k_dsa_tile_wg (compute capability 9; its ids unlike the mma form's are
                      counted, and checked against the CPU op's like every form's). DSA() runs
                      a case with tile 1 again with tile 2 */
    int tile_group; /* its tokens per launch pair (nb_cuda_dsa_force_tile_group; 0: automatic) */
    int reverse;   /* the batch's tokens in reverse order (a sequence's positions descending) */
} dsa_spec;

/* Compute capability 9: the prefill form's wgmma kernel runs (elsewhere k_dsa_tile stands in). */
static int dsa_hopper(void)
{
    int dev = 0, cc = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev);
    return cc == 9;
}

static int dsa_by_score(const void *x, const void *y)
{
    const float *a = x, *b = y; /* {score, position} */
    if (a[0] != b[0]) return a[0] > b[0] ? -1 : 1;
    return (a[1] > b[1]) - (a[1] < b[1]);
}

/* The CPU op's selection (same float arithmetic) where rows outside the pool are skipped. */
static void dsa_ref(const nb_attn_index *ix, const float *q, const float *w, int nh, int hd, float sm, const float *keys,
                    int rw, int rows, int topk, int32_t *sp, int32_t *sc)
{
    for (int i = 0; i < ix->n_tokens; i++) {
        const int n = ix->pos[i] + 1;
        const int32_t *slots = ix->slot_table + ix->slot_base[i];
        if (n <= topk) {
            for (int t = 0; t < n; t++) sp[i * topk + t] = t;
            sc[i] = n;
            continue;
        }
        float *sv = malloc((size_t)n * 2 * sizeof(float)); /* positions < 2^24: exact as floats */
        int m = 0;
        for (int p = 0; p < n; p++) {
            if (slots[p] < 0 || slots[p] >= rows) continue;
            const float *k = keys + (int64_t)slots[p] * rw;
            float total = 0;
            for (int h = 0; h < nh; h++) {
                float d = 0;
                for (int c = 0; c < hd; c++) d += q[(i * nh + h) * hd + c] * k[c];
                d *= sm;
                if (d > 0) total += d * w[i * nh + h];
            }
            sv[2 * m] = total, sv[2 * m + 1] = (float)p, m++;
        }
        qsort(sv, (size_t)m, 2 * sizeof(float), dsa_by_score);
        sc[i] = m < topk ? m : topk;
        for (int t = 0; t < sc[i]; t++) sp[i * topk + t] = (int32_t)sv[2 * t + 1];
        free(sv);
    }
}

static void dsa_case(dsa_spec c)
{
    const int hd = 128, nh = c.nh ? c.nh : 32, topk = c.topk, rw = c.unaligned ? hd + 3 : hd + 4, off = c.unaligned;
    int T = 0, n_pos = 0;
    for (int s = 0; s < 3; s++) T += c.fresh[s], n_pos += c.fresh[s] + c.past[s];
    const int rows = n_pos + 8;
    int32_t *pos = malloc(T * 4), *base = malloc(T * 4), *tab = malloc((size_t)n_pos * 4), *perm = malloc((size_t)rows * 4);
    for (int r = 0; r < rows; r++) perm[r] = r;
    for (int r = rows - 1; r > 0; r--) {
        int j = (int)(tu_u32() % (uint32_t)(r + 1)), t = perm[r];
        perm[r] = perm[j], perm[j] = t;
    }
    for (int s = 0, t = 0, b = 0; s < 3; b += c.fresh[s] + c.past[s], s++) {
        for (int p = 0; p < c.fresh[s] + c.past[s]; p++)
            tab[b + p] = c.outside && p < c.past[s] && p % 3 == 1 ? (p % 2 ? -1 : rows + 5) : perm[b + p];
        for (int j = 0; j < c.fresh[s]; j++, t++) pos[t] = c.past[s] + j, base[t] = b;
    }
    for (int t = 0; c.reverse && t < T / 2; t++) {
        const int32_t p0 = pos[t], b0 = base[t];
        pos[t] = pos[T - 1 - t], base[t] = base[T - 1 - t];
        pos[T - 1 - t] = p0, base[T - 1 - t] = b0;
    }
    float *pool = malloc((size_t)rows * rw * 4), *q = malloc((size_t)T * nh * hd * 4), *w = malloc((size_t)T * nh * 4);
    tu_fill(pool, (size_t)rows * rw, 1.0f);
    tu_fill(q, (size_t)T * nh * hd, 1.0f);
    tu_fill(w, (size_t)T * nh, 0.2f);
    if (c.zeros) {
        for (size_t e = 0; e < (size_t)T * nh * hd; e++) q[e] = fabsf(q[e]);
        for (int r = 0; r < rows; r++)
            if (r % 16)
                for (int e = 0; e < hd; e++) pool[(size_t)r * rw + off + e] = -fabsf(pool[(size_t)r * rw + off + e]);
    }
    const nb_attn_index hix = {T, pos, base, tab, 0, 0};
    int max_ctx = 0; /* the host's bound (ops.h), as the engine's eager steps give it */
    for (int s = 0; s < 3; s++)
        if (c.fresh[s] && c.past[s] + c.fresh[s] > max_ctx) max_ctx = c.past[s] + c.fresh[s];
    const nb_attn_index dix = {T, tu_up(pos, T * 4), tu_up(base, T * 4), tu_up(tab, (size_t)n_pos * 4), 0, max_ctx};
    nb_tensor hq = nb_tensor_3d(q, F32, T, nh, hd), hw = nb_tensor_2d(w, F32, T, nh);
    nb_tensor hk = nb_tensor_2d(pool + off, F32, rows, hd);
    hk.stride[0] = rw;
    nb_tensor dq = tu_twin(&hq), dw = tu_twin(&hw), dk = hk;
    float *dpool = tu_up(pool, (size_t)rows * rw * 4);
    dk.data = dpool + off;
    dk.device = NB_DEVICE_CUDA;
    const size_t sel_bytes = (size_t)T * topk * 4;
    int32_t *sp = malloc(sel_bytes), *sc = malloc(T * 4), *sp2 = malloc(sel_bytes), *sc2 = malloc(T * 4);
    int32_t *sp1 = malloc(sel_bytes), *sc1 = malloc(T * 4);
    int32_t *dsp = tu_poisoned(sel_bytes), *dsc = tu_poisoned(T * 4);
    const float sm = 1.0f / sqrtf((float)hd);
    if (c.outside)
        dsa_ref(&hix, q, w, nh, hd, sm, pool + off, rw, rows, topk, sp, sc);
    else
        NB_CHECK_OK(nb_op_dsa_select(tu_cpu, &hq, &hw, sm, &hk, &hix, topk, sp, sc));
    nb_cuda_dsa_force_form(c.form);
    nb_cuda_dsa_force_tile(0); /* the forms asked for: the prefill form (on by default) only where the case says */
    int G = 1;
    if (c.split) { /* the unsplit op first: the split one must give its ids exactly */
        nb_cuda_dsa_force_split(0);
        NB_CHECK_OK(nb_op_dsa_select(tu_gpu, &dq, &dw, sm, &dk, &dix, topk, dsp, dsc));
        NB_CHECK(nb_cuda_dsa_last_splits() == 1);
        NB_CHECK_OK(nb_ops_download(tu_gpu, sp1, dsp, sel_bytes));
        NB_CHECK_OK(nb_ops_download(tu_gpu, sc1, dsc, T * 4));
        dsp = tu_poisoned(sel_bytes), dsc = tu_poisoned(T * 4);
        /* the merge's fallback (every radix digit over the global candidates) and a room of
         * 16 keys for the first digit's bin (the shared-memory path where it fits, else the
         * fallback), each with both histogram forms, and the automatic room with match.any
         * (the main run below takes the default form): the same ids */
        static const int caps[] = {0, 16, 0, 16, -1}, hist[] = {0, 0, 1, 1, 1};
        for (int ci = 0; ci < 5; ci++) {
            nb_cuda_dsa_force_split(c.split);
            nb_cuda_dsa_force_merge_cap(caps[ci]);
            nb_cuda_dsa_force_hist(hist[ci]);
            NB_CHECK_OK(nb_op_dsa_select(tu_gpu, &dq, &dw, sm, &dk, &dix, topk, dsp, dsc));
            nb_cuda_dsa_force_merge_cap(-1);
            nb_cuda_dsa_force_hist(-1);
            NB_CHECK_OK(nb_ops_download(tu_gpu, sp2, dsp, sel_bytes));
            NB_CHECK_OK(nb_ops_download(tu_gpu, sc2, dsc, T * 4));
            int diff = 0;
            for (int i = 0; i < T; i++) {
                diff += sc1[i] != sc2[i];
                for (int j = 0; j < sc1[i] && j < sc2[i]; j++) diff += sp1[i * topk + j] != sp2[i * topk + j];
            }
            NB_CHECK_MSG(diff == 0, "merge room %d keys, %s histograms: %d ids or counts unlike unsplit", caps[ci],
                         hist[ci] ? "match.any" : "atomic", diff);
            dsp = tu_poisoned(sel_bytes), dsc = tu_poisoned(T * 4);
        }
    }
    /* the prefill form takes 32 heads, aligned rows, topk % 16 == 0 and a context above topk */
    const int tile_ok = c.tile && !c.unaligned && nh == 32 && topk % 16 == 0 && max_ctx > topk;
    if (c.tile) { /* the mma form (or, where the prefill form is not taken, the form that then runs), one
                   * block per token, first: the prefill form must give its ids exactly */
        nb_cuda_dsa_force_form(tile_ok ? 2 : c.form);
        nb_cuda_dsa_force_split(0);
        NB_CHECK_OK(nb_op_dsa_select(tu_gpu, &dq, &dw, sm, &dk, &dix, topk, dsp, dsc));
        NB_CHECK_OK(nb_ops_download(tu_gpu, sp1, dsp, sel_bytes));
        NB_CHECK_OK(nb_ops_download(tu_gpu, sc1, dsc, T * 4));
        dsp = tu_poisoned(sel_bytes), dsc = tu_poisoned(T * 4);
        nb_cuda_dsa_force_form(c.form);
        nb_cuda_dsa_force_tile(c.tile);
        nb_cuda_dsa_force_tile_group(c.tile_group);
    }
    nb_cuda_dsa_force_split(c.split);
    NB_CHECK_OK(nb_op_dsa_select(tu_gpu, &dq, &dw, sm, &dk, &dix, topk, dsp, dsc));
    G = nb_cuda_dsa_last_splits();
    /* the form that ran: the one asked for, or the next that takes the shape */
    const int want = tile_ok ? (c.tile == 2 && dsa_hopper() ? 4 : 3) : c.unaligned ? 0 : c.form, ran = nb_cuda_dsa_last_form();
    NB_CHECK_MSG(ran == want, "form %d asked, %d expected, %d ran", c.form, want, ran);
    nb_cuda_dsa_force_split(-1);
    nb_cuda_dsa_force_form(-1);
    nb_cuda_dsa_force_tile(-1);
    nb_cuda_dsa_force_tile_group(0);
    const int want_g = tile_ok ? (max_ctx + topk - 1) / topk : c.split > 1 ? c.split : 1;
    NB_CHECK_MSG(c.split == 1 ? G >= 2 : G == want_g, "split %d ran with G = %d (want %d)", c.split, G, want_g);
    NB_CHECK_OK(nb_ops_download(tu_gpu, sp2, dsp, sel_bytes));
    NB_CHECK_OK(nb_ops_download(tu_gpu, sc2, dsc, T * 4));
    int mism = 0, ties = 0, split_diff = 0;
    double worst_gap = 0;
    for (int i = 0; i < T; i++) {
        NB_CHECK_MSG(sc[i] == sc2[i], "token %d: count ref %d cuda %d", i, sc[i], sc2[i]);
        if (pos[i] + 1 <= topk) /* every position, in order (ops.h), on both backends */
            for (int j = 0; j < sc2[i]; j++)
                NB_CHECK_MSG(sp[i * topk + j] == j && sp2[i * topk + j] == j, "token %d entry %d: ref %d cuda %d", i, j,
                             sp[i * topk + j], sp2[i * topk + j]);
        if (c.split || c.tile) {
            NB_CHECK_MSG(sc1[i] == sc2[i], "token %d: count unsplit %d split %d", i, sc1[i], sc2[i]);
            for (int j = 0; j < sc1[i] && j < sc2[i]; j++)
                if (sp1[i * topk + j] != sp2[i * topk + j] && split_diff++ < 8)
                    fprintf(stderr, "      token %d rank %d: unsplit pos %d, split pos %d\n", i, j, sp1[i * topk + j],
                            sp2[i * topk + j]);
        }
        const int32_t *slots = tab + base[i];
        for (int j = 0; j < sc[i] && j < sc2[i]; j++) {
            const int32_t pa = sp[i * topk + j], pb = sp2[i * topk + j];
            if (pa == pb) continue;
            if (pb < 0 || pb > pos[i] || slots[pb] < 0 || slots[pb] >= rows) { /* never a valid choice */
                if (mism++ < 8) fprintf(stderr, "      token %d rank %d: cuda pos %d (outside)\n", i, j, pb);
                continue;
            }
            /* a near-tie: the two scores within float32-level rounding of their terms' magnitude
             * (the forms sum in different orders; the mma and prefill forms in TF32 split three
             * ways: gaps up to ~2e-5 of a score measured where cancellation left scores ~1 % of
             * their terms, H100, twenty-fourth session) */
            double ma, mb;
            double a = dsa_score_mag(q + i * nh * hd, w + i * nh, nh, hd, sm, pool + off + (int64_t)slots[pa] * rw, &ma);
            double b = dsa_score_mag(q + i * nh * hd, w + i * nh, nh, hd, sm, pool + off + (int64_t)slots[pb] * rw, &mb);
            double gap = fabs(a - b) / (fmax(ma, mb) + 1e-30);
            if (gap > worst_gap) worst_gap = gap;
            if (gap <= 1e-5) {
                ties++;
            } else if (mism++ < 8) {
                fprintf(stderr, "      token %d rank %d: ref pos %d (score %.9g), cuda pos %d (score %.9g)\n", i, j, pa, a,
                        pb, b);
            }
        }
    }
    char tok[64] = "";
    for (int s = 0, k = 0; s < 3; s++)
        if (c.fresh[s]) k += snprintf(tok + k, sizeof tok - k, "%s%d@%d", k ? " " : "", c.fresh[s], c.past[s]);
    char split[96] = "one block per token";
    if (c.split) snprintf(split, sizeof split, "%d splits (%d ids unlike unsplit)", G, split_diff);
    if (c.tile) snprintf(split, sizeof split, "prefill %s%s, G %d (%d ids unlike mma)", c.tile == 2 ? "wgmma tiles" : "tiles",
                         tile_ok ? "" : " (not taken)", G, split_diff);
    if (c.tile == 2 && tile_ok && dsa_hopper()) split_diff = 0; /* its own sums: the CPU check above judges its ids */
    fprintf(stderr, "    dsa_select topk %d, %d heads, %s form%s%s%s, tokens new@past %s, %s: %d mismatches, %d near-ties "
            "(worst gap %.2g)%s\n", topk, nh, c.form == 2 ? "mma" : c.form ? "lanes" : "warp", c.unaligned ? " (unaligned rows)" : "",
            c.zeros ? ", zero ties" : "", c.outside ? ", rows outside" : "", tok, split, mism, ties, worst_gap,
            mism || split_diff ? "  <-- FAIL" : "");
    NB_CHECK(mism == 0 && split_diff == 0);
    free(pos), free(base), free(tab), free(perm), free(pool), free(q), free(w);
    free(sp), free(sc), free(sp1), free(sc1), free(sp2), free(sc2);
    tu_free_all();
}

static void dsa_case2(dsa_spec c)
{
    dsa_case(c);
    if (c.tile == 1) c.tile = 2, dsa_case(c);
}
#define DSA(...) dsa_case2((dsa_spec){__VA_ARGS__})

static void test_dsa_select(void)
{
    tu_seed(15);
    static const int gs[] = {2, 3, 7, 128};
    for (int form = 0; form < 3; form++) { /* warp, lanes, mma */
        /* one block per token; 4 tokens at positions 0..3 besides the long one */
        DSA(.topk = 64, .form = form, .fresh = {4, 1}, .past = {0, 300});
        DSA(.topk = 512, .form = form, .fresh = {4, 1}, .past = {0, 100});   /* fewer positions than topk: all of them, sorted */
        DSA(.topk = 256, .form = form, .fresh = {4, 1}, .past = {0, 1100});  /* several merge chunks */
        DSA(.topk = 2048, .form = form, .fresh = {4, 1}, .past = {0, 1100}); /* GLM-5's index_topk and heads */
        DSA(.topk = 256, .nh = 64, .form = form, .fresh = {4, 1}, .past = {0, 1100}); /* DeepSeek-V3.2's 64 heads */
        DSA(.topk = 256, .form = form, .unaligned = 1, .fresh = {4, 1}, .past = {0, 700}); /* rows lanes does not take */
        DSA(.topk = 256, .form = form, .fresh = {1}, .past = {5000}, .zeros = 1); /* ties at 0: lower positions first */
        DSA(.topk = 256, .form = form, .fresh = {1, 1}, .past = {5000, 300}, .outside = 1);
        /* split: G blocks per token and the merge */
        for (int g = 0; g < 4; g++) {
            DSA(.topk = 256, .form = form, .split = gs[g], .fresh = {1}, .past = {1100});
            /* ranges above topk (merged in chunks), and a token whose context fits in topk */
            DSA(.topk = 256, .form = form, .split = gs[g], .fresh = {1, 1, 1}, .past = {5000, 2500, 100});
            DSA(.topk = 256, .form = form, .split = gs[g], .fresh = {1}, .past = {5000}, .zeros = 1);
        }
        DSA(.topk = 64, .form = form, .split = 128, .fresh = {1}, .past = {300}); /* 10 splits of 32, 118 empty */
        DSA(.topk = 256, .form = form, .split = 3, .fresh = {3}, .past = {1100}); /* three tokens of one sequence */
        DSA(.topk = 2048, .form = form, .split = 2, .fresh = {1}, .past = {9000}); /* GLM-5: 2 ranges of 4501 */
        DSA(.topk = 2048, .form = form, .split = 7, .fresh = {1, 1, 1}, .past = {9000, 4000, 1000});
        DSA(.topk = 2048, .form = form, .split = 1, .fresh = {1}, .past = {9000}); /* the automatic count */
        DSA(.topk = 256, .nh = 64, .form = form, .split = 3, .fresh = {1}, .past = {1100});
        DSA(.topk = 256, .form = form, .unaligned = 1, .split = 3, .fresh = {1}, .past = {1100});
        DSA(.topk = 256, .form = form, .split = 3, .fresh = {1}, .past = {300}, .outside = 1); /* <= topk candidates */
        DSA(.topk = 256, .form = form, .split = 7, .fresh = {1, 1, 1}, .past = {5000, 2500, 100}, .outside = 1);
        DSA(.topk = 256, .form = form, .split = 7, .fresh = {1}, .past = {5000}, .zeros = 1, .outside = 1);
    }
    /* the prefill form (its scores are the mma form's whatever form is asked): prefill chunks of
     * one and of three sequences (token groups of 32 crossing sequences, tokens whose context
     * fits in topk, the diagonal), GLM-5's topk, many splits, ties at 0, rows outside the pool,
     * and the shapes it does not take (64 heads, unaligned rows: the asked form runs) */
    DSA(.topk = 256, .form = 1, .tile = 1, .fresh = {200}, .past = {2000});
    DSA(.topk = 256, .form = 1, .tile = 1, .fresh = {70, 40, 3}, .past = {3000, 150, 600});
    DSA(.topk = 2048, .form = 2, .tile = 1, .fresh = {64}, .past = {5000});
    DSA(.topk = 64, .form = 1, .tile = 1, .fresh = {33}, .past = {3000}); /* G 48 */
    DSA(.topk = 256, .form = 1, .tile = 1, .fresh = {40}, .past = {1500}, .zeros = 1);
    DSA(.topk = 256, .form = 1, .tile = 1, .fresh = {20, 10}, .past = {1200, 700}, .outside = 1);
    DSA(.topk = 256, .form = 1, .tile = 1, .fresh = {300}, .past = {0}); /* a first chunk: the diagonal from 0 */
    DSA(.topk = 256, .form = 1, .tile = 1, .tile_group = 37, .fresh = {200}, .past = {2000}); /* 6 launch pairs */
    DSA(.topk = 256, .form = 1, .tile = 1, .tile_group = 5, .fresh = {70, 40, 3}, .past = {3000, 150, 600});
    /* a sequence's positions descending: a warp's rows loaded for a longer context serve shorter ones */
    DSA(.topk = 256, .form = 1, .tile = 1, .reverse = 1, .fresh = {100, 30}, .past = {1500, 400});
    DSA(.topk = 256, .nh = 64, .form = 1, .tile = 1, .fresh = {20}, .past = {1100});
    DSA(.topk = 256, .form = 1, .tile = 1, .unaligned = 1, .fresh = {20}, .past = {1100});
}

/* ---- MoE -------------------------------------------------------------------------------- */

static void route_case(nb_router_score score, nb_router_group group, int bias, int norm)
{
    const int T = 37, E = 64, K = 6;
    float *lg = malloc(T * E * 4), *bs = malloc(E * 4), *w = malloc(T * K * 4), *w2 = malloc(T * K * 4);
    int32_t *id = malloc(T * K * 4), *id2 = malloc(T * K * 4);
    tu_fill(lg, T * E, 3.0f);
    tu_fill(bs, E, 0.1f);
    nb_router_params p = {E, K, score, group, group == NB_ROUTER_GREEDY ? 1 : 8, group == NB_ROUTER_GREEDY ? 1 : 3,
                          bias ? bs : NULL, norm, 2.5f};
    nb_tensor hl = nb_tensor_2d(lg, F32, T, E), hw = nb_tensor_2d(w, F32, T, K), hi = nb_tensor_2d(id, NB_DTYPE_I32, T, K);
    nb_tensor dl = tu_twin(&hl), dw = hw, di = hi;
    dw.data = tu_poisoned(T * K * 4);
    di.data = tu_poisoned(T * K * 4);
    dw.device = di.device = NB_DEVICE_CUDA;
    nb_router_params dp = p;
    dp.correction_bias = bias ? tu_up(bs, E * 4) : NULL;
    NB_CHECK_OK(nb_op_moe_route(tu_cpu, &hl, &p, &hi, &hw));
    NB_CHECK_OK(nb_op_moe_route(tu_gpu, &dl, &dp, &di, &dw));
    tu_down(&dw, w2);
    tu_down(&di, id2);
    int mism = 0;
    for (int i = 0; i < T * K; i++)
        if (id[i] != id2[i] && mism++ < 8) fprintf(stderr, "      [%d] cpu expert %d cuda %d\n", i, id[i], id2[i]);
    char name[96];
    snprintf(name, sizeof name, "moe_route %s group %d%s%s: weights", score ? "sigmoid" : "softmax", (int)group,
             bias ? " bias" : "", norm ? " norm" : "");
    fprintf(stderr, "    %s ids: %d mismatches of %d\n", name, mism, T * K);
    NB_CHECK(mism == 0);
    tu_compare(name, w, w2, T * K, NB_TOL_F32);
    free(lg), free(bs), free(w), free(w2), free(id), free(id2);
    tu_free_all();
}

static void test_moe_route(void)
{
    tu_seed(16);
    route_case(NB_ROUTER_SOFTMAX, NB_ROUTER_GREEDY, 0, 0);
    route_case(NB_ROUTER_SOFTMAX, NB_ROUTER_GROUP_MAX, 0, 1);
    route_case(NB_ROUTER_SIGMOID, NB_ROUTER_GROUP_TOP2, 1, 1);
    route_case(NB_ROUTER_SIGMOID, NB_ROUTER_GREEDY, 1, 1);
}

/* repacked: register the experts for the MoE engineer's NVFP4 kernels (BF16 activations). */
static void experts_case(nb_wfmt fmt, int T, int E, int H, int I, int K, int repacked, double tol)
{
    tu_weight *g = calloc(E, sizeof *g), *u = calloc(E, sizeof *u), *d = calloc(E, sizeof *d);
    nb_weight *hg = calloc(E, sizeof *hg), *hu = calloc(E, sizeof *hu), *hd = calloc(E, sizeof *hd);
    nb_weight *dg = calloc(E, sizeof *dg), *du = calloc(E, sizeof *du), *dd = calloc(E, sizeof *dd);
    for (int e = 0; e < E; e++) {
        tu_weight_make(&g[e], fmt, I, H, 0.1f, 0);
        tu_weight_make(&u[e], fmt, I, H, 0.1f, 0);
        tu_weight_make(&d[e], fmt, H, I, 0.1f, 0);
        hg[e] = g[e].h, hu[e] = u[e].h, hd[e] = d[e].h;
        dg[e] = g[e].d, du[e] = u[e].d, dd[e] = d[e].d;
    }
    nb_moe_weights hw = {E, H, I, hg, hu, hd}, dw = {E, H, I, dg, du, dd};
    if (repacked) {
        nb_status st = nb_cuda_moe_register(tu_gpu, &dw, &hw);
        NB_CHECK_OK(st);
        NB_CHECK(nb_cuda_moe_is_registered(tu_gpu, &dw));
    }
    float *x = malloc((size_t)T * H * 4), *o = malloc((size_t)T * H * 4), *ob = malloc((size_t)T * H * 4);
    float *rw = malloc(T * K * 4);
    int32_t *ids = malloc(T * K * 4);
    tu_fill(x, (size_t)T * H, 1.0f);
    tu_fill(o, (size_t)T * H, 1.0f);
    for (int i = 0; i < T * K; i++) {
        ids[i] = (int32_t)(tu_u32() % (uint32_t)E);
        rw[i] = 0.1f + 0.5f * (tu_f() + 1.0f);
    }
    if (!repacked) ids[1] = -1; /* a skipped slot */
    for (int t = 0; t < T; t++) /* distinct experts within a token */
        for (int j = 0; j < K; j++)
            for (int j2 = 0; j2 < j; j2++)
                if (ids[t * K + j] >= 0 && ids[t * K + j] == ids[t * K + j2]) ids[t * K + j] = (ids[t * K + j] + 1 + j) % E;
    nb_tensor hx = nb_tensor_2d(x, F32, T, H), ho = nb_tensor_2d(o, F32, T, H);
    nb_tensor hi = nb_tensor_2d(ids, NB_DTYPE_I32, T, K), hr = nb_tensor_2d(rw, F32, T, K);
    nb_tensor dx = tu_twin(&hx), dout = tu_twin(&ho), dr = tu_twin(&hr), di = hi;
    di.data = tu_up(ids, T * K * 4);
    di.device = NB_DEVICE_CUDA;
    NB_CHECK_OK(nb_op_moe_experts(tu_cpu, &hx, &hi, &hr, &hw, 1, &ho));
    NB_CHECK_OK(nb_op_moe_experts(tu_gpu, &dx, &di, &dr, &dw, 1, &dout));
    tu_down(&dout, ob);
    char name[96];
    snprintf(name, sizeof name, "moe_experts %s%s T=%d E=%d H=%d I=%d k=%d", tu_fmt_name(fmt), repacked ? " repacked" : "", T,
             E, H, I, K);
    tu_compare(name, o, ob, (size_t)T * H, tol);
    for (int e = 0; e < E; e++) tu_weight_free(&g[e]), tu_weight_free(&u[e]), tu_weight_free(&d[e]);
    free(g), free(u), free(d), free(hg), free(hu), free(hd), free(dg), free(du), free(dd);
    free(x), free(o), free(ob), free(rw), free(ids);
    tu_free_all();
}

static void test_moe_experts(void)
{
    tu_seed(17);
    for (int f = 0; f < 4; f++) experts_case((nb_wfmt)f, 5, 8, 128, 64, 2, 0, NB_TOL_F32);
    experts_case(NB_WFMT_NVFP4, 33, 16, 256, 96, 4, 0, NB_TOL_F32);
}

static void test_moe_experts_repacked(void)
{
    tu_seed(18);
    experts_case(NB_WFMT_NVFP4, 6, 8, 256, 256, 2, 1, NB_TOL_BF16);
    experts_case(NB_WFMT_NVFP4, 64, 16, 512, 256, 4, 1, NB_TOL_BF16);
}

static const nb_test tests[] = {
    {"embedding", test_embedding},
    {"norms", test_norms},
    {"rows", test_rows},
    {"rope", test_rope},
    {"rope_n", test_rope_n},
    {"norm_n", test_norm_n},
    {"set_rows_n", test_set_rows_n},
    {"rows_bf16", test_rows_bf16},
    {"attention", test_attention},
    {"mla", test_mla},
    {"mla_bf16", test_mla_bf16},
    {"dsa_select", test_dsa_select},
    {"moe_route", test_moe_route},
    {"moe_experts", test_moe_experts},
    {"moe_experts_repacked", test_moe_experts_repacked},
};

/* `test_cuda_vs_cpu dsa-time T CTX [G]`: dsa_select at GLM-5's shape (32 heads x 128, topk 2048)
 * for T tokens at position CTX - 1 over one shared context of CTX rows, in one scoring form
 * (lanes, or NB_TEST_DSA_FORM=warp|mma): one block per token; split in G blocks per token (automatic without G; "G=1" in the line: the
 * automatic count did not split) with the merge's every digit over the global candidates
 * (room 0), with the automatic room, and the part kernel alone (no merge). A B C D A B C D, each
 * the op captured as a graph, the mean of 20 replays after 3: device time, as a decode step
 * runs it (a timing, not a check: the dsa_select test compares every variant with the CPU op). */
static int dsa_time(int T, int ctx, int G)
{
    const int nh = 32, hd = 128, topk = 2048, rw = hd + 4;
    const char *fe = getenv("NB_TEST_DSA_FORM");
    const int form = fe && !strcmp(fe, "warp") ? 0 : fe && !strcmp(fe, "mma") ? 2 : 1;
    float *pool = malloc((size_t)ctx * rw * 4), *q = malloc((size_t)T * nh * hd * 4), *w = malloc((size_t)T * nh * 4);
    int32_t *pos = malloc((size_t)T * 4), *base = calloc((size_t)T, 4), *tab = malloc((size_t)ctx * 4);
    tu_fill(pool, (size_t)ctx * rw, 1.0f);
    tu_fill(q, (size_t)T * nh * hd, 1.0f);
    tu_fill(w, (size_t)T * nh, 0.2f);
    for (int t = 0; t < T; t++) pos[t] = ctx - 1;
    for (int p = 0; p < ctx; p++) tab[p] = (int32_t)(((int64_t)p * 7919) % ctx); /* scrambled rows */
    nb_attn_index ix = {T, tu_up(pos, (size_t)T * 4), tu_up(base, (size_t)T * 4), tu_up(tab, (size_t)ctx * 4), 0, 0};
    nb_tensor dq = nb_tensor_3d(tu_up(q, (size_t)T * nh * hd * 4), F32, T, nh, hd);
    nb_tensor dw = nb_tensor_2d(tu_up(w, (size_t)T * nh * 4), F32, T, nh);
    nb_tensor dk = nb_tensor_2d(tu_up(pool, (size_t)ctx * rw * 4), F32, ctx, hd);
    dq.device = dw.device = dk.device = NB_DEVICE_CUDA;
    dk.stride[0] = rw;
    int32_t *sp = tu_poisoned((size_t)T * topk * 4), *sc = tu_poisoned((size_t)T * 4);
    static const int cap[4] = {-1, 0, -1, -2};
    double ms[4][2];
    int used = 1;
    nb_cuda_dsa_force_form(form);
    for (int rep = 0; rep < 2; rep++)
        for (int v = 0; v < 4; v++) {
            nb_cuda_dsa_force_split(v == 0 ? 0 : G >= 2 ? G : 1);
            nb_cuda_dsa_force_merge_cap(cap[v]);
            /* once eagerly (scratch grows outside the capture), then as a graph: device time */
            NB_ASSERT(nb_op_dsa_select(tu_gpu, &dq, &dw, 1.0f / sqrtf((float)hd), &dk, &ix, topk, sp, sc) == NB_OK);
            nb_cuda_graph *g = NULL;
            NB_ASSERT(nb_cuda_graph_begin(tu_gpu) == NB_OK);
            const nb_status st = nb_op_dsa_select(tu_gpu, &dq, &dw, 1.0f / sqrtf((float)hd), &dk, &ix, topk, sp, sc);
            NB_ASSERT(nb_cuda_graph_end(tu_gpu, st == NB_OK, &g) == NB_OK && st == NB_OK && g);
            for (int it = 0; it < 23; it++) {
                if (it == 3) {
                    NB_ASSERT(nb_ops_sync(tu_gpu) == NB_OK);
                    ms[v][rep] = (double)nb_now_ns();
                }
                NB_ASSERT(nb_cuda_graph_launch(tu_gpu, g) == NB_OK);
            }
            NB_ASSERT(nb_ops_sync(tu_gpu) == NB_OK);
            ms[v][rep] = ((double)nb_now_ns() - ms[v][rep]) / 1e6 / 20;
            nb_cuda_graph_free(g);
            if (v >= 1) used = nb_cuda_dsa_last_splits();
        }
    nb_cuda_dsa_force_merge_cap(-1);
    nb_cuda_dsa_force_form(-1);
    nb_cuda_dsa_force_split(-1);
    fprintf(stderr,
            "dsa_select time T=%d ctx %d (32 x 128, topk 2048, %s form): one block per token %.3f / %.3f ms; split G=%d: "
            "merge room 0 %.3f / %.3f ms, automatic %.3f / %.3f ms, part alone %.3f / %.3f ms\n",
            T, ctx, form == 2 ? "mma" : form ? "lanes" : "warp", ms[0][0], ms[0][1], used, ms[1][0], ms[1][1], ms[2][0], ms[2][1], ms[3][0],
            ms[3][1]);
    free(pool), free(q), free(w), free(pos), free(base), free(tab);
    tu_free_all();
    return 0;
}

/* `test_cuda_vs_cpu dsa-prefill T CTX`: a prefill chunk at GLM-5's shape (32 heads x 128, topk
 * 2048): T tokens of one sequence at positions CTX - T .. CTX - 1 (each attends causally), the
 * host's bound max_ctx = CTX given as the engine's eager steps give it. One block per token in
 * the lanes and the mma forms, then the prefill form's two kernels (k_dsa_tile, k_dsa_tile_wg
 * where the device takes it), each whole (tiles, then the merge) and scoring alone, in rounds
 * A B C D E F A B C D E F, each the mean wall time of 3 eager calls after one (ms). k_dsa_tile's
 * ids must be the mma form's (the same scores bit for bit); k_dsa_tile_wg's that differ are
 * counted (the tensor cores' own accumulation order; test_cuda_vs_cpu dsa_select checks them). */
static int dsa_prefill_time(int T, int ctx)
{
    const int nh = 32, hd = 128, topk = 2048, rw = hd + 4;
    if (T < 1 || ctx < T) {
        fprintf(stderr, "dsa-prefill: want 1 <= T <= CTX\n");
        return 2;
    }
    float *pool = malloc((size_t)ctx * rw * 4), *q = malloc((size_t)T * nh * hd * 4), *w = malloc((size_t)T * nh * 4);
    int32_t *pos = malloc((size_t)T * 4), *base = calloc((size_t)T, 4), *tab = malloc((size_t)ctx * 4);
    tu_fill(pool, (size_t)ctx * rw, 1.0f);
    tu_fill(q, (size_t)T * nh * hd, 1.0f);
    tu_fill(w, (size_t)T * nh, 0.2f);
    for (int t = 0; t < T; t++) pos[t] = ctx - T + t;
    for (int p = 0; p < ctx; p++) tab[p] = (int32_t)(((int64_t)p * 7919) % ctx); /* scrambled rows */
    nb_attn_index ix = {T, tu_up(pos, (size_t)T * 4), tu_up(base, (size_t)T * 4), tu_up(tab, (size_t)ctx * 4), 1, ctx};
    nb_tensor dq = nb_tensor_3d(tu_up(q, (size_t)T * nh * hd * 4), F32, T, nh, hd);
    nb_tensor dw = nb_tensor_2d(tu_up(w, (size_t)T * nh * 4), F32, T, nh);
    nb_tensor dk = nb_tensor_2d(tu_up(pool, (size_t)ctx * rw * 4), F32, ctx, hd);
    dq.device = dw.device = dk.device = NB_DEVICE_CUDA;
    dk.stride[0] = rw;
    const size_t sel = (size_t)T * topk * 4;
    int32_t *sp = tu_poisoned(sel), *sc = tu_poisoned((size_t)T * 4);
    enum { NV = 6 };
    int32_t *ids[3], *cnt[3];
    for (int k = 0; k < 3; k++) ids[k] = malloc(sel), cnt[k] = malloc((size_t)T * 4);
    static const int form[NV] = {1, 2, 2, 2, 2, 2}, tile[NV] = {0, 0, 1, 1, 2, 2}, cap[NV] = {-1, -1, -1, -2, -1, -2};
    static const int keep[NV] = {-1, 0, 1, -1, 2, -1}; /* whose ids are kept (the first round) */
    const int wg = dsa_hopper();
    double ms[NV][2];
    for (int rep = 0; rep < 2; rep++)
        for (int v = 0; v < NV; v++) {
            nb_cuda_dsa_force_form(form[v]);
            nb_cuda_dsa_force_split(0);
            nb_cuda_dsa_force_tile(tile[v]);
            nb_cuda_dsa_force_merge_cap(cap[v]);
            NB_ASSERT(nb_op_dsa_select(tu_gpu, &dq, &dw, 1.0f / sqrtf((float)hd), &dk, &ix, topk, sp, sc) == NB_OK);
            NB_ASSERT(nb_ops_sync(tu_gpu) == NB_OK);
            const int64_t t0 = nb_now_ns();
            for (int it = 0; it < 3; it++)
                NB_ASSERT(nb_op_dsa_select(tu_gpu, &dq, &dw, 1.0f / sqrtf((float)hd), &dk, &ix, topk, sp, sc) == NB_OK);
            NB_ASSERT(nb_ops_sync(tu_gpu) == NB_OK);
            ms[v][rep] = (double)(nb_now_ns() - t0) / 1e6 / 3;
            const int want = tile[v] == 2 && wg ? 4 : tile[v] ? 3 : form[v];
            if (nb_cuda_dsa_last_form() != want) {
                fprintf(stderr, "dsa-prefill: form %d ran where %d was asked (CTX <= topk 2048?)\n", nb_cuda_dsa_last_form(), want);
                return 1;
            }
            if (rep == 0 && keep[v] >= 0) {
                NB_ASSERT(nb_ops_download(tu_gpu, ids[keep[v]], sp, sel) == NB_OK);
                NB_ASSERT(nb_ops_download(tu_gpu, cnt[keep[v]], sc, (size_t)T * 4) == NB_OK);
            }
        }
    nb_cuda_dsa_force_merge_cap(-1);
    nb_cuda_dsa_force_form(-1);
    nb_cuda_dsa_force_split(-1);
    nb_cuda_dsa_force_tile(-1);
    int64_t diff[3] = {0, 0, 0}; /* [k]: ids of kept set k unlike the mma form's */
    for (int k = 1; k < 3; k++)
        for (int t = 0; t < T; t++) {
            diff[k] += cnt[0][t] != cnt[k][t];
            for (int j = 0; j < cnt[0][t] && j < cnt[k][t] && j < topk; j++)
                diff[k] += ids[0][(size_t)t * topk + j] != ids[k][(size_t)t * topk + j];
        }
    double pairs = 0; /* (token, position) pairs scored: contexts above topk only */
    for (int t = 0; t < T; t++) pairs += pos[t] + 1 > topk ? pos[t] + 1 : 0;
    const double b1 = ms[2][0] < ms[2][1] ? ms[2][0] : ms[2][1], b2 = ms[4][0] < ms[4][1] ? ms[4][0] : ms[4][1];
    fprintf(stderr,
            "dsa_select prefill T=%d ctx %d (32 x 128, topk 2048): one block per token lanes %.3f / %.3f ms, mma %.3f / "
            "%.3f ms; prefill tiles %.3f / %.3f ms (scoring alone %.3f / %.3f; %.1f T MAC/s); ids unlike mma: %lld%s; "
            "%s %.3f / %.3f ms (scoring alone %.3f / %.3f; %.1f T MAC/s); ids unlike mma: %lld\n",
            T, ctx, ms[0][0], ms[0][1], ms[1][0], ms[1][1], ms[2][0], ms[2][1], ms[3][0], ms[3][1],
            pairs * nh * hd / (b1 * 1e-3) / 1e12, (long long)diff[1], diff[1] ? "  <-- FAIL" : "",
            wg ? "wgmma tiles" : "wgmma tiles (not on this device: tiles again)", ms[4][0], ms[4][1], ms[5][0], ms[5][1],
            pairs * nh * hd / (b2 * 1e-3) / 1e12, (long long)diff[2]);
    for (int k = 0; k < 3; k++) free(ids[k]), free(cnt[k]);
    free(pool), free(q), free(w), free(pos), free(base), free(tab);
    tu_free_all();
    return diff[1] ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (!nb_cuda_test_require_gpu()) return 77;
    if (!tu_open()) return 1;
    if ((argc == 4 || argc == 5) && !strcmp(argv[1], "dsa-time")) {
        int rc = dsa_time(atoi(argv[2]), atoi(argv[3]), argc == 5 ? atoi(argv[4]) : 0);
        tu_close();
        return rc;
    }
    if (argc == 4 && !strcmp(argv[1], "dsa-prefill")) {
        int rc = dsa_prefill_time(atoi(argv[2]), atoi(argv[3]));
        tu_close();
        return rc;
    }
    int rc = nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
    tu_close();
    return rc;
}
