/* Counter-based synthetic weight streams and the thread pool that fills them (see
 * synthetic_fill.h for the exact streams). Tests: tests/engine/test_synthetic.c. */
#include "model/synthetic_fill.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "format/dtype.h"
#include "format/numerics.h"
#include "format/nvfp4.h"

/* N(0, 1) is scaled by this before E2M1 quantization: a Gaussian block of 16 has
 * |max| ~ 2.2 sd, and ModelOpt maps a block's max to 6. */
#define NB_SYNTH_CODE_SPREAD 2.7
#define NB_SYNTH_SCALE_BASE 0x72 /* E4M3 160; + 0..7 gives 160 .. 288 */
#define NB_SYNTH_IH_MEAN 131070.0f
#define NB_SYNTH_IH_INV_SD 2.642903e-05f /* 1 / sqrt((2^32 - 1) / 3) */

static uint64_t nb_sm_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t nb_sm_at(uint64_t key, uint64_t i) { return nb_sm_mix(key + (i + 1) * 0x9E3779B97F4A7C15ULL); }

uint64_t nb_synth_key(uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *s = name; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return nb_sm_mix(seed * 0xD6E8FEB86659FD93ULL ^ h);
}

static inline float nb_ih_normal(uint64_t h)
{
    uint32_t s = (uint32_t)(h & 0xffff) + (uint32_t)((h >> 16) & 0xffff) + (uint32_t)((h >> 32) & 0xffff) +
                 (uint32_t)(h >> 48);
    return ((float)s - NB_SYNTH_IH_MEAN) * NB_SYNTH_IH_INV_SD;
}

/* ---------------------------------------------------------------- NVFP4 code table */

static uint8_t nb_code_lut[65536]; /* two codes: low nibble from the low byte */
static uint8_t nb_code_c8[256];    /* one code per 8-bit quantile index */
static double nb_code_msq;         /* E[e2m1(code)^2] over the 8-bit table */
static pthread_once_t nb_lut_once = PTHREAD_ONCE_INIT;

static void nb_build_lut(void)
{
    uint8_t c8[256];
    double msq = 0;
    for (int i = 0; i < 256; i++) {
        /* z with Phi(z) = (i + 0.5) / 256, by bisection on erfc (monotone) */
        double u = (i + 0.5) / 256.0, lo = -10, hi = 10;
        for (int it = 0; it < 80; it++) {
            double mid = 0.5 * (lo + hi);
            if (0.5 * erfc(-mid / sqrt(2.0)) < u) lo = mid;
            else hi = mid;
        }
        c8[i] = nb_nvfp4_e2m1_encode((float)(0.5 * (lo + hi) * NB_SYNTH_CODE_SPREAD));
        nb_code_c8[i] = c8[i];
        double v = nb_e2m1_to_f32(c8[i]);
        msq += v * v;
    }
    nb_code_msq = msq / 256;
    for (int i = 0; i < 65536; i++) nb_code_lut[i] = (uint8_t)(c8[i & 255] | (c8[i >> 8] << 4));
}

void nb_synth_code_table(uint8_t c8[256])
{
    pthread_once(&nb_lut_once, nb_build_lut);
    memcpy(c8, nb_code_c8, 256);
}

float nb_synth_nvfp4_global_scale(double init_std)
{
    pthread_once(&nb_lut_once, nb_build_lut);
    double ssq = 0;
    for (int r = 0; r < 8; r++) {
        double s = nb_e4m3_to_f32((uint8_t)(NB_SYNTH_SCALE_BASE + r));
        ssq += s * s;
    }
    return (float)(init_std / sqrt(nb_code_msq * (ssq / 8)));
}

/* ---------------------------------------------------------------- fills */

