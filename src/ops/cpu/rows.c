/* CPU reference: row movement and scaling used by the backend-neutral forward pass (KV pool
 * writes, logit-row gathers, the DSA weight scale). Exercised by tests/ops (through the
 * forward tests) and tests/cuda_ops/test_cuda_vs_cpu.c (against the CUDA versions). */
#include <string.h>

#include "base/error.h"
#include "format/numerics.h"
#include "ops/cpu/cpu_ops.h"

static nb_status check_width(const char *op, const nb_tensor *a, const nb_tensor *b)
{
    NB_TRY(nb_cpu_check_f32(op, "src", a, 2));
    NB_TRY(nb_cpu_check_f32(op, "dst", b, 2));
    if (a->shape[1] != b->shape[1])
        return nb_error(NB_ERR_INVALID_ARG, "%s: row widths %lld and %lld differ", op, (long long)a->shape[1],
                        (long long)b->shape[1]);
    return NB_OK;
}

nb_status nb_cpu_set_rows(nb_ops_ctx *ctx, const nb_tensor *src, const int32_t *rows, nb_tensor *dst)
{
    NB_TRY(nb_cpu_check_f32("set_rows", "src", src, 2));
    NB_TRY(nb_cpu_check_f32_bf16("set_rows", "dst", dst, 2));
    if (src->shape[1] != dst->shape[1])
        return nb_error(NB_ERR_INVALID_ARG, "set_rows: row widths %lld and %lld differ", (long long)src->shape[1],
                        (long long)dst->shape[1]);
    const int64_t w = src->shape[1];
    for (int64_t t = 0; t < src->shape[0]; t++) /* every row checked before any is written */
        if (rows[t] < 0 || rows[t] >= dst->shape[0])
            return nb_error(NB_ERR_INVALID_ARG, "set_rows: row %d of token %lld outside [0, %lld)", rows[t],
                            (long long)t, (long long)dst->shape[0]);
    for (int64_t t = 0; t < src->shape[0]; t++) {
        const float *s = (const float *)src->data + t * src->stride[0];
        if (dst->dtype == NB_DTYPE_BF16) { /* the BF16 latent rows: rounded to nearest even */
            nb_bf16 *d = (nb_bf16 *)dst->data + (int64_t)rows[t] * dst->stride[0];
            for (int64_t j = 0; j < w; j++) d[j] = nb_f32_to_bf16(s[j]);
        } else {
            memcpy((float *)dst->data + (int64_t)rows[t] * dst->stride[0], s, (size_t)w * sizeof(float));
        }
    }
    return NB_OK;
}

nb_status nb_cpu_get_rows(nb_ops_ctx *ctx, const nb_tensor *x, const int32_t *rows, nb_tensor *out)
{
    NB_TRY(check_width("get_rows", x, out));
    const int64_t w = x->shape[1];
    for (int64_t r = 0; r < out->shape[0]; r++) {
        if (rows[r] < 0 || rows[r] >= x->shape[0])
            return nb_error(NB_ERR_INVALID_ARG, "get_rows: row %d outside [0, %lld)", rows[r], (long long)x->shape[0]);
        memcpy((float *)out->data + r * out->stride[0], (const float *)x->data + (int64_t)rows[r] * x->stride[0],
               (size_t)w * sizeof(float));
    }
    return NB_OK;
}

nb_status nb_cpu_scale(nb_ops_ctx *ctx, nb_tensor *x, float s)
{
    NB_TRY(nb_cpu_check_f32("scale", "x", x, 2));
    for (int64_t r = 0; r < x->shape[0]; r++) {
        float *p = (float *)x->data + r * x->stride[0];
        for (int64_t j = 0; j < x->shape[1]; j++) p[j] *= s;
    }
    return NB_OK;
}
