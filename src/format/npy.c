/* .npy read/write for float32 arrays (format/npy.h). */
#include "format/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

nb_status nb_npy_write_f32(const char *path, const float *data, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > NB_NPY_MAX_DIMS) return nb_error(NB_ERR_INVALID_ARG, "%s: %d dims", path, ndim);
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld%s", (long long)shape[i], ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
        count *= shape[i];
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    /* magic(6) + version(2) + len(2) + dict + padding + '\n' must be a multiple of 64 */
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) return nb_error(NB_ERR_IO, "%s: cannot create", path);
    uint16_t hl = (uint16_t)(n + pad + 1);
    unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
    int ok = fwrite(head, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (int i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && fwrite(data, sizeof(float), (size_t)count, f) == (size_t)count;
    if (fclose(f) != 0) ok = 0;
    return ok ? NB_OK : nb_error(NB_ERR_IO, "%s: write failed", path);
}

nb_status nb_npy_read_f32(const char *path, float **data, int *ndim, int64_t *shape)
{
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return nb_error(NB_ERR_IO, "%s: cannot open", path);
    unsigned char head[12];
    nb_status st = NB_OK;
    char *dict = NULL;
    if (fread(head, 1, 8, f) != 8 || memcmp(head, "\x93NUMPY", 6)) {
        st = nb_error(NB_ERR_FORMAT, "%s: not a .npy file", path);
        goto out;
    }
    size_t hl;
    if (head[6] == 1) {
        if (fread(head + 8, 1, 2, f) != 2) goto trunc;
        hl = head[8] | (size_t)head[9] << 8;
    } else {
        if (fread(head + 8, 1, 4, f) != 4) goto trunc;
        hl = head[8] | (size_t)head[9] << 8 | (size_t)head[10] << 16 | (size_t)head[11] << 24;
    }
    if (hl > (1 << 20)) {
        st = nb_error(NB_ERR_FORMAT, "%s: header of %zu bytes", path, hl);
        goto out;
    }
    dict = malloc(hl + 1);
    if (!dict) {
        st = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: header", path);
        goto out;
    }
    if (fread(dict, 1, hl, f) != hl) goto trunc;
    dict[hl] = 0;
    if (!strstr(dict, "'descr': '<f4'")) {
        st = nb_error(NB_ERR_UNSUPPORTED, "%s: only float32 ('<f4') arrays are read", path);
        goto out;
    }
    if (!strstr(dict, "'fortran_order': False")) {
        st = nb_error(NB_ERR_UNSUPPORTED, "%s: Fortran-order arrays are not read", path);
        goto out;
    }
    const char *s = strstr(dict, "'shape': (");
    if (!s) {
        st = nb_error(NB_ERR_FORMAT, "%s: no shape in the header", path);
        goto out;
    }
    s += 10;
    int nd = 0;
    int64_t count = 1;
    while (*s && *s != ')') {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s) {
            if (*s == ',' || *s == ' ') {
                s++;
                continue;
            }
            st = nb_error(NB_ERR_FORMAT, "%s: malformed shape", path);
            goto out;
        }
        if (nd == NB_NPY_MAX_DIMS || v < 0) {
            st = nb_error(NB_ERR_UNSUPPORTED, "%s: shape beyond %d dims or negative", path, NB_NPY_MAX_DIMS);
            goto out;
        }
        shape[nd++] = v;
        count *= v;
        s = end;
    }
    *ndim = nd;
    *data = malloc((size_t)(count ? count : 1) * sizeof(float));
    if (!*data) {
        st = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: %lld floats", path, (long long)count);
        goto out;
    }
    if (fread(*data, sizeof(float), (size_t)count, f) != (size_t)count) {
        free(*data);
        *data = NULL;
        goto trunc;
    }
    goto out;
trunc:
    st = nb_error(NB_ERR_FORMAT, "%s: truncated", path);
out:
    free(dict);
    fclose(f);
    return st;
}
