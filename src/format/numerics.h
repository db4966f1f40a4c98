/* Number formats: BF16, FP16, E4M3 (FP8, "fn": no infinities, 0x7f/0xff are NaN, max 448),
 * E5M2, E2M1 (FP4: sign bit 3, values ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}).
 * Decoding is exact; encoding rounds to nearest even and saturates where stated.
 * Tests: tests/format/test_numerics.c checks every code. */
#ifndef NB_FORMAT_NUMERICS_H
#define NB_FORMAT_NUMERICS_H

#include <stdint.h>
#include <string.h>

typedef uint16_t nb_bf16;

static inline float nb_bf16_to_f32(nb_bf16 h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even; NaN stays a quiet NaN. */
static inline nb_bf16 nb_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (nb_bf16)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (nb_bf16)(u >> 16);
}

float nb_f16_to_f32(uint16_t h);
uint16_t nb_f32_to_f16(float f);

/* E4M3 (fn): table lookup; 0x7f and 0xff decode to NaN. */
extern const float nb_e4m3_table[256];
static inline float nb_e4m3_to_f32(uint8_t v) { return nb_e4m3_table[v]; }
/* Round to nearest even, saturating to ±448 (as a scale must never become NaN). NaN → 0x7f. */
uint8_t nb_f32_to_e4m3(float f);

extern const float nb_e5m2_table[256];
static inline float nb_e5m2_to_f32(uint8_t v) { return nb_e5m2_table[v]; }

/* E2M1: a 4-bit code, bit 3 is the sign. */
extern const float nb_e2m1_table[16];
static inline float nb_e2m1_to_f32(uint8_t code) { return nb_e2m1_table[code & 15]; }
/* Plain round-to-nearest-even E2M1 encoding, saturating at ±6 (the NVFP4 quantizer's
 * bound rule is nb_nvfp4_e2m1_encode in format/nvfp4.h). */
uint8_t nb_f32_to_e2m1(float f);

#endif