void nb_synth_fill_range(const nb_synth_job *j, size_t a, size_t b)
{
    switch (j->kind) {
    case NB_SYNTH_CONST_F32: {
        float *d = j->data;
        for (size_t i = a; i < b; i++) d[i] = j->value;
        break;
    }
    case NB_SYNTH_NORMAL_F32: {
        float *d = j->data;
        for (size_t i = a; i < b; i++) d[i] = nb_ih_normal(nb_sm_at(j->key, i)) * j->value;
        break;
    }
    case NB_SYNTH_NORMAL_BF16: {
        nb_bf16 *d = j->data;
        for (size_t i = a; i < b; i++) d[i] = nb_f32_to_bf16(nb_ih_normal(nb_sm_at(j->key, i)) * j->value);
        break;
    }
    case NB_SYNTH_NVFP4_CODES: {
        pthread_once(&nb_lut_once, nb_build_lut);
        uint8_t *d = j->data;
        size_t i = a;
        for (; i < b && (i & 3); i++) d[i] = nb_code_lut[(nb_sm_at(j->key, i >> 2) >> (16 * (i & 3))) & 0xffff];
        for (; i + 4 <= b; i += 4) {
            uint64_t h = nb_sm_at(j->key, i >> 2);
            d[i] = nb_code_lut[h & 0xffff];
            d[i + 1] = nb_code_lut[(h >> 16) & 0xffff];
            d[i + 2] = nb_code_lut[(h >> 32) & 0xffff];
            d[i + 3] = nb_code_lut[h >> 48];
        }
        for (; i < b; i++) d[i] = nb_code_lut[(nb_sm_at(j->key, i >> 2) >> (16 * (i & 3))) & 0xffff];
        break;
    }
    case NB_SYNTH_NVFP4_SCALES: {
        uint8_t *d = j->data;
        for (size_t i = a; i < b; i++)
            d[i] = (uint8_t)(NB_SYNTH_SCALE_BASE + ((nb_sm_at(j->key, i >> 3) >> (8 * (i & 7))) & 7));
        break;
    }
    }
}

/* ---------------------------------------------------------------- thread pool */

typedef struct nb_fill_ctx {
    const nb_synth_job *jobs;
    const size_t *first; /* first[t] = index of job t's first chunk; first[n_jobs] = total */
    size_t n_jobs, chunk;
    atomic_size_t next;
} nb_fill_ctx;

static void *nb_fill_worker(void *arg)
{
    nb_fill_ctx *c = arg;
    size_t total = c->first[c->n_jobs];
    for (;;) {
        size_t k = atomic_fetch_add(&c->next, 1);
        if (k >= total) break;
        size_t lo = 0, hi = c->n_jobs; /* the job t with first[t] <= k < first[t + 1] */
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            if (c->first[mid] <= k) lo = mid;
            else hi = mid;
        }
        const nb_synth_job *j = &c->jobs[lo];
        size_t a = (k - c->first[lo]) * c->chunk, b = a + c->chunk < j->n ? a + c->chunk : j->n;
        nb_synth_fill_range(j, a, b);
    }
    return NULL;
}

int nb_synth_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n < 256 ? n : 256) : 1;
}

void nb_synth_fill_all(const nb_synth_job *jobs, size_t n_jobs, int threads, size_t chunk)
{
    if (!n_jobs) return;
    if (threads <= 0) threads = nb_synth_default_threads();
    chunk = chunk ? (chunk + 7) & ~(size_t)7 : (size_t)1 << 20;
    size_t *first = malloc((n_jobs + 1) * sizeof *first);
    pthread_t *tid = malloc((size_t)threads * sizeof *tid);
    if (!first || !tid) { /* no room for the chunk index: fill serially (same bytes) */
        free(first);
        free(tid);
        for (size_t t = 0; t < n_jobs; t++) nb_synth_fill_range(&jobs[t], 0, jobs[t].n);
        return;
    }
    first[0] = 0;
    for (size_t t = 0; t < n_jobs; t++) first[t + 1] = first[t] + (jobs[t].n + chunk - 1) / chunk;
    nb_fill_ctx c = {.jobs = jobs, .first = first, .n_jobs = n_jobs, .chunk = chunk};
    atomic_init(&c.next, 0);
    int started = 0;
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&tid[started], NULL, nb_fill_worker, &c) != 0) {
            NB_LOG_WARN("model", "synthetic weights: started %d of %d threads", started + 1, threads);
            break;
        }
        started++;
    }
    nb_fill_worker(&c);
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
    free(tid);
    free(first);
}
