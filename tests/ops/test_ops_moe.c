/* CPU MoE ops: the router (softmax / sigmoid, correction bias for the choice only, group
 * limits, norm_topk_prob, routed scaling) on hand-computed cases, and the routed experts op
 * against a per-token float64 evaluation, in BF16, NVFP4 and FP8-block weights (the NVFP4
 * form is what the CUDA MoE kernel is tested against). Run: build-x/tests/test_ops_moe. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/numerics.h"
#include "nbtest.h"
#include "ops/ops.h"

static nb_ops_ctx *ctx(void)
{
    static nb_ops_ctx *c;
    if (!c) nb_ops_ctx_new_cpu(2, &c);
    return c;
}

static void test_route_softmax(void)
{
    /* probs 1/6, 2/6, 3/6 (+ a tiny fourth): top-2 = experts 2, 1; renormalized 0.6, 0.4 */
    float lg[4] = {0, logf(2), logf(3), -20}, w[2];
    int32_t ids[2];
    nb_tensor l = nb_tensor_2d(lg, NB_DTYPE_F32, 1, 4), wt = nb_tensor_2d(w, NB_DTYPE_F32, 1, 2),
              it = nb_tensor_2d(ids, NB_DTYPE_I32, 1, 2);
    nb_router_params p = {.n_experts = 4, .top_k = 2, .score = NB_ROUTER_SOFTMAX, .n_group = 1, .topk_group = 1,
                          .norm_topk_prob = 1, .routed_scaling_factor = 1};
    NB_CHECK_OK(nb_op_moe_route(ctx(), &l, &p, &it, &wt));
    NB_CHECK(ids[0] == 2 && ids[1] == 1);
    NB_CHECK_NEAR(w[0], 0.6, 1e-6);
    NB_CHECK_NEAR(w[1], 0.4, 1e-6);
    p.norm_topk_prob = 0;
    NB_CHECK_OK(nb_op_moe_route(ctx(), &l, &p, &it, &wt));
    double z = 1 + 2 + 3 + exp(-20.0);
    NB_CHECK_NEAR(w[0], 3 / z, 1e-6);
}

static void test_route_sigmoid_bias_groups(void)
{
    /* all scores sigmoid(0) = 0.5; bias [0.1, 0, 0, 0.3] decides: groups {0,1} (top-2 sum
     * 1.1) vs {2,3} (1.3) -> group 1; experts 3 then 2; weights from the unbiased scores. */
    float lg[4] = {0, 0, 0, 0}, bias[4] = {0.1f, 0, 0, 0.3f}, w[2];
    int32_t ids[2];
    nb_tensor l = nb_tensor_2d(lg, NB_DTYPE_F32, 1, 4), wt = nb_tensor_2d(w, NB_DTYPE_F32, 1, 2),
              it = nb_tensor_2d(ids, NB_DTYPE_I32, 1, 2);
    nb_router_params p = {.n_experts = 4, .top_k = 2, .score = NB_ROUTER_SIGMOID, .group = NB_ROUTER_GROUP_TOP2,
                          .n_group = 2, .topk_group = 1, .correction_bias = bias, .norm_topk_prob = 1,
                          .routed_scaling_factor = 2.5f};
    NB_CHECK_OK(nb_op_moe_route(ctx(), &l, &p, &it, &wt));
    NB_CHECK(ids[0] == 3 && ids[1] == 2);
    NB_CHECK_NEAR(w[0], 1.25, 1e-6);
    NB_CHECK_NEAR(w[1], 1.25, 1e-6);
    /* without groups the bias picks experts 3 and 0 */
    p.group = NB_ROUTER_GREEDY;
    NB_CHECK_OK(nb_op_moe_route(ctx(), &l, &p, &it, &wt));
    NB_CHECK(ids[0] == 3 && ids[1] == 0);
    /* GROUP_MAX ranks groups by their best expert: {0,1} max 0.6 vs {2,3} 0.8 -> same as TOP2 */
    p.group = NB_ROUTER_GROUP_MAX;
    lg[1] = 2; /* sigmoid(2) = 0.88 + 0 -> group 0 now has max 0.88 > 0.8 */
    NB_CHECK_OK(nb_op_moe_route(ctx(), &l, &p, &it, &wt));
    NB_CHECK(ids[0] == 1 && ids[1] == 0);
    double s1 = 1 / (1 + exp(-2.0));
    NB_CHECK_NEAR(w[0], 2.5 * s1 / (s1 + 0.5), 1e-6);
    /* impossible grouping is refused */
    p.n_group = 3;
    NB_CHECK_STATUS(nb_op_moe_route(ctx(), &l, &p, &it, &wt), NB_ERR_INVALID_ARG);
}

