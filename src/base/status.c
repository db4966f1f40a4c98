/* Status codes, per-thread error messages and the version string (include/nibble.h). */
#include "base/error.h"
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NB_ERRBUF 2048
static _Thread_local char nb_errbuf[NB_ERRBUF];

const char *nb_version(void) { return NIBBLE_VERSION_STRING; }

const char *nb_strerror(nb_status s)
{
    static const char *const names[NB_STATUS_COUNT] = {
        [NB_OK] = "ok",
        [NB_ERR_INVALID_ARG] = "invalid argument",
        [NB_ERR_IO] = "I/O error",
        [NB_ERR_FORMAT] = "malformed input",
        [NB_ERR_UNSUPPORTED] = "unsupported",
        [NB_ERR_NOT_FOUND] = "not found",
        [NB_ERR_OUT_OF_MEMORY] = "out of memory",
        [NB_ERR_CUDA] = "CUDA error",
        [NB_ERR_BUSY] = "busy",
        [NB_ERR_ABORTED] = "aborted",
        [NB_ERR_INTERNAL] = "internal error",
    };
    if ((unsigned)s >= NB_STATUS_COUNT) return "unknown status";
    return names[s];
}

const char *nb_last_error(void) { return nb_errbuf; }

void nb_error_clear(void) { nb_errbuf[0] = 0; }

nb_status nb_error(nb_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(nb_errbuf, sizeof nb_errbuf, fmt, ap);
    va_end(ap);
    return s;
}

nb_status nb_error_wrap(nb_status s, const char *fmt, ...)
{
    char prefix[512], old[NB_ERRBUF];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, nb_errbuf, sizeof old);
    size_t pl = strlen(prefix);
    if (pl > sizeof nb_errbuf - 3) pl = sizeof nb_errbuf - 3;
    memcpy(nb_errbuf, prefix, pl);
    memcpy(nb_errbuf + pl, ": ", 2);
    size_t room = sizeof nb_errbuf - pl - 3, ol = strlen(old);
    if (ol > room) ol = room;
    memcpy(nb_errbuf + pl + 2, old, ol);
    nb_errbuf[pl + 2 + ol] = 0;
    return s;
}

void nb_assert_fail(const char *expr, const char *file, int line)
{
    NB_LOG_ERROR("bug", "assertion failed: %s (%s:%d)", expr, file, line);
    abort();
}
