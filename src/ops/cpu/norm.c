/* CPU reference: embedding lookup, RMSNorm (plain and with the fused residual add),
 * LayerNorm and elementwise add. Rows are [rows, d] views with a free row stride.
 * Sums accumulate in double so the reference is at least as exact as HF's float32.
 * Exercised by tests/ops/test_ops_basic.c. */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "ops/cpu/cpu_ops.h"

nb_status nb_cpu_embedding(nb_ops_ctx *ctx, const nb_weight *table, const int32_t *ids, int n, nb_tensor *out)
{
    NB_TRY(nb_cpu_check_f32("embedding", "out", out, 2));
    if (out->shape[0] != n || out->shape[1] != table->k)
        return nb_error(NB_ERR_INVALID_ARG, "embedding: out is [%lld, %lld], expected [%d, %lld]",
                        (long long)out->shape[0], (long long)out->shape[1], n, (long long)table->k);
    for (int t = 0; t < n; t++) {
        if (ids[t] < 0 || ids[t] >= table->n)
            return nb_error(NB_ERR_INVALID_ARG, "embedding: token id %d at %d outside [0, %lld)", ids[t], t,
                            (long long)table->n);
        NB_TRY(nb_weight_dequant_rows(table, ids[t], 1, (float *)out->data + t * out->stride[0]));
    }
    return NB_OK;
}

static nb_status check_rows(const char *op, const nb_tensor *a, const char *an, const nb_tensor *b, const char *bn)
{
    NB_TRY(nb_cpu_check_f32(op, an, a, 2));
    NB_TRY(nb_cpu_check_f32(op, bn, b, 2));
    if (a->shape[0] != b->shape[0] || a->shape[1] != b->shape[1])
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s [%lld, %lld] and %s [%lld, %lld] differ", op, an,
                        (long long)a->shape[0], (long long)a->shape[1], bn, (long long)b->shape[0],
                        (long long)b->shape[1]);
    return NB_OK;
}

static void rms_row(const float *x, const float *w, float eps, int64_t d, float *y)
{
    double ss = 0;
    for (int64_t j = 0; j < d; j++) ss += (double)x[j] * x[j];
    float inv = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
    for (int64_t j = 0; j < d; j++) y[j] = w[j] * (x[j] * inv);
}

nb_status nb_cpu_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, float eps, nb_tensor *out)
{
    NB_TRY(check_rows("rmsnorm", x, "x", out, "out"));
    const int64_t d = x->shape[1];
    for (int64_t r = 0; r < x->shape[0]; r++)
        rms_row((const float *)x->data + r * x->stride[0], weight, eps, d, (float *)out->data + r * out->stride[0]);
    return NB_OK;
}

nb_status nb_cpu_add_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *residual, const float *weight,
                             float eps, nb_tensor *out)
{
    NB_TRY(check_rows("add_rmsnorm", x, "x", residual, "residual"));
    NB_TRY(check_rows("add_rmsnorm", x, "x", out, "out"));
    const int64_t d = x->shape[1];
    for (int64_t r = 0; r < x->shape[0]; r++) {
        const float *xr = (const float *)x->data + r * x->stride[0];
        float *res = (float *)residual->data + r * residual->stride[0];
        for (int64_t j = 0; j < d; j++) res[j] += xr[j];
        rms_row(res, weight, eps, d, (float *)out->data + r * out->stride[0]);
    }
    return NB_OK;
}

nb_status nb_cpu_layernorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, const float *bias, float eps,
                           nb_tensor *out)
{
    NB_TRY(check_rows("layernorm", x, "x", out, "out"));
    const int64_t d = x->shape[1];
    for (int64_t r = 0; r < x->shape[0]; r++) {
        const float *xr = (const float *)x->data + r * x->stride[0];
        float *y = (float *)out->data + r * out->stride[0];
        double mean = 0, var = 0;
        for (int64_t j = 0; j < d; j++) mean += xr[j];
        mean /= (double)d;
        for (int64_t j = 0; j < d; j++) var += ((double)xr[j] - mean) * ((double)xr[j] - mean);
        var /= (double)d;
        double inv = 1.0 / sqrt(var + (double)eps);
        for (int64_t j = 0; j < d; j++) {
            float v = (float)(((double)xr[j] - mean) * inv);
            y[j] = v * weight[j] + (bias ? bias[j] : 0.0f);
        }
    }
    return NB_OK;
}

nb_status nb_cpu_add(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *y)
{
    NB_TRY(check_rows("add", x, "x", y, "y"));
    for (int64_t r = 0; r < x->shape[0]; r++) {
        const float *xr = (const float *)x->data + r * x->stride[0];
        float *yr = (float *)y->data + r * y->stride[0];
        for (int64_t j = 0; j < x->shape[1]; j++) yr[j] += xr[j];
    }
    return NB_OK;
}
