/* Helpers of the CUDA-vs-CPU registry test: seeded random inputs, host tensors mirrored
 * into device memory, weights of every format on both sides, and the comparison by
 * normalized error that prints the parameters and the first mismatches. */
#ifndef NB_TESTS_CUDA_TEST_UTIL_H
#define NB_TESTS_CUDA_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "format/numerics.h"
#include "nbtest.h"
#include "ops/cuda/device.h"
#include "ops/ops.h"

/* float32 ops whose CPU and CUDA versions differ only in summation order. */
#define NB_TOL_F32 1e-5
/* Paths that round activations (and non-BF16 weights) to BF16 before tensor-core GEMMs. */
#define NB_TOL_BF16 1e-2
/* The cuBLASLt linear path on BF16-stored weights: the weight is exact and activations go in
 * as two BF16 terms (about 16 mantissa bits). */
#define NB_TOL_LT_BF16W 1e-4

static uint64_t tu_rng = 1;
static void tu_seed(uint64_t s) { tu_rng = s * 0x9E3779B97F4A7C15ULL + 1; }
static uint32_t tu_u32(void)
{
    tu_rng = tu_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(tu_rng >> 32);
}
static float tu_f(void) { return (float)(tu_u32() >> 8) / 16777216.0f * 2.0f - 1.0f; }
static void tu_fill(float *p, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) p[i] = tu_f() * scale;
}

static nb_ops_ctx *tu_cpu, *tu_gpu;

/* A test binary's start: prints the device and makes both contexts; 0 (with a message) when
 * they cannot be had. tu_close frees them. */
static inline int tu_open(void)
{
    char desc[256];
    if (nb_cuda_device_describe(0, desc, sizeof desc) == NB_OK) fprintf(stderr, "device: %s\n", desc);
    if (nb_ops_ctx_new_cpu(0, &tu_cpu) != NB_OK || nb_ops_ctx_new_cuda(0, &tu_gpu) != NB_OK) {
        fprintf(stderr, "cannot create contexts: %s\n", nb_last_error());
        return 0;
    }
    return 1;
}
static inline void tu_close(void)
{
    nb_ops_ctx_free(tu_gpu);
    nb_ops_ctx_free(tu_cpu);
}

/* Device allocations of one case, freed by tu_free_all. */
static void *tu_dev[4096];
static int tu_ndev;
static void *tu_up(const void *host, size_t bytes)
{
    void *d = nb_ops_alloc(tu_gpu, bytes ? bytes : 4);
    NB_ASSERT(d);
    if (bytes) NB_ASSERT(nb_ops_upload(tu_gpu, d, host, bytes) == NB_OK);
    NB_ASSERT(tu_ndev < 4096);
    tu_dev[tu_ndev++] = d;
    return d;
}
static void *tu_poisoned(size_t bytes)
{
    void *d = nb_ops_alloc(tu_gpu, bytes ? bytes : 4);
    NB_ASSERT(d);
    NB_ASSERT(nb_ops_memset(tu_gpu, d, 0xff, bytes) == NB_OK); /* NaN / -1 poison */
    tu_dev[tu_ndev++] = d;
    return d;
}
static void tu_free_all(void)
{
    for (int i = 0; i < tu_ndev; i++) nb_ops_free(tu_gpu, tu_dev[i]);
    tu_ndev = 0;
}

/* A device twin of a host tensor (same shape and strides; span bytes copied). */
static size_t tu_span(const nb_tensor *t)
{
    int64_t last = 0;
    for (int i = 0; i < t->ndim; i++) last += (t->shape[i] - 1) * t->stride[i];
    return (size_t)(last + 1) * 4;
}
static nb_tensor tu_twin(const nb_tensor *h)
{
    nb_tensor d = *h;
    d.data = tu_up(h->data, tu_span(h));
    d.device = NB_DEVICE_CUDA;
    return d;
}
static void tu_down(const nb_tensor *d, void *host) { NB_ASSERT(nb_ops_download(tu_gpu, host, d->data, tu_span(d)) == NB_OK); }

/* sqrt(sum (a-b)^2 / sum a^2) over n values (a: CPU, b: CUDA); prints the first mismatches
 * beyond tol and fails the test when the error exceeds tol or b has a NaN where a does not. */
static double tu_compare(const char *what, const float *a, const float *b, size_t n, double tol)
{
    double e = 0, r = 0;
    int bad_nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(b[i]) && !isnan(a[i])) bad_nan++;
        double d = (double)a[i] - b[i];
        e += d * d;
        r += (double)a[i] * a[i];
    }
    double rel = r > 0 ? sqrt(e / r) : sqrt(e);
    int ok = rel <= tol && !bad_nan;
    fprintf(stderr, "    %-44s n=%-8zu rel err %.3g (tol %.0e)%s\n", what, n, rel, tol, ok ? "" : "  <-- FAIL");
    if (!ok) {
        int shown = 0;
        double scale = r > 0 ? sqrt(r / (double)n) : 1;
        for (size_t i = 0; i < n && shown < 8; i++)
            if (isnan(b[i]) != isnan(a[i]) || fabs((double)a[i] - b[i]) > tol * scale * 10) {
                fprintf(stderr, "      [%zu] cpu %.9g cuda %.9g\n", i, a[i], b[i]);
                shown++;
            }
        nb_test_failures_++;
    }
    return rel;
}

