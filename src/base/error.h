/* Error reporting inside nibble: set a status with a formatted message, return it.
 *   return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': offsets out of range", path, name);
 * The message is per thread and read back with nb_last_error() (include/nibble.h).
 * NB_ASSERT is for impossible states (bugs) only: it logs and aborts. Bad input never
 * asserts; it returns a status. */
#ifndef NB_BASE_ERROR_H
#define NB_BASE_ERROR_H

#include "nibble.h"

#if defined(__GNUC__)
#define NB_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define NB_PRINTF(a, b)
#endif

#ifdef __cplusplus /* CUDA files (.cu) are compiled as C++ */
extern "C" {
#endif

/* Record `s` with a printf-style message on this thread and return `s`. */
nb_status nb_error(nb_status s, const char *fmt, ...) NB_PRINTF(2, 3);

/* Prefix the current thread's message with "prefix: " (context added on the way up). */
nb_status nb_error_wrap(nb_status s, const char *fmt, ...) NB_PRINTF(2, 3);

/* Clear this thread's message. */
void nb_error_clear(void);

void nb_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#ifdef __cplusplus
}
#endif

#define NB_ASSERT(e) ((e) ? (void)0 : nb_assert_fail(#e, __FILE__, __LINE__))

/* Propagate a failing status: NB_TRY(nb_foo(...)); */
#define NB_TRY(expr)                                                                    \
    do {                                                                                \
        nb_status nb_try_s_ = (expr);                                                   \
        if (nb_try_s_ != NB_OK) return nb_try_s_;                                       \
    } while (0)

#define NB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define NB_MIN(a, b) ((a) < (b) ? (a) : (b))
#define NB_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
