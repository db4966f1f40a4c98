/* nb_weight: linear-layer weights in their stored format, and their exact dequantization
 * to float32 (the definition every backend's fused dequant-GEMM must reproduce).
 * Exercised by tests/ops/test_ops_linear.c. */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "format/numerics.h"
#include "ops/ops.h"

int64_t nb_weight_row_bytes(nb_wfmt fmt, int64_t k)
{
    switch (fmt) {
    case NB_WFMT_F32: return k * 4;
    case NB_WFMT_BF16: return k * 2;
    case NB_WFMT_NVFP4: return k / 2;
    case NB_WFMT_FP8_BLOCK: return k;
    }
    return 0;
}

static int64_t scale_row_bytes(const nb_weight *w)
{
    if (w->fmt == NB_WFMT_NVFP4) return w->k / 16;
    if (w->fmt == NB_WFMT_FP8_BLOCK) return (w->k + w->block_k - 1) / w->block_k * 4;
    return 0;
}

nb_status nb_weight_check(const nb_weight *w, const char *what)
{
    if (!w->data) return nb_error(NB_ERR_INVALID_ARG, "%s: weight has no data", what);
    if (w->n <= 0 || w->k <= 0)
        return nb_error(NB_ERR_INVALID_ARG, "%s: weight shape [%lld, %lld]", what, (long long)w->n, (long long)w->k);
    if (w->fmt == NB_WFMT_NVFP4) {
        if (w->k % 16) return nb_error(NB_ERR_INVALID_ARG, "%s: NVFP4 needs k %% 16 == 0 (k = %lld)", what, (long long)w->k);
        if (!w->scale) return nb_error(NB_ERR_INVALID_ARG, "%s: NVFP4 weight without weight_scale", what);
        if (!isfinite(w->global_scale))
            return nb_error(NB_ERR_INVALID_ARG, "%s: NVFP4 weight_scale_2 is not finite", what);
    }
    if (w->fmt == NB_WFMT_FP8_BLOCK) {
        if (!w->scale) return nb_error(NB_ERR_INVALID_ARG, "%s: FP8 weight without weight_scale_inv", what);
        if (w->block_n <= 0 || w->block_k <= 0)
            return nb_error(NB_ERR_INVALID_ARG, "%s: FP8 block size %dx%d", what, w->block_n, w->block_k);
    }
    return NB_OK;
}

nb_status nb_weight_dequant_rows(const nb_weight *w, int64_t r0, int64_t nr, float *dst)
{
    if (w->device != NB_DEVICE_CPU) return nb_error(NB_ERR_INVALID_ARG, "dequant: weight is not in host memory");
    if (r0 < 0 || nr < 0 || r0 + nr > w->n)
        return nb_error(NB_ERR_INVALID_ARG, "dequant: rows [%lld, %lld) outside [0, %lld)", (long long)r0,
                        (long long)(r0 + nr), (long long)w->n);
    const int64_t k = w->k;
    const int64_t rs = w->row_stride ? w->row_stride : nb_weight_row_bytes(w->fmt, k);
    const int64_t ss = w->scale_row_stride ? w->scale_row_stride : scale_row_bytes(w);
    const uint8_t *base = w->data;
    for (int64_t r = r0; r < r0 + nr; r++) {
        const uint8_t *row = base + r * rs;
        float *d = dst + (r - r0) * k;
        switch (w->fmt) {
        case NB_WFMT_F32: memcpy(d, row, (size_t)k * 4); break;
        case NB_WFMT_BF16: {
            const nb_bf16 *h = (const nb_bf16 *)row;
            for (int64_t j = 0; j < k; j++) d[j] = nb_bf16_to_f32(h[j]);
            break;
        }
        case NB_WFMT_NVFP4: {
            /* value = e2m1 * (e4m3 * global): the two scales are multiplied first, in
             * float32, as ModelOpt does (format/nvfp4.h); the order decides the last bit. */
            const uint8_t *sc = (const uint8_t *)w->scale + r * ss;
            for (int64_t b = 0; b < k / 16; b++) {
                float s = nb_e4m3_to_f32(sc[b]) * w->global_scale;
                for (int j = 0; j < 8; j++) {
                    uint8_t byte = row[b * 8 + j];
                    d[b * 16 + 2 * j] = nb_e2m1_to_f32(byte & 15) * s;
                    d[b * 16 + 2 * j + 1] = nb_e2m1_to_f32(byte >> 4) * s;
                }
            }
            break;
        }
        case NB_WFMT_FP8_BLOCK: {
            const float *sc = (const float *)((const uint8_t *)w->scale + (r / w->block_n) * ss);
            for (int64_t j = 0; j < k; j++) d[j] = nb_e4m3_to_f32(row[j]) * sc[j / w->block_k];
            break;
        }
        }
    }
    return NB_OK;
}
