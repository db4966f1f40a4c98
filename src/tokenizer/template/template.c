/* Chat templates, public API (template.h): compile once, render many times, and apply a
 * chat template with transformers' variables (messages, tools, documents,
 * add_generation_prompt, bos_token, eos_token, extra kwargs).
 * Exercised by tests/template/ and `nibble render-template`. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/template/tpl_internal.h"

/* Values one render may allocate (strings, lists, scopes) before it is refused. */
#define RENDER_ARENA_LIMIT ((size_t)256 << 20)

nb_status nb_template_compile(const char *src, size_t len, const char *name, nb_template **out)
{
    *out = NULL;
    if (!src) return nb_error(NB_ERR_INVALID_ARG, "nb_template_compile: src is NULL");
    nb_template *t = calloc(1, sizeof *t);
    if (!t) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_template_compile: out of memory");
    t->name = strdup(name ? name : "template");
    if (!t->name) {
        free(t);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_template_compile: out of memory");
    }
    nb_status st = tpl_parse(t, src, len);
    if (st != NB_OK) {
        nb_template_free(t);
        return st;
    }
    *out = t;
    return NB_OK;
}

const char *nb_template_name(const nb_template *tpl) { return tpl->name; }

void nb_template_free(nb_template *tpl)
{
    if (!tpl) return;
    tpl_arena_free(&tpl->arena);
    free(tpl->name);
    free(tpl);
}

/* Render with a root scope already filled by `fill`. */
static nb_status render(const nb_template *tpl, const cJSON *vars, const cJSON *const *extra_names_vals, char **out,
                        size_t *len)
{
    (void)extra_names_vals;
    *out = NULL;
    if (len) *len = 0;
    if (vars && !cJSON_IsObject(vars))
        return nb_error(NB_ERR_INVALID_ARG, "template %s: variables must be a JSON object", tpl->name);
    tpl_ctx c;
    memset(&c, 0, sizeof c);
    c.tpl = tpl;
    c.arena.limit = RENDER_ARENA_LIMIT;
    tpl_buf result = {0};
    c.out = &result;
    nb_status st = NB_OK;
    tpl_scope *root = tpl_scope_new(&c, NULL);
    if (!root) st = tpl_oom(&c, 0);
    const cJSON *it;
    if (st == NB_OK && vars) {
        cJSON_ArrayForEach(it, vars)
        {
            tv v;
            st = tpl_from_cjson(&c, it, &v);
            if (st != NB_OK) break;
            if (tpl_scope_set(&c, root, it->string ? it->string : "", v)) {
                st = tpl_oom(&c, 0);
                break;
            }
        }
    }
    if (st == NB_OK) st = tpl_exec(&c, root, tpl->root);
    if (st == NB_OK && result.failed) st = tpl_oom(&c, 0);
    tpl_arena_free(&c.arena);
    if (st != NB_OK) {
        tpl_buf_free(&result);
        return st;
    }
    if (!result.p) {
        result.p = calloc(1, 1);
        if (!result.p) return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s: out of memory", tpl->name);
    }
    *out = result.p;
    if (len) *len = result.n;
    return NB_OK;
}

nb_status nb_template_render(const nb_template *tpl, const cJSON *vars, char **out, size_t *len)
{
    return render(tpl, vars, NULL, out, len);
}

nb_status nb_chat_template_apply(const nb_template *tpl, const cJSON *messages, const cJSON *tools,
                                 int add_generation_prompt, const cJSON *kwargs, const char *bos_token,
                                 const char *eos_token, char **out, size_t *len)
{
    *out = NULL;
    if (kwargs && !cJSON_IsObject(kwargs))
        return nb_error(NB_ERR_INVALID_ARG, "template %s: kwargs must be a JSON object", tpl->name);
    if (messages && !cJSON_IsArray(messages))
        return nb_error(NB_ERR_INVALID_ARG, "template %s: messages must be a JSON array", tpl->name);
    /* Build one variables object. The caller's trees are referenced, not copied: the
     * wrapper owns only its own nodes (cJSON_CreateArrayReference / ObjectReference). */
    cJSON *vars = cJSON_CreateObject();
    if (!vars) return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s: out of memory", tpl->name);
    int ok = 1;
    ok &= cJSON_AddItemToObject(vars, "messages", messages ? cJSON_CreateArrayReference(messages->child)
                                                           : cJSON_CreateArray()) != 0;
    ok &= cJSON_AddItemToObject(vars, "tools", tools ? (cJSON_IsArray(tools) ? cJSON_CreateArrayReference(tools->child)
                                                                             : cJSON_CreateObjectReference(tools->child))
                                                     : cJSON_CreateNull()) != 0;
    ok &= cJSON_AddItemToObject(vars, "documents", cJSON_CreateNull()) != 0;
    ok &= cJSON_AddItemToObject(vars, "add_generation_prompt", cJSON_CreateBool(add_generation_prompt)) != 0;
    if (bos_token) ok &= cJSON_AddItemToObject(vars, "bos_token", cJSON_CreateStringReference(bos_token)) != 0;
    if (eos_token) ok &= cJSON_AddItemToObject(vars, "eos_token", cJSON_CreateStringReference(eos_token)) != 0;
    if (!ok) {
        cJSON_Delete(vars);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s: out of memory", tpl->name);
    }
    nb_status st = NB_OK;
    if (kwargs) {
        const cJSON *k;
        cJSON_ArrayForEach(k, kwargs)
        {
            if (!k->string) continue;
            cJSON *ref = cJSON_IsArray(k) ? cJSON_CreateArrayReference(k->child)
                       : cJSON_IsObject(k) ? cJSON_CreateObjectReference(k->child) : cJSON_Duplicate(k, 0);
            if (!ref) {
                st = nb_error(NB_ERR_OUT_OF_MEMORY, "template %s: out of memory", tpl->name);
                break;
            }
            /* a keyword argument replaces a variable of the same name */
            cJSON_DeleteItemFromObjectCaseSensitive(vars, k->string);
            cJSON_AddItemToObject(vars, k->string, ref);
        }
    }
    if (st == NB_OK) st = render(tpl, vars, NULL, out, len);
    cJSON_Delete(vars);
    return st;
}
