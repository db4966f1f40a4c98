/* The arithmetic of nb_op_sample (ops.h), written once for the CPU op (ops/cpu/sample.c) and
 * the CUDA op (ops/cuda/sample.cu) so that both make bit-identical decisions: every value a
 * decision depends on (penalized logits, the weights exp((l - m) / T), the kept set, the
 * draw) is computed with single IEEE operations (rounded multiply and add spelled out, no contraction, no library
 * exp whose last bit differs between glibc and CUDA) and integer sums, which are the same in
 * any order. Only the log-probabilities (reported, never decided on) use library exp/log.
 * Exercised by tests/engine/test_sampling.c and tests/cuda_ops/test_cuda_sample.c. */
#ifndef NB_OPS_SAMPLE_MATH_H
#define NB_OPS_SAMPLE_MATH_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define NB_SM_FN static inline __host__ __device__
#else
#define NB_SM_FN static inline
#endif

/* Device code would otherwise fuse a*b+c and round divisions differently: spell each op.
 * a*b+c is a rounded multiply then a rounded add on both sides (not fmaf: without -mfma the
 * host would call glibc's fmaf nine times per token, 4x slower than the whole sampler). */
#if defined(__CUDA_ARCH__)
#define NB_SM_MUL(a, b) __fmul_rn(a, b)
#define NB_SM_ADD(a, b) __fadd_rn(a, b)
#define NB_SM_SUB(a, b) __fsub_rn(a, b)
#define NB_SM_DIV(a, b) __fdiv_rn(a, b)
#define NB_SM_DMUL(a, b) __dmul_rn(a, b)
#define NB_SM_U2D(x) __ull2double_rn(x)
#define NB_SM_D2U(x) __double2ull_rz(x)
#define NB_SM_F2U(x) __float2ull_rz(x)
#define NB_SM_FBITS(x) __float_as_uint(x)
#define NB_SM_BITSF(x) __uint_as_float(x)
#else
/* Host: the project builds C11 in ISO mode, where GCC does not contract a*b+c; clang would
 * (its default is FP_CONTRACT ON), so it is told not to for the functions below. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#define NB_SM_MUL(a, b) ((a) * (b))
#define NB_SM_ADD(a, b) ((a) + (b))
#define NB_SM_SUB(a, b) ((a) - (b))
#define NB_SM_DIV(a, b) ((a) / (b))
#define NB_SM_DMUL(a, b) ((a) * (b))
#define NB_SM_U2D(x) ((double)(x))
#define NB_SM_D2U(x) ((uint64_t)(x))
#define NB_SM_F2U(x) ((uint64_t)(x))
NB_SM_FN uint32_t nb_sm_fbits_(float x)
{
    union { float f; uint32_t u; } v;
    v.f = x;
    return v.u;
}
NB_SM_FN float nb_sm_bitsf_(uint32_t x)
{
    union { float f; uint32_t u; } v;
    v.u = x;
    return v.f;
}
#define NB_SM_FBITS(x) nb_sm_fbits_(x)
#define NB_SM_BITSF(x) nb_sm_bitsf_(x)
#endif
#define NB_SM_MAD(a, b, c) NB_SM_ADD(NB_SM_MUL(a, b), c)

/* Keys order tokens for the filters and top-n: the value in the high bits, then the
 * complement of the id in the low NB_SM_ID_BITS, so a larger key is "better" and equal
 * values rank by lower id. All keys of a row are distinct. */
#define NB_SM_ID_BITS 20
#define NB_SM_ID_MASK ((1u << NB_SM_ID_BITS) - 1u)
/* Weights are e * 2^44 truncated: NB_SAMPLE_MAX_VOCAB (2^19) tokens * 2^44 <= 2^63, and what
 * truncation drops (< 2^-44 per token) is far below float resolution of the probabilities. */
#define NB_SM_W_SCALE 17592186044416.0f /* 2^44 */

