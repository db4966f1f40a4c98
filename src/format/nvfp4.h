/* NVFP4 weights as ModelOpt exports them, and the ModelOpt quantization recipe.
 *
 * A linear weight W [N, K] (out x in, K a multiple of 16) becomes four tensors:
 *   <m>.weight          U8      [N, K/2]   two E2M1 codes a byte: element 2j in the LOW
 *                                          nibble, 2j+1 in the high nibble; code bit 3 = sign
 *   <m>.weight_scale    F8_E4M3 [N, K/16]  one scale per 16 consecutive K elements
 *   <m>.weight_scale_2  F32     []         per-tensor global scale
 *   <m>.input_scale     F32     []         optional (static activation scale; unused for
 *                                          weight-only dequantization)
 *   W[n][k] = e2m1(code[n][k]) * (e4m3(weight_scale[n][k/16]) * weight_scale_2)
 * (the product of the two scales is formed first, in float32, as ModelOpt does).
 *
 * Recipe (modelopt.torch.quantization.qtensor.NVFP4QTensor, dynamic path), in float32:
 *   weight_scale_2 = amax(|W|) / (6 * 448)
 *   s = block_amax / (6 * weight_scale_2); s == 0 -> 1.0; s = max(s, 2^-9); e4m3 RNE
 *   code = E2M1 of W / (e4m3(s) * weight_scale_2) by the bounds
 *          [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5]: a magnitude equal to a bound takes the
 *          lower code, except 0.75, 1.75 and 3.5, which take the upper one. That is
 *          exactly round-to-nearest-even. NOTE: ModelOpt's source comment (and issue 2)
 *          name the third exception "2.5", but its code indexes bounds[[1, 3, 5]], i.e.
 *          3.5; we follow the code, since our files must match what ModelOpt writes.
 *          Magnitudes above 5 saturate to 6; a NaN gets the largest code.
 *   The 2^-9 floor (E4M3's smallest subnormal) is in current ModelOpt; without it a tiny
 *   but non-zero block would get scale 0 and divide by zero.
 * Fused gate/up serving wants one weight_scale_2 for an expert's gate and up: pass the
 * shared value (nb_nvfp4_global_scale(max(amax_gate, amax_up))) instead of 0.
 * Tests: tests/format/test_nvfp4.c (every code, recipe, round trip, Python oracle). */
#ifndef NB_FORMAT_NVFP4_H
#define NB_FORMAT_NVFP4_H

#include <stddef.h>
#include <stdint.h>

#include "nibble.h"

#define NB_NVFP4_GROUP 16        /* K elements per E4M3 scale */
#define NB_NVFP4_E2M1_MAX 6.0f
#define NB_NVFP4_E4M3_MAX 448.0f
#define NB_NVFP4_SCALE_MIN 0.001953125f /* 2^-9, the smallest E4M3 subnormal */

/* One scale group in memory: 16 codes in 8 bytes. */
typedef struct nb_nvfp4_group {
    uint8_t qs[NB_NVFP4_GROUP / 2];
} nb_nvfp4_group;
_Static_assert(sizeof(nb_nvfp4_group) == 8, "NVFP4: 16 E2M1 codes pack into 8 bytes");
_Static_assert(NB_NVFP4_GROUP % 2 == 0, "NVFP4: two codes per byte");

/* E2M1 code of a value already divided by its scales, by ModelOpt's bound rule above. */
uint8_t nb_nvfp4_e2m1_encode(float v);

/* E4M3 RNE of a block scale: the same result as nb_f32_to_e4m3, found by binary search
 * (the quantizer's hot path). */
uint8_t nb_nvfp4_scale_to_e4m3(float s);

/* weight_scale_2 for a tensor (or a gate/up pair) whose largest magnitude is amax. */
static inline float nb_nvfp4_global_scale(float amax) { return amax / (NB_NVFP4_E2M1_MAX * NB_NVFP4_E4M3_MAX); }

/* max |w| over n floats (NaN-free input assumed; a NaN is ignored). */
float nb_absmax_f32(const float *w, size_t n);

/* Quantize rows [rows, k] of float32 weights with a given weight_scale_2 (> 0):
 * packed [rows, k/2], scales [rows, k/16]. k must be a multiple of 16 (NB_ASSERT). The
 * reference implementation: plain loops, exactly the recipe above. */
void nb_nvfp4_quantize_rows_ref(const float *w, int64_t rows, int64_t k, float weight_scale_2, uint8_t *packed,
                                uint8_t *scales);

/* Whole tensor: weight_scale_2 = `shared_scale_2` when > 0 (gate/up sharing), else computed
 * from W. An all-zero W gets weight_scale_2 = 1/2688 (as if amax were 1; ModelOpt would
 * divide 0 by 0) so every code and scale stays defined. NB_ERR_INVALID_ARG when k is not a
 * multiple of 16 or W holds Inf/NaN; `what` names the tensor in the message. */
nb_status nb_nvfp4_quantize(const char *what, const float *w, int64_t n, int64_t k, float shared_scale_2,
                            uint8_t *packed, uint8_t *scales, float *weight_scale_2);

/* Dequantize one row of k values (k multiple of 16). */
void nb_nvfp4_dequant_row(const uint8_t *packed, const uint8_t *scales, float weight_scale_2, int64_t k, float *out);

/* Dequantize rows [row0, row0 + rows) of an [n, k] tensor into out [rows, k]. */
void nb_nvfp4_dequant_rows(const uint8_t *packed, const uint8_t *scales, float weight_scale_2, int64_t k, int64_t row0,
                           int64_t rows, float *out);

#endif
