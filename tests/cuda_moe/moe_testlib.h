/* Shared by the MoE kernel tests: random NVFP4 matrices in the ModelOpt layout and a
 * float64 SwiGLU expert on their dequantized values (the reference every kernel and the
 * CPU op are held to). Static functions: include once per test executable. */
#ifndef NB_TESTS_CUDA_MOE_TESTLIB_H
#define NB_TESTS_CUDA_MOE_TESTLIB_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/numerics.h"
#include "ops/ops.h"

static uint64_t rng;
static uint32_t rnd32(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng >> 32);
}
static float frand(void) { return (float)(rnd32() >> 8) / 16777216.0f * 2.0f - 1.0f; }

/* A random E4M3 block scale: mostly normal values in [2^-4, 4], some zeros, subnormals and
 * the largest finite value, so every decoding path of the kernel is exercised. */
static uint8_t rand_scale(void)
{
    uint32_t r = rnd32() % 100;
    if (r < 2) return 0;
    if (r < 4) return (uint8_t)(1 + rnd32() % 7);
    if (r < 5) return 0x7E;
    return nb_f32_to_e4m3(exp2f((float)(rnd32() % 1000) / 1000.0f * 6.0f - 4.0f));
}

typedef struct {
    int n, k;
    uint8_t *codes, *scales; /* ModelOpt layout */
    float gs;                /* weight_scale_2 */
} mat;

static void mat_rand(mat *m, int n, int k)
{
    m->n = n, m->k = k;
    m->codes = malloc((size_t)n * k / 2);
    m->scales = malloc((size_t)n * k / 16);
    for (size_t i = 0; i < (size_t)n * k / 2; i++) m->codes[i] = (uint8_t)rnd32();
    for (size_t i = 0; i < (size_t)n * k / 16; i++) m->scales[i] = rand_scale();
    m->gs = 0.02f * (1.0f + 0.5f * frand());
}

static void mat_free(mat *m)
{
    free(m->codes);
    free(m->scales);
}

static float mat_get(const mat *m, int r, int c)
{
    uint8_t code = (m->codes[(size_t)r * m->k / 2 + c / 2] >> ((c & 1) * 4)) & 15;
    return nb_e2m1_to_f32(code) * nb_e4m3_to_f32(m->scales[(size_t)r * m->k / 16 + c / 16]) * m->gs;
}


/* gate/up/down of E experts (host side): w13[e] is [2I, H] (gate rows then up rows), w2[e]
 * [H, I]; gate and up keep separate global scales g13[2e], g13[2e+1]. */
typedef struct {
    int E, H, I;
    mat *w13, *w2;
    float *g13, *g2;
} host_experts;

static void host_experts_make(host_experts *x, int E, int H, int I)
{
    x->E = E, x->H = H, x->I = I;
    x->w13 = calloc((size_t)E, sizeof(mat));
    x->w2 = calloc((size_t)E, sizeof(mat));
    x->g13 = malloc(sizeof(float) * 2 * E);
    x->g2 = malloc(sizeof(float) * E);
    for (int e = 0; e < E; e++) {
        mat_rand(&x->w13[e], 2 * I, H);
        mat_rand(&x->w2[e], H, I);
        x->g13[2 * e] = x->w13[e].gs;
        x->g13[2 * e + 1] = x->w13[e].gs * 1.5f;
        x->g2[e] = x->w2[e].gs;
    }
}

static void host_experts_free(host_experts *x)
{
    for (int e = 0; e < x->E; e++) mat_free(&x->w13[e]), mat_free(&x->w2[e]);
    free(x->w13), free(x->w2), free(x->g13), free(x->g2);
}

/* float64 SwiGLU expert e on token row xr (BF16 values), added with weight rw into acc. */
static void ref_expert(const host_experts *x, int e, const float *xr, double rw, double *acc)
{
    const int H = x->H, I = x->I;
    double *a = malloc(sizeof(double) * I);
    const mat *m13 = &x->w13[e], *m2 = &x->w2[e];
    for (int i = 0; i < I; i++) {
        double gsum = 0, usum = 0;
        for (int h = 0; h < H; h++) {
            gsum += (double)mat_get(m13, i, h) * xr[h];
            usum += (double)mat_get(m13, I + i, h) * xr[h];
        }
        gsum *= x->g13[2 * e] / m13->gs;
        usum *= x->g13[2 * e + 1] / m13->gs;
        a[i] = gsum / (1.0 + exp(-gsum)) * usum;
    }
    for (int h = 0; h < H; h++) {
        double s = 0;
        for (int i = 0; i < I; i++) s += (double)mat_get(m2, h, i) * a[i];
        acc[h] += rw * s;
    }
    free(a);
}

#ifndef NB_MOE_TEST_NO_CPU_OP
/* The CPU reference op (nb_op_moe_experts on a CPU context, ops/cpu/moe.c) on the same
 * ModelOpt-layout weights: out[T, H] F32 (overwritten). x holds the BF16 values as F32. */
static nb_status cpu_op_moe(const host_experts *x, int T, int topk, const float *xf, const int32_t *ids,
                            const float *rw, float *out)
{
    const int E = x->E, H = x->H, I = x->I;
    nb_ops_ctx *ctx = NULL;
    nb_status st = nb_ops_ctx_new_cpu(1, &ctx);
    if (st != NB_OK) return st;
    nb_weight *gate = calloc((size_t)E, sizeof(nb_weight)), *up = calloc((size_t)E, sizeof(nb_weight)),
              *down = calloc((size_t)E, sizeof(nb_weight));
    for (int e = 0; e < E; e++) {
        const mat *m13 = &x->w13[e], *m2 = &x->w2[e];
        gate[e] = (nb_weight){.fmt = NB_WFMT_NVFP4, .n = I, .k = H, .data = m13->codes, .scale = m13->scales,
                              .global_scale = x->g13[2 * e], .block_k = 16, .device = NB_DEVICE_CPU};
        up[e] = gate[e];
        up[e].data = m13->codes + (size_t)I * H / 2;
        up[e].scale = m13->scales + (size_t)I * H / 16;
        up[e].global_scale = x->g13[2 * e + 1];
        down[e] = (nb_weight){.fmt = NB_WFMT_NVFP4, .n = H, .k = I, .data = m2->codes, .scale = m2->scales,
                              .global_scale = x->g2[e], .block_k = 16, .device = NB_DEVICE_CPU};
    }
    nb_moe_weights mw = {E, H, I, gate, up, down};
    nb_tensor tx = nb_tensor_2d((void *)xf, NB_DTYPE_F32, T, H), tids = nb_tensor_2d((void *)ids, NB_DTYPE_I32, T, topk);
    nb_tensor tw = nb_tensor_2d((void *)rw, NB_DTYPE_F32, T, topk), to = nb_tensor_2d(out, NB_DTYPE_F32, T, H);
    st = nb_op_moe_experts(ctx, &tx, &tids, &tw, &mw, 0, &to);
    free(gate), free(up), free(down);
    nb_ops_ctx_free(ctx);
    return st;
}

/* Relative L2 distance of a [n] F32 array from a [n] float64 one. */
static double rel_l2(const float *a, const double *ref, size_t n)
{
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double d = a[i] - ref[i];
        e += d * d, r += ref[i] * ref[i];
    }
    return r > 0 ? sqrt(e / r) : sqrt(e);
}
#endif /* NB_MOE_TEST_NO_CPU_OP: the standalone build has no CPU ops */

#endif
