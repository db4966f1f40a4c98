/* JSON for the chat-template interpreter: the `tojson` filter as transformers defines it
 * (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False): Python's
 * separators, float repr, NaN/Infinity, \uXXXX escapes) and the conversion of cJSON
 * variables into template values.
 * Exercised by tests/template/test_template.c (tojson cases) and the jinja2 comparisons. */
#include <math.h>
#include <string.h>

#include "tokenizer/template/tpl_internal.h"

typedef struct jopts {
    int ensure_ascii, has_indent, sort_keys;
    const char *indent, *item_sep, *key_sep;
    size_t indent_n;
} jopts;

static void json_str(tpl_buf *b, const char *s, size_t n, int ascii)
{
    tpl_buf_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        size_t st = i;
        uint32_t cp = tpl_utf8_next(s, n, &i);
        switch (cp) {
        case '"': tpl_buf_puts(b, "\\\""); break;
        case '\\': tpl_buf_puts(b, "\\\\"); break;
        case '\n': tpl_buf_puts(b, "\\n"); break;
        case '\r': tpl_buf_puts(b, "\\r"); break;
        case '\t': tpl_buf_puts(b, "\\t"); break;
        case '\b': tpl_buf_puts(b, "\\b"); break;
        case '\f': tpl_buf_puts(b, "\\f"); break;
        default:
            if (cp < 0x20 || (ascii && cp >= 0x7F)) {
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    tpl_buf_printf(b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else tpl_buf_printf(b, "\\u%04x", cp);
            } else tpl_buf_put(b, s + st, i - st);
        }
    }
    tpl_buf_putc(b, '"');
}

static void json_float(tpl_buf *b, double f)
{
    if (isnan(f)) tpl_buf_puts(b, "NaN");
    else if (isinf(f)) tpl_buf_puts(b, f < 0 ? "-Infinity" : "Infinity");
    else tpl_float_repr(b, f);
}

static void newline_indent(tpl_buf *b, const jopts *o, int level)
{
    tpl_buf_putc(b, '\n');
    for (int i = 0; i < level; i++) tpl_buf_put(b, o->indent, o->indent_n);
}

/* Python's json key coercion: str as is, numbers / bools / None as their JSON text. */
static int json_key(tpl_buf *b, tv k, int ascii)
{
    switch (k.t) {
    case TV_STR: json_str(b, k.u.s.p, k.u.s.n, ascii); return 0;
    case TV_INT: tpl_buf_printf(b, "\"%lld\"", (long long)k.u.i); return 0;
    case TV_BOOL: tpl_buf_puts(b, k.u.i ? "\"true\"" : "\"false\""); return 0;
    case TV_NONE: tpl_buf_puts(b, "\"null\""); return 0;
    case TV_FLOAT:
        tpl_buf_putc(b, '"');
        json_float(b, k.u.f);
        tpl_buf_putc(b, '"');
        return 0;
    default: return -1;
    }
}

