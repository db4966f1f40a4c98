/* Host repack of NVFP4 weights from the ModelOpt layout into the MoE kernels' fragment
 * layout (ops/cuda/moe.h; the picture is in docs/moe-kernels.md). Pure C, no CUDA calls:
 * tests/cuda_moe/test_moe.c checks that nb_moe_packed_get inverts it on every element.
 *
 * Weights: for each 16-row tile and 64-wide k-tile, 32 lanes x 16 bytes. Lane (g = lane/4,
 * t = lane%4) holds rows g and g+8 at k = 16t..16t+15 of the k-tile: word s (of 4) holds
 * k = 16t+4s..16t+4s+3 of both rows as four (lo, hi) pairs of the mma A fragment:
 *   P0 = row g k+0,1   P1 = row g+8 k+0,1   P2 = row g k+2,3   P3 = row g+8 k+2,3.
 * Each pair's E2M1 bits sit where a mask, after a shift or rotation, turns them into two
 * BF16 numbers equal to e2m1 * 2^-126 (magnitude bits at 6..8 / 22..24, sign at 15 / 31):
 * P0 as they are, P1 shifted left by 4, P2 rotated left by 10, P3 from two parts (shifted
 * left by 6, and the e1 bits rotated left by 14). Seven ALU-pipe instructions per word, one
 * less than the first layout's eight (shifts right by 4 and 5 for P3); bench/lab/README.md.
 * Scales: for each 16-row tile and group of four k-tiles, lane L holds 8 bytes: for k-tile
 * qq = 0..3 the scales of rows g and g+8 at k-group 4*qq+t. */
#include <string.h>

#include "base/error.h"
#include "ops/cuda/moe.h"

/* Bit position of code bit b (0..3: m, e0, e1, sign) for pair p (0..3), half hi (0/1). */
static const uint8_t nb_moe_bitpos[4][2][4] = {
    {{6, 7, 8, 15}, {22, 23, 24, 31}},
    {{2, 3, 4, 11}, {18, 19, 20, 27}},
    {{28, 29, 30, 5}, {12, 13, 14, 21}},
    {{0, 1, 26, 9}, {16, 17, 10, 25}},
};

/* Where element (row, col) lives: byte offset of its 32-bit word, pair and half. */
static void locate_code(int k, int row, int col, size_t *word_off, int *pair, int *hi)
{
    int nt = row / 16, r = row % 16, g = r % 8, h = r / 8;
    int q = col / 64, c = col % 64, t = c / 16, s = (c % 16) / 4, j = c % 4;
    int lane = g * 4 + t;
    *word_off = (((size_t)nt * (size_t)(k / 64) + (size_t)q) * 32 + (size_t)lane) * 16 + (size_t)s * 4;
    *pair = (j >> 1) * 2 + h;
    *hi = j & 1;
}

static size_t locate_scale(int k, int row, int grp)
{
    int nt = row / 16, r = row % 16, g = r % 8, h = r / 8;
    int q = grp / 4, t = grp % 4, qg = q / 4, qq = q % 4;
    int lane = g * 4 + t;
    return (((size_t)nt * (size_t)(k / 256) + (size_t)qg) * 32 + (size_t)lane) * 8 + (size_t)qq * 2 + (size_t)h;
}

nb_status nb_moe_repack_nvfp4(const char *name, const uint8_t *codes, const uint8_t *scales, int n, int k,
                              uint8_t *out_w, uint8_t *out_s)
{
    if (n <= 0 || k <= 0 || n % NB_MOE_ROW_TILE || k % NB_MOE_K_GROUP)
        return nb_error(NB_ERR_INVALID_ARG,
                        "moe repack: tensor '%s' [%d, %d]: rows must be a multiple of %d and columns of %d",
                        name ? name : "?", n, k, NB_MOE_ROW_TILE, NB_MOE_K_GROUP);
    memset(out_w, 0, nb_moe_packed_weight_bytes(n, k));
    for (int row = 0; row < n; row++) {
        const uint8_t *src = codes + (size_t)row * (size_t)(k / 2);
        for (int col = 0; col < k; col++) {
            uint8_t code = (uint8_t)((src[col / 2] >> ((col & 1) * 4)) & 15);
            size_t off;
            int p, hi;
            locate_code(k, row, col, &off, &p, &hi);
            uint32_t w;
            memcpy(&w, out_w + off, 4);
            for (int b = 0; b < 4; b++)
                if (code >> b & 1) w |= 1u << nb_moe_bitpos[p][hi][b];
            memcpy(out_w + off, &w, 4);
        }
        for (int grp = 0; grp < k / 16; grp++)
            out_s[locate_scale(k, row, grp)] = scales[(size_t)row * (size_t)(k / 16) + (size_t)grp];
    }
    return NB_OK;
}

void nb_moe_packed_get(const uint8_t *w, const uint8_t *s, int n, int k, int row, int col, uint8_t *code,
                       uint8_t *scale)
{
    (void)n;
    size_t off;
    int p, hi;
    locate_code(k, row, col, &off, &p, &hi);
    uint32_t v;
    memcpy(&v, w + off, 4);
    uint8_t c = 0;
    for (int b = 0; b < 4; b++) c |= (uint8_t)(((v >> nb_moe_bitpos[p][hi][b]) & 1u) << b);
    *code = c;
    *scale = s[locate_scale(k, row, col / 16)];
}
