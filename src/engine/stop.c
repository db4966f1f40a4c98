/* Stop strings over streamed text (see stop.h). Tests: tests/engine/test_stop.c. */
#include "engine/stop.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

void nb_stop_init(nb_stop_matcher *m, const char *const *stops, int n_stops)
{
    memset(m, 0, sizeof *m);
    m->stops = stops;
    m->n_stops = n_stops;
    for (int i = 0; i < n_stops; i++) m->max_len = NB_MAX(m->max_len, strlen(stops[i]));
}

void nb_stop_free(nb_stop_matcher *m)
{
    free(m->held);
    free(m->out);
    memset(m, 0, sizeof *m);
}

static int nb_reserve(char **p, size_t *cap, size_t need)
{
    if (need <= *cap) return 1;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    char *q = realloc(*p, nc);
    if (!q) return 0;
    *p = q;
    *cap = nc;
    return 1;
}

/* Move the first n held bytes to the release buffer. */
static int nb_release(nb_stop_matcher *m, size_t n, const char **emit, size_t *emit_len)
{
    if (!nb_reserve(&m->out, &m->out_cap, n + 1)) return 0;
    memcpy(m->out, m->held, n);
    m->out[n] = 0;
    memmove(m->held, m->held + n, m->held_len - n);
    m->held_len -= n;
    *emit = m->out;
    *emit_len = n;
    return 1;
}

int nb_stop_push(nb_stop_matcher *m, const char *text, size_t len, const char **emit, size_t *emit_len)
{
    *emit = "";
    *emit_len = 0;
    if (!nb_reserve(&m->held, &m->held_cap, m->held_len + len + 1)) return -2;
    memcpy(m->held + m->held_len, text, len);
    m->held_len += len;

    /* earliest complete match; held text never contains the start of an earlier match,
     * because it was only released when no stop string could start in it */
    size_t best_pos = (size_t)-1;
    int best = -1;
    for (int i = 0; i < m->n_stops; i++) {
        size_t sl = strlen(m->stops[i]);
        if (sl > m->held_len) continue;
        for (size_t p = 0; p + sl <= m->held_len && p < best_pos; p++)
            if (!memcmp(m->held + p, m->stops[i], sl)) {
                best_pos = p;
                best = i;
                break;
            }
    }
    if (best >= 0) {
        if (!nb_release(m, best_pos, emit, emit_len)) return -2;
        m->held_len = 0;
        return best;
    }
    /* hold back the longest suffix that could still grow into a stop string */
    size_t hold = 0;
    size_t maxh = m->max_len > 0 ? NB_MIN(m->max_len - 1, m->held_len) : 0;
    for (size_t h = maxh; h > 0 && !hold; h--)
        for (int i = 0; i < m->n_stops; i++)
            if (strlen(m->stops[i]) > h && !memcmp(m->held + m->held_len - h, m->stops[i], h)) {
                hold = h;
                break;
            }
    if (!nb_release(m, m->held_len - hold, emit, emit_len)) return -2;
    return -1;
}

void nb_stop_flush(nb_stop_matcher *m, const char **emit, size_t *emit_len)
{
    *emit = "";
    *emit_len = 0;
    if (!nb_release(m, m->held_len, emit, emit_len)) m->held_len = 0;
}
