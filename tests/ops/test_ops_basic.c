/* CPU op unit tests on tiny hand-computed cases: embedding, RMSNorm (+ residual), LayerNorm,
 * RoPE (interleaved / half-split / partial / yarn tables), linear over F32, BF16, NVFP4 and
 * FP8-block weights (including row slices with strides) and the SwiGLU MLP.
 * Run: build-x/tests/test_ops_basic [name]. */
#include <math.h>
#include <string.h>

#include "format/model_config.h"
#include "format/numerics.h"
#include "nbtest.h"
#include "ops/ops.h"

static nb_ops_ctx *ctx(void)
{
    static nb_ops_ctx *c;
    if (!c) nb_ops_ctx_new_cpu(2, &c);
    return c;
}

static nb_weight wf32(const float *d, int64_t n, int64_t k)
{
    return (nb_weight){.fmt = NB_WFMT_F32, .n = n, .k = k, .data = d, .global_scale = 1, .device = NB_DEVICE_CPU};
}

static void test_rmsnorm(void)
{
    float x[4] = {3, 4, 1, -1}, w[2] = {1, 2}, y[4];
    nb_tensor xt = nb_tensor_2d(x, NB_DTYPE_F32, 2, 2), yt = nb_tensor_2d(y, NB_DTYPE_F32, 2, 2);
    NB_CHECK_OK(nb_op_rmsnorm(ctx(), &xt, w, 0.0f, &yt));
    /* row 0: rms = sqrt(12.5); row 1: rms = 1 */
    NB_CHECK_NEAR(y[0], 3 / sqrt(12.5), 1e-6);
    NB_CHECK_NEAR(y[1], 8 / sqrt(12.5), 1e-6);
    NB_CHECK_NEAR(y[2], 1, 1e-6);
    NB_CHECK_NEAR(y[3], -2, 1e-6);
    /* eps enters under the root: x = [1, 1], eps = 3 -> 1/2 */
    float x2[2] = {1, 1}, w2[2] = {1, 1}, y2[2];
    nb_tensor a = nb_tensor_2d(x2, NB_DTYPE_F32, 1, 2), b = nb_tensor_2d(y2, NB_DTYPE_F32, 1, 2);
    NB_CHECK_OK(nb_op_rmsnorm(ctx(), &a, w2, 3.0f, &b));
    NB_CHECK_NEAR(y2[0], 0.5, 1e-7);
    /* wrong shapes are refused with a message */
    nb_tensor bad = nb_tensor_2d(y2, NB_DTYPE_F32, 2, 1);
    NB_CHECK_STATUS(nb_op_rmsnorm(ctx(), &a, w2, 0, &bad), NB_ERR_INVALID_ARG);
}

static void test_add_rmsnorm(void)
{
    float x[2] = {1, 2}, res[2] = {2, 2}, w[2] = {1, 1}, y[2];
    nb_tensor xt = nb_tensor_2d(x, NB_DTYPE_F32, 1, 2), rt = nb_tensor_2d(res, NB_DTYPE_F32, 1, 2),
              yt = nb_tensor_2d(y, NB_DTYPE_F32, 1, 2);
    NB_CHECK_OK(nb_op_add_rmsnorm(ctx(), &xt, &rt, w, 0.0f, &yt));
    NB_CHECK_NEAR(res[0], 3, 0);
    NB_CHECK_NEAR(res[1], 4, 0);
    NB_CHECK_NEAR(y[0], 3 / sqrt(12.5), 1e-6);
    NB_CHECK_NEAR(y[1], 4 / sqrt(12.5), 1e-6);
}

static void test_layernorm(void)
{
    float x[3] = {1, 2, 3}, w[3] = {1, 1, 2}, b[3] = {0, 0.5f, 0}, y[3];
    nb_tensor xt = nb_tensor_2d(x, NB_DTYPE_F32, 1, 3), yt = nb_tensor_2d(y, NB_DTYPE_F32, 1, 3);
    NB_CHECK_OK(nb_op_layernorm(ctx(), &xt, w, b, 0.0f, &yt));
    /* mean 2, biased variance 2/3 */
    NB_CHECK_NEAR(y[0], -1 / sqrt(2.0 / 3), 1e-6);
    NB_CHECK_NEAR(y[1], 0.5, 1e-6);
    NB_CHECK_NEAR(y[2], 2 / sqrt(2.0 / 3), 1e-6);
}

