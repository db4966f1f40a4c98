/* cJSON helpers (base/json.h). */
#include "base/json.h"
#include "base/error.h"
#include "base/file.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

nb_status nb_json_parse(const char *what, const char *text, size_t len, cJSON **out)
{
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (*out) return NB_OK;
    /* cJSON reports the position where parsing stopped; turn it into line:column. */
    size_t off = end && end >= text ? (size_t)(end - text) : 0;
    if (off > len) off = len;
    int line = 1, col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return nb_error(NB_ERR_FORMAT, "%s: invalid JSON near line %d, column %d", what, line, col);
}

nb_status nb_json_load_file(const char *path, cJSON **out)
{
    char *buf;
    size_t len;
    *out = NULL;
    NB_TRY(nb_read_file(path, &buf, &len, 0));
    nb_status s = nb_json_parse(path, buf, len, out);
    free(buf);
    return s;
}

static const cJSON *nb_json_get(const cJSON *obj, const char *key, int *found)
{
    const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (v && cJSON_IsNull(v)) v = NULL;
    if (found) *found = v != NULL;
    return v;
}

nb_status nb_json_int(const cJSON *obj, const char *key, int64_t dflt, int64_t *out, const char *what, int *found)
{
    const cJSON *v = nb_json_get(obj, key, found);
    *out = dflt;
    if (!v) return NB_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9.0e15)
        return nb_error(NB_ERR_FORMAT, "%s: '%s' must be an integer", what, key);
    *out = (int64_t)v->valuedouble;
    return NB_OK;
}

nb_status nb_json_num(const cJSON *obj, const char *key, double dflt, double *out, const char *what, int *found)
{
    const cJSON *v = nb_json_get(obj, key, found);
    *out = dflt;
    if (!v) return NB_OK;
    if (!cJSON_IsNumber(v)) return nb_error(NB_ERR_FORMAT, "%s: '%s' must be a number", what, key);
    *out = v->valuedouble;
    return NB_OK;
}

nb_status nb_json_bool(const cJSON *obj, const char *key, int dflt, int *out, const char *what, int *found)
{
    const cJSON *v = nb_json_get(obj, key, found);
    *out = dflt;
    if (!v) return NB_OK;
    if (!cJSON_IsBool(v)) return nb_error(NB_ERR_FORMAT, "%s: '%s' must be true or false", what, key);
    *out = cJSON_IsTrue(v);
    return NB_OK;
}

nb_status nb_json_str(const cJSON *obj, const char *key, const char *dflt, const char **out, const char *what, int *found)
{
    const cJSON *v = nb_json_get(obj, key, found);
    *out = dflt;
    if (!v) return NB_OK;
    if (!cJSON_IsString(v)) return nb_error(NB_ERR_FORMAT, "%s: '%s' must be a string", what, key);
    *out = v->valuestring;
    return NB_OK;
}
