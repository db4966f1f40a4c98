/* JSON for the chat-template interpreter: the `tojson` filter as transformers defines it
 * (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False): Python's
 * separators, float repr, NaN/Infinity, \uXXXX escapes) and the conversion of cJSON
 * variables (or of JSON text, keeping "1.0" apart from "1" as Python's json.loads does)
 * into template values.
 * Exercised by tests/template/test_template.c (tojson cases) and the jinja2 comparisons. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
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
        if (v.flag & TV_F_NOT_SEQ)
            return tpl_fail(c, line, "Object of type %s is not JSON serializable", tv_type_name(v));
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

/* ---- JSON text -> values, keeping Python's int / float distinction ------------------- */
typedef struct jparser {
    tpl_ctx *c;
    const char *what, *s;
    size_t n, i;
    int depth;
} jparser;

static nb_status jfail(jparser *J, const char *msg)
{
    int line = 1, col = 1;
    for (size_t k = 0; k < J->i && k < J->n; k++) {
        if (J->s[k] == '\n') line++, col = 1;
        else col++;
    }
    return nb_error(NB_ERR_INVALID_ARG, "%s: JSON %s at line %d column %d", J->what, msg, line, col);
}

static void jws(jparser *J)
{
    while (J->i < J->n && (J->s[J->i] == ' ' || J->s[J->i] == '\t' || J->s[J->i] == '\n' || J->s[J->i] == '\r')) J->i++;
}

static int jhex4(jparser *J, uint32_t *v)
{
    if (J->i + 4 > J->n) return -1;
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = J->s[J->i + (size_t)k];
        int h = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (h < 0) return -1;
        *v = *v * 16 + (uint32_t)h;
    }
    J->i += 4;
    return 0;
}

