/* OpenAI request parsing and validation (server/oai_request.h).
 * Exercised by: build-srv/tests/test_oai_request */
#include "server/oai_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_span.h"
#include "server/strbuf.h"

void nb_oai_set_error(nb_oai_error *err, int http, const char *type, const char *param, const char *code,
                      const char *fmt, ...)
{
    err->http = http;
    err->type = type;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    snprintf(err->code, sizeof err->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

char *nb_oai_error_json(const nb_oai_error *err)
{
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", err->message);
    cJSON_AddStringToObject(e, "type", err->type ? err->type : "invalid_request_error");
    if (err->param[0]) cJSON_AddStringToObject(e, "param", err->param);
    else cJSON_AddNullToObject(e, "param");
    if (err->code[0]) cJSON_AddStringToObject(e, "code", err->code);
    else cJSON_AddNullToObject(e, "code");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

int nb_oai_utf8_valid(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        unsigned cp, min;
        if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
        else return 0;
        if (i + (size_t)len > n) return 0;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += (size_t)len;
    }
    return 1;
}

#define NB_INVALID "invalid_request_error"

/* A present, non-null member. */
static const cJSON *nb_get(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int nb_get_num(const cJSON *o, const char *k, double lo, double hi, double *out, nb_oai_error *err)
{
    const cJSON *v = nb_get(o, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        nb_oai_set_error(err, 400, NB_INVALID, k, "invalid_type", "'%s' must be a number", k);
        return -1;
    }
    if (!(v->valuedouble >= lo && v->valuedouble <= hi)) {
        nb_oai_set_error(err, 400, NB_INVALID, k, "invalid_value", "'%s' = %g is out of range [%g, %g]", k,
                         v->valuedouble, lo, hi);
        return -1;
    }
    *out = v->valuedouble;
    return 1;
}

static int nb_get_int(const cJSON *o, const char *k, double lo, double hi, int64_t *out, nb_oai_error *err)
{
    const cJSON *v = nb_get(o, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble)) {
        nb_oai_set_error(err, 400, NB_INVALID, k, "invalid_type", "'%s' must be an integer", k);
        return -1;
    }
    if (!(v->valuedouble >= lo && v->valuedouble <= hi)) {
        nb_oai_set_error(err, 400, NB_INVALID, k, "invalid_value", "'%s' = %.17g is out of range [%.17g, %.17g]", k,
                         v->valuedouble, lo, hi);
        return -1;
    }
    *out = (int64_t)v->valuedouble;
    return 1;
}

static int nb_get_bool(const cJSON *o, const char *k, int *out, nb_oai_error *err)
{
    const cJSON *v = nb_get(o, k);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) {
        nb_oai_set_error(err, 400, NB_INVALID, k, "invalid_type", "'%s' must be a boolean", k);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 1;
}

void nb_oai_request_free(nb_oai_request *r)
{
    free(r->model);
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].ids);
        free(r->prompts[i].text);
    }
    free(r->prompts);
    cJSON_Delete(r->messages);
    cJSON_Delete(r->tools);
    cJSON_Delete(r->template_kwargs);
    free(r->messages_json);
    free(r->tools_json);
    free(r->kwargs_json);
    for (int i = 0; r->stop && i < r->sp.n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    memset(r, 0, sizeof *r);
}

/* An array of token ids; `param` names it in errors. */
static int nb_parse_ids(const cJSON *a, const char *param, int32_t **out, int *n, nb_oai_error *err)
{
    int cnt = cJSON_GetArraySize(a), i = 0;
    *out = malloc(((size_t)cnt + 1) * sizeof **out);
    *n = 0;
    if (!*out) {
        nb_oai_set_error(err, 500, "server_error", param, "", "out of memory");
        return -1;
    }
    const cJSON *x;
    cJSON_ArrayForEach(x, a)
    {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || !(x->valuedouble >= 0) ||
            !(x->valuedouble < 2147483647.0)) {
            nb_oai_set_error(err, 400, NB_INVALID, param, "invalid_value",
                             "'%s'[%d] must be a non-negative integer token id", param, i);
            return -1;
        }
        (*out)[i++] = (int32_t)x->valuedouble;
    }
    *n = i;
    return 0;
}

