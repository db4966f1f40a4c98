/* Streaming safetensors writer (format/safetensors.h): the header (names, dtypes, shapes,
 * offsets, optional __metadata__) is written first, padded with spaces to a multiple of 8
 * so tensor data stays aligned; then the caller streams the tensors' bytes in declared
 * order, in chunks of any size. The file appears under its name only when close succeeds
 * (written to PATH.tmp, then renamed). Exercise: build-fmt/tests/test_safetensors. */
#include "format/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct nb_st_writer {
    FILE *f;
    char *path, *tmp;
    uint64_t total;   /* bytes of data declared */
    uint64_t written; /* bytes of data written so far */
};

static void nb_st_writer_free(nb_st_writer *w, int remove_tmp)
{
    if (!w) return;
    if (w->f) fclose(w->f);
    if (remove_tmp && w->tmp) remove(w->tmp);
    free(w->path);
    free(w->tmp);
    free(w);
}

void nb_st_writer_abort(nb_st_writer *w) { nb_st_writer_free(w, 1); }

nb_status nb_st_writer_open(nb_st_writer **out, const char *path, int n, const char *const *names,
                            const nb_dtype *dtypes, const int64_t (*shapes)[NB_MAX_DIMS], const int *ndims,
                            const char *metadata_json)
{
    *out = NULL;
    nb_status s = NB_OK;
    char *hdr = NULL;
    cJSON *root = cJSON_CreateObject();
    nb_st_writer *w = calloc(1, sizeof *w);
    if (!root || !w) {
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: writer", path);
        goto fail;
    }
    if (metadata_json) {
        cJSON *meta = cJSON_Parse(metadata_json);
        if (!cJSON_IsObject(meta)) {
            cJSON_Delete(meta);
            s = nb_error(NB_ERR_INVALID_ARG, "%s: metadata is not a JSON object", path);
            goto fail;
        }
        cJSON_AddItemToObject(root, "__metadata__", meta);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (!names[i] || !names[i][0] || !strcmp(names[i], "__metadata__") ||
            cJSON_GetObjectItemCaseSensitive(root, names[i])) {
            s = nb_error(NB_ERR_INVALID_ARG, "%s: tensor '%s': empty, reserved or duplicate name", path,
                         names[i] ? names[i] : "(null)");
            goto fail;
        }
        if ((unsigned)dtypes[i] >= NB_DTYPE_COUNT || ndims[i] < 0 || ndims[i] > NB_MAX_DIMS) {
            s = nb_error(NB_ERR_INVALID_ARG, "%s: tensor '%s': bad dtype or ndim", path, names[i]);
            goto fail;
        }
        uint64_t nb = nb_dtype_size(dtypes[i]);
        cJSON *e = cJSON_CreateObject(), *sh = cJSON_CreateArray(), *of = cJSON_CreateArray();
        cJSON_AddItemToObject(root, names[i], e);
        cJSON_AddStringToObject(e, "dtype", nb_dtype_name(dtypes[i]));
        cJSON_AddItemToObject(e, "shape", sh);
        for (int d = 0; d < ndims[i]; d++) {
            if (shapes[i][d] < 0 || __builtin_mul_overflow(nb, (uint64_t)shapes[i][d], &nb)) {
                s = nb_error(NB_ERR_INVALID_ARG, "%s: tensor '%s': bad shape", path, names[i]);
                goto fail;
            }
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shapes[i][d]));
        }
        cJSON_AddItemToObject(e, "data_offsets", of);
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        if (__builtin_add_overflow(off, nb, &off) || off > (1ull << 53)) {
            s = nb_error(NB_ERR_INVALID_ARG, "%s: tensor '%s': file too large", path, names[i]);
            goto fail;
        }
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
    }
    w->total = off;
    hdr = cJSON_PrintUnformatted(root);
    if (!hdr) {
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: header", path);
        goto fail;
    }
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;
    w->path = strdup(path);
    w->tmp = malloc(strlen(path) + 8);
    if (!w->path || !w->tmp) {
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: writer", path);
        goto fail;
    }
    sprintf(w->tmp, "%s.tmp", path);
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        s = nb_error(NB_ERR_IO, "%s: cannot create: %s", w->tmp, strerror(errno));
        goto fail;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = "        ";
    if (fwrite(len8, 1, 8, w->f) != 8 || fwrite(hdr, 1, hl, w->f) != hl ||
        fwrite(spaces, 1, padded - hl, w->f) != padded - hl) {
        s = nb_error(NB_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
        goto fail;
    }
    cJSON_free(hdr);
    cJSON_Delete(root);
    *out = w;
    return NB_OK;
fail:
    if (hdr) cJSON_free(hdr);
    cJSON_Delete(root);
    nb_st_writer_free(w, 1);
    return s;
}

nb_status nb_st_writer_write(nb_st_writer *w, const void *data, size_t nbytes)
{
    if (nbytes > w->total - w->written)
        return nb_error(NB_ERR_INVALID_ARG, "%s: writing %zu bytes past the %llu declared", w->path, nbytes,
                        (unsigned long long)w->total);
    if (nbytes && fwrite(data, 1, nbytes, w->f) != nbytes)
        return nb_error(NB_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
    w->written += nbytes;
    return NB_OK;
}

nb_status nb_st_writer_close(nb_st_writer *w)
{
    if (!w) return NB_OK;
    nb_status s = NB_OK;
    if (w->written != w->total)
        s = nb_error(NB_ERR_INVALID_ARG, "%s: %llu of %llu declared data bytes written", w->path,
                     (unsigned long long)w->written, (unsigned long long)w->total);
    int rc = fclose(w->f);
    w->f = NULL;
    if (!s && rc != 0) s = nb_error(NB_ERR_IO, "%s: close failed: %s", w->tmp, strerror(errno));
    if (!s && rename(w->tmp, w->path) != 0)
        s = nb_error(NB_ERR_IO, "%s: rename to %s failed: %s", w->tmp, w->path, strerror(errno));
    nb_st_writer_free(w, s != NB_OK);
    return s;
}
