/* File helpers (base/file.h). */
#include "base/file.h"
#include "base/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

nb_status nb_read_file(const char *path, char **out, size_t *len, size_t max_bytes)
{
    *out = NULL;
    if (len) *len = 0;
    if (!max_bytes) max_bytes = (size_t)1 << 30;
    FILE *f = fopen(path, "rb");
    if (!f) return nb_error(NB_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return nb_error(NB_ERR_IO, "%s: not a regular file", path);
    }
    if ((size_t)st.st_size > max_bytes) {
        fclose(f);
        return nb_error(NB_ERR_IO, "%s: %lld bytes is over the %zu-byte limit", path,
                        (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", path, n + 1);
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        free(buf);
        return nb_error(NB_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return NB_OK;
}

nb_status nb_write_file(const char *path, const void *data, size_t len)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return nb_error(NB_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    size_t put = fwrite(data, 1, len, f);
    int rc = fclose(f);
    if (put != len || rc != 0) {
        unlink(tmp);
        return nb_error(NB_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        return nb_error(NB_ERR_IO, "%s: rename failed: %s", path, strerror(errno));
    }
    return NB_OK;
}

int nb_path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

char *nb_path_join(char *buf, size_t n, const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    if (dl && dir[dl - 1] == '/')
        snprintf(buf, n, "%s%s", dir, name);
    else
        snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

nb_status nb_mkdirs(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return nb_error(NB_ERR_IO, "%s: mkdir: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return nb_error(NB_ERR_IO, "%s: mkdir: %s", tmp, strerror(errno));
    return NB_OK;
}
