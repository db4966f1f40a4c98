/* Progress bar drawing (base/progress.h). */
#include "base/progress.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *nb_format_bytes(double bytes, char *buf, int n)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    snprintf(buf, (size_t)n, u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}

static void nb_progress_draw(nb_progress *p, int final)
{
    double frac = p->total ? (double)p->done / (double)p->total : 0.0;
    if (frac > 1.0) frac = 1.0;
    const int width = 30;
    char bar[64];
    int fill = (int)(frac * width);
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    double el = (double)(nb_now_ns() - p->start_ns) * 1e-9;
    double rate = el > 0 ? (double)p->done / el : 0;
    double eta = rate > 0 && p->total > p->done ? (double)(p->total - p->done) / rate : 0;
    char a[32], b[32], r[32];
    if (strcmp(p->unit, "B") == 0) {
        nb_format_bytes((double)p->done, a, sizeof a);
        nb_format_bytes((double)p->total, b, sizeof b);
        nb_format_bytes(rate, r, sizeof r);
        strcat(r, "/s");
    } else {
        snprintf(a, sizeof a, "%llu", (unsigned long long)p->done);
        snprintf(b, sizeof b, "%llu", (unsigned long long)p->total);
        snprintf(r, sizeof r, "%.1f %s/s", rate, p->unit);
    }
    fprintf(stderr, "\r%-16s [%s] %5.1f%% %s/%s %s eta %.0fs   %s", p->label, bar, frac * 100, a, b,
            r, eta, final ? "\n" : "");
    fflush(stderr);
}

void nb_progress_begin(nb_progress *p, const char *label, uint64_t total, const char *unit)
{
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    snprintf(p->unit, sizeof p->unit, "%s", unit ? unit : "");
    p->total = total;
    p->start_ns = nb_now_ns();
    const char *env = getenv("NIBBLE_PROGRESS");
    p->enabled = env ? atoi(env) != 0 : isatty(STDERR_FILENO);
}

void nb_progress_update(nb_progress *p, uint64_t done)
{
    p->done = done;
    if (!p->enabled) return;
    int64_t now = nb_now_ns();
    if (now - p->last_draw_ns < 100000000LL) return;
    p->last_draw_ns = now;
    nb_progress_draw(p, 0);
}

void nb_progress_add(nb_progress *p, uint64_t delta) { nb_progress_update(p, p->done + delta); }

void nb_progress_end(nb_progress *p)
{
    if (p->enabled) nb_progress_draw(p, 1);
    p->enabled = 0;
}
