/* Filters and tests of the chat-template interpreter, with jinja2 3.1's semantics
 * (default, trim, join, map / select / selectattr with dotted attributes, dictsort,
 * unique and sort with case-insensitive string keys, int / float with their fallbacks,
 * round, indent, ...) and transformers' tojson. An unknown name is rejected when the
 * template compiles (tpl_filter_exists / tpl_test_exists), as jinja2 does.
 * Exercised by tests/template/test_template.c and the jinja2 comparison checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/template/tpl_internal.h"

static const char *const FILTERS[] = {
    "abs", "attr", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "format", "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title",
    "tojson", "trim", "unique", "upper", "wordcount"};
static const char *const TESTS[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter",
    "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping",
    "ne", "none", "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper", "==",
    "!=", "<", "<=", ">", ">="};

static int in_set(const char *name, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(name, set[i])) return 1;
    return 0;
}
int tpl_filter_exists(const char *name) { return in_set(name, FILTERS, NB_ARRAY_LEN(FILTERS)); }
int tpl_test_exists(const char *name) { return in_set(name, TESTS, NB_ARRAY_LEN(TESTS)); }

static nb_status buf_to_str(tpl_ctx *c, int line, tpl_buf *b, tv *out)
{
    char *p = tpl_strndup(&c->arena, b->p ? b->p : "", b->n);
    size_t n = b->n;
    int failed = b->failed;
    tpl_buf_free(b);
    if (!p || failed) return tpl_oom(c, line);
    *out = tv_str(p, n);
    return NB_OK;
}

/* jinja2's make_attrgetter: "a.b.0" looks up each part with item-then-attribute access,
 * integer parts as integers. */
static nb_status attr_path(tpl_ctx *c, int line, tv item, tv path, tv *out)
{
    if (path.t == TV_INT) return tpl_getitem(c, line, item, path, out);
    if (path.t != TV_STR) return tpl_fail(c, line, "attribute must be a string or an integer");
    const char *p = path.u.s.p, *end = p + path.u.s.n;
    tv cur = item;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        if (!dot) dot = end;
        size_t n = (size_t)(dot - p);
        int digits = n > 0;
        for (size_t i = 0; i < n; i++)
            if (p[i] < '0' || p[i] > '9') digits = 0;
        tv key = digits ? tv_int(strtoll(p, NULL, 10)) : tv_str(p, n);
        NB_TRY(tpl_getitem(c, line, cur, key, &cur));
        p = dot + 1;
    }
    *out = cur;
    return NB_OK;
}

/* Sort key for dictsort / sort / unique / min / max: lowercased strings when not case
 * sensitive. */
static nb_status ci_key(tpl_ctx *c, int line, tv v, int case_sensitive, tv *out)
{
    if (v.t == TV_STR && !case_sensitive) return tpl_str_case(c, line, v, 0, out);
    *out = v;
    return NB_OK;
}

typedef struct sort_item {
    tv key, val;
} sort_item;

/* Stable merge sort with Python ordering; a type mismatch is a runtime error. */
static nb_status sort_items(tpl_ctx *c, int line, sort_item *a, size_t n, int reverse)
{
    if (n < 2) return NB_OK;
    sort_item *tmp = tpl_alloc(&c->arena, n * sizeof(sort_item));
    if (!tmp) return tpl_oom(c, line);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = NB_MIN(lo + width, n), hi = NB_MIN(lo + 2 * width, n), i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int r;
                if (tv_cmp(a[j].key, a[i].key, &r))
                    return tpl_fail(c, line, "'<' not supported between instances of '%s' and '%s'",
                                    tv_type_name(a[j].key), tv_type_name(a[i].key));
                /* take from the right only when strictly before (reverse: strictly after) */
                if (reverse ? r > 0 : r < 0) tmp[k++] = a[j++];
                else tmp[k++] = a[i++];
            }
            while (i < mid) tmp[k++] = a[i++];
            while (j < hi) tmp[k++] = a[j++];
        }
        memcpy(a, tmp, n * sizeof(sort_item));
    }
    return NB_OK;
}

static tv new_list(tpl_ctx *c, size_t cap) { return tv_list_new(&c->arena, cap); }

static nb_status f_select(tpl_ctx *c, int line, const char *name, tv v, const tv *args, int nargs, const char **kwn,
                          const tv *kwv, int nkw, tv *out)
{
    int by_attr = !strcmp(name, "selectattr") || !strcmp(name, "rejectattr");
    int reject = name[0] == 'r';
    tpl_list *items;
    NB_TRY(tpl_iterate(c, line, v, &items));
    int ai = 0;
    tv attr = tv_none();
    if (by_attr) {
        if (nargs < 1) return tpl_fail(c, line, "%s: missing attribute", name);
        attr = args[ai++];
    }
    const char *test = NULL;
    if (ai < nargs) {
        if (args[ai].t != TV_STR) return tpl_fail(c, line, "%s: the test name must be a string", name);
        test = tpl_strndup(&c->arena, args[ai].u.s.p, args[ai].u.s.n);
        if (!test) return tpl_oom(c, line);
        if (!tpl_test_exists(test)) return tpl_fail(c, line, "no test named '%s'", test);
        ai++;
    }
    tv l = new_list(c, 0);
    if (!l.u.l) return tpl_oom(c, line);
    for (size_t i = 0; i < items->n; i++) {
        tv x = items->v[i];
        if (by_attr) NB_TRY(attr_path(c, line, x, attr, &x));
        int r;
        if (test) NB_TRY(tpl_test(c, line, test, x, args + ai, nargs - ai, kwn, kwv, nkw, &r));
        else r = tv_truthy(x);
        if ((r != 0) != reject && tpl_list_push(&c->arena, l.u.l, items->v[i])) return tpl_oom(c, line);
    }
    *out = l;
    return NB_OK;
}

