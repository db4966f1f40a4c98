/* Logging: leveled, tagged, timestamped lines to one sink (stderr by default).
 *   NB_LOG_INFO("engine", "KV cache: %d tokens", n);
 * A message below the current level is neither formatted nor its arguments evaluated.
 * Tags name the component: base, format, model, tok, ops, cuda, engine, sched, http, bench. */
#ifndef NB_BASE_LOG_H
#define NB_BASE_LOG_H

#include "nibble.h"
#include "base/error.h"

#ifdef __cplusplus /* CUDA files (.cu) are compiled as C++ */
extern "C" {
#endif

extern nb_log_level nb_log_level_current;

void nb_log_write(nb_log_level level, const char *tag, const char *fmt, ...) NB_PRINTF(3, 4);

/* Parse "trace|debug|info|warn|error|off"; returns -1 when unknown. */
int nb_log_level_parse(const char *s);

#ifdef __cplusplus
}
#endif

#define NB_LOG(level, tag, ...)                                                         \
    do {                                                                                \
        if ((level) >= nb_log_level_current) nb_log_write((level), (tag), __VA_ARGS__); \
    } while (0)
#define NB_LOG_TRACE(tag, ...) NB_LOG(NB_LOG_TRACE, tag, __VA_ARGS__)
#define NB_LOG_DEBUG(tag, ...) NB_LOG(NB_LOG_DEBUG, tag, __VA_ARGS__)
#define NB_LOG_INFO(tag, ...) NB_LOG(NB_LOG_INFO, tag, __VA_ARGS__)
#define NB_LOG_WARN(tag, ...) NB_LOG(NB_LOG_WARN, tag, __VA_ARGS__)
#define NB_LOG_ERROR(tag, ...) NB_LOG(NB_LOG_ERROR, tag, __VA_ARGS__)

#endif
