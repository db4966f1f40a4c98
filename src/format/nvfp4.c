/* NVFP4 (ModelOpt layout) quantization and dequantization, scalar reference code
 * (format/nvfp4.h). Exercise: build-fmt/tests/test_nvfp4. */
#include "format/nvfp4.h"

#include <math.h>

#include "base/error.h"
#include "format/numerics.h"

/* ModelOpt's e2m1_bounds. A magnitude v gets ord = #bounds strictly below v (torch's
 * searchsorted, right=False), plus one when v equals bounds[1], [3] or [5]. */
static const float nb_e2m1_bounds[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};

uint8_t nb_nvfp4_e2m1_encode(float v)
{
    uint8_t sign = v < 0 ? 8 : 0; /* ModelOpt: sign_bit = (w < 0); -0.0 encodes as +0 */
    float a = fabsf(v);
    if (a != a) return sign | 7;
    /* branch-free: the count of bounds strictly below a, plus the round-up equalities */
    int ord = (a > nb_e2m1_bounds[0]) + (a > nb_e2m1_bounds[1]) + (a > nb_e2m1_bounds[2]) + (a > nb_e2m1_bounds[3]) +
              (a > nb_e2m1_bounds[4]) + (a > nb_e2m1_bounds[5]) + (a > nb_e2m1_bounds[6]);
    ord += (a == nb_e2m1_bounds[1]) + (a == nb_e2m1_bounds[3]) + (a == nb_e2m1_bounds[5]);
    return (uint8_t)(sign | ord);
}

uint8_t nb_nvfp4_scale_to_e4m3(float s)
{
    if (!(s > 0)) return s == 0 ? 0 : nb_f32_to_e4m3(s); /* zero, negative, NaN: the general encoder */
    if (s >= 448.0f) return 0x7e;
    /* largest positive code with value <= s, by binary search over the monotonic table */
    int lo = 0, hi = 126;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (nb_e4m3_table[mid] <= s) lo = mid;
        else hi = mid - 1;
    }
    if (nb_e4m3_table[lo] == s) return (uint8_t)lo;
    float m = 0.5f * (nb_e4m3_table[lo] + nb_e4m3_table[lo + 1]);
    if (s < m) return (uint8_t)lo;
    if (s > m) return (uint8_t)(lo + 1);
    return (uint8_t)((lo & 1) ? lo + 1 : lo); /* tie: even code */
}

float nb_absmax_f32(const float *w, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(w[i]);
        if (a > m) m = a;
    }
    return m;
}

void nb_nvfp4_quantize_rows_ref(const float *w, int64_t rows, int64_t k, float weight_scale_2, uint8_t *packed,
                                uint8_t *scales)
{
    NB_ASSERT(k % NB_NVFP4_GROUP == 0 && weight_scale_2 > 0);
    const int64_t groups = k / NB_NVFP4_GROUP;
    /* float32 throughout, in ModelOpt's order of operations: 6 * ws2 first, then divide */
    const float denom = 6.0f * weight_scale_2;
    for (int64_t r = 0; r < rows; r++) {
        const float *wr = w + r * k;
        for (int64_t g = 0; g < groups; g++) {
            const float *x = wr + g * NB_NVFP4_GROUP;
            float s = nb_absmax_f32(x, NB_NVFP4_GROUP) / denom;
            if (s == 0.0f) s = 1.0f;
            if (s < NB_NVFP4_SCALE_MIN) s = NB_NVFP4_SCALE_MIN;
            uint8_t sc = nb_nvfp4_scale_to_e4m3(s);
            scales[r * groups + g] = sc;
            const float q = nb_e4m3_to_f32(sc) * weight_scale_2;
            uint8_t *out = packed + r * (k / 2) + g * (NB_NVFP4_GROUP / 2);
            for (int j = 0; j < NB_NVFP4_GROUP; j += 2) {
                uint8_t lo = nb_nvfp4_e2m1_encode(x[j] / q), hi = nb_nvfp4_e2m1_encode(x[j + 1] / q);
                out[j / 2] = (uint8_t)(lo | hi << 4);
            }
        }
    }
}

nb_status nb_nvfp4_quantize(const char *what, const float *w, int64_t n, int64_t k, float shared_scale_2,
                            uint8_t *packed, uint8_t *scales, float *weight_scale_2)
{
    if (n < 0 || k <= 0 || k % NB_NVFP4_GROUP)
        return nb_error(NB_ERR_INVALID_ARG, "%s: NVFP4 needs K (%lld) to be a positive multiple of %d", what,
                        (long long)k, NB_NVFP4_GROUP);
    for (int64_t i = 0; i < n * k; i++)
        if (!isfinite(w[i])) return nb_error(NB_ERR_INVALID_ARG, "%s: element %lld is not finite", what, (long long)i);
    float ws2 = shared_scale_2;
    if (!(ws2 > 0)) {
        float amax = nb_absmax_f32(w, (size_t)(n * k));
        ws2 = nb_nvfp4_global_scale(amax > 0 ? amax : 1.0f);
    }
    nb_nvfp4_quantize_rows_ref(w, n, k, ws2, packed, scales);
    *weight_scale_2 = ws2;
    return NB_OK;
}

void nb_nvfp4_dequant_row(const uint8_t *packed, const uint8_t *scales, float weight_scale_2, int64_t k, float *out)
{
    for (int64_t g = 0; g < k / NB_NVFP4_GROUP; g++) {
        const float s = nb_e4m3_to_f32(scales[g]) * weight_scale_2;
        const uint8_t *p = packed + g * (NB_NVFP4_GROUP / 2);
        float *o = out + g * NB_NVFP4_GROUP;
        for (int j = 0; j < NB_NVFP4_GROUP / 2; j++) {
            o[2 * j] = nb_e2m1_to_f32(p[j] & 15) * s;
            o[2 * j + 1] = nb_e2m1_to_f32(p[j] >> 4) * s;
        }
    }
}

void nb_nvfp4_dequant_rows(const uint8_t *packed, const uint8_t *scales, float weight_scale_2, int64_t k, int64_t row0,
                           int64_t rows, float *out)
{
    for (int64_t r = 0; r < rows; r++)
        nb_nvfp4_dequant_row(packed + (row0 + r) * (k / 2), scales + (row0 + r) * (k / NB_NVFP4_GROUP),
                             weight_scale_2, k, out + r * k);
}
