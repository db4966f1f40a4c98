/* Quantization configs (format/quant_config.h): ModelOpt NVFP4 and FP8 block.
 * Exercise: build-fmt/tests/test_model_config (quant cases). */
#include "format/quant_config.h"

#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"

const char *nb_quant_algo_name(nb_quant_algo a)
{
    switch (a) {
    case NB_QUANT_NONE: return "none";
    case NB_QUANT_NVFP4: return "nvfp4";
    case NB_QUANT_FP8_BLOCK: return "fp8-block";
    }
    return "?";
}

void nb_quant_config_free(nb_quant_config *q)
{
    if (!q) return;
    for (int i = 0; i < q->n_exclude; i++) free(q->exclude[i]);
    free(q->exclude);
    q->exclude = NULL;
    q->n_exclude = 0;
}

int nb_quant_excluded(const nb_quant_config *q, const char *module)
{
    if (!q || !module) return 0;
    char parent[1024];
    const char *dot = strrchr(module, '.');
    size_t pl = dot ? (size_t)(dot - module) : 0;
    if (pl >= sizeof parent) pl = 0;
    memcpy(parent, module, pl);
    parent[pl] = 0;
    for (int i = 0; i < q->n_exclude; i++) {
        if (fnmatch(q->exclude[i], module, 0) == 0) return 1;
        if (pl && fnmatch(q->exclude[i], parent, 0) == 0) return 1;
    }
    return 0;
}

/* Append the strings of a JSON array to q->exclude. */
static nb_status nb_quant_add_excludes(const char *what, const char *key, const cJSON *arr, nb_quant_config *q)
{
    if (!arr || cJSON_IsNull(arr)) return NB_OK;
    if (!cJSON_IsArray(arr)) return nb_error(NB_ERR_FORMAT, "%s: '%s' must be a list of module globs", what, key);
    int n = cJSON_GetArraySize(arr);
    char **ne = realloc(q->exclude, ((size_t)q->n_exclude + (size_t)n + 1) * sizeof *ne);
    if (!ne) return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: %s", what, key);
    q->exclude = ne;
    for (const cJSON *e = arr->child; e; e = e->next) {
        if (!cJSON_IsString(e)) return nb_error(NB_ERR_FORMAT, "%s: '%s' must hold strings", what, key);
        if (!(q->exclude[q->n_exclude] = strdup(e->valuestring))) return nb_error(NB_ERR_OUT_OF_MEMORY, "%s", what);
        q->n_exclude++;
    }
    return NB_OK;
}

static nb_status nb_quant_parse_nvfp4(const char *what, const cJSON *obj, nb_quant_config *q)
{
    int64_t gs;
    NB_TRY(nb_json_int(obj, "group_size", 16, &gs, what, NULL));
    if (gs != 16)
        return nb_error(NB_ERR_UNSUPPORTED, "%s: NVFP4 group_size %lld (only 16 is supported)", what, (long long)gs);
    q->algo = NB_QUANT_NVFP4;
    q->group_size = 16;
    NB_TRY(nb_quant_add_excludes(what, "exclude_modules", cJSON_GetObjectItemCaseSensitive(obj, "exclude_modules"), q));
    NB_TRY(nb_quant_add_excludes(what, "ignore", cJSON_GetObjectItemCaseSensitive(obj, "ignore"), q));
    return NB_OK;
}

nb_status nb_quant_config_parse(const char *what, const cJSON *obj, nb_quant_config *q)
{
    memset(q, 0, sizeof *q);
    if (!cJSON_IsObject(obj)) return nb_error(NB_ERR_FORMAT, "%s: quantization config is not an object", what);
    /* a whole hf_quant_config.json, or config.json's quantization_config with the
     * ModelOpt block nested */
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(obj, "quantization");
    if (cJSON_IsObject(inner)) obj = inner;
    const char *method, *algo;
    NB_TRY(nb_json_str(obj, "quant_method", NULL, &method, what, NULL));
    NB_TRY(nb_json_str(obj, "quant_algo", NULL, &algo, what, NULL));
    nb_status s;
    if (algo && (!method || !strcmp(method, "modelopt"))) {
        if (!strcmp(algo, "NVFP4")) {
            s = nb_quant_parse_nvfp4(what, obj, q);
        } else {
            s = nb_error(NB_ERR_UNSUPPORTED, "%s: ModelOpt quant_algo '%s' (supported: NVFP4)", what, algo);
        }
    } else if (method && !strcmp(method, "fp8")) {
        const cJSON *wb = cJSON_GetObjectItemCaseSensitive(obj, "weight_block_size");
        uint64_t bn = 0, bk = 0;
        if (!cJSON_IsArray(wb) || cJSON_GetArraySize(wb) != 2 || !cJSON_IsNumber(wb->child) ||
            !cJSON_IsNumber(wb->child->next)) {
            s = nb_error(NB_ERR_UNSUPPORTED, "%s: fp8 without weight_block_size [n, k] (per-tensor FP8 is not supported)",
                         what);
        } else if ((bn = (uint64_t)wb->child->valuedouble) < 1 || bn > 65536 ||
                   (bk = (uint64_t)wb->child->next->valuedouble) < 1 || bk > 65536 ||
                   (double)bn != wb->child->valuedouble || (double)bk != wb->child->next->valuedouble) {
            s = nb_error(NB_ERR_FORMAT, "%s: weight_block_size must be two positive integers", what);
        } else {
            const char *fmt;
            s = nb_json_str(obj, "fmt", "e4m3", &fmt, what, NULL);
            if (!s && strcmp(fmt, "e4m3"))
                s = nb_error(NB_ERR_UNSUPPORTED, "%s: fp8 fmt '%s' (supported: e4m3)", what, fmt);
            q->algo = NB_QUANT_FP8_BLOCK;
            q->block_n = (int)bn;
            q->block_k = (int)bk;
            if (!s)
                s = nb_quant_add_excludes(what, "modules_to_not_convert",
                                          cJSON_GetObjectItemCaseSensitive(obj, "modules_to_not_convert"), q);
            if (!s)
                s = nb_quant_add_excludes(what, "ignored_layers", cJSON_GetObjectItemCaseSensitive(obj, "ignored_layers"), q);
        }
    } else {
        s = nb_error(NB_ERR_UNSUPPORTED,
                     "%s: quantization quant_method '%s' quant_algo '%s' (supported: modelopt NVFP4, fp8 with weight_block_size)",
                     what, method ? method : "(none)", algo ? algo : "(none)");
    }
    if (s) nb_quant_config_free(q);
    return s;
}

nb_status nb_quant_config_load(const char *dir, const cJSON *config_json, nb_quant_config *q)
{
    memset(q, 0, sizeof *q);
    if (dir) {
        char path[4096];
        nb_path_join(path, sizeof path, dir, "hf_quant_config.json");
        if (nb_path_exists(path)) {
            cJSON *root;
            NB_TRY(nb_json_load_file(path, &root));
            nb_status s = nb_quant_config_parse(path, root, q);
            cJSON_Delete(root);
            return s;
        }
    }
    const cJSON *qc = config_json ? cJSON_GetObjectItemCaseSensitive(config_json, "quantization_config") : NULL;
    if (!qc || cJSON_IsNull(qc)) return NB_OK;
    return nb_quant_config_parse("config.json quantization_config", qc, q);
}
