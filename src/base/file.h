/* Small-file helpers: read a whole file, write one atomically, path joins. */
#ifndef NB_BASE_FILE_H
#define NB_BASE_FILE_H

#include <stddef.h>
#include "nibble.h"

/* Read all of `path` into a NUL-terminated malloc'd buffer (*len excludes the NUL).
 * Refuses files over max_bytes (0: 1 GiB). Errors name the path. */
nb_status nb_read_file(const char *path, char **out, size_t *len, size_t max_bytes);

/* Write `len` bytes to `path` through a temporary file and rename. */
nb_status nb_write_file(const char *path, const void *data, size_t len);

/* 1 when `path` exists (file or folder). */
int nb_path_exists(const char *path);

/* dir + "/" + name into buf (size n); returns buf. */
char *nb_path_join(char *buf, size_t n, const char *dir, const char *name);

/* mkdir -p. */
nb_status nb_mkdirs(const char *path);

#endif
