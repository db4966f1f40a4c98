/* The fused launches of ops.h on the CPU: by definition the composition of the ops they
 * name, part after part (the parts do not overlap, so the order does not matter). The CUDA
 * backend's single-kernel versions are checked against these in
 * tests/cuda_ops/test_cuda_vs_cpu.c; tests/ops/test_ops_fused.c checks these against the
 * separate ops. */
#include "base/error.h"
#include "ops/cpu/cpu_ops.h"

static nb_status parts_ok(const char *op, int n)
{
    if (n < 1 || n > NB_FUSED_MAX) return nb_error(NB_ERR_INVALID_ARG, "%s: %d parts (1..%d)", op, n, NB_FUSED_MAX);
    return NB_OK;
}

nb_status nb_cpu_rope_n(nb_ops_ctx *ctx, int n, nb_tensor *const *x, const int32_t *pos, const nb_rope *const *rope)
{
    NB_TRY(parts_ok("rope_n", n));
    for (int i = 0; i < n; i++) {
        nb_status st = nb_cpu_rope(ctx, x[i], pos, rope[i]);
        if (st != NB_OK) return nb_error_wrap(st, "rope_n: part %d", i);
    }
    return NB_OK;
}

nb_status nb_cpu_norm_n(nb_ops_ctx *ctx, int n, const nb_norm_part *parts)
{
    NB_TRY(parts_ok("norm_n", n));
    for (int i = 0; i < n; i++) {
        const nb_norm_part *p = &parts[i];
        nb_status st;
        switch (p->kind) {
        case NB_NORM_RMS: st = nb_cpu_rmsnorm(ctx, p->x, p->weight, p->eps, p->out); break;
        case NB_NORM_LAYER: st = nb_cpu_layernorm(ctx, p->x, p->weight, p->bias, p->eps, p->out); break;
        case NB_NORM_SCALE:
            st = p->x->data == p->out->data ? nb_cpu_scale(ctx, p->out, p->s)
                                            : nb_error(NB_ERR_INVALID_ARG, "norm_n: a scale part must be in place");
            break;
        default: st = nb_error(NB_ERR_INVALID_ARG, "norm_n: kind %d", (int)p->kind);
        }
        if (st != NB_OK) return nb_error_wrap(st, "norm_n: part %d", i);
    }
    return NB_OK;
}

nb_status nb_cpu_set_rows_n(nb_ops_ctx *ctx, int n, const nb_tensor *const *src, const int32_t *rows,
                            nb_tensor *const *dst)
{
    NB_TRY(parts_ok("set_rows_n", n));
    for (int i = 0; i < n; i++) {
        nb_status st = nb_cpu_set_rows(ctx, src[i], rows, dst[i]);
        if (st != NB_OK) return nb_error_wrap(st, "set_rows_n: part %d", i);
    }
    return NB_OK;
}

nb_status nb_cpu_norm_rope_set_n(nb_ops_ctx *ctx, const nb_norm_rope_set *p)
{
    if (p->n_norm < 0 || p->n_norm > NB_FUSED_MAX || p->n_rope < 0 || p->n_rope > NB_FUSED_MAX || p->n_set < 0 ||
        p->n_set > NB_FUSED_MAX || p->n_norm + p->n_rope + p->n_set == 0)
        return nb_error(NB_ERR_INVALID_ARG, "norm_rope_set_n: %d norm, %d rope, %d set parts (0..%d each, not none)",
                        p->n_norm, p->n_rope, p->n_set, NB_FUSED_MAX);
    if (p->n_norm) NB_TRY(nb_cpu_norm_n(ctx, p->n_norm, p->norms));
    if (p->n_rope) NB_TRY(nb_cpu_rope_n(ctx, p->n_rope, p->rope_x, p->pos, p->rope));
    if (p->n_set) NB_TRY(nb_cpu_set_rows_n(ctx, p->n_set, p->src, p->rows, p->dst));
    return NB_OK;
}

nb_status nb_cpu_moe_gate_route(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *gate, nb_tensor *logits,
                                const nb_router_params *p, nb_tensor *ids, nb_tensor *weights)
{
    nb_status st = nb_cpu_linear(ctx, x, gate, logits);
    if (st != NB_OK) return nb_error_wrap(st, "moe_gate_route: gate");
    return nb_cpu_moe_route(ctx, logits, p, ids, weights);
}
