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

/* Fills the root scope of a render with its variables. */
typedef nb_status (*fill_fn)(tpl_ctx *c, tpl_scope *root, const void *user);

static nb_status render(const nb_template *tpl, fill_fn fill, const void *user, char **out, size_t *len)
{
    *out = NULL;
    if (len) *len = 0;
    tpl_ctx c;
    memset(&c, 0, sizeof c);
    c.tpl = tpl;
    c.arena.limit = RENDER_ARENA_LIMIT;
    tpl_buf result = {0};
    c.out = &result;
    nb_status st = NB_OK;
    tpl_scope *root = tpl_scope_new(&c, NULL);
    if (!root) st = tpl_oom(&c, 0);
    if (st == NB_OK) st = fill(&c, root, user);
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

static nb_status fill_cjson(tpl_ctx *c, tpl_scope *root, const void *user)
{
    const cJSON *vars = user, *it;
    if (!vars) return NB_OK;
    cJSON_ArrayForEach(it, vars)
    {
        tv v;
        NB_TRY(tpl_from_cjson(c, it, &v));
        if (tpl_scope_set(c, root, it->string ? it->string : "", v)) return tpl_oom(c, 0);
    }
    return NB_OK;
}

nb_status nb_template_render(const nb_template *tpl, const cJSON *vars, char **out, size_t *len)
{
    *out = NULL;
    if (vars && !cJSON_IsObject(vars))
        return nb_error(NB_ERR_INVALID_ARG, "template %s: variables must be a JSON object", tpl->name);
    return render(tpl, fill_cjson, vars, out, len);
}

typedef struct json_text_vars {
    const char *messages, *tools, *kwargs, *bos, *eos;
    int add_generation_prompt;
} json_text_vars;

static nb_status fill_json_text(tpl_ctx *c, tpl_scope *root, const void *user)
{
    const json_text_vars *j = user;
    tv msgs, tools = tv_none(), kw = {0};
    if (j->messages) {
        NB_TRY(tpl_parse_json(c, "messages", j->messages, strlen(j->messages), &msgs));
        if (msgs.t != TV_LIST) return nb_error(NB_ERR_INVALID_ARG, "messages: expected a JSON array");
    } else {
        msgs = tv_list_new(&c->arena, 0);
        if (!msgs.u.l) return tpl_oom(c, 0);
    }
    if (j->tools) NB_TRY(tpl_parse_json(c, "tools", j->tools, strlen(j->tools), &tools));
    if (j->kwargs) {
        NB_TRY(tpl_parse_json(c, "kwargs", j->kwargs, strlen(j->kwargs), &kw));
        if (kw.t != TV_DICT) return nb_error(NB_ERR_INVALID_ARG, "kwargs: expected a JSON object");
    }
    int bad = tpl_scope_set(c, root, "messages", msgs) || tpl_scope_set(c, root, "tools", tools) ||
              tpl_scope_set(c, root, "documents", tv_none()) ||
              tpl_scope_set(c, root, "add_generation_prompt", tv_bool(j->add_generation_prompt));
    if (j->bos) bad |= tpl_scope_set(c, root, "bos_token", tv_str(j->bos, strlen(j->bos)));
    if (j->eos) bad |= tpl_scope_set(c, root, "eos_token", tv_str(j->eos, strlen(j->eos)));
    if (j->kwargs)
        for (size_t i = 0; i < kw.u.d->n && !bad; i++) {
            tv k = kw.u.d->k[i];
            char *name = tpl_strndup(&c->arena, k.u.s.p, k.u.s.n);
            bad |= !name || tpl_scope_set(c, root, name, kw.u.d->v[i]);
        }
    return bad ? tpl_oom(c, 0) : NB_OK;
}

nb_status nb_chat_template_apply_json(const nb_template *tpl, const char *messages_json, const char *tools_json,
                                      int add_generation_prompt, const char *kwargs_json, const char *bos_token,
                                      const char *eos_token, char **out, size_t *len)
{
    json_text_vars j = {messages_json, tools_json, kwargs_json, bos_token, eos_token, add_generation_prompt};
    *out = NULL;
    nb_status st = render(tpl, fill_json_text, &j, out, len);
    if (st != NB_OK && strncmp(nb_last_error(), "template ", 9))
        return nb_error_wrap(st, "template %s", tpl->name);
    return st;
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
    if (st == NB_OK) st = render(tpl, fill_cjson, vars, out, len);
    cJSON_Delete(vars);
    return st;
}