static void test_embedding(void)
{
    nb_bf16 table[6];
    float vals[6] = {1, 2, 3, 4, 5, 6.5f};
    for (int i = 0; i < 6; i++) table[i] = nb_f32_to_bf16(vals[i]);
    nb_weight w = {.fmt = NB_WFMT_BF16, .n = 3, .k = 2, .data = table, .global_scale = 1};
    int32_t ids[2] = {2, 0};
    float out[4];
    nb_tensor o = nb_tensor_2d(out, NB_DTYPE_F32, 2, 2);
    NB_CHECK_OK(nb_op_embedding(ctx(), &w, ids, 2, &o));
    NB_CHECK(out[0] == 5 && out[1] == 6.5f && out[2] == 1 && out[3] == 2);
    int32_t bad[1] = {3};
    nb_tensor o1 = nb_tensor_2d(out, NB_DTYPE_F32, 1, 2);
    NB_CHECK_STATUS(nb_op_embedding(ctx(), &w, bad, 1, &o1), NB_ERR_INVALID_ARG);
}

static void test_rope(void)
{
    nb_rope_config rc = {.type = NB_ROPE_DEFAULT, .theta = 100.0};
    nb_rope r;
    NB_CHECK_OK(nb_rope_init(&rc, 4, &r));
    NB_CHECK_NEAR(r.inv_freq[0], 1.0, 0);
    NB_CHECK_NEAR(r.inv_freq[1], 0.1, 1e-7);
    int32_t pos[1] = {2};
    /* half-split: pairs (0,2) at angle 2, (1,3) at angle 0.2 */
    float x[6] = {1, 2, 3, 4, 7, 8};
    nb_tensor t = nb_tensor_3d(x, NB_DTYPE_F32, 1, 1, 6);
    NB_CHECK_OK(nb_op_rope(ctx(), &t, pos, &r));
    NB_CHECK_NEAR(x[0], 1 * cos(2.0) - 3 * sin(2.0), 1e-6);
    NB_CHECK_NEAR(x[2], 3 * cos(2.0) + 1 * sin(2.0), 1e-6);
    NB_CHECK_NEAR(x[1], 2 * cos(0.2) - 4 * sin(0.2), 1e-6);
    NB_CHECK_NEAR(x[3], 4 * cos(0.2) + 2 * sin(0.2), 1e-6);
    NB_CHECK(x[4] == 7 && x[5] == 8); /* partial rotary: the rest passes */
    /* interleaved: pairs (0,1) at angle 2, (2,3) at angle 0.2 */
    float y[4] = {1, 2, 3, 4};
    r.interleave = 1;
    nb_tensor u = nb_tensor_3d(y, NB_DTYPE_F32, 1, 1, 4);
    NB_CHECK_OK(nb_op_rope(ctx(), &u, pos, &r));
    NB_CHECK_NEAR(y[0], 1 * cos(2.0) - 2 * sin(2.0), 1e-6);
    NB_CHECK_NEAR(y[1], 2 * cos(2.0) + 1 * sin(2.0), 1e-6);
    NB_CHECK_NEAR(y[2], 3 * cos(0.2) - 4 * sin(0.2), 1e-6);
    NB_CHECK_NEAR(y[3], 4 * cos(0.2) + 3 * sin(0.2), 1e-6);
    /* the widest supported head rotates its last pair too; wider is refused */
    nb_rope wide;
    NB_CHECK_OK(nb_rope_init(&rc, 2 * NB_ROPE_MAX_PAIRS, &wide));
    float *big = calloc(2 * NB_ROPE_MAX_PAIRS, sizeof(float));
    big[NB_ROPE_MAX_PAIRS - 1] = 1; /* first element of the last half-split pair */
    nb_tensor bt = nb_tensor_3d(big, NB_DTYPE_F32, 1, 1, 2 * NB_ROPE_MAX_PAIRS);
    NB_CHECK_OK(nb_op_rope(ctx(), &bt, pos, &wide));
    double ang = 2.0 * (double)wide.inv_freq[NB_ROPE_MAX_PAIRS - 1];
    NB_CHECK_NEAR(big[2 * NB_ROPE_MAX_PAIRS - 1], sin(ang), 1e-6);
    free(big);
    NB_CHECK_STATUS(nb_rope_init(&rc, 2 * NB_ROPE_MAX_PAIRS + 2, &wide), NB_ERR_UNSUPPORTED);
    /* position 0 is the identity */
    float z[4] = {1, 2, 3, 4};
    int32_t p0[1] = {0};
    nb_tensor zt = nb_tensor_3d(z, NB_DTYPE_F32, 1, 1, 4);
    NB_CHECK_OK(nb_op_rope(ctx(), &zt, p0, &r));
    NB_CHECK(z[0] == 1 && z[1] == 2 && z[2] == 3 && z[3] == 4);
}