typedef struct expert_set {
    int E, H, I;
    float *g, *u, *d;          /* float32 values every format must reproduce [E][I][H] ... */
    nb_weight *wg, *wu, *wd;
} expert_set;

/* Values that every format represents exactly: e2m1 codes times a power-of-two scale. */
static float exact_value(unsigned i)
{
    static const float v[8] = {0, 0.5f, 1, 1.5f, 2, 3, -1, -0.5f};
    return v[(i * 2654435761u) >> 29] * 0.25f;
}

static void build_experts(expert_set *s, nb_wfmt fmt)
{
    const int E = s->E, H = s->H, I = s->I;
    s->g = malloc(sizeof(float) * E * I * H);
    s->u = malloc(sizeof(float) * E * I * H);
    s->d = malloc(sizeof(float) * E * H * I);
    for (int i = 0; i < E * I * H; i++) {
        s->g[i] = exact_value((unsigned)i);
        s->u[i] = exact_value((unsigned)i * 7 + 3);
        s->d[i] = exact_value((unsigned)i * 13 + 5);
    }
    s->wg = calloc((size_t)E, sizeof(nb_weight));
    s->wu = calloc((size_t)E, sizeof(nb_weight));
    s->wd = calloc((size_t)E, sizeof(nb_weight));
    float *src[3] = {s->g, s->u, s->d};
    nb_weight *dst[3] = {s->wg, s->wu, s->wd};
    for (int m = 0; m < 3; m++)
        for (int e = 0; e < E; e++) {
            int n = m == 2 ? H : I, k = m == 2 ? I : H;
            const float *f = src[m] + (size_t)e * n * k;
            nb_weight *w = &dst[m][e];
            *w = (nb_weight){.fmt = fmt, .n = n, .k = k, .global_scale = 1, .device = NB_DEVICE_CPU};
            if (fmt == NB_WFMT_BF16) {
                nb_bf16 *b = malloc(sizeof(nb_bf16) * n * k);
                for (int i = 0; i < n * k; i++) b[i] = nb_f32_to_bf16(f[i]);
                w->data = b;
            } else if (fmt == NB_WFMT_NVFP4) {
                /* scale 0.25 = E4M3 0x28 (0.25) x global 1: code = value / 0.25 */
                uint8_t *q = malloc((size_t)n * k / 2), *sc = malloc((size_t)n * k / 16);
                memset(sc, 0x28, (size_t)n * k / 16);
                for (int i = 0; i < n * k; i += 2)
                    q[i / 2] = (uint8_t)(nb_f32_to_e2m1(f[i] * 4) | nb_f32_to_e2m1(f[i + 1] * 4) << 4);
                w->data = q;
                w->scale = sc;
                w->block_k = 16;
            } else { /* FP8 block 16 x 16 with scale_inv 0.25 */
                uint8_t *q = malloc((size_t)n * k);
                int sn = (n + 15) / 16, sk = (k + 15) / 16;
                float *sc = malloc(sizeof(float) * sn * sk);
                for (int i = 0; i < sn * sk; i++) sc[i] = 0.25f;
                for (int i = 0; i < n * k; i++) q[i] = nb_f32_to_e4m3(f[i] * 4);
                w->data = q;
                w->scale = sc;
                w->block_n = w->block_k = 16;
            }
        }
}