static int nb_parse_prompt(const cJSON *body, nb_oai_request *r, nb_oai_error *err)
{
    const cJSON *p = nb_get(body, "prompt");
    if (!p) {
        nb_oai_set_error(err, 400, NB_INVALID, "prompt", "missing_required_parameter", "'prompt' is required");
        return -1;
    }
    if (cJSON_IsString(p)) {
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) goto oom;
        r->n_prompts = 1;
        r->prompts[0].text = strdup(p->valuestring);
        if (!r->prompts[0].text) goto oom;
        r->prompts[0].text_len = strlen(p->valuestring);
        if (!r->prompts[0].text_len) goto empty;
        return 0;
    }
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0) {
        nb_oai_set_error(err, 400, NB_INVALID, "prompt", "invalid_type",
                         "'prompt' must be a string, an array of strings, an array of token ids or an array of "
                         "token-id arrays, and not empty");
        return -1;
    }
    const cJSON *first = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsNumber(first)) {
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) goto oom;
        r->n_prompts = 1;
        return nb_parse_ids(p, "prompt", &r->prompts[0].ids, &r->prompts[0].n_ids, err);
    }
    int cnt = cJSON_GetArraySize(p);
    if (cnt > NB_OAI_MAX_PROMPTS) {
        nb_oai_set_error(err, 400, NB_INVALID, "prompt", "invalid_value", "at most %d prompts per request (got %d)",
                         NB_OAI_MAX_PROMPTS, cnt);
        return -1;
    }
    r->prompts = calloc((size_t)cnt, sizeof *r->prompts);
    if (!r->prompts) goto oom;
    const cJSON *x;
    cJSON_ArrayForEach(x, p)
    {
        nb_oai_prompt *q = &r->prompts[r->n_prompts++];
        if (cJSON_IsString(first) && cJSON_IsString(x)) {
            q->text = strdup(x->valuestring);
            if (!q->text) goto oom;
            q->text_len = strlen(x->valuestring);
            if (!q->text_len) goto empty;
        } else if (cJSON_IsArray(first) && cJSON_IsArray(x)) {
            if (nb_parse_ids(x, "prompt", &q->ids, &q->n_ids, err)) return -1;
            if (!q->n_ids) goto empty;
        } else {
            nb_oai_set_error(err, 400, NB_INVALID, "prompt", "invalid_type",
                             "'prompt'[%d]: a batch must be all strings or all token-id arrays", r->n_prompts - 1);
            return -1;
        }
    }
    return 0;
empty:
    nb_oai_set_error(err, 400, NB_INVALID, "prompt", "invalid_value", "'prompt' must not be empty");
    return -1;
oom:
    nb_oai_set_error(err, 500, "server_error", "prompt", "", "out of memory");
    return -1;
}

/* Append `s` to a growing string. */
static int nb_cat(char **buf, size_t *len, const char *s)
{
    size_t n = strlen(s);
    char *b = realloc(*buf, *len + n + 1);
    if (!b) return -1;
    memcpy(b + *len, s, n + 1);
    *buf = b;
    *len += n;
    return 0;
}

/* ---- the chat variables as the request's own JSON text ---- */

/* The value span of `child` in the container `parent` whose text starts at s[start]: the
 * members are walked in step with cJSON's child list. Returns 0 or -1. */
static int nb_span_of(const char *s, size_t n, size_t start, const cJSON *parent, const cJSON *child, size_t *vs,
                      size_t *ve)
{
    nb_json_iter it;
    size_t ks, ke;
    if (nb_json_iter_begin(&it, s, n, start)) return -1;
    for (const cJSON *c = parent->child; c; c = c->next) {
        if (nb_json_iter_next(&it, &ks, &ke, vs, ve) != 1) return -1;
        if (c == child) return 0;
    }
    return -1;
}

/* messages_json: the raw array, except that a message whose content was a list of parts is
 * rebuilt member by member with the joined string (from r->messages) in place of the list. */
