/* Stop strings on a stream of decoded text: text is released only once no stop string
 * can begin inside it, so a stop string split over several tokens is caught and neither
 * it nor anything after it is ever emitted. Input deltas are whole UTF-8 characters (the
 * streaming detokenizer guarantees it); stop strings are valid UTF-8, so what is held
 * back always starts on a character boundary.
 * Tests: tests/engine/test_stop.c. */
#ifndef NB_ENGINE_STOP_H
#define NB_ENGINE_STOP_H

#include <stddef.h>

#include "nibble.h"

typedef struct nb_stop_matcher {
    const char *const *stops; /* borrowed; must outlive the matcher */
    int n_stops;
    size_t max_len;
    char *held;               /* text not yet released */
    size_t held_len, held_cap;
    char *out;                /* the last release */
    size_t out_cap;
} nb_stop_matcher;

void nb_stop_init(nb_stop_matcher *m, const char *const *stops, int n_stops);
void nb_stop_free(nb_stop_matcher *m);

/* Feed `len` bytes. emit and emit_len receive the text released now (valid until the next
 * call). Returns the index of the stop string that matched (earliest in the text; the
 * first listed on a tie), after which the stream is over, or -1.
 * NB_ERR_OUT_OF_MEMORY is reported as -2 (emit empty). */
int nb_stop_push(nb_stop_matcher *m, const char *text, size_t len, const char **emit, size_t *emit_len);

/* End of stream without a match: release everything held. */
void nb_stop_flush(nb_stop_matcher *m, const char **emit, size_t *emit_len);

#endif
