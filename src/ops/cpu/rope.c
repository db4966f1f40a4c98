/* CPU reference: rotary position embedding tables (HF's default and yarn rope_init) and their
 * application, in the interleaved layout (pairs 2i, 2i+1: DeepSeek's rope_interleave) or the
 * half-split layout (i, i + dim/2: Llama/NeoX, GLM, Qwen, the DSA indexer). The interleaved
 * form rotates the same pairs HF's de-interleave-then-rotate-half does, so every q.k dot
 * product is identical; only the order of the rotated elements differs, and q and k agree.
 * Exercised by tests/ops/test_ops_basic.c. */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "format/model_config.h"
#include "ops/cpu/cpu_ops.h"

static double yarn_mscale(double scale, double m)
{
    if (scale <= 1.0) return 1.0;
    return 0.1 * m * log(scale) + 1.0;
}

static double yarn_correction_dim(double rotations, int dim, double base, double max_pos)
{
    return (dim * log(max_pos / (rotations * 2.0 * M_PI))) / (2.0 * log(base));
}

nb_status nb_rope_init(const struct nb_rope_config *rc, int rotary_dim, nb_rope *out)
{
    memset(out, 0, sizeof *out);
    if (rotary_dim <= 0 || rotary_dim % 2 || rotary_dim / 2 > NB_ROPE_MAX_PAIRS)
        return nb_error(NB_ERR_UNSUPPORTED, "rope: rotary dim %d (must be even, <= %d)", rotary_dim,
                        2 * NB_ROPE_MAX_PAIRS);
    if (!(rc->theta > 0)) return nb_error(NB_ERR_INVALID_ARG, "rope: rope_theta %g", rc->theta);
    out->dim = rotary_dim;
    out->interleave = rc->interleave;
    out->attention_scaling = 1.0f;
    const int half = rotary_dim / 2;
    /* HF computes base ** (arange(0, dim, 2) / dim) in float32. */
    float pos_freq[NB_ROPE_MAX_PAIRS];
    for (int i = 0; i < half; i++) pos_freq[i] = powf((float)rc->theta, (float)(2 * i) / (float)rotary_dim);
    if (rc->type == NB_ROPE_DEFAULT) {
        for (int i = 0; i < half; i++) out->inv_freq[i] = 1.0f / pos_freq[i];
        return NB_OK;
    }
    if (rc->type != NB_ROPE_YARN) return nb_error(NB_ERR_UNSUPPORTED, "rope: unknown rope type %d", (int)rc->type);
    double factor = rc->factor;
    if (!(factor > 0)) return nb_error(NB_ERR_INVALID_ARG, "rope: yarn factor %g", factor);
    double orig = rc->original_max_position_embeddings;
    if (!(orig > 0)) return nb_error(NB_ERR_INVALID_ARG, "rope: yarn original_max_position_embeddings %g", orig);
    double att = rc->attention_factor;
    if (att <= 0) {
        if (rc->mscale != 0 && rc->mscale_all_dim != 0)
            att = yarn_mscale(factor, rc->mscale) / yarn_mscale(factor, rc->mscale_all_dim);
        else
            att = yarn_mscale(factor, 1.0);
    }
    double beta_fast = rc->beta_fast > 0 ? rc->beta_fast : 32.0;
    double beta_slow = rc->beta_slow > 0 ? rc->beta_slow : 1.0;
    double low = floor(yarn_correction_dim(beta_fast, rotary_dim, rc->theta, orig));
    double high = ceil(yarn_correction_dim(beta_slow, rotary_dim, rc->theta, orig));
    if (low < 0) low = 0;
    if (high > rotary_dim - 1) high = rotary_dim - 1;
    if (low == high) high += 0.001;
    for (int i = 0; i < half; i++) {
        float ramp = ((float)i - (float)low) / (float)(high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float extrap_w = 1.0f - ramp;
        float inv_extrap = 1.0f / pos_freq[i];
        float inv_interp = 1.0f / ((float)factor * pos_freq[i]);
        out->inv_freq[i] = inv_interp * (1.0f - extrap_w) + inv_extrap * extrap_w;
    }
    out->attention_scaling = (float)att;
    return NB_OK;
}

nb_status nb_cpu_rope(nb_ops_ctx *ctx, nb_tensor *x, const int32_t *pos, const nb_rope *rope)
{
    NB_TRY(nb_cpu_check_f32("rope", "x", x, 3));
    if (x->shape[2] < rope->dim)
        return nb_error(NB_ERR_INVALID_ARG, "rope: head has %lld dims, fewer than the %d rotated",
                        (long long)x->shape[2], rope->dim);
    const int half = rope->dim / 2;
    float c[NB_ROPE_MAX_PAIRS], s[NB_ROPE_MAX_PAIRS];
    for (int64_t t = 0; t < x->shape[0]; t++) {
        for (int i = 0; i < half; i++) {
            float ang = (float)pos[t] * rope->inv_freq[i]; /* one float32 rounding, as HF */
            c[i] = (float)cos((double)ang) * rope->attention_scaling;
            s[i] = (float)sin((double)ang) * rope->attention_scaling;
        }
        for (int64_t h = 0; h < x->shape[1]; h++) {
            float *v = (float *)x->data + t * x->stride[0] + h * x->stride[1];
            for (int i = 0; i < half; i++) {
                int a = rope->interleave ? 2 * i : i;
                int b = rope->interleave ? 2 * i + 1 : i + half;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * c[i] - x1 * s[i];
                v[b] = x1 * c[i] + x0 * s[i];
            }
        }
    }
    return NB_OK;
}
