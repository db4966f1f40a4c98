/* Synthetic weights, element by element: a counter-based random stream per tensor and a
 * thread pool that fills many tensors at once. Every byte is a pure function of
 * (seed, tensor name, element index), so the result is the same for any thread count and
 * any chunking. Streams (key = splitmix64 finalizer of (seed * 0xD6E8FEB86659FD93 ^
 * FNV-1a(name)); h(i) = splitmix64 finalizer of key + (i + 1) * 0x9E3779B97F4A7C15):
 *   normal   element i = std * (sum of the four 16-bit fields of h(i) - 131070) / 37837.2..
 *            (Irwin-Hall of 4 uniforms: mean 0, variance std^2, tails cut at 3.46 std;
 *            integer sums and float arithmetic, no libm, so the same bits everywhere)
 *   NVFP4    packed code byte j = two codes from the 16-bit field j % 4 of h(j / 4), each from a
 *            256-entry table of E2M1(2.7 * z) at the 256 mid-quantiles z of N(0, 1) (low
 *            byte -> low nibble; roughly what ModelOpt's recipe makes of a Gaussian block);
 *            scale byte j = the E4M3 code 0x72 + (low 3 bits of byte j % 8 of h'(j / 8)),
 *            i.e. 160, 176, ..., 240, 256, 288, h' on the key of name + "/scale";
 *            weight_scale_2 = init_std / sqrt(E[e2m1^2] E[scale^2]) (the same for every
 *            tensor, so an expert's gate and up share it as fused serving wants)
 * Tests: tests/engine/test_synthetic.c. */
#ifndef NB_MODEL_SYNTHETIC_FILL_H
#define NB_MODEL_SYNTHETIC_FILL_H

#include <stddef.h>
#include <stdint.h>

#include "nibble.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nb_synth_fill {
    NB_SYNTH_CONST_F32,   /* every element = value */
    NB_SYNTH_NORMAL_F32,  /* normal(0, value) */
    NB_SYNTH_NORMAL_BF16, /* normal(0, value), BF16 round-to-nearest-even */
    NB_SYNTH_NVFP4_CODES, /* packed E2M1 code bytes */
    NB_SYNTH_NVFP4_SCALES /* E4M3 block scale bytes */
} nb_synth_fill;

/* One tensor to fill: n elements (bytes for the NVFP4 kinds) into data. */
typedef struct nb_synth_job {
    nb_synth_fill kind;
    uint64_t key;
    float value;
    size_t n;
    void *data;
} nb_synth_job;

/* Key of a tensor's stream. */
uint64_t nb_synth_key(uint64_t seed, const char *name);

/* Fill elements [a, b) of one job (chunk-independent). */
void nb_synth_fill_range(const nb_synth_job *j, size_t a, size_t b);

/* Fill every job with `threads` threads (<= 0: every online core), handing out chunks of
 * `chunk` elements (0: 1 Mi; rounded up to a multiple of 8). The calling thread works too,
 * so a thread that cannot be started only costs speed (logged), never bytes. */
void nb_synth_fill_all(const nb_synth_job *jobs, size_t n_jobs, int threads, size_t chunk);

/* The 256-entry E2M1 code table of the NVFP4 streams (a code byte is
 * table[lo byte] | table[hi byte] << 4 of its 16-bit field): what a device port of the
 * streams needs (model/cuda/synth_fill_cuda.h). */
void nb_synth_code_table(uint8_t c8[256]);

/* weight_scale_2 of every synthetic NVFP4 tensor for a target weight std. */
float nb_synth_nvfp4_global_scale(double init_std);

/* Online cores (at least 1). */
int nb_synth_default_threads(void);

#ifdef __cplusplus
}
#endif

#endif