static nb_status jstring(jparser *J, tv *out)
{
    J->i++; /* opening quote */
    size_t start = J->i;
    while (J->i < J->n && J->s[J->i] != '"' && J->s[J->i] != '\\' && (unsigned char)J->s[J->i] >= 0x20) J->i++;
    if (J->i < J->n && J->s[J->i] == '"') { /* no escapes: point into a copy */
        char *p = tpl_strndup(&J->c->arena, J->s + start, J->i - start);
        if (!p) return tpl_oom(J->c, 0);
        *out = tv_str(p, J->i - start);
        J->i++;
        return NB_OK;
    }
    tpl_buf b = {0};
    tpl_buf_put(&b, J->s + start, J->i - start);
    nb_status st = NB_OK;
    for (;;) {
        if (J->i >= J->n) {
            st = jfail(J, "unterminated string");
            break;
        }
        char ch = J->s[J->i];
        if (ch == '"') {
            J->i++;
            break;
        }
        if ((unsigned char)ch < 0x20) {
            st = jfail(J, "control character in string");
            break;
        }
        if (ch != '\\') {
            tpl_buf_putc(&b, ch);
            J->i++;
            continue;
        }
        if (++J->i >= J->n) {
            st = jfail(J, "unterminated string");
            break;
        }
        char e = J->s[J->i++];
        uint32_t cp;
        switch (e) {
        case '"': tpl_buf_putc(&b, '"'); break;
        case '\\': tpl_buf_putc(&b, '\\'); break;
        case '/': tpl_buf_putc(&b, '/'); break;
        case 'b': tpl_buf_putc(&b, '\b'); break;
        case 'f': tpl_buf_putc(&b, '\f'); break;
        case 'n': tpl_buf_putc(&b, '\n'); break;
        case 'r': tpl_buf_putc(&b, '\r'); break;
        case 't': tpl_buf_putc(&b, '\t'); break;
        case 'u':
            if (jhex4(J, &cp)) {
                st = jfail(J, "bad \\u escape");
                break;
            }
            if (cp >= 0xD800 && cp < 0xDC00 && J->i + 6 <= J->n && J->s[J->i] == '\\' && J->s[J->i + 1] == 'u') {
                size_t save = J->i;
                uint32_t lo;
                J->i += 2;
                if (!jhex4(J, &lo) && lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else J->i = save;
            }
            tpl_buf_utf8(&b, cp); /* a lone surrogate keeps its 3-byte form, as Python's surrogatepass would */
            break;
        default: st = jfail(J, "bad escape"); break;
        }
        if (st != NB_OK) break;
    }
    if (st == NB_OK) {
        char *p = tpl_strndup(&J->c->arena, b.p ? b.p : "", b.n);
        if (!p || b.failed) st = tpl_oom(J->c, 0);
        else *out = tv_str(p, b.n);
    }
    tpl_buf_free(&b);
    return st;
}

static nb_status jvalue(jparser *J, tv *out);

static nb_status jnumber(jparser *J, tv *out)
{
    size_t st = J->i;
    int is_float = 0;
    if (J->s[J->i] == '-') J->i++;
    if (J->i >= J->n || !(J->s[J->i] >= '0' && J->s[J->i] <= '9')) return jfail(J, "bad number");
    if (J->s[J->i] == '0') J->i++;
    else
        while (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') J->i++;
    if (J->i < J->n && J->s[J->i] == '.') {
        is_float = 1;
        J->i++;
        if (J->i >= J->n || !(J->s[J->i] >= '0' && J->s[J->i] <= '9')) return jfail(J, "bad number");
        while (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') J->i++;
    }
    if (J->i < J->n && (J->s[J->i] == 'e' || J->s[J->i] == 'E')) {
        is_float = 1;
        J->i++;
        if (J->i < J->n && (J->s[J->i] == '+' || J->s[J->i] == '-')) J->i++;
        if (J->i >= J->n || !(J->s[J->i] >= '0' && J->s[J->i] <= '9')) return jfail(J, "bad number");
        while (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') J->i++;
    }
    char tmp[400];
    size_t len = J->i - st;
    if (len >= sizeof tmp) return jfail(J, "number too long");
    memcpy(tmp, J->s + st, len);
    tmp[len] = 0;
    if (!is_float) {
        errno = 0;
        long long v = strtoll(tmp, NULL, 10);
        if (errno == 0) {
            *out = tv_int(v);
            return NB_OK;
        }
        /* beyond int64: Python keeps an exact int; a float is the closest we have */
    }
    *out = tv_float(strtod(tmp, NULL));
    return NB_OK;
}

static nb_status jvalue(jparser *J, tv *out)
{
    jws(J);
    if (J->i >= J->n) return jfail(J, "unexpected end of input");
    if (++J->depth > 1000) return jfail(J, "nesting too deep");
    char ch = J->s[J->i];
    nb_status st = NB_OK;
    if (ch == '"') st = jstring(J, out);
    else if (ch == '-' || (ch >= '0' && ch <= '9')) st = jnumber(J, out);
    else if (ch == '[') {
        J->i++;
        tv l = tv_list_new(&J->c->arena, 0);
        if (!l.u.l) return tpl_oom(J->c, 0);
        jws(J);
        if (J->i < J->n && J->s[J->i] == ']') J->i++;
        else
            for (;;) {
                tv v;
                NB_TRY(jvalue(J, &v));
                if (tpl_list_push(&J->c->arena, l.u.l, v)) return tpl_oom(J->c, 0);
                jws(J);
                if (J->i < J->n && J->s[J->i] == ',') J->i++;
                else if (J->i < J->n && J->s[J->i] == ']') {
                    J->i++;
                    break;
                } else return jfail(J, "expected ',' or ']'");
            }
        *out = l;
    } else if (ch == '{') {
        J->i++;
        tv d = tv_dict_new(&J->c->arena, 0);
        if (!d.u.d) return tpl_oom(J->c, 0);
        jws(J);
        if (J->i < J->n && J->s[J->i] == '}') J->i++;
        else
            for (;;) {
                tv k, v;
                jws(J);
                if (J->i >= J->n || J->s[J->i] != '"') return jfail(J, "expected a string key");
                NB_TRY(jstring(J, &k));
                jws(J);
                if (J->i >= J->n || J->s[J->i] != ':') return jfail(J, "expected ':'");
                J->i++;
                NB_TRY(jvalue(J, &v));
                /* a repeated key keeps its first position and takes the last value, as in Python */
                if (tpl_dict_set(&J->c->arena, d.u.d, k, v)) return tpl_oom(J->c, 0);
                jws(J);
                if (J->i < J->n && J->s[J->i] == ',') J->i++;
                else if (J->i < J->n && J->s[J->i] == '}') {
                    J->i++;
                    break;
                } else return jfail(J, "expected ',' or '}'");
            }
        *out = d;
    } else {
        static const struct {
            const char *w;
            int kind;
        } words[] = {{"true", 1}, {"false", 2}, {"null", 3}, {"NaN", 4}, {"Infinity", 5}, {"-Infinity", 6}};
        size_t k;
        for (k = 0; k < NB_ARRAY_LEN(words); k++) {
            size_t wl = strlen(words[k].w);
            if (J->i + wl <= J->n && !memcmp(J->s + J->i, words[k].w, wl)) {
                J->i += wl;
                break;
            }
        }
        if (k == NB_ARRAY_LEN(words)) return jfail(J, "unexpected character");
        switch (words[k].kind) {
        case 1: *out = tv_bool(1); break;
        case 2: *out = tv_bool(0); break;
        case 3: *out = tv_none(); break;
        case 4: *out = tv_float(NAN); break;
        case 5: *out = tv_float(INFINITY); break;
        default: *out = tv_float(-INFINITY); break;
        }
    }
    J->depth--;
    return st;
}

nb_status tpl_parse_json(tpl_ctx *c, const char *what, const char *s, size_t n, tv *out)
{
    jparser J = {.c = c, .what = what, .s = s, .n = n};
    NB_TRY(jvalue(&J, out));
    jws(&J);
    if (J.i != n) return jfail(&J, "extra data after the value");
    return NB_OK;
}