static int nb_raw_messages(const char *s, size_t n, size_t ms, const cJSON *m, const nb_oai_request *r,
                           nb_strbuf *b)
{
    nb_json_iter it, mit;
    size_t ks, ke, vs, ve, fs, fe;
    if (nb_json_iter_begin(&it, s, n, ms)) return -1;
    nb_sb_add(b, "[", 1);
    const cJSON *norm = r->messages->child;
    for (const cJSON *msg = m->child; msg; msg = msg->next, norm = norm->next) {
        if (nb_json_iter_next(&it, &ks, &ke, &vs, &ve) != 1 || !norm) return -1;
        if (msg != m->child) nb_sb_add(b, ",", 1);
        const cJSON *content = nb_get(msg, "content");
        if (!cJSON_IsArray(content)) {
            nb_sb_add(b, s + vs, ve - vs);
            continue;
        }
        if (nb_json_iter_begin(&mit, s, n, vs)) return -1;
        nb_sb_add(b, "{", 1);
        /* The normalized copy has the same members in the same order, content replaced. */
        for (const cJSON *c = msg->child, *nc = norm->child; c; c = c->next, nc = nc ? nc->next : NULL) {
            if (nb_json_iter_next(&mit, &ks, &ke, &fs, &fe) != 1 || !nc) return -1;
            if (c != msg->child) nb_sb_add(b, ",", 1);
            nb_sb_add(b, s + ks, ke - ks);
            nb_sb_add(b, ":", 1);
            if (c != content) {
                nb_sb_add(b, s + fs, fe - fs);
                continue;
            }
            char *txt = cJSON_PrintUnformatted(nc);
            if (!txt) b->oom = 1;
            else nb_sb_puts(b, txt);
            free(txt);
        }
        nb_sb_add(b, "}", 1);
    }
    if (norm) return -1;
    nb_sb_add(b, "]", 1);
    return 0;
}

static char *nb_span_dup(const char *s, size_t a, size_t b)
{
    char *p = malloc(b - a + 1);
    if (p) memcpy(p, s + a, b - a), p[b - a] = 0;
    return p;
}

/* Fill r->messages_json, tools_json and kwargs_json from the body text `s` (which cJSON
 * accepted as `body`). think: the top-level enable_thinking to add to the kwargs (-1: none).
 * Returns 0, or -1 with *err set (500: out of memory, or a scanner that lost step with
 * cJSON, which is a bug). */
static int nb_raw_chat_json(const char *s, size_t n, const cJSON *body, const cJSON *m, const cJSON *tools,
                            const cJSON *kw, int think, nb_oai_request *r, nb_oai_error *err)
{
    size_t root = n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3) ? 3 : 0; /* cJSON skips a UTF-8 BOM */
    root = nb_json_skip_ws(s, n, root);
    size_t vs, ve;
    nb_strbuf b = {0};
    if (nb_span_of(s, n, root, body, m, &vs, &ve) || nb_raw_messages(s, n, vs, m, r, &b)) goto lost;
    if (b.oom) goto oom;
    r->messages_json = b.p;
    b = (nb_strbuf){0};
    if (tools) {
        if (nb_span_of(s, n, root, body, tools, &vs, &ve)) goto lost;
        if (!(r->tools_json = nb_span_dup(s, vs, ve))) goto oom;
    }
    if (kw) {
        if (nb_span_of(s, n, root, body, kw, &vs, &ve) || ve - vs < 2) goto lost;
        nb_sb_add(&b, s + vs, ve - vs - 1); /* all but the closing brace */
    } else {
        nb_sb_add(&b, "{", 1);
    }
    if (think >= 0) {
        if (kw && kw->child) nb_sb_add(&b, ",", 1);
        nb_sb_puts(&b, think ? "\"enable_thinking\":true" : "\"enable_thinking\":false");
    }
    nb_sb_add(&b, "}", 1);
    if (b.oom) goto oom;
    r->kwargs_json = b.p;
    return 0;
lost:
    nb_sb_free(&b);
    nb_oai_set_error(err, 500, "server_error", "messages", "", "internal error: request JSON text scan lost step");
    return -1;