/* ---- weights -------------------------------------------------------------------------- */

typedef struct tu_weight {
    nb_weight h, d; /* host and device views of the same values */
    void *hdata, *hscale;
    float *hbias;
} tu_weight;

static const char *tu_fmt_name(nb_wfmt f)
{
    static const char *n[] = {"f32", "bf16", "nvfp4", "fp8"};
    return n[f];
}

/* Random weight [n, k] in `fmt`, values about `amp` in magnitude, optional bias. */
static void tu_weight_make(tu_weight *w, nb_wfmt fmt, int64_t n, int64_t k, float amp, int bias)
{
    memset(w, 0, sizeof *w);
    nb_weight *h = &w->h;
    h->fmt = fmt;
    h->n = n;
    h->k = k;
    h->global_scale = 1.0f;
    size_t db = (size_t)(n * nb_weight_row_bytes(fmt, k)), sb = 0;
    w->hdata = malloc(db);
    uint8_t *u8 = w->hdata;
    switch (fmt) {
    case NB_WFMT_F32: tu_fill(w->hdata, (size_t)(n * k), amp); break;
    case NB_WFMT_BF16:
        for (int64_t i = 0; i < n * k; i++) ((nb_bf16 *)w->hdata)[i] = nb_f32_to_bf16(tu_f() * amp);
        break;
    case NB_WFMT_NVFP4:
        for (size_t i = 0; i < db; i++) u8[i] = (uint8_t)tu_u32();
        sb = (size_t)(n * k / 16);
        w->hscale = malloc(sb);
        for (size_t i = 0; i < sb; i++) ((uint8_t *)w->hscale)[i] = nb_f32_to_e4m3(0.5f + (float)(tu_u32() % 100) / 100.0f);
        h->global_scale = amp / 3.0f;
        h->block_k = 16;
        break;
    case NB_WFMT_FP8_BLOCK: {
        for (size_t i = 0; i < db; i++) {
            uint8_t v = (uint8_t)tu_u32();
            if ((v & 0x7f) == 0x7f) v ^= 1; /* no NaN codes */
            if (((v >> 3) & 15) > 9) v &= 0xcf; /* keep magnitudes moderate */
            u8[i] = v;
        }
        h->block_n = 128;
        h->block_k = 128;
        int64_t bn = (n + 127) / 128, bk = (k + 127) / 128;
        sb = (size_t)(bn * bk) * 4;
        w->hscale = malloc(sb);
        for (int64_t i = 0; i < bn * bk; i++) ((float *)w->hscale)[i] = amp * (0.05f + 0.05f * (float)(tu_u32() % 10));
        break;
    }
    }
    h->data = w->hdata;
    h->scale = w->hscale;
    if (bias) {
        w->hbias = malloc((size_t)n * 4);
        tu_fill(w->hbias, (size_t)n, 0.5f);
        h->bias = w->hbias;
    }
    h->device = NB_DEVICE_CPU;
    w->d = *h;
    w->d.data = tu_up(w->hdata, db);
    w->d.scale = sb ? tu_up(w->hscale, sb) : NULL;
    w->d.bias = bias ? tu_up(w->hbias, (size_t)n * 4) : NULL;
    w->d.device = NB_DEVICE_CUDA;
}

static void tu_weight_free(tu_weight *w)
{
    free(w->hdata);
    free(w->hscale);
    free(w->hbias);
}

/* ---- attention index -------------------------------------------------------------------- */

/* A batch of n_seq sequences with the given lengths (tokens this step / past positions),
 * slots a random permutation of the pool rows. Host arrays plus their device twins. */
typedef struct tu_index {
    int T, n_slots_used;
    int32_t pos[512], slot_base[512], slot_table[8192];
    nb_attn_index h, d;
} tu_index;

static void tu_index_make(tu_index *x, int n_seq, const int *n_new, const int *n_past, int pool_rows)
{
    int32_t perm[8192];
    for (int i = 0; i < pool_rows; i++) perm[i] = i;
    for (int i = pool_rows - 1; i > 0; i--) {
        int j = (int)(tu_u32() % (uint32_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int t = 0, base = 0, used = 0;
    for (int s = 0; s < n_seq; s++) {
        int len = n_new[s] + n_past[s];
        for (int p = 0; p < len; p++) x->slot_table[base + p] = perm[used++];
        NB_ASSERT(used <= pool_rows);
        for (int i = 0; i < n_new[s]; i++, t++) {
            x->pos[t] = n_past[s] + i;
            x->slot_base[t] = base;
        }
        base += len;
    }
    x->T = t;
    x->n_slots_used = base;
    x->h = (nb_attn_index){t, x->pos, x->slot_base, x->slot_table, 0, 0};
    x->d = (nb_attn_index){t, tu_up(x->pos, (size_t)t * 4), tu_up(x->slot_base, (size_t)t * 4),
                           tu_up(x->slot_table, (size_t)base * 4), 0, 0};
}

#endif
