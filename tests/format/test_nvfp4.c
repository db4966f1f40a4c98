/* Tests for format/nvfp4.h and format/fp8_block.h: the E2M1 bound rule at every bound,
 * the ModelOpt recipe on hand-checked blocks, quantize -> dequantize within the E2M1 grid,
 * the nibble order, and a byte-exact comparison with a PyTorch oracle of the recipe
 * (tests/format/data/nvfp4_oracle.safetensors, made by tests/format/nvfp4_oracle.py).
 * Run from the repository root: build-fmt/tests/test_nvfp4 [NAME_SUBSTRING] */
#include "nbtest.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/fp8_block.h"
#include "format/numerics.h"
#include "format/nvfp4.h"
#include "format/safetensors.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_e2m1_bounds(void)
{
    static const float bounds[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    /* equal to a bound: lower code, except 0.75, 1.75, 3.5 (ModelOpt's bounds[[1,3,5]]) */
    static const uint8_t at[7] = {0, 2, 2, 4, 4, 6, 6};
    for (int i = 0; i < 7; i++) {
        NB_CHECK_MSG(nb_nvfp4_e2m1_encode(bounds[i]) == at[i], "bound %g -> %d", bounds[i], nb_nvfp4_e2m1_encode(bounds[i]));
        NB_CHECK(nb_nvfp4_e2m1_encode(-bounds[i]) == (8 | at[i]));
        NB_CHECK(nb_nvfp4_e2m1_encode(nextafterf(bounds[i], 0)) == i);
        NB_CHECK(nb_nvfp4_e2m1_encode(nextafterf(bounds[i], 10)) == i + 1);
    }
    NB_CHECK(nb_nvfp4_e2m1_encode(0.0f) == 0 && nb_nvfp4_e2m1_encode(-0.0f) == 0);
    NB_CHECK(nb_nvfp4_e2m1_encode(6.0f) == 7 && nb_nvfp4_e2m1_encode(1e9f) == 7 && nb_nvfp4_e2m1_encode(-7.0f) == 15);
    /* the rule is round-to-nearest-even: agree with the plain RNE encoder everywhere */
    for (int i = 0; i < 200000; i++) {
        float v = frand() * 7.0f;
        if (nb_nvfp4_e2m1_encode(v) != nb_f32_to_e2m1(v) && v != 0) {
            NB_CHECK_MSG(0, "v=%g: bound rule %d, RNE %d", v, nb_nvfp4_e2m1_encode(v), nb_f32_to_e2m1(v));
            break;
        }
    }
    for (unsigned c = 0; c < 16; c++) {
        float v = nb_e2m1_to_f32((uint8_t)c);
        NB_CHECK(nb_nvfp4_e2m1_encode(v) == (c == 8 ? 0 : c));
    }
}

/* the fast scale encoder agrees with the general one on every float in (0, 500] at every
 * 64th bit pattern, on every code value and on every midpoint */
static void test_scale_encoder(void)
{
    uint32_t lo, hi;
    float f0 = 1e-12f, f1 = 500.0f;
    memcpy(&lo, &f0, 4);
    memcpy(&hi, &f1, 4);
    int bad = 0;
    for (uint32_t u = lo; u <= hi; u += 64) {
        float f;
        memcpy(&f, &u, 4);
        bad += nb_nvfp4_scale_to_e4m3(f) != nb_f32_to_e4m3(f);
    }
    for (int c = 0; c < 126; c++) {
        float a = nb_e4m3_to_f32((uint8_t)c), b = nb_e4m3_to_f32((uint8_t)(c + 1)), m = 0.5f * (a + b);
        bad += nb_nvfp4_scale_to_e4m3(a) != c;
        bad += nb_nvfp4_scale_to_e4m3(m) != nb_f32_to_e4m3(m);
        bad += nb_nvfp4_scale_to_e4m3(nextafterf(m, 0)) != nb_f32_to_e4m3(nextafterf(m, 0));
        bad += nb_nvfp4_scale_to_e4m3(nextafterf(m, 1000)) != nb_f32_to_e4m3(nextafterf(m, 1000));
    }
    bad += nb_nvfp4_scale_to_e4m3(0.0f) != 0;
    NB_CHECK_MSG(bad == 0, "%d disagreements", bad);
}

/* ws2 = 2^-10 exactly (amax = 6 * 448 * 2^-10 = 2.625), block scale s = 1: w / q = w * 2^10
 * is exact, so the values hit each bound exactly. */
static void test_recipe_exact(void)
{
    float w[2][16];
    const float u = 1.0f / 1024;
    /* row 0: first block holds amax 2.625 (w/q would be 2688 -> its own scale 448) */
    for (int j = 0; j < 16; j++) w[0][j] = 0;
    w[0][0] = 2.625f;
    /* row 1: block amax 6 * 2^-10 -> s = 1.0 exactly; values on the bounds */
    static const float v[16] = {6.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f,
                                -0.25f, -0.75f, -2.5f, -3.5f, -6.0f, 0.5f, 0.0f, 4.0f};
    for (int j = 0; j < 16; j++) w[1][j] = v[j] * u;
    uint8_t packed[2][8], scales[2];
    float ws2;
    NB_CHECK_OK(nb_nvfp4_quantize("exact", &w[0][0], 2, 16, 0, &packed[0][0], scales, &ws2));
    NB_CHECK(ws2 == u);
    NB_CHECK(scales[0] == nb_f32_to_e4m3(448.0f) && scales[1] == 0x38); /* 0x38 = 1.0 */
    /* row 0: 2.625 / (448 * 2^-10) = 6 -> code 7; zeros elsewhere */
    NB_CHECK(packed[0][0] == 0x07);
    for (int j = 1; j < 8; j++) NB_CHECK(packed[0][j] == 0);
    static const uint8_t want[16] = {7, 0, 2, 2, 4, 4, 6, 6, 8, 10, 12, 14, 15, 1, 0, 6};
    for (int j = 0; j < 16; j++) {
        uint8_t code = (uint8_t)(j & 1 ? packed[1][j / 2] >> 4 : packed[1][j / 2] & 15);
        NB_CHECK_MSG(code == want[j], "element %d (%g): code %d want %d", j, v[j], code, want[j]);
    }
    /* dequantization: low nibble is the even element */
    float out[16];
    nb_nvfp4_dequant_row(packed[1], &scales[1], ws2, 16, out);
    NB_CHECK(out[0] == 6.0f * u && out[1] == 0.0f && out[2] == 1.0f * u && out[6] == 4.0f * u && out[12] == -6.0f * u);
    uint8_t one[8] = {0x21, 0, 0, 0, 0, 0, 0, 0xf0}, sc = 0x38;
    nb_nvfp4_dequant_row(one, &sc, 1.0f, 16, out);
    NB_CHECK(out[0] == 0.5f && out[1] == 1.0f && out[14] == 0.0f && out[15] == -6.0f);
}

/* |deq - w| within half the local E2M1 step (times the block's scale), plus what the
 * saturation at 6 adds when the E4M3 scale rounded down. */
static int within_grid(float w, float deq, float q)
{
    float a = fabsf(w) / q;
    float half = a < 2 ? 0.25f : a < 4 ? 0.5f : 1.0f;
    float sat = a > 6 ? a - 6 : 0;
    return fabsf(deq - w) <= (half + sat) * q * (1 + 1e-6f);
}

static void test_roundtrip(void)
{
    enum { N = 37, K = 96 };
    float *w = malloc(sizeof(float) * N * K), *deq = malloc(sizeof(float) * N * K);
    uint8_t *packed = malloc(N * K / 2), *scales = malloc(N * K / 16);
    for (int i = 0; i < N * K; i++) w[i] = frand() * 0.05f;
    for (int j = 0; j < 16; j++) w[3 * K + j] = 0;            /* an all-zero block: scale 1.0 */
    for (int j = 16; j < 32; j++) w[4 * K + j] *= 1e-6f;      /* a tiny block: scale floor 2^-9 */
    w[5 * K + 7] = 0.9f;                                      /* an outlier sets amax */
    float ws2;
    NB_CHECK_OK(nb_nvfp4_quantize("roundtrip", w, N, K, 0, packed, scales, &ws2));
    NB_CHECK(ws2 == 0.9f / 2688.0f);
    nb_nvfp4_dequant_rows(packed, scales, ws2, K, 0, N, deq);
    int bad = 0;
    for (int r = 0; r < N; r++) {
        for (int g = 0; g < K / 16; g++) {
            float bamax = 0;
            for (int j = 0; j < 16; j++) bamax = fmaxf(bamax, fabsf(w[r * K + g * 16 + j]));
            float s = bamax / (6.0f * ws2);
            if (s == 0) s = 1.0f;
            if (s < 0.001953125f) s = 0.001953125f;
            uint8_t sc = scales[r * (K / 16) + g];
            if (sc != nb_f32_to_e4m3(s)) bad++;
            float q = nb_e4m3_to_f32(sc) * ws2;
            for (int j = 0; j < 16; j++) {
                int i = r * K + g * 16 + j;
                if (!within_grid(w[i], deq[i], q)) {
                    if (bad++ < 5) fprintf(stderr, "  row %d col %d: w %g deq %g q %g\n", r, g * 16 + j, w[i], deq[i], q);
                }
            }
        }
    }
    NB_CHECK(bad == 0);
    NB_CHECK(scales[3 * (K / 16)] == 0x38);
    NB_CHECK(scales[4 * (K / 16) + 1] == 0x01);
    /* rows are independent: quantizing a slice gives the same bytes (streaming) */
    uint8_t p2[K / 2], s2[K / 16];
    nb_nvfp4_quantize_rows_ref(w + 11 * K, 1, K, ws2, p2, s2);
    NB_CHECK(!memcmp(p2, packed + 11 * K / 2, K / 2) && !memcmp(s2, scales + 11 * K / 16, K / 16));
    /* shared weight_scale_2 (gate/up): used as given */
    float shared = 2.0f / 2688.0f, got;
    NB_CHECK_OK(nb_nvfp4_quantize("shared", w, N, K, shared, packed, scales, &got));
    NB_CHECK(got == shared);
    /* errors */
    NB_CHECK_STATUS(nb_nvfp4_quantize("odd", w, 2, 24, 0, packed, scales, &got), NB_ERR_INVALID_ARG);
    NB_CHECK(strstr(nb_last_error(), "odd") != NULL);
    w[9] = NAN;
    NB_CHECK_STATUS(nb_nvfp4_quantize("nan", w, N, K, 0, packed, scales, &got), NB_ERR_INVALID_ARG);
    memset(w, 0, sizeof(float) * N * K);
    NB_CHECK_OK(nb_nvfp4_quantize("zeros", w, N, K, 0, packed, scales, &got));
    nb_nvfp4_dequant_rows(packed, scales, got, K, 0, N, deq);
    for (int i = 0; i < N * K; i++) NB_CHECK(deq[i] == 0);
    free(w);
    free(deq);
    free(packed);
    free(scales);
}

static void test_fp8_block(void)
{
    enum { N = 300, K = 200 }; /* partial edge blocks both ways with [128, 128] */
    float *w = malloc(sizeof(float) * N * K), *deq = malloc(sizeof(float) * N * K);
    uint8_t *q = malloc(N * K);
    const int64_t sn = nb_fp8_block_count(N, 128), sk = nb_fp8_block_count(K, 128);
    NB_CHECK(sn == 3 && sk == 2);
    float *s = malloc(sizeof(float) * (size_t)(sn * sk));
    for (int i = 0; i < N * K; i++) w[i] = frand() * (1 + (i % 7));
    nb_fp8_block_quantize_ref(w, N, K, 128, 128, q, s);
    nb_fp8_block_dequant_rows(q, s, K, 128, 128, 0, N, deq);
    int bad = 0;
    for (int r = 0; r < N; r++) {
        for (int c = 0; c < K; c++) {
            float sc = s[(r / 128) * sk + c / 128];
            float want = nb_e4m3_to_f32(q[r * K + c]) * sc;
            /* E4M3 has 3 mantissa bits: relative error <= 2^-4, absolute floor at subnormals */
            if (deq[r * K + c] != want || fabsf(deq[r * K + c] - w[r * K + c]) > fabsf(w[r * K + c]) / 16 + sc * 0.001f)
                bad++;
        }
    }
    NB_CHECK(bad == 0);
    /* the edge block's scale comes from its own elements only */
    float amax = 0;
    for (int r = 256; r < N; r++)
        for (int c = 128; c < K; c++) amax = fmaxf(amax, fabsf(w[r * K + c]));
    NB_CHECK(s[2 * sk + 1] == amax / 448.0f);
    /* a slice dequantizes identically */
    nb_fp8_block_dequant_rows(q, s, K, 128, 128, 250, 10, deq);
    for (int c = 0; c < K; c++) NB_CHECK(deq[c] == nb_e4m3_to_f32(q[250 * K + c]) * s[1 * sk + c / 128]);
    NB_CHECK_OK(nb_fp8_block_check("ok", N, K, 3, 2, 128, 128));
    NB_CHECK_STATUS(nb_fp8_block_check("model.layers.0.mlp.down_proj", N, K, 2, 2, 128, 128), NB_ERR_FORMAT);
    NB_CHECK(strstr(nb_last_error(), "down_proj") != NULL);
    free(w);
    free(deq);
    free(q);
    free(s);
}

/* tests/format/data/nvfp4_oracle.safetensors: for each case X, X.w (F32 [n, k]) and what a
 * PyTorch implementation of the ModelOpt recipe made of it: X.weight, X.weight_scale,
 * X.weight_scale_2; cases named "shared*" were quantized with X.shared_scale_2. */
static void test_torch_oracle(void)
{
    nb_checkpoint *ck;
    NB_CHECK_OK(nb_checkpoint_open("tests/format/data/nvfp4_oracle.safetensors", &ck));
    if (!ck) return;
    int cases = 0;
    for (int i = 0; i < nb_checkpoint_count(ck); i++) {
        const nb_st_tensor *t = nb_checkpoint_at(ck, i);
        size_t l = strlen(t->name);
        if (l < 2 || strcmp(t->name + l - 2, ".w")) continue;
        char base[128], name[160];
        snprintf(base, sizeof base, "%.*s", (int)(l - 2), t->name);
        const nb_st_tensor *wt, *ws, *w2, *sh;
        snprintf(name, sizeof name, "%s.weight", base);
        NB_CHECK_OK(nb_checkpoint_get(ck, name, &wt));
        snprintf(name, sizeof name, "%s.weight_scale", base);
        NB_CHECK_OK(nb_checkpoint_get(ck, name, &ws));
        snprintf(name, sizeof name, "%s.weight_scale_2", base);
        NB_CHECK_OK(nb_checkpoint_get(ck, name, &w2));
        snprintf(name, sizeof name, "%s.shared_scale_2", base);
        sh = nb_checkpoint_find(ck, name);
        if (!wt || !ws || !w2) continue;
        const int64_t n = t->shape[0], k = t->shape[1];
        NB_CHECK(t->dtype == NB_DTYPE_F32 && wt->dtype == NB_DTYPE_U8 && ws->dtype == NB_DTYPE_F8_E4M3);
        NB_CHECK(wt->shape[0] == n && wt->shape[1] == k / 2 && ws->shape[1] == k / 16 && w2->nbytes == 4);
        float *w = malloc(t->nbytes), ws2, oracle_ws2, shared = 0;
        memcpy(w, t->data, t->nbytes);
        memcpy(&oracle_ws2, w2->data, 4);
        if (sh) memcpy(&shared, sh->data, 4);
        uint8_t *p = malloc(wt->nbytes), *s = malloc(ws->nbytes);
        NB_CHECK_OK(nb_nvfp4_quantize(base, w, n, k, shared, p, s, &ws2));
        NB_CHECK_MSG(ws2 == oracle_ws2, "%s: weight_scale_2 %.9g vs oracle %.9g", base, ws2, oracle_ws2);
        size_t dp = 0, ds = 0;
        for (size_t b = 0; b < wt->nbytes; b++) dp += p[b] != ((const uint8_t *)wt->data)[b];
        for (size_t b = 0; b < ws->nbytes; b++) ds += s[b] != ((const uint8_t *)ws->data)[b];
        NB_CHECK_MSG(dp == 0 && ds == 0, "%s: %zu packed and %zu scale bytes differ from the oracle", base, dp, ds);
        free(w);
        free(p);
        free(s);
        cases++;
    }
    NB_CHECK_MSG(cases >= 3, "only %d oracle cases", cases);
    nb_checkpoint_close(ck);
}

static const nb_test tests[] = {
    {"e2m1_bounds", test_e2m1_bounds}, {"scale_encoder", test_scale_encoder}, {"recipe_exact", test_recipe_exact}, {"roundtrip", test_roundtrip},
    {"fp8_block", test_fp8_block},     {"torch_oracle", test_torch_oracle},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