static nb_status f_map(tpl_ctx *c, int line, tv v, const tv *args, int nargs, const char **kwn, const tv *kwv, int nkw,
                       tv *out)
{
    tpl_list *items;
    NB_TRY(tpl_iterate(c, line, v, &items));
    tv attr = {0}, dflt = {0};
    int has_attr = 0, has_dflt = 0;
    for (int k = 0; k < nkw; k++) {
        if (!strcmp(kwn[k], "attribute")) attr = kwv[k], has_attr = 1;
        else if (!strcmp(kwn[k], "default")) dflt = kwv[k], has_dflt = 1;
    }
    tv l = new_list(c, items->n);
    if (!l.u.l) return tpl_oom(c, line);
    if (has_attr) {
        if (nargs) return tpl_fail(c, line, "map: positional arguments with attribute=");
        for (size_t i = 0; i < items->n; i++) {
            tv x;
            NB_TRY(attr_path(c, line, items->v[i], attr, &x));
            if (x.t == TV_UNDEF && has_dflt) x = dflt;
            l.u.l->v[l.u.l->n++] = x;
        }
    } else {
        if (nargs < 1 || args[0].t != TV_STR) return tpl_fail(c, line, "map: expected a filter name or attribute=");
        char *fname = tpl_strndup(&c->arena, args[0].u.s.p, args[0].u.s.n);
        if (!fname) return tpl_oom(c, line);
        if (!tpl_filter_exists(fname)) return tpl_fail(c, line, "no filter named '%s'", fname);
        for (size_t i = 0; i < items->n; i++)
            NB_TRY(tpl_filter(c, line, fname, items->v[i], args + 1, nargs - 1, kwn, kwv, nkw, &l.u.l->v[l.u.l->n++]));
    }
    *out = l;
    return NB_OK;
}

/* Python int(str, base) acceptance: optional sign, digits with single underscores,
 * surrounding whitespace. */
static int parse_py_int(tv s, int base, int64_t *out)
{
    tv t = tpl_str_strip(s, tv_none(), 3);
    const char *p = t.u.s.p;
    size_t n = t.u.s.n, i = 0;
    int neg = 0;
    if (i < n && (p[i] == '+' || p[i] == '-')) neg = p[i++] == '-';
    if (base == 16 && i + 1 < n && p[i] == '0' && (p[i + 1] == 'x' || p[i + 1] == 'X')) i += 2;
    if (i >= n) return -1;
    int64_t v = 0;
    int prev_us = 1;
    for (; i < n; i++) {
        if (p[i] == '_') {
            if (prev_us) return -1;
            prev_us = 1;
            continue;
        }
        int d = p[i] >= '0' && p[i] <= '9' ? p[i] - '0' : p[i] >= 'a' && p[i] <= 'z' ? p[i] - 'a' + 10
              : p[i] >= 'A' && p[i] <= 'Z' ? p[i] - 'A' + 10 : 99;
        if (d >= base) return -1;
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return -1;
        prev_us = 0;
    }
    if (prev_us) return -1;
    *out = neg ? -v : v;
    return 0;
}

/* Python float(str): decimal / exponent forms, inf / nan, surrounding whitespace. */
static int parse_py_float(tv s, double *out)
{
    tv t = tpl_str_strip(s, tv_none(), 3);
    if (t.u.s.n == 0 || t.u.s.n > 300) return -1;
    char buf[320];
    size_t k = 0;
    for (size_t i = 0; i < t.u.s.n; i++) {
        char ch = t.u.s.p[i];
        if (ch == '_') {
            if (i == 0 || i + 1 == t.u.s.n || !(t.u.s.p[i - 1] >= '0' && t.u.s.p[i - 1] <= '9') ||
                !(t.u.s.p[i + 1] >= '0' && t.u.s.p[i + 1] <= '9'))
                return -1;
            continue;
        }
        if (ch == 'x' || ch == 'X' || ch == 'p' || ch == 'P') return -1; /* no hex floats */
        buf[k++] = ch;
    }
    buf[k] = 0;
    char *end;
    double d = strtod(buf, &end);
    if (*end || end == buf) return -1;
    const char *w = buf[0] == '+' || buf[0] == '-' ? buf + 1 : buf;
    if ((w[0] == 'i' || w[0] == 'I' || w[0] == 'n' || w[0] == 'N') && strcasecmp(w, "inf") && strcasecmp(w, "infinity") &&
        strcasecmp(w, "nan"))
        return -1;
    *out = d;
    return 0;
}