static nb_status dump(tpl_ctx *c, int line, tpl_buf *b, tv v, const jopts *o, int level)
{
    if (level > 1000) return tpl_fail(c, line, "tojson: nesting too deep");
    switch (v.t) {
    case TV_NONE: tpl_buf_puts(b, "null"); return NB_OK;
    case TV_BOOL: tpl_buf_puts(b, v.u.i ? "true" : "false"); return NB_OK;
    case TV_INT: tpl_buf_printf(b, "%lld", (long long)v.u.i); return NB_OK;
    case TV_FLOAT: json_float(b, v.u.f); return NB_OK;
    case TV_STR: json_str(b, v.u.s.p, v.u.s.n, o->ensure_ascii); return NB_OK;
    case TV_LIST:
        if (v.u.l->n == 0) {
            tpl_buf_puts(b, "[]");
            return NB_OK;
        }
        tpl_buf_putc(b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) tpl_buf_puts(b, o->item_sep);
            if (o->has_indent) newline_indent(b, o, level + 1);
            NB_TRY(dump(c, line, b, v.u.l->v[i], o, level + 1));
        }
        if (o->has_indent) newline_indent(b, o, level);
        tpl_buf_putc(b, ']');
        return NB_OK;
    case TV_DICT: {
        tpl_dict *d = v.u.d;
        if (d->n == 0) {
            tpl_buf_puts(b, "{}");
            return NB_OK;
        }
        size_t *order = tpl_alloc(&c->arena, d->n * sizeof(size_t));
        if (!order) return tpl_oom(c, line);
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) {
            /* insertion sort: dicts in templates are small; Python refuses mixed key types */
            for (size_t i = 1; i < d->n; i++) {
                size_t x = order[i], j = i;
                while (j > 0) {
                    int r;
                    if (tv_cmp(d->k[order[j - 1]], d->k[x], &r))
                        return tpl_fail(c, line, "tojson: '<' not supported between instances of '%s' and '%s'",
                                        tv_type_name(d->k[x]), tv_type_name(d->k[order[j - 1]]));
                    if (r <= 0) break;
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        tpl_buf_putc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            size_t k = order[i];
            if (i) tpl_buf_puts(b, o->item_sep);
            if (o->has_indent) newline_indent(b, o, level + 1);
            if (json_key(b, d->k[k], o->ensure_ascii))
                return tpl_fail(c, line, "tojson: keys must be str, int, float, bool or None, not %s",
                                tv_type_name(d->k[k]));
            tpl_buf_puts(b, o->key_sep);
            NB_TRY(dump(c, line, b, d->v[k], o, level + 1));
        }
        if (o->has_indent) newline_indent(b, o, level);
        tpl_buf_putc(b, '}');
        return NB_OK;
    }
    default: return tpl_fail(c, line, "Object of type %s is not JSON serializable", tv_type_name(v));
    }
}

nb_status tpl_tojson(tpl_ctx *c, int line, tv v, int ensure_ascii, const char *indent, size_t indent_n,
                     int has_indent, const char *item_sep, const char *key_sep, int sort_keys, tv *out)
{
    jopts o = {.ensure_ascii = ensure_ascii, .has_indent = has_indent, .sort_keys = sort_keys, .indent = indent,
               .indent_n = indent_n, .item_sep = item_sep, .key_sep = key_sep};
    tpl_buf b = {0};
    nb_status st = dump(c, line, &b, v, &o, 0);
    if (st == NB_OK) {
        char *p = tpl_strndup(&c->arena, b.p ? b.p : "", b.n);
        if (!p || b.failed) st = tpl_oom(c, line);
        else *out = tv_str(p, b.n);
    }
    tpl_buf_free(&b);
    return st;
}

nb_status tpl_from_cjson(tpl_ctx *c, const cJSON *j, tv *out)
{
    if (cJSON_IsNull(j)) *out = tv_none();
    else if (cJSON_IsBool(j)) *out = tv_bool(cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* cJSON keeps no int/float distinction: integral values in int64 range are ints */
        if (isfinite(d) && d == floor(d) && fabs(d) < 9.2e18) *out = tv_int((int64_t)d);
        else *out = tv_float(d);
    } else if (cJSON_IsString(j)) *out = tv_str(j->valuestring, strlen(j->valuestring));
    else if (cJSON_IsArray(j)) {
        tv l = tv_list_new(&c->arena, (size_t)cJSON_GetArraySize(j));
        if (!l.u.l) return tpl_oom(c, 0);
        const cJSON *it;
        cJSON_ArrayForEach(it, j) NB_TRY(tpl_from_cjson(c, it, &l.u.l->v[l.u.l->n++]));
        *out = l;
    } else if (cJSON_IsObject(j)) {
        tv d = tv_dict_new(&c->arena, (size_t)cJSON_GetArraySize(j));
        if (!d.u.d) return tpl_oom(c, 0);
        const cJSON *it;
        cJSON_ArrayForEach(it, j)
        {
            tv v;
            NB_TRY(tpl_from_cjson(c, it, &v));
            const char *k = it->string ? it->string : "";
            if (tpl_dict_set(&c->arena, d.u.d, tv_str(k, strlen(k)), v)) return tpl_oom(c, 0);
        }
        *out = d;
    } else *out = tv_none();
    return NB_OK;
}
