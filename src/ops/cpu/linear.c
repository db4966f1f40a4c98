/* CPU reference: dense linear layers (y = x W^T + b) and the SwiGLU MLP, over weights in any
 * nb_weight format. The weight is dequantized to float32 a block of rows at a time (bounded
 * scratch, never the whole matrix when it is large) and multiplied with OpenBLAS sgemm.
 * Exercised by tests/ops/test_ops_linear.c. */
#include <cblas.h>
#include <string.h>

#include "base/error.h"
#include "ops/cpu/cpu_ops.h"

/* Rows of W dequantized per block: 4M floats (16 MB) of scratch. Smaller blocks help a
 * single token (less memory traffic) but hurt batches (sgemm on thin panels); on the 2-core
 * machine the difference was within the noise of a shared box, so one size for now. */
#ifndef NB_LINEAR_BLOCK_FLOATS
#define NB_LINEAR_BLOCK_FLOATS (4 << 20)
#endif
static int64_t rows_per_block(int64_t n, int64_t k)
{
    int64_t r = (int64_t)(NB_LINEAR_BLOCK_FLOATS) / (k > 0 ? k : 1);
    if (r < 1) r = 1;
    return r < n ? r : n;
}

nb_status nb_cpu_linear_raw(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w, float *y,
                            int64_t ldy, int accumulate)
{
    if (T == 0) return NB_OK;
    const int64_t n = w->n, k = w->k, rb = rows_per_block(n, k);
    float *wb = nb_ops_scratch(ctx, 0, (size_t)(rb * k) * sizeof(float));
    if (!wb) return NB_ERR_OUT_OF_MEMORY;
    for (int64_t r0 = 0; r0 < n; r0 += rb) {
        int64_t nr = NB_MIN(rb, n - r0);
        NB_TRY(nb_cpu_dequant_rows(ctx, w, r0, nr, wb));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)nr, (int)k, 1.0f, x, (int)ldx, wb, (int)k,
                    accumulate ? 1.0f : 0.0f, y + r0, (int)ldy);
    }
    if (w->bias)
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < n; j++) y[t * ldy + j] += w->bias[j];
    return NB_OK;
}

nb_status nb_cpu_linear(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *w, nb_tensor *y)
{
    NB_TRY(nb_cpu_check_f32("linear", "x", x, 2));
    NB_TRY(nb_cpu_check_f32("linear", "y", y, 2));
    NB_TRY(nb_weight_check(w, "linear"));
    if (x->shape[1] != w->k || y->shape[1] != w->n || y->shape[0] != x->shape[0])
        return nb_error(NB_ERR_INVALID_ARG, "linear: x [%lld, %lld] W [%lld, %lld] y [%lld, %lld] do not agree",
                        (long long)x->shape[0], (long long)x->shape[1], (long long)w->n, (long long)w->k,
                        (long long)y->shape[0], (long long)y->shape[1]);
    return nb_cpu_linear_raw(ctx, x->data, x->stride[0], x->shape[0], w, y->data, y->stride[0], 0);
}

nb_status nb_cpu_swiglu_raw(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *gate,
                            const nb_weight *up, const nb_weight *down, float *g, float *u, float *y, int64_t ldy,
                            int accumulate)
{
    const int64_t inter = gate->n;
    NB_TRY(nb_cpu_linear_raw(ctx, x, ldx, T, gate, g, inter, 0));
    NB_TRY(nb_cpu_linear_raw(ctx, x, ldx, T, up, u, inter, 0));
    for (int64_t i = 0; i < T * inter; i++) g[i] = nb_cpu_silu(g[i]) * u[i];
    return nb_cpu_linear_raw(ctx, g, inter, T, down, y, ldy, accumulate);
}

nb_status nb_cpu_mlp(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *gate, const nb_weight *up,
                     const nb_weight *down, int accumulate, nb_tensor *out)
{
    NB_TRY(nb_cpu_check_f32("mlp", "x", x, 2));
    NB_TRY(nb_cpu_check_f32("mlp", "out", out, 2));
    NB_TRY(nb_weight_check(gate, "mlp gate"));
    NB_TRY(nb_weight_check(up, "mlp up"));
    NB_TRY(nb_weight_check(down, "mlp down"));
    const int64_t T = x->shape[0], H = x->shape[1], inter = gate->n;
    if (gate->k != H || up->k != H || up->n != inter || down->k != inter || down->n != H || out->shape[0] != T ||
        out->shape[1] != H)
        return nb_error(NB_ERR_INVALID_ARG, "mlp: x [%lld, %lld], gate [%lld, %lld], up [%lld, %lld], down [%lld, %lld]",
                        (long long)T, (long long)H, (long long)gate->n, (long long)gate->k, (long long)up->n,
                        (long long)up->k, (long long)down->n, (long long)down->k);
    float *g = nb_ops_scratch(ctx, 1, (size_t)(T * inter) * sizeof(float));
    float *u = nb_ops_scratch(ctx, 2, (size_t)(T * inter) * sizeof(float));
    if (!g || !u) return NB_ERR_OUT_OF_MEMORY;
    return nb_cpu_swiglu_raw(ctx, x->data, x->stride[0], T, gate, up, down, g, u, out->data, out->stride[0],
                             accumulate);
}