/* splitmix64 finalizer (the engine's seeds and the draw's counter-based generator). */
NB_SM_FN uint64_t nb_sm_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* Uniform double in [0, 1) from (seed, k): exact in both compilers (53-bit integer times 2^-53). */
NB_SM_FN double nb_sm_uniform(uint64_t seed, uint64_t k)
{
    uint64_t r = nb_sm_mix64(nb_sm_mix64(seed) ^ nb_sm_mix64(k * 0xD1B54A32D192ED03ULL + 1));
    return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

/* exp(a) for a <= 0: Cody-Waite reduction by ln 2 (ln2_hi has 9 trailing zero bits, so
 * k * ln2_hi is exact for |k| <= 116) and a degree-6 polynomial, each step one rounded
 * multiply and one rounded add, so both compilers produce the same bits (a few ulp from the
 * true value). Below -80 (and for -inf / NaN) it returns 0: such weights truncate to 0
 * anyway. exp(0) is exactly 1. */
NB_SM_FN float nb_sm_exp(float a)
{
    if (!(a > -80.0f)) return 0.0f;
    float k = rintf(NB_SM_MUL(a, 1.44269502f));
    float r = NB_SM_MAD(k, -0.693145752f, a);
    r = NB_SM_MAD(k, -1.42860677e-6f, r);
    float p = 1.38888889e-3f;
    p = NB_SM_MAD(p, r, 8.33333333e-3f);
    p = NB_SM_MAD(p, r, 4.16666667e-2f);
    p = NB_SM_MAD(p, r, 1.66666667e-1f);
    p = NB_SM_MAD(p, r, 0.5f);
    p = NB_SM_MAD(p, r, 1.0f);
    p = NB_SM_MAD(p, r, 1.0f);
    int ki = (int)k; /* in [-116, 0]: 2^k is a normal float */
    return NB_SM_MUL(p, NB_SM_BITSF((uint32_t)(ki + 127) << 23));
}

/* NaN counts as -inf everywhere; -0 as +0. */
NB_SM_FN float nb_sm_clean(float x)
{
    if (x != x) return -INFINITY;
    return x == 0.0f ? 0.0f : x;
}

/* Order-preserving map of a (clean) float to 32 bits. */
NB_SM_FN uint32_t nb_sm_fkey(float x)
{
    uint32_t b = NB_SM_FBITS(x);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* The key of token i with ordering bits v (nb_sm_fkey of a logit, or the bits of a weight e). */
NB_SM_FN uint64_t nb_sm_key(uint32_t v, int32_t i)
{
    return ((uint64_t)v << NB_SM_ID_BITS) | (uint64_t)(NB_SM_ID_MASK - (uint32_t)i);
}

NB_SM_FN int32_t nb_sm_key_id(uint64_t key) { return (int32_t)(NB_SM_ID_MASK - (uint32_t)(key & NB_SM_ID_MASK)); }

/* The penalized logit (sampling.h order: repetition, then frequency * count + presence when
 * the token occurs in the output). */
NB_SM_FN float nb_sm_penalize(float l, int32_t count, float rep, float freq, float pres)
{
    if (rep != 1.0f) l = l > 0.0f ? NB_SM_DIV(l, rep) : NB_SM_MUL(l, rep);
    if (count > 0) l = NB_SM_SUB(l, NB_SM_ADD(NB_SM_MUL(freq, (float)count), pres));
    return l;
}

/* The unnormalized probability of a (clean) logit x under max m and 1/T: exactly 1 at the
 * max (also when m is +inf or every logit is -inf). */
NB_SM_FN float nb_sm_weight_e(float x, float m, float inv_t)
{
    return x == m ? 1.0f : nb_sm_exp(NB_SM_MUL(NB_SM_SUB(x, m), inv_t));
}

NB_SM_FN uint64_t nb_sm_weight(float e) { return NB_SM_F2U(NB_SM_MUL(e, NB_SM_W_SCALE)); }

/* top_p's bound on the mass before a kept token, in weight units (none at top_p >= 1). */
NB_SM_FN uint64_t nb_sm_top_p_limit(float top_p, uint64_t total)
{
    if (!(top_p < 1.0f)) return UINT64_MAX;
    return NB_SM_D2U(NB_SM_DMUL((double)top_p, NB_SM_U2D(total)));
}

/* The draw's target in [0, kept_mass): the first kept token (id order) whose running mass
 * exceeds it is drawn. */
NB_SM_FN uint64_t nb_sm_target(double u, uint64_t kept_mass)
{
    uint64_t t = NB_SM_D2U(NB_SM_DMUL(u, NB_SM_U2D(kept_mass)));
    return t >= kept_mass ? kept_mass - 1 : t;
}

#if defined(__clang__) && !defined(__CUDA_ARCH__)
#pragma STDC FP_CONTRACT DEFAULT
#endif

#endif
