/* Table tests for format/numerics.h: every E2M1, E4M3, E5M2 code re-derived from the
 * format's definition (sign, exponent, mantissa, bias), the RNE encoders over every code
 * and every midpoint, BF16 and F16 over all 65536 codes incl. ties and NaN.
 * Run: build-fmt/tests/test_numerics */
#include "nbtest.h"

#include <stdint.h>
#include <string.h>

#include "format/numerics.h"

/* Value of a minifloat code with `eb` exponent and `mb` mantissa bits, IEEE-like bias,
 * subnormals at exponent 0; specials are handled by the callers. */
static double minifloat(unsigned code, int eb, int mb)
{
    int bias = (1 << (eb - 1)) - 1;
    unsigned s = code >> (eb + mb) & 1, e = code >> mb & ((1u << eb) - 1), m = code & ((1u << mb) - 1);
    double v = e == 0 ? ldexp((double)m / (1 << mb), 1 - bias) : ldexp(1.0 + (double)m / (1 << mb), (int)e - bias);
    return s ? -v : v;
}

static int same_float(float a, float b)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static void test_e2m1_table(void)
{
    for (unsigned c = 0; c < 16; c++) {
        float want = (float)minifloat(c, 2, 1);
        NB_CHECK_MSG(same_float(nb_e2m1_to_f32((uint8_t)c), want), "code %u: %g vs %g", c, nb_e2m1_to_f32((uint8_t)c), want);
        NB_CHECK(nb_f32_to_e2m1(want) == c); /* exact values encode to themselves, -0 included */
    }
    /* RNE ties between neighbours go to the even code; saturation at 6 */
    static const float pos[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int i = 0; i + 1 < 8; i++) {
        float mid = 0.5f * (pos[i] + pos[i + 1]);
        NB_CHECK(nb_f32_to_e2m1(mid) == ((i & 1) ? i + 1 : i));
        NB_CHECK(nb_f32_to_e2m1(nextafterf(mid, 0)) == i);
        NB_CHECK(nb_f32_to_e2m1(nextafterf(mid, 100)) == i + 1);
        NB_CHECK(nb_f32_to_e2m1(-mid) == (8 | ((i & 1) ? i + 1 : i)));
    }
    NB_CHECK(nb_f32_to_e2m1(100.0f) == 7 && nb_f32_to_e2m1(-7.0f) == 15);
}

static void test_e4m3_table(void)
{
    for (unsigned c = 0; c < 256; c++) {
        float want = (c & 0x7f) == 0x7f ? NAN : (float)minifloat(c, 4, 3);
        NB_CHECK_MSG(same_float(nb_e4m3_to_f32((uint8_t)c), want), "code 0x%02x: %g vs %g", c, nb_e4m3_to_f32((uint8_t)c), want);
        if ((c & 0x7f) != 0x7f) NB_CHECK_MSG(nb_f32_to_e4m3(want) == c, "encode %g -> 0x%02x, want 0x%02x", want, nb_f32_to_e4m3(want), c);
    }
    NB_CHECK(nb_e4m3_to_f32(0x7e) == 448.0f && nb_e4m3_to_f32(0x01) == 0.001953125f);
    /* every midpoint between neighbouring positive codes: ties to even, else nearest */
    for (unsigned c = 0; c + 1 < 0x7f; c++) {
        float a = nb_e4m3_to_f32((uint8_t)c), b = nb_e4m3_to_f32((uint8_t)(c + 1));
        float mid = (float)(0.5 * ((double)a + (double)b));
        NB_CHECK_MSG(nb_f32_to_e4m3(mid) == ((c & 1) ? c + 1 : c), "midpoint %g after 0x%02x", mid, c);
        NB_CHECK(nb_f32_to_e4m3(nextafterf(mid, 0)) == c);
        NB_CHECK(nb_f32_to_e4m3(nextafterf(mid, 1e9f)) == c + 1);
        NB_CHECK(nb_f32_to_e4m3(-mid) == (0x80 | ((c & 1) ? c + 1 : c)));
    }
    /* saturation and NaN */
    NB_CHECK(nb_f32_to_e4m3(464.0f) == 0x7e && nb_f32_to_e4m3(1e30f) == 0x7e && nb_f32_to_e4m3(-INFINITY) == 0xfe);
    NB_CHECK(nb_f32_to_e4m3(NAN) == 0x7f);
    NB_CHECK(nb_f32_to_e4m3(0.0009765625f) == 0x00); /* half the smallest subnormal: tie to even 0 */
    NB_CHECK(nb_f32_to_e4m3(0.0009765626f) == 0x01);
}

