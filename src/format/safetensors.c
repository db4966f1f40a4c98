/* safetensors header parsing and validation (format/safetensors.h): nb_st_parse.
 * The checkpoint (mmap, shards, lookup) is in checkpoint.c, the writer in st_writer.c.
 * Exercise: build-fmt/tests/test_safetensors; fuzz: tests/fuzz/fuzz_st_parse.c.
 *
 * Everything here treats the buffer as hostile: all arithmetic on sizes is checked for
 * overflow, and no byte outside [buf, buf+len) is read. */
#include "format/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* The safetensors reference implementation refuses headers over 100 MB; so do we, which
 * also bounds the JSON parser's work on hostile input. */
#define NB_ST_MAX_HEADER ((uint64_t)100 << 20)
/* Integers in JSON come back as doubles: beyond 2^53 they are not exact. */
#define NB_ST_MAX_INT 9007199254740992.0

void nb_st_tensors_free(nb_st_tensor *t, int n)
{
    if (!t) return;
    for (int i = 0; i < n; i++) free((char *)t[i].name);
    free(t);
}

/* A non-negative integer that a double holds exactly. */
static int nb_st_get_u53(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0) || d > NB_ST_MAX_INT || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

typedef struct nb_st_span {
    uint64_t begin, end;
    int idx;
} nb_st_span;

static int nb_st_span_cmp(const void *a, const void *b)
{
    const nb_st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int nb_st_name_cmp(const void *a, const void *b)
{
    const nb_st_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* One entry of the header: {"dtype": .., "shape": [..], "data_offsets": [b, e]}. */
static nb_status nb_st_parse_entry(const char *what, const cJSON *e, uint64_t data_len, nb_st_tensor *t,
                                   uint64_t *begin, uint64_t *end)
{
    const char *name = t->name;
    if (!cJSON_IsObject(e)) return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': entry is not an object", what, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': missing or non-string 'dtype'", what, name);
    int d = nb_dtype_parse(dt->valuestring);
    if (d < 0)
        return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'", what, name, dt->valuestring);
    t->dtype = (nb_dtype)d;
    if (!cJSON_IsArray(sh)) return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': missing or non-array 'shape'", what, name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > NB_MAX_DIMS)
        return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': %d dimensions (at most %d)", what, name, nd, NB_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    int i = 0;
    for (const cJSON *v = sh->child; v; v = v->next, i++) {
        uint64_t x;
        if (!nb_st_get_u53(v, &x))
            return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", what, name, i);
        t->shape[i] = (int64_t)x;
        if (__builtin_mul_overflow(numel, x, &numel))
            return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': shape overflows", what, name);
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)nb_dtype_size(t->dtype), &nbytes))
        return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': shape x dtype size overflows", what, name);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': 'data_offsets' must be [begin, end]", what, name);
    if (!nb_st_get_u53(off->child, begin) || !nb_st_get_u53(off->child->next, end))
        return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': data_offsets are not non-negative integers", what, name);
    if (*begin > *end)
        return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before begin", what, name,
                        (unsigned long long)*begin, (unsigned long long)*end);
    if (*end > data_len)
        return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] out of range (data section is %llu bytes; truncated file?)",
                        what, name, (unsigned long long)*begin, (unsigned long long)*end, (unsigned long long)data_len);
    if (*end - *begin != nbytes)
        return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': %llu bytes but shape x %s needs %llu", what, name,
                        (unsigned long long)(*end - *begin), nb_dtype_name(t->dtype), (unsigned long long)nbytes);
    t->nbytes = (size_t)nbytes;
    return NB_OK;
}