oom:
    nb_sb_free(&b);
    nb_oai_set_error(err, 500, "server_error", "messages", "", "out of memory");
    return -1;
}

static int nb_parse_messages(const cJSON *body, const char *raw, size_t len, nb_oai_request *r, nb_oai_error *err)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool", "developer", "function"};
    const cJSON *m = nb_get(body, "messages");
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) == 0) {
        nb_oai_set_error(err, 400, NB_INVALID, "messages", m ? "invalid_value" : "missing_required_parameter",
                         "'messages' must be a non-empty array");
        return -1;
    }
    r->messages = cJSON_CreateArray();
    if (!r->messages) goto oom;
    int i = 0;
    const cJSON *msg;
    cJSON_ArrayForEach(msg, m)
    {
        char param[64];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(msg)) {
            nb_oai_set_error(err, 400, NB_INVALID, param, "invalid_type", "'%s' must be an object", param);
            return -1;
        }
        const cJSON *role = nb_get(msg, "role");
        int ok = 0;
        for (size_t k = 0; cJSON_IsString(role) && k < sizeof roles / sizeof roles[0]; k++)
            ok |= !strcmp(role->valuestring, roles[k]);
        if (!ok) {
            snprintf(param, sizeof param, "messages[%d].role", i);
            nb_oai_set_error(err, 400, NB_INVALID, param, "invalid_value",
                             "'%s' must be one of system, user, assistant, tool, developer", param);
            return -1;
        }
        cJSON *copy = cJSON_Duplicate(msg, 1);
        if (!copy) goto oom;
        cJSON_AddItemToArray(r->messages, copy);
        const cJSON *content = nb_get(msg, "content");
        snprintf(param, sizeof param, "messages[%d].content", i);
        if (!content) {
            /* Only an assistant turn carrying tool calls may omit its text. */
            if (strcmp(role->valuestring, "assistant") || !nb_get(msg, "tool_calls")) {
                nb_oai_set_error(err, 400, NB_INVALID, param, "missing_required_parameter", "'%s' is required",
                                 param);
                return -1;
            }
        } else if (cJSON_IsArray(content)) {
            /* Text parts are joined with newlines (as vLLM does) so every template sees a string. */
            char *joined = NULL;
            size_t jl = 0;
            int j = 0;
            const cJSON *part;
            cJSON_ArrayForEach(part, content)
            {
                const cJSON *type = nb_get(part, "type"), *text = nb_get(part, "text");
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
                    free(joined);
                    snprintf(param, sizeof param, "messages[%d].content[%d]", i, j);
                    nb_oai_set_error(err, 400, NB_INVALID, param, "invalid_value",
                                     "'%s': only {\"type\": \"text\", \"text\": ...} parts are supported", param);
                    return -1;
                }
                if ((j && nb_cat(&joined, &jl, "\n")) || nb_cat(&joined, &jl, text->valuestring)) {
                    free(joined);
                    goto oom;
                }
                j++;
            }
            cJSON_ReplaceItemInObjectCaseSensitive(copy, "content", cJSON_CreateString(joined ? joined : ""));
            free(joined);
        } else if (!cJSON_IsString(content)) {
            nb_oai_set_error(err, 400, NB_INVALID, param, "invalid_type",
                             "'%s' must be a string or an array of text parts", param);
            return -1;
        }
        i++;
    }
    const cJSON *tools = nb_get(body, "tools");
    if (tools) {
        const cJSON *t;
        int ok = cJSON_IsArray(tools);
        cJSON_ArrayForEach(t, tools) ok &= cJSON_IsObject(t);
        if (!ok) {
            nb_oai_set_error(err, 400, NB_INVALID, "tools", "invalid_type", "'tools' must be an array of objects");
            return -1;
        }
        r->tools = cJSON_Duplicate(tools, 1);
        if (!r->tools) goto oom;
    }
    const cJSON *kw = nb_get(body, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw)) {
        nb_oai_set_error(err, 400, NB_INVALID, "chat_template_kwargs", "invalid_type",
                         "'chat_template_kwargs' must be an object");
        return -1;
    }
    r->template_kwargs = kw ? cJSON_Duplicate(kw, 1) : cJSON_CreateObject();
    if (!r->template_kwargs) goto oom;
    int think;
    int got = nb_get_bool(body, "enable_thinking", &think, err);
    if (got < 0) return -1;
    int add_think = got && !cJSON_GetObjectItemCaseSensitive(r->template_kwargs, "enable_thinking");
    if (add_think) cJSON_AddBoolToObject(r->template_kwargs, "enable_thinking", think);
    if (nb_raw_chat_json(raw, len, body, m, tools, kw, add_think ? think : -1, r, err)) return -1;
    r->add_generation_prompt = 1;
    if (nb_get_bool(body, "add_generation_prompt", &r->add_generation_prompt, err) < 0) return -1;
    r->separate_reasoning = 1;
    if (nb_get_bool(body, "separate_reasoning", &r->separate_reasoning, err) < 0) return -1;
    return 0;