static void test_rope_yarn(void)
{
    /* DeepSeek-style yarn: dim 16, theta 1e4, factor 4, original 256, betas 32/1, mscale 0.9 /
     * mscale_all_dim 0.8. Expected values from HF's formula evaluated in double. */
    nb_rope_config rc = {.type = NB_ROPE_YARN, .theta = 10000.0, .factor = 4, .original_max_position_embeddings = 256,
                         .beta_fast = 32, .beta_slow = 1, .mscale = 0.9, .mscale_all_dim = 0.8};
    nb_rope r;
    NB_CHECK_OK(nb_rope_init(&rc, 16, &r));
    const double want[8] = {1.0, 0.2569350598886808, 0.0625, 0.01383496476323666, 0.0025, 0.0007905694150420947,
                            0.00025, 7.905694150420948e-05};
    for (int i = 0; i < 8; i++) NB_CHECK_NEAR(r.inv_freq[i], want[i], want[i] * 2e-6);
    NB_CHECK_NEAR(r.attention_scaling, 1.0124789803984833, 1e-6);
    /* cos and sin carry the attention factor: at position 0 a vector is scaled by it */
    float x[2] = {1, 0};
    int32_t p0[1] = {0};
    nb_tensor t = nb_tensor_3d(x, NB_DTYPE_F32, 1, 1, 2);
    nb_rope r2;
    NB_CHECK_OK(nb_rope_init(&rc, 2, &r2));
    NB_CHECK_OK(nb_op_rope(ctx(), &t, p0, &r2));
    NB_CHECK_NEAR(x[0], 1.0124789803984833, 1e-6);
}

static void test_linear_formats(void)
{
    /* W = [[1, 2, 0.5], [-1, 0, 3]], x = [[1, 1, 2]] -> y = [4, 5] (+ bias [0.5, -1]) */
    const float wv[6] = {1, 2, 0.5f, -1, 0, 3};
    float x[3] = {1, 1, 2}, y[2];
    nb_tensor xt = nb_tensor_2d(x, NB_DTYPE_F32, 1, 3), yt = nb_tensor_2d(y, NB_DTYPE_F32, 1, 2);
    nb_weight w = wf32(wv, 2, 3);
    NB_CHECK_OK(nb_op_linear(ctx(), &xt, &w, &yt));
    NB_CHECK_NEAR(y[0], 4, 1e-6);
    NB_CHECK_NEAR(y[1], 5, 1e-6);
    float bias[2] = {0.5f, -1};
    w.bias = bias;
    NB_CHECK_OK(nb_op_linear(ctx(), &xt, &w, &yt));
    NB_CHECK_NEAR(y[0], 4.5, 1e-6);
    NB_CHECK_NEAR(y[1], 4, 1e-6);
    nb_bf16 wb[6];
    for (int i = 0; i < 6; i++) wb[i] = nb_f32_to_bf16(wv[i]);
    nb_weight b = {.fmt = NB_WFMT_BF16, .n = 2, .k = 3, .data = wb, .global_scale = 1};
    NB_CHECK_OK(nb_op_linear(ctx(), &xt, &b, &yt));
    NB_CHECK_NEAR(y[0], 4, 1e-6);

    /* NVFP4, one row of 16: byte j holds codes (2j: low nibble, 2j+1: high nibble).
     * Codes 0x2 = 1.0, 0xB = -1.5, 0x7 = 6; E4M3 0x40 = 2.0; weight_scale_2 = 0.25 -> scale 0.5. */
    uint8_t packed[8], scale[1] = {0x40};
    for (int j = 0; j < 8; j++) packed[j] = (uint8_t)(0x2 | (0xB << 4));
    packed[7] = 0x70; /* element 14 = 0, element 15 = 6 */
    nb_weight q = {.fmt = NB_WFMT_NVFP4, .n = 1, .k = 16, .data = packed, .scale = scale, .global_scale = 0.25f,
                   .block_k = 16};
    float deq[16];
    NB_CHECK_OK(nb_weight_dequant_rows(&q, 0, 1, deq));
    NB_CHECK(deq[0] == 0.5f && deq[1] == -0.75f && deq[14] == 0 && deq[15] == 3.0f);
    float x16[16], y1[1];
    for (int i = 0; i < 16; i++) x16[i] = 1;
    nb_tensor x1 = nb_tensor_2d(x16, NB_DTYPE_F32, 1, 16), y1t = nb_tensor_2d(y1, NB_DTYPE_F32, 1, 1);
    NB_CHECK_OK(nb_op_linear(ctx(), &x1, &q, &y1t));
    NB_CHECK_NEAR(y1[0], 7 * (0.5 - 0.75) + 3.0, 1e-6);

    /* FP8 block 2x2 on a [3, 3] weight: partial edge blocks take their own scale. E4M3 0x38 = 1. */
    uint8_t f8[9];
    memset(f8, 0x38, sizeof f8);
    float sinv[4] = {1, 2, 3, 4}; /* [ceil(3/2), ceil(3/2)] */
    nb_weight f = {.fmt = NB_WFMT_FP8_BLOCK, .n = 3, .k = 3, .data = f8, .scale = sinv, .global_scale = 1, .block_n = 2,
                   .block_k = 2};
    float fd[9];
    NB_CHECK_OK(nb_weight_dequant_rows(&f, 0, 3, fd));
    const float fw[9] = {1, 1, 2, 1, 1, 2, 3, 3, 4};
    for (int i = 0; i < 9; i++) NB_CHECK_NEAR(fd[i], fw[i], 0);
    /* row_stride: every other row of a BF16 [4, 3] tensor, as a [2, 3] weight */
    nb_bf16 w4[12];
    for (int i = 0; i < 12; i++) w4[i] = nb_f32_to_bf16((float)i);
    nb_weight ev = {.fmt = NB_WFMT_BF16, .n = 2, .k = 3, .data = w4, .global_scale = 1, .row_stride = 12};
    NB_CHECK_OK(nb_weight_dequant_rows(&ev, 0, 2, fd));
    NB_CHECK(fd[0] == 0 && fd[2] == 2 && fd[3] == 6 && fd[5] == 8);
    /* a slice starting at row 2 of a block-scaled tensor (its own block row of scales) */
    nb_weight sl = f;
    sl.n = 1;
    sl.data = f8 + 6;
    sl.scale = sinv + 2;
    NB_CHECK_OK(nb_weight_dequant_rows(&sl, 0, 1, fd));
    NB_CHECK(fd[0] == 3 && fd[2] == 4);
    /* NVFP4 with k not a multiple of 16 is refused */
    nb_weight badq = q;
    badq.k = 8;
    NB_CHECK_STATUS(nb_weight_check(&badq, "badq"), NB_ERR_INVALID_ARG);
}