nb_status nb_st_parse(const char *what, const uint8_t *buf, size_t len, nb_st_tensor **out, int *n)
{
    *out = NULL;
    *n = 0;
    if (!what) what = "safetensors";
    if (len < 8) return nb_error(NB_ERR_FORMAT, "%s: truncated file (%zu bytes, no header length)", what, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    if (hlen > len - 8)
        return nb_error(NB_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)", what,
                        (unsigned long long)hlen, len);
    if (hlen > NB_ST_MAX_HEADER)
        return nb_error(NB_ERR_FORMAT, "%s: header length %llu over the 100 MB limit", what, (unsigned long long)hlen);
    if (hlen < 2 || buf[8] != '{')
        return nb_error(NB_ERR_FORMAT, "%s: header is not a JSON object", what);
    const char *text = (const char *)buf + 8;
    const char *jend = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen, &jend, 0);
    if (!root) {
        size_t at = jend && jend >= text ? (size_t)(jend - text) : 0;
        return nb_error(NB_ERR_FORMAT, "%s: invalid JSON in header near byte %zu", what, at);
    }
    nb_status s = NB_OK;
    nb_st_tensor *t = NULL;
    nb_st_span *spans = NULL;
    const nb_st_tensor **sorted = NULL;
    int count = 0;
    /* Only spaces (the writers' alignment padding) may follow the JSON. */
    for (const char *p = jend; p && p < text + hlen; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != 0) {
            s = nb_error(NB_ERR_FORMAT, "%s: trailing bytes after the header JSON", what);
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        s = nb_error(NB_ERR_FORMAT, "%s: header is not a JSON object", what);
        goto done;
    }
    int cap = 0;
    for (const cJSON *e = root->child; e; e = e->next) cap++;
    t = calloc((size_t)cap + 1, sizeof *t);
    spans = calloc((size_t)cap + 1, sizeof *spans);
    if (!t || !spans) {
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: header with %d entries", what, cap);
        goto done;
    }
    const uint64_t data_len = (uint64_t)len - 8 - hlen;
    const uint8_t *data = buf + 8 + hlen;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!e->string) {
            s = nb_error(NB_ERR_FORMAT, "%s: header entry without a name", what);
            goto done;
        }
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e)) {
                s = nb_error(NB_ERR_FORMAT, "%s: '__metadata__' is not an object", what);
                goto done;
            }
            continue;
        }
        nb_st_tensor *ti = &t[count];
        ti->name = strdup(e->string);
        if (!ti->name) {
            s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: tensor names", what);
            goto done;
        }
        count++;
        uint64_t b = 0, en = 0;
        s = nb_st_parse_entry(what, e, data_len, ti, &b, &en);
        if (s) goto done;
        ti->data = data + b;
        ti->file_index = 0;
        spans[count - 1] = (nb_st_span){b, en, count - 1};
    }
    /* Duplicate names: cJSON keeps both entries of a repeated key. */
    sorted = malloc(((size_t)count + 1) * sizeof *sorted);
    if (!sorted) {
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: header", what);
        goto done;
    }
    for (int i = 0; i < count; i++) sorted[i] = &t[i];
    qsort(sorted, (size_t)count, sizeof *sorted, nb_st_name_cmp);
    for (int i = 1; i < count; i++) {
        if (!strcmp(sorted[i - 1]->name, sorted[i]->name)) {
            s = nb_error(NB_ERR_FORMAT, "%s: tensor '%s': duplicate name", what, sorted[i]->name);
            goto done;
        }
    }
    /* The data section must be covered exactly: no overlap, no gap, nothing after. */
    qsort(spans, (size_t)count, sizeof *spans, nb_st_span_cmp);
    uint64_t pos = 0;
    for (int i = 0; i < count; i++) {
        if (spans[i].begin < pos) {
            s = nb_error(NB_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] overlap another tensor", what,
                         t[spans[i].idx].name, (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end);
            goto done;
        }
        if (spans[i].begin > pos) {
            s = nb_error(NB_ERR_FORMAT, "%s: tensor '%s': gap of %llu bytes before its data (offsets must cover the data section)",
                         what, t[spans[i].idx].name, (unsigned long long)(spans[i].begin - pos));
            goto done;
        }
        pos = spans[i].end;
    }
    if (pos != data_len) {
        s = nb_error(NB_ERR_FORMAT, "%s: tensors cover %llu of the %llu data bytes (offsets must cover the data section)",
                     what, (unsigned long long)pos, (unsigned long long)data_len);
        goto done;
    }
done:
    cJSON_Delete(root);
    free(spans);
    free(sorted);
    if (s) {
        nb_st_tensors_free(t, count);
        return s;
    }
    *out = t;
    *n = count;
    return NB_OK;
}
