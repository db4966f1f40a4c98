/* NVML via dlopen (tools/nvml.h). The handful of entry points used are declared here
 * with NVML's documented C signatures; no NVML header is needed to build. */
#include "tools/nvml.h"
#include "base/error.h"
#include "base/log.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void *nb_nvml_dev;
typedef struct {
    unsigned int gpu, memory;
} nb_nvml_util;
typedef struct {
    unsigned long long total, free, used;
} nb_nvml_mem;

static struct {
    pthread_once_t once;
    nb_status status;
    char why[200];
    int n;
    nb_nvml_dev dev[NB_NVML_MAX_GPUS];
    char name[NB_NVML_MAX_GPUS][64];
    pthread_mutex_t mu; /* NVML is thread-safe; this guards our table only */
    int (*power)(nb_nvml_dev, unsigned int *);
    int (*limit)(nb_nvml_dev, unsigned int *);
    int (*clock)(nb_nvml_dev, int, unsigned int *);
    int (*util)(nb_nvml_dev, nb_nvml_util *);
    int (*mem)(nb_nvml_dev, nb_nvml_mem *);
    int (*reasons)(nb_nvml_dev, unsigned long long *);
} g_nvml = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

#define NB_NVML_CLOCK_SM 1
/* nvmlClocksEventReason* bits (nvml.h): software power cap; software, hardware thermal */
#define NB_NVML_REASON_SW_POWER_CAP 0x4ULL
#define NB_NVML_REASON_SW_THERMAL 0x20ULL
#define NB_NVML_REASON_HW_THERMAL 0x40ULL

