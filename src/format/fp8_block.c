/* FP8 block-scaled weights (format/fp8_block.h): dequantization and a reference
 * quantizer. Exercise: build-fmt/tests/test_nvfp4 fp8. */
#include "format/fp8_block.h"

#include <math.h>

#include "base/error.h"
#include "format/numerics.h"

nb_status nb_fp8_block_check(const char *what, int64_t n, int64_t k, int64_t sn, int64_t sk, int bn, int bk)
{
    if (bn <= 0 || bk <= 0) return nb_error(NB_ERR_FORMAT, "%s: FP8 block size [%d, %d]", what, bn, bk);
    if (sn != nb_fp8_block_count(n, bn) || sk != nb_fp8_block_count(k, bk))
        return nb_error(NB_ERR_FORMAT, "%s: weight_scale_inv is [%lld, %lld] but weight [%lld, %lld] in [%d, %d] blocks needs [%lld, %lld]",
                        what, (long long)sn, (long long)sk, (long long)n, (long long)k, bn, bk,
                        (long long)nb_fp8_block_count(n, bn), (long long)nb_fp8_block_count(k, bk));
    return NB_OK;
}

void nb_fp8_block_dequant_rows(const uint8_t *w, const float *scale_inv, int64_t k, int bn, int bk, int64_t row0,
                               int64_t rows, float *out)
{
    const int64_t sk = nb_fp8_block_count(k, bk);
    for (int64_t r = 0; r < rows; r++) {
        const int64_t n = row0 + r;
        const float *srow = scale_inv + (n / bn) * sk;
        const uint8_t *wr = w + n * k;
        float *o = out + r * k;
        for (int64_t c = 0; c < k; c++) o[c] = nb_e4m3_to_f32(wr[c]) * srow[c / bk];
    }
}

void nb_fp8_block_quantize_ref(const float *w, int64_t n, int64_t k, int bn, int bk, uint8_t *q, float *scale_inv)
{
    const int64_t sn = nb_fp8_block_count(n, bn), sk = nb_fp8_block_count(k, bk);
    for (int64_t bi = 0; bi < sn; bi++) {
        for (int64_t bj = 0; bj < sk; bj++) {
            const int64_t r1 = NB_MIN((bi + 1) * bn, n), c1 = NB_MIN((bj + 1) * bk, k);
            float amax = 0;
            for (int64_t r = bi * bn; r < r1; r++)
                for (int64_t c = bj * bk; c < c1; c++) amax = fmaxf(amax, fabsf(w[r * k + c]));
            const float s = amax > 0 ? amax / 448.0f : 1.0f;
            scale_inv[bi * sk + bj] = s;
            for (int64_t r = bi * bn; r < r1; r++)
                for (int64_t c = bj * bk; c < c1; c++) q[r * k + c] = nb_f32_to_e4m3(w[r * k + c] / s);
        }
    }
}