oom:
    nb_oai_set_error(err, 500, "server_error", "messages", "", "out of memory");
    return -1;
}

static int nb_parse_stop(const cJSON *body, nb_oai_request *r, nb_oai_error *err)
{
    const cJSON *s = nb_get(body, "stop");
    if (s) {
        int cnt = cJSON_IsString(s) ? 1 : cJSON_IsArray(s) ? cJSON_GetArraySize(s) : -1;
        if (cnt < 0) {
            nb_oai_set_error(err, 400, NB_INVALID, "stop", "invalid_type", "'stop' must be a string or an array of strings");
            return -1;
        }
        if (cnt > NB_OAI_MAX_STOP) {
            nb_oai_set_error(err, 400, NB_INVALID, "stop", "invalid_value", "at most %d stop strings (got %d)",
                             NB_OAI_MAX_STOP, cnt);
            return -1;
        }
        r->stop = calloc((size_t)cnt + 1, sizeof *r->stop);
        if (!r->stop) goto oom;
        const cJSON *one = s, *x;
        int i = 0;
        if (cJSON_IsString(s)) goto single;
        cJSON_ArrayForEach(x, s)
        {
            one = x;
        single:
            if (!cJSON_IsString(one) || !one->valuestring[0] || strlen(one->valuestring) > NB_OAI_MAX_STOP_LEN) {
                nb_oai_set_error(err, 400, NB_INVALID, "stop", "invalid_value",
                                 "'stop'[%d] must be a non-empty string of at most %d bytes", i, NB_OAI_MAX_STOP_LEN);
                return -1;
            }
            r->stop[i] = strdup(one->valuestring);
            if (!r->stop[i]) goto oom;
            r->sp.n_stop = ++i;
            if (one == s) break;
        }
        r->sp.stop = (const char *const *)r->stop;
    }
    const cJSON *ids = nb_get(body, "stop_token_ids");
    if (ids) {
        if (!cJSON_IsArray(ids) || cJSON_GetArraySize(ids) > NB_OAI_MAX_STOP_IDS) {
            nb_oai_set_error(err, 400, NB_INVALID, "stop_token_ids", "invalid_type",
                             "'stop_token_ids' must be an array of at most %d token ids", NB_OAI_MAX_STOP_IDS);
            return -1;
        }
        if (nb_parse_ids(ids, "stop_token_ids", &r->stop_ids, &r->sp.n_stop_token_ids, err)) return -1;
        r->sp.stop_token_ids = r->stop_ids;
    }
    return 0;
oom:
    nb_oai_set_error(err, 500, "server_error", "stop", "", "out of memory");
    return -1;
}