static void free_experts(expert_set *s)
{
    nb_weight *w[3] = {s->wg, s->wu, s->wd};
    for (int m = 0; m < 3; m++) {
        for (int e = 0; e < s->E; e++) {
            free((void *)w[m][e].data);
            free((void *)w[m][e].scale);
        }
        free(w[m]);
    }
    free(s->g), free(s->u), free(s->d);
}

static void experts_case(nb_wfmt fmt)
{
    expert_set s = {.E = 6, .H = 32, .I = 48};
    build_experts(&s, fmt);
    const int T = 5, K = 2, H = s.H, I = s.I;
    float x[5 * 32], w[5 * 2], out[5 * 32];
    int32_t ids[5 * 2] = {0, 3, 3, 5, 1, -1, 5, 0, 3, 2}; /* -1: a dropped slot */
    for (int i = 0; i < T * H; i++) x[i] = sinf((float)i * 0.37f);
    for (int i = 0; i < T * K; i++) w[i] = 0.3f + 0.1f * (float)i;
    nb_tensor xt = nb_tensor_2d(x, NB_DTYPE_F32, T, H), it = nb_tensor_2d(ids, NB_DTYPE_I32, T, K),
              wt = nb_tensor_2d(w, NB_DTYPE_F32, T, K), ot = nb_tensor_2d(out, NB_DTYPE_F32, T, H);
    nb_moe_weights mw = {s.E, H, I, s.wg, s.wu, s.wd};
    NB_CHECK_OK(nb_op_moe_experts(ctx(), &xt, &it, &wt, &mw, 0, &ot));
    double worst = 0;
    for (int t = 0; t < T; t++) {
        for (int c = 0; c < H; c++) {
            double acc = 0;
            for (int j = 0; j < K; j++) {
                int e = ids[t * K + j];
                if (e < 0) continue;
                double y = 0;
                for (int i = 0; i < I; i++) {
                    double g = 0, u = 0;
                    for (int h = 0; h < H; h++) {
                        g += (double)s.g[((size_t)e * I + i) * H + h] * x[t * H + h];
                        u += (double)s.u[((size_t)e * I + i) * H + h] * x[t * H + h];
                    }
                    y += (double)s.d[((size_t)e * H + c) * I + i] * (g / (1 + exp(-g)) * u);
                }
                acc += w[t * K + j] * y;
            }
            worst = fmax(worst, fabs(acc - out[t * H + c]) / (1 + fabs(acc)));
        }
    }
    NB_CHECK_MSG(worst < 1e-5, "format %d: worst error %g", (int)fmt, worst);
    /* accumulate adds on top */
    float before = out[7];
    NB_CHECK_OK(nb_op_moe_experts(ctx(), &xt, &it, &wt, &mw, 1, &ot));
    NB_CHECK_NEAR(out[7], 2 * before, 1e-5 * (1 + fabs(before)));
    /* an expert id past the table is an error */
    ids[3] = 6;
    NB_CHECK_STATUS(nb_op_moe_experts(ctx(), &xt, &it, &wt, &mw, 0, &ot), NB_ERR_INVALID_ARG);
    free_experts(&s);
}

static void test_experts_bf16(void) { experts_case(NB_WFMT_BF16); }
static void test_experts_nvfp4(void) { experts_case(NB_WFMT_NVFP4); }
static void test_experts_fp8(void) { experts_case(NB_WFMT_FP8_BLOCK); }

static const nb_test tests[] = {
    {"route_softmax", test_route_softmax},
    {"route_sigmoid_bias_groups", test_route_sigmoid_bias_groups},
    {"experts_bf16", test_experts_bf16},
    {"experts_nvfp4", test_experts_nvfp4},
    {"experts_fp8", test_experts_fp8},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