static void test_linear_large_blocks(void)
{
    /* More rows than one dequantization block: 70000 x 64 BF16 rows = 4.5M floats. */
    const int64_t n = 70000, k = 64;
    nb_bf16 *w = malloc(sizeof(nb_bf16) * (size_t)(n * k));
    float x[2 * 64], *y = malloc(sizeof(float) * (size_t)(2 * n));
    for (int64_t i = 0; i < n * k; i++) w[i] = nb_f32_to_bf16((float)((i * 7) % 13) - 6);
    for (int i = 0; i < 2 * 64; i++) x[i] = (float)(i % 5) - 2;
    nb_weight wb = {.fmt = NB_WFMT_BF16, .n = n, .k = k, .data = w, .global_scale = 1};
    nb_tensor xt = nb_tensor_2d(x, NB_DTYPE_F32, 2, k), yt = nb_tensor_2d(y, NB_DTYPE_F32, 2, n);
    NB_CHECK_OK(nb_op_linear(ctx(), &xt, &wb, &yt));
    int bad = 0;
    for (int64_t r = 0; r < n; r += 997)
        for (int t = 0; t < 2; t++) {
            double s = 0;
            for (int64_t c = 0; c < k; c++) s += (double)nb_bf16_to_f32(w[r * k + c]) * x[t * k + c];
            bad += fabs(s - y[t * n + r]) > 1e-4;
        }
    NB_CHECK(bad == 0);
    free(w);
    free(y);
}

static void test_mlp(void)
{
    /* hidden 1, inter 1: down(silu(1 * x) * (2 * x)) with down = 3, x = 1 */
    float g = 1, u = 2, d = 3, x = 1, out = 10;
    nb_weight G = wf32(&g, 1, 1), U = wf32(&u, 1, 1), D = wf32(&d, 1, 1);
    nb_tensor xt = nb_tensor_2d(&x, NB_DTYPE_F32, 1, 1), ot = nb_tensor_2d(&out, NB_DTYPE_F32, 1, 1);
    const double want = 3 * (1 / (1 + exp(-1.0))) * 2;
    NB_CHECK_OK(nb_op_mlp(ctx(), &xt, &G, &U, &D, 0, &ot));
    NB_CHECK_NEAR(out, want, 1e-6);
    NB_CHECK_OK(nb_op_mlp(ctx(), &xt, &G, &U, &D, 1, &ot));
    NB_CHECK_NEAR(out, 2 * want, 1e-6);
}

static const nb_test tests[] = {
    {"rmsnorm", test_rmsnorm},         {"add_rmsnorm", test_add_rmsnorm},
    {"layernorm", test_layernorm},     {"embedding", test_embedding},
    {"rope", test_rope},               {"rope_yarn", test_rope_yarn},
    {"linear_formats", test_linear_formats}, {"linear_large_blocks", test_linear_large_blocks},
    {"mlp", test_mlp},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