static nb_status f_indent(tpl_ctx *c, int line, tv s, tv width, int first, int blank, tv *out)
{
    tpl_buf ind = {0}, b = {0};
    if (width.t == TV_STR) tpl_buf_put(&ind, width.u.s.p, width.u.s.n);
    else
        for (int64_t i = 0; i < (width.t == TV_ABSENT ? 4 : width.u.i) && i < 4096; i++) tpl_buf_putc(&ind, ' ');
    /* Python's splitlines on (s + "\n"): split at \n \r \r\n \v \f \x1c-\x1e \x85 \u2028 \u2029 */
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0, st = 0;
    int first_line = 1;
    while (i <= n) {
        size_t j = i, brk = 0;
        if (i == n) brk = 1;
        else {
            uint32_t cp = tpl_utf8_next(p, n, &j);
            if (cp == '\n' || cp == '\v' || cp == '\f' || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 || cp == 0x2028 ||
                cp == 0x2029)
                brk = 1;
            else if (cp == '\r') {
                brk = 1;
                if (j < n && p[j] == '\n') j++;
            }
        }
        if (!brk) {
            i = j;
            continue;
        }
        size_t ln = i - st;
        if (first_line) {
            if (first) tpl_buf_put(&b, ind.p ? ind.p : "", ind.n);
            tpl_buf_put(&b, p + st, ln);
            first_line = 0;
        } else {
            tpl_buf_putc(&b, '\n');
            if (ln || blank) tpl_buf_put(&b, ind.p ? ind.p : "", ind.n);
            tpl_buf_put(&b, p + st, ln);
        }
        if (i == n) break;
        st = i = j;
    }
    tpl_buf_free(&ind);
    return buf_to_str(c, line, &b, out);
}

static nb_status f_title(tpl_ctx *c, int line, tv s, tv *out)
{
    /* jinja2: split at runs of [-\s({[<], capitalise each piece (first upper, rest lower) */
    tpl_buf b = {0};
    size_t i = 0;
    int at_start = 1;
    while (i < s.u.s.n) {
        uint32_t cp = tpl_utf8_next(s.u.s.p, s.u.s.n, &i);
        int delim = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || tpl_py_isspace(cp);
        if (delim) {
            tpl_buf_utf8(&b, cp);
            at_start = 1;
        } else {
            tpl_case_to(&b, cp, at_start ? 1 : 0, 0, 0);
            at_start = 0;
        }
    }
    return buf_to_str(c, line, &b, out);
}

static nb_status f_round(tpl_ctx *c, int line, tv v, tv prec, tv method, tv *out)
{
    if (!tv_is_num(v)) return tpl_fail(c, line, "round: type %s doesn't define __round__ method", tv_type_name(v));
    int64_t p = prec.t == TV_INT ? prec.u.i : 0;
    const char *m = method.t == TV_STR ? method.u.s.p : "common";
    size_t mn = method.t == TV_STR ? method.u.s.n : 6;
    if (mn == 6 && !memcmp(m, "common", 6)) {
        if (v.t != TV_FLOAT) {
            *out = tv_int(v.u.i);
            return NB_OK;
        }
        if (p >= 0 && p < 300) {
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)p, v.u.f);
            *out = tv_float(strtod(buf, NULL));
        } else *out = tv_float(nearbyint(v.u.f / pow(10, (double)-p)) * pow(10, (double)-p));
        return NB_OK;
    }
    int is_ceil = mn == 4 && !memcmp(m, "ceil", 4), is_floor = mn == 5 && !memcmp(m, "floor", 5);
    if (!is_ceil && !is_floor) return tpl_fail(c, line, "method must be common, ceil or floor");
    double scale = pow(10, (double)p), x = tv_num(v) * scale;
    *out = tv_float((is_ceil ? ceil(x) : floor(x)) / scale);
    return NB_OK;
}

#define BIND(...)                                                                       \
    static const char *const P[] = {__VA_ARGS__};                                       \
    tv a[NB_ARRAY_LEN(P)];                                                              \
    NB_TRY(tpl_bind_args(c, line, name, P, (int)NB_ARRAY_LEN(P), args, nargs, kwn, kwv, nkw, a))
#define BIND0() NB_TRY(tpl_bind_args(c, line, name, NULL, 0, args, nargs, kwn, kwv, nkw, NULL))
#define GIVEN(x) ((x).t != TV_ABSENT)

static nb_status filter_impl(tpl_ctx *c, int line, const char *name, tv v, const tv *args, int nargs,
                             const char **kwn, const tv *kwv, int nkw, tv *out);

nb_status tpl_filter(tpl_ctx *c, int line, const char *name, tv v, const tv *args, int nargs, const char **kwn,
                     const tv *kwv, int nkw, tv *out)
{
    NB_TRY(filter_impl(c, line, name, v, args, nargs, kwn, kwv, nkw, out));
    /* jinja2 returns generators / iterators from these: mark the list so truthiness, len,
     * indexing and tojson behave as they do on a generator */
    static const char *const lazy[] = {"map", "select", "reject", "selectattr", "rejectattr", "unique", "items"};
    int gen = out->t == TV_LIST && in_set(name, lazy, NB_ARRAY_LEN(lazy));
    if (out->t == TV_LIST && !strcmp(name, "reverse") && !(v.t == TV_LIST && (v.flag & TV_F_GEN))) gen = 1;
    if (gen) out->flag = TV_F_GEN;
    return NB_OK;
}

