/* Progress bars on stderr for long work (loading, quantizing, benchmarking).
 * Drawn only when stderr is a terminal (or NIBBLE_PROGRESS=1); otherwise silent, so
 * logs and CI output stay clean. At most ~10 redraws a second.
 *   nb_progress p; nb_progress_begin(&p, "quantize", total_bytes, "B");
 *   nb_progress_update(&p, done); ... nb_progress_end(&p); */
#ifndef NB_BASE_PROGRESS_H
#define NB_BASE_PROGRESS_H

#include <stdint.h>

typedef struct nb_progress {
    char label[48];
    char unit[8];  /* "B" formats as bytes (KiB, MiB, ...); anything else as a count */
    uint64_t total;
    uint64_t done;
    int64_t start_ns;
    int64_t last_draw_ns;
    int enabled;
} nb_progress;

void nb_progress_begin(nb_progress *p, const char *label, uint64_t total, const char *unit);
void nb_progress_update(nb_progress *p, uint64_t done);
void nb_progress_add(nb_progress *p, uint64_t delta);
void nb_progress_end(nb_progress *p);

/* "1.50 GiB" style formatting of a byte count into buf; returns buf. */
char *nb_format_bytes(double bytes, char *buf, int n);

#endif
