/* nibble — public C API.
 *
 * Opaque handles with the nb_ prefix; functions are nb_<thing>_<verb>; parameters come
 * as structs filled by nb_<thing>_default_params(). Every function that can fail returns
 * an nb_status; the message that explains the last failure on this thread is
 * nb_last_error(). Exercised by: build/nibble --help, tests/base/test_base.c.
 */
#ifndef NIBBLE_H
#define NIBBLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NB_VERSION_MAJOR 0
#define NB_VERSION_MINOR 1
#define NB_VERSION_PATCH 0

/* "0.1.0" (the version this library was built as). */
const char *nb_version(void);

/* Status codes. NB_OK is zero; every other value is an error whose explanation, with
 * the file, tensor, field or parameter involved, is in nb_last_error(). */
typedef enum nb_status {
    NB_OK = 0,
    NB_ERR_INVALID_ARG,   /* a parameter is out of range or malformed */
    NB_ERR_IO,            /* a file could not be opened, read, written or mapped */
    NB_ERR_FORMAT,        /* a file's contents are malformed (safetensors, JSON, config) */
    NB_ERR_UNSUPPORTED,   /* well-formed, but nibble does not support it (architecture, dtype) */
    NB_ERR_NOT_FOUND,     /* a named thing (tensor, model, request) does not exist */
    NB_ERR_OUT_OF_MEMORY, /* host or device allocation failed, or a budget is exceeded */
    NB_ERR_CUDA,          /* a CUDA runtime/driver/library call failed */
    NB_ERR_BUSY,          /* a queue or capacity limit refuses new work for now */
    NB_ERR_ABORTED,       /* the operation was cancelled */
    NB_ERR_INTERNAL,      /* a bug: an invariant did not hold */
    NB_STATUS_COUNT
} nb_status;

/* Short fixed description of a status code ("invalid argument"). Never NULL. */
const char *nb_strerror(nb_status s);

/* The message describing the most recent error set on the calling thread, or "" when
 * none. Valid until the next nibble call on this thread. */
const char *nb_last_error(void);

/* Log levels; messages below the current level cost nothing (not even formatting). */
typedef enum nb_log_level {
    NB_LOG_TRACE = 0,
    NB_LOG_DEBUG,
    NB_LOG_INFO,
    NB_LOG_WARN,
    NB_LOG_ERROR,
    NB_LOG_OFF
} nb_log_level;

/* A log sink receives one formatted line (no trailing newline). */
typedef void (*nb_log_sink)(nb_log_level level, const char *tag, const char *line, void *user);

/* Set the level (default INFO, or NIBBLE_LOG=trace|debug|info|warn|error|off) and the sink
 * (NULL: timestamped lines on stderr). Thread-safe. */
void nb_log_set(nb_log_level level, nb_log_sink sink, void *user);

#ifdef __cplusplus
}
#endif
#endif /* NIBBLE_H */