static nb_status filter_impl(tpl_ctx *c, int line, const char *name, tv v, const tv *args, int nargs,
                             const char **kwn, const tv *kwv, int nkw, tv *out)
{
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        BIND("default_value", "boolean");
        int use = v.t == TV_UNDEF || (GIVEN(a[1]) && tv_truthy(a[1]) && !tv_truthy(v));
        *out = use ? (GIVEN(a[0]) ? a[0] : tv_str("", 0)) : v;
        return NB_OK;
    }
    if (!strcmp(name, "tojson")) {
        BIND("ensure_ascii", "indent", "separators", "sort_keys");
        char ind[64];
        const char *indent = "", *item_sep = ", ", *key_sep = ": ";
        size_t indent_n = 0;
        int has_indent = GIVEN(a[1]) && a[1].t != TV_NONE;
        if (has_indent) {
            if (a[1].t == TV_STR) indent = a[1].u.s.p, indent_n = a[1].u.s.n;
            else if (a[1].t == TV_INT) {
                indent_n = a[1].u.i < 0 ? 0 : (size_t)NB_MIN(a[1].u.i, 63);
                memset(ind, ' ', indent_n);
                indent = ind;
            } else return tpl_fail(c, line, "tojson: indent must be an int or a str");
            item_sep = ",";
        }
        if (GIVEN(a[2]) && a[2].t != TV_NONE) {
            if (a[2].t != TV_LIST || a[2].u.l->n != 2 || a[2].u.l->v[0].t != TV_STR || a[2].u.l->v[1].t != TV_STR)
                return tpl_fail(c, line, "tojson: separators must be a (item, key) pair of strings");
            item_sep = tpl_strndup(&c->arena, a[2].u.l->v[0].u.s.p, a[2].u.l->v[0].u.s.n);
            key_sep = tpl_strndup(&c->arena, a[2].u.l->v[1].u.s.p, a[2].u.l->v[1].u.s.n);
            if (!item_sep || !key_sep) return tpl_oom(c, line);
        }
        return tpl_tojson(c, line, v, GIVEN(a[0]) && tv_truthy(a[0]), indent, indent_n, has_indent, item_sep,
                          key_sep, GIVEN(a[3]) && tv_truthy(a[3]), out);
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        BIND0();
        switch (v.t) {
        case TV_UNDEF: *out = tv_int(0); return NB_OK;
        case TV_STR: *out = tv_int((int64_t)tpl_utf8_len(v.u.s.p, v.u.s.n)); return NB_OK;
        case TV_LIST:
            if (v.flag & TV_F_GEN) return tpl_fail(c, line, "object of type 'generator' has no len()");
            *out = tv_int((int64_t)v.u.l->n);
            return NB_OK;
        case TV_DICT: *out = tv_int((int64_t)v.u.d->n); return NB_OK;
        default: return tpl_fail(c, line, "object of type '%s' has no len()", tv_type_name(v));
        }
    }
    if (!strcmp(name, "safe")) {
        BIND0();
        /* no autoescaping in transformers' environment: Markup(str(v)) prints as str(v) */
        return tpl_to_str(c, line, v, out);
    }
    if (!strcmp(name, "string")) {
        BIND0();
        return tpl_to_str(c, line, v, out);
    }
    if (!strcmp(name, "escape") || !strcmp(name, "e")) {
        BIND0();
        tv s;
        NB_TRY(tpl_to_str(c, line, v.t == TV_NONE ? tv_str("None", 4) : v, &s));
        tpl_buf b = {0};
        for (size_t i = 0; i < s.u.s.n; i++) {
            char ch = s.u.s.p[i];
            if (ch == '&') tpl_buf_puts(&b, "&amp;");
            else if (ch == '<') tpl_buf_puts(&b, "&lt;");
            else if (ch == '>') tpl_buf_puts(&b, "&gt;");
            else if (ch == '"') tpl_buf_puts(&b, "&#34;");
            else if (ch == '\'') tpl_buf_puts(&b, "&#39;");
            else tpl_buf_putc(&b, ch);
        }
        return buf_to_str(c, line, &b, out);
    }
    if (!strcmp(name, "trim")) {
        BIND("chars");
        tv s;
        NB_TRY(tpl_to_str(c, line, v, &s));
        *out = tpl_str_strip(s, GIVEN(a[0]) ? a[0] : tv_none(), 3);
        return NB_OK;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper") || !strcmp(name, "capitalize")) {
        BIND0();
        tv s;
        NB_TRY(tpl_to_str(c, line, v, &s));
        return tpl_str_case(c, line, s, name[0] == 'l' ? 0 : name[0] == 'u' ? 1 : 2, out);
    }
    if (!strcmp(name, "title")) {
        BIND0();
        tv s;
        NB_TRY(tpl_to_str(c, line, v, &s));
        return f_title(c, line, s, out);
    }
    if (!strcmp(name, "replace")) {
        BIND("old", "new", "count");
        if (!GIVEN(a[0]) || !GIVEN(a[1])) return tpl_fail(c, line, "replace: missing argument");
        tv s, o, r;
        NB_TRY(tpl_to_str(c, line, v, &s));
        NB_TRY(tpl_to_str(c, line, a[0], &o));
        NB_TRY(tpl_to_str(c, line, a[1], &r));
        int64_t cnt = GIVEN(a[2]) && a[2].t == TV_INT ? a[2].u.i : -1;
        return tpl_str_replace(c, line, s, o, r, cnt, out);
    }
    if (!strcmp(name, "join")) {
        BIND("d", "attribute");
        tpl_list *items;
        NB_TRY(tpl_iterate(c, line, v, &items));
        tv sep;
        NB_TRY(tpl_to_str(c, line, GIVEN(a[0]) ? a[0] : tv_str("", 0), &sep));
        tpl_buf b = {0};
        for (size_t i = 0; i < items->n; i++) {
            tv x = items->v[i];
            if (GIVEN(a[1]) && a[1].t != TV_NONE) {
                nb_status st = attr_path(c, line, x, a[1], &x);
                if (st != NB_OK) {
                    tpl_buf_free(&b);
                    return st;
                }
            }
            if (i) tpl_buf_put(&b, sep.u.s.p, sep.u.s.n);
            tv_str_to(&b, x);
        }
        return buf_to_str(c, line, &b, out);
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        BIND0();
        /* last() reverses its argument: a generator cannot be; first() takes one item */
        if (name[0] == 'l' && v.t == TV_LIST && (v.flag & TV_F_GEN))
            return tpl_fail(c, line, "'generator' object is not reversible");
        if (v.t == TV_LIST && (v.flag & TV_F_GEN)) {
            if (v.u.l->used < v.u.l->n) *out = v.u.l->v[v.u.l->used++];
            else *out = tv_undef("No first item, sequence was empty.");
            return NB_OK;
        }
        tpl_list *items;
        NB_TRY(tpl_iterate(c, line, v, &items));
        if (!items->n) *out = tv_undef(name[0] == 'f' ? "No first item, sequence was empty." : "No last item, sequence was empty.");
        else *out = items->v[name[0] == 'f' ? 0 : items->n - 1];
        return NB_OK;
    }
    if (!strcmp(name, "list")) {
        BIND0();
        tpl_list *items;
        NB_TRY(tpl_iterate(c, line, v, &items));
        tv l = new_list(c, items->n);
        if (!l.u.l) return tpl_oom(c, line);
        for (size_t i = 0; i < items->n; i++) l.u.l->v[l.u.l->n++] = items->v[i];
        *out = l;
        return NB_OK;
    }
    if (!strcmp(name, "reverse")) {
        BIND0();
        if (v.t == TV_STR) {
            tpl_buf b = {0};
            size_t i = v.u.s.n;
            while (i > 0) {
                size_t j = i - 1;
                while (j > 0 && ((unsigned char)v.u.s.p[j] & 0xC0) == 0x80) j--;
                tpl_buf_put(&b, v.u.s.p + j, i - j);
                i = j;
            }
            return buf_to_str(c, line, &b, out);
        }
        tpl_list *items;
        NB_TRY(tpl_iterate(c, line, v, &items));
        tv l = new_list(c, items->n);
        if (!l.u.l) return tpl_oom(c, line);
        for (size_t i = items->n; i > 0; i--) l.u.l->v[l.u.l->n++] = items->v[i - 1];
        *out = l;
        return NB_OK;
    }
    if (!strcmp(name, "items")) {
        BIND0();
        if (v.t == TV_UNDEF) {
            *out = new_list(c, 0);
            return out->u.l ? NB_OK : tpl_oom(c, line);
        }
        if (v.t != TV_DICT) return tpl_fail(c, line, "Can only get item pairs from a mapping.");
        tv d = v;
        d.t = TV_DICT;
        return tpl_call_method(c, line, d, "items", NULL, 0, NULL, NULL, 0, out);
    }
    if (!strcmp(name, "dictsort")) {
        BIND("case_sensitive", "by", "reverse");
        if (v.t != TV_DICT) return tpl_fail(c, line, "dictsort: expected a mapping, got %s", tv_type_name(v));
        int by_value = GIVEN(a[1]) && a[1].t == TV_STR && a[1].u.s.n == 5 && !memcmp(a[1].u.s.p, "value", 5);
        if (GIVEN(a[1]) && !by_value && !(a[1].t == TV_STR && a[1].u.s.n == 3 && !memcmp(a[1].u.s.p, "key", 3)))
            return tpl_fail(c, line, "You can only sort by either \"key\" or \"value\"");
        size_t n = v.u.d->n;
        sort_item *it = tpl_alloc(&c->arena, (n ? n : 1) * sizeof(sort_item));
        if (!it) return tpl_oom(c, line);
        for (size_t i = 0; i < n; i++) {
            tv t = new_list(c, 2);
            if (!t.u.l) return tpl_oom(c, line);
            t.flag = TV_F_TUPLE;
            t.u.l->v[0] = v.u.d->k[i];
            t.u.l->v[1] = v.u.d->v[i];
            t.u.l->n = 2;
            it[i].val = t;
            NB_TRY(ci_key(c, line, by_value ? v.u.d->v[i] : v.u.d->k[i], GIVEN(a[0]) && tv_truthy(a[0]), &it[i].key));
        }
        NB_TRY(sort_items(c, line, it, n, GIVEN(a[2]) && tv_truthy(a[2])));
        tv l = new_list(c, n);
        if (!l.u.l) return tpl_oom(c, line);
        for (size_t i = 0; i < n; i++) l.u.l->v[l.u.l->n++] = it[i].val;
        *out = l;
        return NB_OK;
    }
    if (!strcmp(name, "sort") || !strcmp(name, "unique") || !strcmp(name, "min") || !strcmp(name, "max")) {
        int is_sort = name[0] == 's', is_unique = name[0] == 'u';
        static const char *const PS[] = {"reverse", "case_sensitive", "attribute"};
        static const char *const PU[] = {"case_sensitive", "attribute"};
        tv a[3];
        if (is_sort) NB_TRY(tpl_bind_args(c, line, name, PS, 3, args, nargs, kwn, kwv, nkw, a));
        else {
            NB_TRY(tpl_bind_args(c, line, name, PU, 2, args, nargs, kwn, kwv, nkw, a + 1));
            a[0].t = TV_ABSENT;
        }
        tpl_list *items;
        NB_TRY(tpl_iterate(c, line, v, &items));
        size_t n = items->n;
        sort_item *it = tpl_alloc(&c->arena, (n ? n : 1) * sizeof(sort_item));
        if (!it) return tpl_oom(c, line);
        int cs = GIVEN(a[1]) && tv_truthy(a[1]);
        for (size_t i = 0; i < n; i++) {
            tv k = items->v[i];
            if (GIVEN(a[2]) && a[2].t != TV_NONE) NB_TRY(attr_path(c, line, k, a[2], &k));
            NB_TRY(ci_key(c, line, k, cs, &it[i].key));
            it[i].val = items->v[i];
        }
        if (is_unique) {
            tv l = new_list(c, n);
            if (!l.u.l) return tpl_oom(c, line);
            for (size_t i = 0; i < n; i++) {
                int seen = 0;
                for (size_t j = 0; j < i && !seen; j++) seen = tv_eq(it[j].key, it[i].key);
                if (!seen) l.u.l->v[l.u.l->n++] = it[i].val;
            }
            *out = l;
            return NB_OK;
        }
        if (!is_sort) {
            if (!n) {
                *out = tv_undef(name[1] == 'i' ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
                return NB_OK;
            }
            size_t best = 0;
            for (size_t i = 1; i < n; i++) {
                int r;
                if (tv_cmp(it[i].key, it[best].key, &r))
                    return tpl_fail(c, line, "'<' not supported between instances of '%s' and '%s'",
                                    tv_type_name(it[i].key), tv_type_name(it[best].key));
                if (name[1] == 'i' ? r < 0 : r > 0) best = i;
            }
            *out = it[best].val;
            return NB_OK;
        }
        NB_TRY(sort_items(c, line, it, n, GIVEN(a[0]) && tv_truthy(a[0])));
        tv l = new_list(c, n);
        if (!l.u.l) return tpl_oom(c, line);
        for (size_t i = 0; i < n; i++) l.u.l->v[l.u.l->n++] = it[i].val;
        *out = l;
        return NB_OK;
    }
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr") || !strcmp(name, "select") ||
        !strcmp(name, "reject"))
        return f_select(c, line, name, v, args, nargs, kwn, kwv, nkw, out);
    if (!strcmp(name, "map")) return f_map(c, line, v, args, nargs, kwn, kwv, nkw, out);
    if (!strcmp(name, "attr")) {
        BIND("name");
        if (a[0].t != TV_STR) return tpl_fail(c, line, "attr: name must be a string");
        char *nm = tpl_strndup(&c->arena, a[0].u.s.p, a[0].u.s.n);
        if (!nm) return tpl_oom(c, line);
        if (v.t == TV_DICT) {
            /* attribute access proper: a dict's keys are not attributes */
            if (!tpl_method_lookup(c, v, nm, out)) *out = tv_undef("no such attribute");
            return NB_OK;
        }
        return tpl_getattr(c, line, v, nm, out);
    }
    if (!strcmp(name, "int")) {
        BIND("default", "base");
        tv dflt = GIVEN(a[0]) ? a[0] : tv_int(0);
        int base = GIVEN(a[1]) && a[1].t == TV_INT ? (int)a[1].u.i : 10;
        int64_t i;
        double d;
        switch (v.t) {
        case TV_UNDEF: return tpl_undef_error(c, line, v);
        case TV_INT:
        case TV_BOOL: *out = tv_int(v.u.i); return NB_OK;
        case TV_FLOAT:
            if (!isfinite(v.u.f)) {
                if (isinf(v.u.f)) return tpl_fail(c, line, "cannot convert float infinity to integer");
                *out = dflt;
                return NB_OK;
            }
            if (fabs(v.u.f) >= 9.2e18) return tpl_fail(c, line, "integer overflow");
            *out = tv_int((int64_t)v.u.f);
            return NB_OK;
        case TV_STR:
            if (!parse_py_int(v, base, &i)) *out = tv_int(i);
            else if (!parse_py_float(v, &d) && isfinite(d) && fabs(d) < 9.2e18) *out = tv_int((int64_t)d);
            else *out = dflt;
            return NB_OK;
        default: *out = dflt; return NB_OK;
        }
    }
    if (!strcmp(name, "float")) {
        BIND("default");
        tv dflt = GIVEN(a[0]) ? a[0] : tv_float(0.0);
        double d;
        if (v.t == TV_UNDEF) return tpl_undef_error(c, line, v);
        if (tv_is_num(v)) *out = tv_float(tv_num(v));
        else if (v.t == TV_STR && !parse_py_float(v, &d)) *out = tv_float(d);
        else *out = dflt;
        return NB_OK;
    }
    if (!strcmp(name, "abs")) {
        BIND0();
        if (!tv_is_num(v)) return tpl_fail(c, line, "bad operand type for abs(): '%s'", tv_type_name(v));
        if (v.t == TV_FLOAT) *out = tv_float(fabs(v.u.f));
        else {
            if (v.u.i == INT64_MIN) return tpl_fail(c, line, "integer overflow");
            *out = tv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        }
        return NB_OK;
    }
    if (!strcmp(name, "round")) {
        BIND("precision", "method");
        return f_round(c, line, v, a[0], a[1], out);
    }
    if (!strcmp(name, "sum")) {
        BIND("attribute", "start");
        tpl_list *items;
        NB_TRY(tpl_iterate(c, line, v, &items));
        tv acc = GIVEN(a[1]) ? a[1] : tv_int(0);
        for (size_t i = 0; i < items->n; i++) {
            tv x = items->v[i];
            if (GIVEN(a[0]) && a[0].t != TV_NONE) NB_TRY(attr_path(c, line, x, a[0], &x));
            if (!tv_is_num(acc) || !tv_is_num(x))
                return tpl_fail(c, line, "unsupported operand type(s) for +: '%s' and '%s'", tv_type_name(acc), tv_type_name(x));
            if (acc.t == TV_FLOAT || x.t == TV_FLOAT) acc = tv_float(tv_num(acc) + tv_num(x));
            else if (__builtin_add_overflow(acc.u.i, x.u.i, &acc.u.i)) return tpl_fail(c, line, "integer overflow");
            else acc.t = TV_INT;
        }
        *out = acc;
        return NB_OK;
    }
    if (!strcmp(name, "indent")) {
        BIND("width", "first", "blank");
        /* jinja2 appends "\n" to the value: anything but a string fails there */
        if (v.t == TV_UNDEF) return tpl_undef_error(c, line, v);
        if (v.t != TV_STR) return tpl_fail(c, line, "indent: expected a string, got %s", tv_type_name(v));
        tv s = v;
        if (GIVEN(a[0]) && a[0].t != TV_INT && a[0].t != TV_STR) return tpl_fail(c, line, "indent: width must be int or str");
        return f_indent(c, line, s, a[0], GIVEN(a[1]) && tv_truthy(a[1]), GIVEN(a[2]) && tv_truthy(a[2]), out);
    }
    if (!strcmp(name, "center")) {
        BIND("width");
        tv s, w = GIVEN(a[0]) ? a[0] : tv_int(80);
        NB_TRY(tpl_to_str(c, line, v, &s));
        return tpl_call_method(c, line, s, "center", &w, 1, NULL, NULL, 0, out);
    }
    if (!strcmp(name, "format")) {
        /* jinja2: soft_str(value) % (kwargs or args) */
        tv s;
        NB_TRY(tpl_to_str(c, line, v, &s));
        if (nargs && nkw) return tpl_fail(c, line, "can't handle positional and keyword arguments at the same time");
        tv t;
        if (nkw) {
            t = tv_dict_new(&c->arena, (size_t)nkw);
            if (!t.u.d) return tpl_oom(c, line);
            for (int i = 0; i < nkw; i++)
                if (tpl_dict_set(&c->arena, t.u.d, tv_str(kwn[i], strlen(kwn[i])), kwv[i])) return tpl_oom(c, line);
        } else {
            t = new_list(c, (size_t)nargs);
            if (!t.u.l) return tpl_oom(c, line);
            t.flag = TV_F_TUPLE;
            for (int i = 0; i < nargs; i++) t.u.l->v[t.u.l->n++] = args[i];
        }
        return tpl_percent_format(c, line, s, t, out);
    }
    if (!strcmp(name, "wordcount")) {
        BIND0();
        tv s;
        NB_TRY(tpl_to_str(c, line, v, &s));
        int64_t words = 0;
        int in_word = 0;
        size_t i = 0;
        while (i < s.u.s.n) {
            uint32_t cp = tpl_utf8_next(s.u.s.p, s.u.s.n, &i);
            int w = cp == '_' || (cp >= '0' && cp <= '9') || tpl_is_cased_letter(cp) || (cp >= 0x80 && !tpl_py_isspace(cp) && tpl_py_isprintable(cp));
            if (w && !in_word) words++;
            in_word = w;
        }
        *out = tv_int(words);
        return NB_OK;
    }
    return tpl_fail(c, line, "no filter named '%s'", name);
}