static void test_e5m2_table(void)
{
    for (unsigned c = 0; c < 256; c++) {
        unsigned e = c >> 2 & 31, m = c & 3;
        float want = e == 31 ? (m ? NAN : ((c & 0x80) ? -INFINITY : INFINITY)) : (float)minifloat(c, 5, 2);
        NB_CHECK_MSG(same_float(nb_e5m2_to_f32((uint8_t)c), want), "code 0x%02x", c);
    }
}

static void test_bf16(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = nb_bf16_to_f32((nb_bf16)h);
        uint32_t u;
        memcpy(&u, &f, 4);
        NB_CHECK(u == h << 16);
        nb_bf16 back = nb_f32_to_bf16(f);
        if (isnan(f)) NB_CHECK((back & 0x7f80) == 0x7f80 && (back & 0x7f) != 0);
        else NB_CHECK_MSG(back == h, "bf16 0x%04x -> 0x%04x", h, back);
    }
    struct {
        uint32_t f32;
        uint16_t bf16;
    } cases[] = {
        {0x3f808000u, 0x3f80}, /* tie, even below: down */
        {0x3f818000u, 0x3f82}, /* tie, odd below: up */
        {0x3f808001u, 0x3f81}, /* just above the tie */
        {0x3f807fffu, 0x3f80}, /* just below */
        {0xbf818000u, 0xbf82}, /* negative tie */
        {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds to +inf */
        {0x7f800000u, 0x7f80}, /* inf stays */
        {0x00008000u, 0x0000}, /* subnormal tie to even zero */
        {0x7f800001u, 0x7fc0}, /* signalling NaN becomes a quiet NaN, not inf */
        {0xff800001u, 0xffc0},
    };
    for (size_t i = 0; i < NB_ARRAY_LEN(cases); i++) {
        float f;
        memcpy(&f, &cases[i].f32, 4);
        NB_CHECK_MSG(nb_f32_to_bf16(f) == cases[i].bf16, "0x%08x -> 0x%04x, want 0x%04x", cases[i].f32,
                     nb_f32_to_bf16(f), cases[i].bf16);
    }
}

static void test_f16(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        unsigned e = h >> 10 & 31, m = h & 1023;
        float f = nb_f16_to_f32((uint16_t)h);
        float want = e == 31 ? (m ? NAN : ((h & 0x8000) ? -INFINITY : INFINITY)) : (float)minifloat(h, 5, 10);
        NB_CHECK_MSG(same_float(f, want), "f16 0x%04x", h);
        if (!isnan(f)) NB_CHECK_MSG(nb_f32_to_f16(f) == h, "f16 0x%04x round trip", h);
    }
    NB_CHECK(nb_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00);             /* tie to even */
    NB_CHECK(nb_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02);
    NB_CHECK(nb_f32_to_f16(65520.0f) == 0x7c00 && nb_f32_to_f16(65519.0f) == 0x7bff);
}

static const nb_test tests[] = {
    {"e2m1_table", test_e2m1_table}, {"e4m3_table", test_e4m3_table}, {"e5m2_table", test_e5m2_table},
    {"bf16", test_bf16},             {"f16", test_f16},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