/* Parameters nibble does not implement: refusing them beats silently ignoring them. */
static int nb_refuse_unsupported(const cJSON *body, nb_oai_request *r, nb_oai_error *err)
{
    const cJSON *v;
    if ((v = nb_get(body, "logit_bias")) && (!cJSON_IsObject(v) || v->child)) {
        nb_oai_set_error(err, 400, NB_INVALID, "logit_bias", "unsupported_parameter", "'logit_bias' is not supported");
        return -1;
    }
    if ((v = nb_get(body, "suffix")) && (!cJSON_IsString(v) || v->valuestring[0])) {
        nb_oai_set_error(err, 400, NB_INVALID, "suffix", "unsupported_parameter", "'suffix' is not supported");
        return -1;
    }
    if ((v = nb_get(body, "response_format"))) {
        const cJSON *t = nb_get(v, "type");
        if (!cJSON_IsObject(v) || !cJSON_IsString(t) || strcmp(t->valuestring, "text")) {
            nb_oai_set_error(err, 400, NB_INVALID, "response_format", "unsupported_parameter",
                             "'response_format' other than {\"type\": \"text\"} is not supported");
            return -1;
        }
    }
    static const char *const constrained[] = {"regex", "json_schema", "ebnf", "guided_json", "guided_regex"};
    for (size_t i = 0; i < sizeof constrained / sizeof constrained[0]; i++)
        if (nb_get(body, constrained[i])) {
            nb_oai_set_error(err, 400, NB_INVALID, constrained[i], "unsupported_parameter",
                             "constrained decoding ('%s') is not supported", constrained[i]);
            return -1;
        }
    int64_t x;
    int got = nb_get_int(body, "min_tokens", 0, 1e9, &x, err);
    if (got < 0) return -1;
    if (got && x > 0) {
        nb_oai_set_error(err, 400, NB_INVALID, "min_tokens", "unsupported_parameter", "'min_tokens' is not supported");
        return -1;
    }
    got = nb_get_int(body, "best_of", 1, NB_OAI_MAX_N, &x, err);
    if (got < 0) return -1;
    if (got && x != 1 && x != r->sp.n) {
        nb_oai_set_error(err, 400, NB_INVALID, "best_of", "unsupported_parameter", "'best_of' other than n is not supported");
        return -1;
    }
    return 0;
}