/* ---- tests ---------------------------------------------------------------------------- */
nb_status tpl_test(tpl_ctx *c, int line, const char *name, tv v, const tv *args, int nargs, const char **kwn,
                   const tv *kwv, int nkw, int *out)
{
    tv arg = nargs ? args[0] : nkw ? kwv[0] : tv_undef(NULL);
    (void)kwn;
    if (!strcmp(name, "defined")) *out = v.t != TV_UNDEF;
    else if (!strcmp(name, "undefined")) *out = v.t == TV_UNDEF;
    else if (!strcmp(name, "none")) *out = v.t == TV_NONE;
    else if (!strcmp(name, "boolean")) *out = v.t == TV_BOOL;
    else if (!strcmp(name, "true")) *out = v.t == TV_BOOL && v.u.i;
    else if (!strcmp(name, "false")) *out = v.t == TV_BOOL && !v.u.i;
    else if (!strcmp(name, "integer")) *out = v.t == TV_INT;
    else if (!strcmp(name, "float")) *out = v.t == TV_FLOAT;
    else if (!strcmp(name, "number")) *out = tv_is_num(v);
    else if (!strcmp(name, "string")) *out = v.t == TV_STR;
    else if (!strcmp(name, "mapping")) *out = v.t == TV_DICT;
    /* jinja2: anything with __len__ and __getitem__ (Undefined has both) / __iter__ */
    else if (!strcmp(name, "sequence")) *out = v.t == TV_STR || v.t == TV_LIST || v.t == TV_DICT || v.t == TV_UNDEF;
    else if (!strcmp(name, "iterable")) *out = v.t == TV_STR || v.t == TV_LIST || v.t == TV_DICT || v.t == TV_UNDEF;
    else if (!strcmp(name, "callable")) *out = v.t == TV_FUNC;
    else if (!strcmp(name, "escaped")) *out = 0;
    else if (!strcmp(name, "filter") || !strcmp(name, "test")) {
        if (v.t != TV_STR) *out = 0;
        else {
            char *nm = tpl_strndup(&c->arena, v.u.s.p, v.u.s.n);
            if (!nm) return tpl_oom(c, line);
            *out = name[0] == 'f' ? tpl_filter_exists(nm) : tpl_test_exists(nm);
        }
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        tv s;
        NB_TRY(tpl_to_str(c, line, v, &s));
        tv r;
        NB_TRY(tpl_call_method(c, line, s, name[0] == 'l' ? "islower" : "isupper", NULL, 0, NULL, NULL, 0, &r));
        *out = (int)r.u.i;
    } else if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        if (v.t == TV_UNDEF) return tpl_undef_error(c, line, v);
        tv d = name[0] == 'd' ? arg : tv_int(2);
        if (!tv_is_num(v) || !tv_is_num(d)) return tpl_fail(c, line, "test '%s' needs numbers", name);
        if (tv_num(d) == 0) return tpl_fail(c, line, "integer division or modulo by zero");
        double m;
        if (v.t != TV_FLOAT && d.t != TV_FLOAT) {
            int64_t r = v.u.i % d.u.i;
            if (r != 0 && ((r < 0) != (d.u.i < 0))) r += d.u.i;
            m = (double)r;
        } else {
            m = fmod(tv_num(v), tv_num(d));
            if (m != 0 && ((m < 0) != (tv_num(d) < 0))) m += tv_num(d);
        }
        *out = name[0] == 'o' ? m == 1 : m == 0;
    } else if (!strcmp(name, "sameas")) {
        if (v.t != arg.t) *out = 0;
        else if (v.t == TV_LIST) *out = v.u.l == arg.u.l;
        else if (v.t == TV_DICT || v.t == TV_NS) *out = v.u.d == arg.u.d;
        else if (v.t == TV_STR) *out = v.u.s.p == arg.u.s.p && v.u.s.n == arg.u.s.n;
        else *out = tv_eq(v, arg);
    } else if (!strcmp(name, "in")) {
        if (arg.t == TV_STR) {
            if (v.t != TV_STR) return tpl_fail(c, line, "'in <string>' requires string as left operand, not %s", tv_type_name(v));
            *out = v.u.s.n == 0 || memmem(arg.u.s.p, arg.u.s.n, v.u.s.p, v.u.s.n) != NULL;
        } else if (arg.t == TV_LIST) {
            *out = 0;
            for (size_t i = 0; i < arg.u.l->n; i++)
                if (tv_eq(arg.u.l->v[i], v)) *out = 1;
        } else if (arg.t == TV_DICT) *out = tpl_dict_get(arg.u.d, v) != NULL;
        else if (arg.t == TV_UNDEF) *out = 0;
        else return tpl_fail(c, line, "argument of type '%s' is not iterable", tv_type_name(arg));
    } else {
        int op = !strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==") ? 0
               : !strcmp(name, "ne") || !strcmp(name, "!=") ? 1
               : !strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<") ? 2
               : !strcmp(name, "le") || !strcmp(name, "<=") ? 3
               : !strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">") ? 4
               : !strcmp(name, "ge") || !strcmp(name, ">=") ? 5 : -1;
        if (op < 0) return tpl_fail(c, line, "no test named '%s'", name);
        if (op <= 1) {
            *out = tv_eq(v, arg) == (op == 0);
            return NB_OK;
        }
        if (v.t == TV_UNDEF) return tpl_undef_error(c, line, v);
        if (arg.t == TV_UNDEF) return tpl_undef_error(c, line, arg);
        int r;
        if (tv_cmp(v, arg, &r))
            return tpl_fail(c, line, "comparison not supported between instances of '%s' and '%s'", tv_type_name(v),
                            tv_type_name(arg));
        *out = op == 2 ? r < 0 : op == 3 ? r <= 0 : op == 4 ? r > 0 : r >= 0;
    }
    return NB_OK;
}