static void nb_nvml_load(void)
{
    g_nvml.status = NB_ERR_UNSUPPORTED;
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libnvidia-ml.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_nvml.why, sizeof g_nvml.why, "NVML: libnvidia-ml.so.1 not found (no NVIDIA driver)");
        return;
    }
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*count)(unsigned int *) = (int (*)(unsigned int *))dlsym(h, "nvmlDeviceGetCount_v2");
    int (*byidx)(unsigned int, nb_nvml_dev *) = (int (*)(unsigned int, nb_nvml_dev *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    int (*name)(nb_nvml_dev, char *, unsigned int) = (int (*)(nb_nvml_dev, char *, unsigned int))dlsym(h, "nvmlDeviceGetName");
    g_nvml.power = (int (*)(nb_nvml_dev, unsigned int *))dlsym(h, "nvmlDeviceGetPowerUsage");
    g_nvml.limit = (int (*)(nb_nvml_dev, unsigned int *))dlsym(h, "nvmlDeviceGetEnforcedPowerLimit");
    g_nvml.clock = (int (*)(nb_nvml_dev, int, unsigned int *))dlsym(h, "nvmlDeviceGetClockInfo");
    g_nvml.util = (int (*)(nb_nvml_dev, nb_nvml_util *))dlsym(h, "nvmlDeviceGetUtilizationRates");
    g_nvml.mem = (int (*)(nb_nvml_dev, nb_nvml_mem *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    /* the name since driver 535; the older one stays as an alias */
    g_nvml.reasons = (int (*)(nb_nvml_dev, unsigned long long *))dlsym(h, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!g_nvml.reasons)
        g_nvml.reasons = (int (*)(nb_nvml_dev, unsigned long long *))dlsym(h, "nvmlDeviceGetCurrentClocksThrottleReasons");
    if (!init || !count || !byidx || !g_nvml.power) {
        snprintf(g_nvml.why, sizeof g_nvml.why, "NVML: entry points missing in libnvidia-ml");
        return;
    }
    int rc = init();
    if (rc != 0) {
        snprintf(g_nvml.why, sizeof g_nvml.why, "NVML: nvmlInit_v2 returned %d", rc);
        return;
    }
    unsigned int n = 0;
    if (count(&n) != 0 || n == 0) {
        snprintf(g_nvml.why, sizeof g_nvml.why, "NVML: no GPU");
        return;
    }
    if (n > NB_NVML_MAX_GPUS) n = NB_NVML_MAX_GPUS;
    for (unsigned int i = 0; i < n; i++) {
        if (byidx(i, &g_nvml.dev[i]) != 0) {
            snprintf(g_nvml.why, sizeof g_nvml.why, "NVML: no handle for GPU %u", i);
            return;
        }
        if (!name || name(g_nvml.dev[i], g_nvml.name[i], sizeof g_nvml.name[i]) != 0)
            snprintf(g_nvml.name[i], sizeof g_nvml.name[i], "GPU %u", i);
    }
    g_nvml.n = (int)n;
    g_nvml.status = NB_OK;
}

nb_status nb_nvml_open(int *n_gpus)
{
    pthread_once(&g_nvml.once, nb_nvml_load);
    *n_gpus = g_nvml.n;
    if (g_nvml.status != NB_OK) return nb_error(g_nvml.status, "%s", g_nvml.why);
    return NB_OK;
}

const char *nb_nvml_name(int i) { return i >= 0 && i < g_nvml.n ? g_nvml.name[i] : "?"; }

nb_status nb_nvml_read(int i, nb_gpu_reading *r)
{
    r->power_w = r->power_limit_w = r->sm_clock_mhz = r->util_pct = r->mem_used_gib = r->mem_total_gib = NAN;
    r->power_capped = r->thermal = NAN;
    if (g_nvml.status != NB_OK || i < 0 || i >= g_nvml.n)
        return nb_error(NB_ERR_NOT_FOUND, "NVML: no GPU %d", i);
    nb_nvml_dev d = g_nvml.dev[i];
    unsigned int v;
    if (g_nvml.power(d, &v) == 0) r->power_w = v / 1000.0;
    if (g_nvml.limit && g_nvml.limit(d, &v) == 0) r->power_limit_w = v / 1000.0;
    if (g_nvml.clock && g_nvml.clock(d, NB_NVML_CLOCK_SM, &v) == 0) r->sm_clock_mhz = v;
    nb_nvml_util u;
    if (g_nvml.util && g_nvml.util(d, &u) == 0) r->util_pct = u.gpu;
    unsigned long long why;
    if (g_nvml.reasons && g_nvml.reasons(d, &why) == 0) {
        r->power_capped = (why & NB_NVML_REASON_SW_POWER_CAP) ? 1 : 0;
        r->thermal = (why & (NB_NVML_REASON_SW_THERMAL | NB_NVML_REASON_HW_THERMAL)) ? 1 : 0;
    }
    nb_nvml_mem m;
    if (g_nvml.mem && g_nvml.mem(d, &m) == 0) {
        r->mem_used_gib = (double)m.used / (1024.0 * 1024 * 1024);
        r->mem_total_gib = (double)m.total / (1024.0 * 1024 * 1024);
    }
    return NB_OK;
}

void nb_gpu_summary_add(nb_gpu_summary *s, const nb_gpu_reading *r)
{
    int k = ++s->samples;
    /* Running means: a long window of 100 ms samples needs no buffer. */
    if (!isnan(r->power_w)) {
        s->power_mean_w += (r->power_w - s->power_mean_w) / k;
        if (r->power_w > s->power_max_w) s->power_max_w = r->power_w;
    }
    if (!isnan(r->power_limit_w)) s->power_limit_w = r->power_limit_w;
    if (!isnan(r->sm_clock_mhz)) {
        s->sm_clock_mean_mhz += (r->sm_clock_mhz - s->sm_clock_mean_mhz) / k;
        if (r->sm_clock_mhz > s->sm_clock_max_mhz) s->sm_clock_max_mhz = r->sm_clock_mhz;
    }
    if (!isnan(r->util_pct)) s->util_mean_pct += (r->util_pct - s->util_mean_pct) / k;
    if (!isnan(r->mem_used_gib) && r->mem_used_gib > s->mem_used_max_gib) s->mem_used_max_gib = r->mem_used_gib;
    if (!isnan(r->mem_total_gib)) s->mem_total_gib = r->mem_total_gib;
    if (!isnan(r->power_capped) && !isnan(r->thermal)) {
        int n = ++s->reason_samples;
        s->power_capped_pct += (100 * r->power_capped - s->power_capped_pct) / n;
        s->thermal_pct += (100 * r->thermal - s->thermal_pct) / n;
    }
}

void nb_gpu_summary_fprint(FILE *f, int g, const nb_gpu_summary *s)
{
    char pct[32] = "n/a", capped[96] = "";
    if (s->power_limit_w > 0) snprintf(pct, sizeof pct, "%.0f%%", 100.0 * s->power_mean_w / s->power_limit_w);
    if (s->reason_samples > 0)
        snprintf(capped, sizeof capped, ", power-capped %.0f%% / thermal %.0f%% of samples", s->power_capped_pct,
                 s->thermal_pct);
    fprintf(f,
            "  GPU %d %-20.20s power mean %.0f W max %.0f W (%s of %.0f W limit), SM %.0f MHz (max %.0f), "
            "util %.0f%%, mem %.1f/%.1f GiB, %d samples%s\n",
            g, s->name, s->power_mean_w, s->power_max_w, pct, s->power_limit_w, s->sm_clock_mean_mhz,
            s->sm_clock_max_mhz, s->util_mean_pct, s->mem_used_max_gib, s->mem_total_gib, s->samples, capped);
}

struct nb_nvml_sampler {
    pthread_t th;
    pthread_mutex_t mu;
    int stop, n, period_ms;
    nb_gpu_summary sum[NB_NVML_MAX_GPUS];
};

static void *nb_sampler_main(void *arg)
{
    nb_nvml_sampler *s = arg;
    for (;;) {
        nb_gpu_reading r[NB_NVML_MAX_GPUS];
        for (int i = 0; i < s->n; i++) nb_nvml_read(i, &r[i]);
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        if (!stop)
            for (int i = 0; i < s->n; i++) nb_gpu_summary_add(&s->sum[i], &r[i]);
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        struct timespec ts = {s->period_ms / 1000, (long)(s->period_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

nb_status nb_nvml_sampler_start(int period_ms, nb_nvml_sampler **out)
{
    *out = NULL;
    int n;
    if (nb_nvml_open(&n) != NB_OK) {
        NB_LOG_INFO("bench", "GPU telemetry n/a: %s", nb_last_error());
        nb_error_clear();
        return NB_OK;
    }
    nb_nvml_sampler *s = calloc(1, sizeof *s);
    if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "NVML sampler");
    s->n = n;
    s->period_ms = period_ms > 0 ? period_ms : 100;
    pthread_mutex_init(&s->mu, NULL);
    for (int i = 0; i < n; i++) snprintf(s->sum[i].name, sizeof s->sum[i].name, "%s", nb_nvml_name(i));
    if (pthread_create(&s->th, NULL, nb_sampler_main, s) != 0) {
        free(s);
        return nb_error(NB_ERR_INTERNAL, "NVML sampler: pthread_create failed");
    }
    *out = s;
    return NB_OK;
}

int nb_nvml_sampler_snapshot(nb_nvml_sampler *s, nb_gpu_summary *out, int max)
{
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    int n = NB_MIN(s->n, max);
    memcpy(out, s->sum, (size_t)n * sizeof *out);
    pthread_mutex_unlock(&s->mu);
    return n;
}

void nb_nvml_sampler_reset(nb_nvml_sampler *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++) {
        char name[64];
        memcpy(name, s->sum[i].name, sizeof name);
        memset(&s->sum[i], 0, sizeof s->sum[i]);
        memcpy(s->sum[i].name, name, sizeof name);
    }
    pthread_mutex_unlock(&s->mu);
}

void nb_nvml_sampler_stop(nb_nvml_sampler *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
