/* A growable byte string for the server's formatting (SSE frames, JSON, Prometheus text).
 * Allocation failure sets `oom` and further appends are dropped: callers check it once. */
#ifndef NB_SERVER_STRBUF_H
#define NB_SERVER_STRBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nb_strbuf {
    char *p;
    size_t len, cap;
    int oom;
} nb_strbuf;

static inline int nb_sb_reserve(nb_strbuf *b, size_t extra)
{
    if (b->oom) return -1;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline void nb_sb_add(nb_strbuf *b, const char *s, size_t n)
{
    if (nb_sb_reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static inline void nb_sb_puts(nb_strbuf *b, const char *s) { nb_sb_add(b, s, strlen(s)); }

static inline void nb_sb_printf(nb_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void nb_sb_printf(nb_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || nb_sb_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static inline void nb_sb_clear(nb_strbuf *b) { b->len = 0; if (b->p) b->p[0] = 0; }
static inline void nb_sb_free(nb_strbuf *b) { free(b->p); memset(b, 0, sizeof *b); }

#endif