int nb_oai_parse(nb_oai_kind kind, const char *body, size_t len, nb_oai_request *r, nb_oai_error *err)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->sp = nb_sampling_default_params();
    if (!nb_oai_utf8_valid(body, len)) {
        nb_oai_set_error(err, 400, NB_INVALID, "", "invalid_encoding", "request body is not valid UTF-8");
        return -1;
    }
    /* A raw NUL is JSON nowhere (U+0000 is written \u0000); cJSON would cut a string there,
     * while the chat template reads the raw text, so refuse it here for everyone. */
    cJSON *j = memchr(body, 0, len) ? NULL : cJSON_ParseWithLength(body, len);
    if (!j) {
        nb_oai_set_error(err, 400, NB_INVALID, "", "invalid_json", "request body is not valid JSON");
        return -1;
    }
    int rc = -1;
    if (!cJSON_IsObject(j)) {
        nb_oai_set_error(err, 400, NB_INVALID, "", "invalid_json", "request body must be a JSON object");
        goto out;
    }
    const cJSON *model = nb_get(j, "model");
    if (model && !cJSON_IsString(model)) {
        nb_oai_set_error(err, 400, NB_INVALID, "model", "invalid_type", "'model' must be a string");
        goto out;
    }
    if (model && !(r->model = strdup(model->valuestring))) goto out;
    double d;
    int64_t x;
    int got;
    if ((got = nb_get_num(j, "temperature", 0, 100, &d, err)) < 0) goto out;
    if (got) r->sp.temperature = (float)d;
    if ((got = nb_get_num(j, "top_p", 0, 1, &d, err)) < 0) goto out;
    if (got) {
        if (d == 0) {
            nb_oai_set_error(err, 400, NB_INVALID, "top_p", "invalid_value", "'top_p' must be in (0, 1]");
            goto out;
        }
        r->sp.top_p = (float)d;
    }
    if ((got = nb_get_int(j, "top_k", -1, 1e9, &x, err)) < 0) goto out;
    if (got) r->sp.top_k = (int)x;
    if ((got = nb_get_num(j, "min_p", 0, 1, &d, err)) < 0) goto out;
    if (got) r->sp.min_p = (float)d;
    if ((got = nb_get_num(j, "repetition_penalty", 1e-6, 1e6, &d, err)) < 0) goto out;
    if (got) r->sp.repetition_penalty = (float)d;
    if ((got = nb_get_num(j, "frequency_penalty", -2, 2, &d, err)) < 0) goto out;
    if (got) r->sp.frequency_penalty = (float)d;
    if ((got = nb_get_num(j, "presence_penalty", -2, 2, &d, err)) < 0) goto out;
    if (got) r->sp.presence_penalty = (float)d;
    if ((got = nb_get_int(j, "seed", -9.0e15, 9.0e15, &x, err)) < 0) goto out;
    if (got) r->sp.seed = x;
    if ((got = nb_get_int(j, "n", 1, NB_OAI_MAX_N, &x, err)) < 0) goto out;
    if (got) r->sp.n = (int)x;
    const char *mt = kind == NB_OAI_CHAT && nb_get(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if ((got = nb_get_int(j, mt, 1, 1 << 30, &x, err)) < 0) goto out;
    if (got) r->sp.max_tokens = (int)x, r->max_tokens_given = 1;
    if (nb_get_bool(j, "ignore_eos", &r->sp.ignore_eos, err) < 0) goto out;
    if (nb_get_bool(j, "skip_special_tokens", &r->sp.skip_special_tokens, err) < 0) goto out;
    if (nb_get_bool(j, "stream", &r->stream, err) < 0) goto out;
    const cJSON *so = nb_get(j, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) {
            nb_oai_set_error(err, 400, NB_INVALID, "stream_options", "invalid_type", "'stream_options' must be an object");
            goto out;
        }
        if (nb_get_bool(so, "include_usage", &r->include_usage, err) < 0 ||
            nb_get_bool(so, "continuous_usage_stats", &r->continuous_usage, err) < 0) {
            snprintf(err->param, sizeof err->param, "stream_options");
            goto out;
        }
    }
    if (kind == NB_OAI_COMPLETIONS) {
        /* logprobs: the number of alternatives per token (0 = the sampled token only). */
        if ((got = nb_get_int(j, "logprobs", 0, NB_MAX_TOP_LOGPROBS, &x, err)) < 0) goto out;
        if (got) r->logprobs = 1, r->top_logprobs = (int)x;
        if (nb_get_bool(j, "echo", &r->echo, err) < 0) goto out;
        if (r->echo && r->logprobs) {
            nb_oai_set_error(err, 400, NB_INVALID, "echo", "unsupported_parameter",
                             "'echo' with 'logprobs' (prompt log-probabilities) is not supported");
            goto out;
        }
        if (nb_parse_prompt(j, r, err)) goto out;
        if (!r->max_tokens_given) r->sp.max_tokens = 16; /* OpenAI's default for completions */
    } else {
        if (nb_get_bool(j, "logprobs", &r->logprobs, err) < 0) goto out;
        if ((got = nb_get_int(j, "top_logprobs", 0, NB_MAX_TOP_LOGPROBS, &x, err)) < 0) goto out;
        if (got && x > 0 && !r->logprobs) {
            nb_oai_set_error(err, 400, NB_INVALID, "top_logprobs", "invalid_value",
                             "'top_logprobs' needs 'logprobs': true");
            goto out;
        }
        if (got) r->top_logprobs = (int)x;
        if (nb_parse_messages(j, body, len, r, err)) goto out;
    }
    r->sp.logprobs = r->logprobs;
    r->sp.top_logprobs = r->top_logprobs;
    if (nb_parse_stop(j, r, err) || nb_refuse_unsupported(j, r, err)) goto out;
    if ((int64_t)r->sp.n * (r->n_prompts ? r->n_prompts : 1) > 4096) {
        nb_oai_set_error(err, 400, NB_INVALID, "n", "invalid_value", "prompts x n must be at most 4096");
        goto out;
    }
    rc = 0;
out:
    cJSON_Delete(j);
    if (rc) {
        if (!err->http) nb_oai_set_error(err, 500, "server_error", "", "", "out of memory");
        nb_oai_request_free(r);
    }
    return rc;
}
