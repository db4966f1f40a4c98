/* Python str methods for the chat-template interpreter (startswith, split / rsplit,
 * strip family, replace, case mappings, find / count, format with {} fields, join,
 * is*, splitlines, partition, padding) and printf-style `fmt % args`, with Python's
 * semantics on code points, not bytes.
 * Exercised by tests/template/test_template.c and snippets.json (test_vs_jinja2.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/template/tpl_internal.h"

/* ---- str methods ------------------------------------------------------------------------ */
static nb_status new_str(tpl_ctx *c, int line, tpl_buf *b, tv *out)
{
    char *p = tpl_strndup(&c->arena, b->p ? b->p : "", b->n);
    size_t n = b->n;
    int failed = b->failed;
    tpl_buf_free(b);
    if (!p || failed) return tpl_oom(c, line);
    *out = tv_str(p, n);
    return NB_OK;
}

static int cp_in(uint32_t cp, tv chars)
{
    size_t i = 0;
    while (i < chars.u.s.n)
        if (tpl_utf8_next(chars.u.s.p, chars.u.s.n, &i) == cp) return 1;
    return 0;
}

/* Python str.strip family: which = 1 left, 2 right, 3 both; chars NONE = whitespace. */
tv tpl_str_strip(tv s, tv chars, int which)
{
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, a = 0, b = n;
    int ws = chars.t != TV_STR;
    if (which & 1) {
        while (a < n) {
            size_t j = a;
            uint32_t cp = tpl_utf8_next(p, n, &j);
            if (ws ? !tpl_py_isspace(cp) : !cp_in(cp, chars)) break;
            a = j;
        }
    }
    if (which & 2) {
        while (b > a) {
            size_t j = b - 1;
            while (j > a && ((unsigned char)p[j] & 0xC0) == 0x80) j--;
            size_t k = j;
            uint32_t cp = tpl_utf8_next(p, n, &k);
            if (ws ? !tpl_py_isspace(cp) : !cp_in(cp, chars)) break;
            b = j;
        }
    }
    return tv_str(p + a, b - a);
}

/* Case mapping per code point: mode 0 lower, 1 upper, 2 capitalize, 3 Python title, 4 swapcase. */
nb_status tpl_str_case(tpl_ctx *c, int line, tv s, int mode, tv *out)
{
    tpl_buf b = {0};
    size_t i = 0;
    int first = 1, prev_cased = 0;
    uint32_t prev = 0;
    while (i < s.u.s.n) {
        uint32_t cp = tpl_utf8_next(s.u.s.p, s.u.s.n, &i);
        size_t j = i;
        uint32_t next = i < s.u.s.n ? tpl_utf8_next(s.u.s.p, s.u.s.n, &j) : 0;
        int m = 0;
        switch (mode) {
        case 0: m = 0; break;
        case 1: m = 1; break;
        case 2: m = first ? 2 : 0; break;                 /* capitalize: title case, then lower */
        case 3: m = prev_cased ? 0 : 2; break;            /* str.title */
        case 4: m = tpl_lower(cp) != cp ? 0 : 1; break;   /* swapcase */
        }
        tpl_case_to(&b, cp, m, prev, next);
        prev_cased = tpl_is_cased_letter(cp);
        prev = cp;
        first = 0;
    }
    return new_str(c, line, &b, out);
}

static nb_status str_split(tpl_ctx *c, int line, tv s, tv sep, int64_t maxsplit, int from_right, tv *out)
{
    tv l = tv_list_new(&c->arena, 0);
    if (!l.u.l) return tpl_oom(c, line);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    if (sep.t == TV_STR) {
        if (sep.u.s.n == 0) return tpl_fail(c, line, "empty separator");
        /* collect all split points, then honour maxsplit from the chosen side */
        size_t cap = 16, np = 0, *pos = malloc(cap * sizeof(size_t));
        if (!pos) return tpl_oom(c, line);
        for (size_t i = 0; i + sep.u.s.n <= n;) {
            if (!memcmp(p + i, sep.u.s.p, sep.u.s.n)) {
                if (np == cap) {
                    size_t *np2 = realloc(pos, (cap *= 2) * sizeof(size_t));
                    if (!np2) {
                        free(pos);
                        return tpl_oom(c, line);
                    }
                    pos = np2;
                }
                pos[np++] = i;
                i += sep.u.s.n;
            } else i++;
        }
        size_t first = 0, use = np;
        if (maxsplit >= 0 && (size_t)maxsplit < np) {
            use = (size_t)maxsplit;
            if (from_right) first = np - use;
        }
        size_t start = 0;
        int bad = 0;
        for (size_t k = first; k < first + use && !bad; k++) {
            bad |= tpl_list_push(&c->arena, l.u.l, tv_str(p + start, pos[k] - start));
            start = pos[k] + sep.u.s.n;
        }
        bad |= tpl_list_push(&c->arena, l.u.l, tv_str(p + start, n - start));
        free(pos);
        if (bad) return tpl_oom(c, line);
        *out = l;
        return NB_OK;
    }
    /* whitespace split: runs of whitespace, no empty strings */
    size_t cap = 16, nw = 0, (*w)[2] = malloc(cap * sizeof *w);
    if (!w) return tpl_oom(c, line);
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        uint32_t cp = tpl_utf8_next(p, n, &j);
        if (tpl_py_isspace(cp)) {
            i = j;
            continue;
        }
        size_t st = i;
        while (i < n) {
            j = i;
            cp = tpl_utf8_next(p, n, &j);
            if (tpl_py_isspace(cp)) break;
            i = j;
        }
        if (nw == cap) {
            void *nw2 = realloc(w, (cap *= 2) * sizeof *w);
            if (!nw2) {
                free(w);
                return tpl_oom(c, line);
            }
            w = nw2;
        }
        w[nw][0] = st;
        w[nw][1] = i;
        nw++;
    }
    int bad = 0;
    if (maxsplit < 0 || (size_t)maxsplit + 1 >= nw) {
        for (size_t k = 0; k < nw; k++) bad |= tpl_list_push(&c->arena, l.u.l, tv_str(p + w[k][0], w[k][1] - w[k][0]));
    } else if (!from_right) {
        for (size_t k = 0; k < (size_t)maxsplit; k++)
            bad |= tpl_list_push(&c->arena, l.u.l, tv_str(p + w[k][0], w[k][1] - w[k][0]));
        bad |= tpl_list_push(&c->arena, l.u.l, tv_str(p + w[maxsplit][0], n - w[maxsplit][0]));
    } else {
        size_t keep = nw - (size_t)maxsplit;
        bad |= tpl_list_push(&c->arena, l.u.l, tv_str(p, w[keep - 1][1]));
        for (size_t k = keep; k < nw; k++) bad |= tpl_list_push(&c->arena, l.u.l, tv_str(p + w[k][0], w[k][1] - w[k][0]));
    }
    free(w);
    if (bad) return tpl_oom(c, line);
    *out = l;
    return NB_OK;
}

nb_status tpl_str_replace(tpl_ctx *c, int line, tv s, tv old, tv rep, int64_t count, tv *out)
{
    tpl_buf b = {0};
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) {
        /* Python inserts the replacement between every character and at both ends */
        while (count < 0 || done < count) {
            tpl_buf_put(&b, rep.u.s.p, rep.u.s.n);
            done++;
            if (i >= n) break;
            size_t j = i;
            tpl_utf8_next(p, n, &j);
            tpl_buf_put(&b, p + i, j - i);
            i = j;
        }
        tpl_buf_put(&b, p + i, n - i);
        return new_str(c, line, &b, out);
    }
    while (i < n) {
        const char *hit = (count < 0 || done < count) ? memmem(p + i, n - i, old.u.s.p, old.u.s.n) : NULL;
        if (!hit) break;
        tpl_buf_put(&b, p + i, (size_t)(hit - (p + i)));
        tpl_buf_put(&b, rep.u.s.p, rep.u.s.n);
        i = (size_t)(hit - p) + old.u.s.n;
        done++;
    }
    tpl_buf_put(&b, p + i, n - i);
    return new_str(c, line, &b, out);
}

/* str.format with {} / {0} / {name} fields and {{ }} escapes; a format spec or conversion
 * is refused rather than ignored. */
static nb_status str_format(tpl_ctx *c, int line, tv s, const tv *args, int nargs, const char **kwn, const tv *kwv,
                            int nkw, tv *out)
{
    tpl_buf b = {0};
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    int auto_idx = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '{' && i + 1 < n && p[i + 1] == '{') {
            tpl_buf_putc(&b, '{');
            i++;
        } else if (p[i] == '}' && i + 1 < n && p[i + 1] == '}') {
            tpl_buf_putc(&b, '}');
            i++;
        } else if (p[i] == '{') {
            size_t j = i + 1;
            while (j < n && p[j] != '}') j++;
            if (j >= n) {
                tpl_buf_free(&b);
                return tpl_fail(c, line, "Single '{' encountered in format string");
            }
            const char *f = p + i + 1;
            size_t fl = j - i - 1;
            tv v;
            int ok = 0;
            if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) || memchr(f, '[', fl)) {
                tpl_buf_free(&b);
                return tpl_fail(c, line, "str.format: format specs, conversions and nested fields are not supported");
            }
            if (fl == 0) {
                if (auto_idx < nargs) v = args[auto_idx], ok = 1;
                auto_idx++;
            } else if (f[0] >= '0' && f[0] <= '9') {
                int k = atoi(f);
                if (k < nargs) v = args[k], ok = 1;
            } else {
                for (int k = 0; k < nkw; k++)
                    if (strlen(kwn[k]) == fl && !memcmp(kwn[k], f, fl)) v = kwv[k], ok = 1;
            }
            if (!ok) {
                tpl_buf_free(&b);
                return tpl_fail(c, line, "str.format: no argument for field '{%.*s}'", (int)fl, f);
            }
            tv_str_to(&b, v);
            i = j;
        } else if (p[i] == '}') {
            tpl_buf_free(&b);
            return tpl_fail(c, line, "Single '}' encountered in format string");
        } else tpl_buf_putc(&b, p[i]);
    }
    return new_str(c, line, &b, out);
}

static int64_t cp_index_of(tv s, size_t byte_off) { return (int64_t)tpl_utf8_len(s.u.s.p, byte_off); }

static int need_str(tv v) { return v.t == TV_STR; }

nb_status tpl_call_str_method(tpl_ctx *c, int line, tv s, const char *m, const tv *args, int nargs, const char **kwn,
                                 const tv *kwv, int nkw, tv *out)
{
    tv a[3];
    if (!strcmp(m, "format")) return str_format(c, line, s, args, nargs, kwn, kwv, nkw, out);
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        static const char *const P[] = {"prefix", "start", "end"};
        NB_TRY(tpl_bind_args(c, line, m, P, 3, args, nargs, kwn, kwv, nkw, a));
        if (a[1].t != TV_ABSENT || a[2].t != TV_ABSENT)
            return tpl_fail(c, line, "str.%s: start/end arguments are not supported", m);
        const tv *cands = &a[0];
        size_t nc = 1;
        if (a[0].t == TV_LIST && (a[0].flag & TV_F_TUPLE)) {
            cands = a[0].u.l->v;
            nc = a[0].u.l->n;
        }
        int r = 0;
        for (size_t i = 0; i < nc; i++) {
            tv x = cands[i];
            if (!need_str(x)) return tpl_fail(c, line, "%s first arg must be str or a tuple of str, not %s", m, tv_type_name(x));
            if (x.u.s.n <= s.u.s.n &&
                !memcmp(m[0] == 's' ? s.u.s.p : s.u.s.p + s.u.s.n - x.u.s.n, x.u.s.p, x.u.s.n))
                r = 1;
        }
        *out = tv_bool(r);
        return NB_OK;
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        static const char *const P[] = {"sep", "maxsplit"};
        NB_TRY(tpl_bind_args(c, line, m, P, 2, args, nargs, kwn, kwv, nkw, a));
        if (a[0].t != TV_ABSENT && a[0].t != TV_NONE && a[0].t != TV_STR)
            return tpl_fail(c, line, "must be str or None, not %s", tv_type_name(a[0]));
        int64_t maxsplit = a[1].t == TV_ABSENT ? -1 : a[1].u.i;
        if (a[1].t != TV_ABSENT && a[1].t != TV_INT) return tpl_fail(c, line, "maxsplit must be an integer");
        return str_split(c, line, s, a[0], maxsplit, m[0] == 'r', out);
    }
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        static const char *const P[] = {"chars"};
        NB_TRY(tpl_bind_args(c, line, m, P, 1, args, nargs, kwn, kwv, nkw, a));
        if (a[0].t != TV_ABSENT && a[0].t != TV_NONE && a[0].t != TV_STR)
            return tpl_fail(c, line, "%s arg must be None or str", m);
        *out = tpl_str_strip(s, a[0], m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
        return NB_OK;
    }
    if (!strcmp(m, "replace")) {
        static const char *const P[] = {"old", "new", "count"};
        NB_TRY(tpl_bind_args(c, line, m, P, 3, args, nargs, kwn, kwv, nkw, a));
        if (!need_str(a[0]) || !need_str(a[1])) return tpl_fail(c, line, "replace() arguments must be str");
        return tpl_str_replace(c, line, s, a[0], a[1], a[2].t == TV_INT ? a[2].u.i : -1, out);
    }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        static const char *const P[] = {"fix"};
        NB_TRY(tpl_bind_args(c, line, m, P, 1, args, nargs, kwn, kwv, nkw, a));
        if (!need_str(a[0])) return tpl_fail(c, line, "%s() argument must be str", m);
        *out = s;
        if (a[0].u.s.n <= s.u.s.n) {
            if (m[6] == 'p' && !memcmp(s.u.s.p, a[0].u.s.p, a[0].u.s.n)) *out = tv_str(s.u.s.p + a[0].u.s.n, s.u.s.n - a[0].u.s.n);
            if (m[6] == 's' && !memcmp(s.u.s.p + s.u.s.n - a[0].u.s.n, a[0].u.s.p, a[0].u.s.n))
                *out = tv_str(s.u.s.p, s.u.s.n - a[0].u.s.n);
        }
        return NB_OK;
    }
    if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "title") || !strcmp(m, "capitalize") ||
        !strcmp(m, "swapcase") || !strcmp(m, "casefold")) {
        NB_TRY(tpl_bind_args(c, line, m, NULL, 0, args, nargs, kwn, kwv, nkw, a));
        int mode = m[0] == 'u' ? 1 : (m[0] == 'l' || !strcmp(m, "casefold")) ? 0 : m[0] == 't' ? 3 : m[0] == 'c' ? 2 : 4;
        return tpl_str_case(c, line, s, mode, out);
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex") || !strcmp(m, "count")) {
        static const char *const P[] = {"sub", "start", "end"};
        NB_TRY(tpl_bind_args(c, line, m, P, 3, args, nargs, kwn, kwv, nkw, a));
        if (!need_str(a[0])) return tpl_fail(c, line, "must be str, not %s", tv_type_name(a[0]));
        if (a[1].t != TV_ABSENT || a[2].t != TV_ABSENT) return tpl_fail(c, line, "str.%s: start/end are not supported", m);
        const char *p = s.u.s.p, *sub = a[0].u.s.p;
        size_t n = s.u.s.n, k = a[0].u.s.n;
        if (m[0] == 'c') {
            int64_t cnt = 0;
            if (k == 0) cnt = (int64_t)tpl_utf8_len(p, n) + 1;
            else
                for (size_t i = 0; i + k <= n;) {
                    if (!memcmp(p + i, sub, k)) cnt++, i += k;
                    else i++;
                }
            *out = tv_int(cnt);
            return NB_OK;
        }
        int64_t at = -1;
        if (m[0] == 'r') {
            for (size_t i = n - (k <= n ? k : n) + 1; k <= n && i > 0; i--)
                if (!memcmp(p + i - 1, sub, k)) {
                    at = cp_index_of(s, i - 1);
                    break;
                }
        } else {
            const char *h = k == 0 ? p : memmem(p, n, sub, k);
            if (h) at = cp_index_of(s, (size_t)(h - p));
        }
        if (at < 0 && strstr(m, "index")) return tpl_fail(c, line, "substring not found");
        *out = tv_int(at);
        return NB_OK;
    }
    if (!strcmp(m, "join")) {
        static const char *const P[] = {"iterable"};
        NB_TRY(tpl_bind_args(c, line, m, P, 1, args, nargs, kwn, kwv, nkw, a));
        if (a[0].t == TV_ABSENT) return tpl_fail(c, line, "join() takes exactly one argument");
        tpl_list *items;
        NB_TRY(tpl_iterate(c, line, a[0], &items));
        tpl_buf b = {0};
        for (size_t i = 0; i < items->n; i++) {
            if (items->v[i].t != TV_STR) {
                tpl_buf_free(&b);
                return tpl_fail(c, line, "sequence item %zu: expected str instance, %s found", i, tv_type_name(items->v[i]));
            }
            if (i) tpl_buf_put(&b, s.u.s.p, s.u.s.n);
            tpl_buf_put(&b, items->v[i].u.s.p, items->v[i].u.s.n);
        }
        return new_str(c, line, &b, out);
    }
    if (!strncmp(m, "is", 2)) {
        NB_TRY(tpl_bind_args(c, line, m, NULL, 0, args, nargs, kwn, kwv, nkw, a));
        size_t i = 0;
        int all = s.u.s.n > 0, any_cased = 0, upper = 0, lower = 0;
        if (!strcmp(m, "isascii") || !strcmp(m, "isprintable")) all = 1;
        while (i < s.u.s.n) {
            uint32_t cp = tpl_utf8_next(s.u.s.p, s.u.s.n, &i);
            int ok;
            if (!strcmp(m, "isdigit") || !strcmp(m, "isdecimal") || !strcmp(m, "isnumeric")) ok = cp >= '0' && cp <= '9';
            else if (!strcmp(m, "isalpha")) ok = tpl_is_cased_letter(cp) || (cp >= 0x80 && tpl_upper(cp) == cp && tpl_lower(cp) == cp && tpl_py_isprintable(cp) && !tpl_py_isspace(cp));
            else if (!strcmp(m, "isalnum")) ok = (cp >= '0' && cp <= '9') || tpl_is_cased_letter(cp) || cp >= 0x80;
            else if (!strcmp(m, "isspace")) ok = tpl_py_isspace(cp);
            else if (!strcmp(m, "isascii")) ok = cp < 0x80;
            else if (!strcmp(m, "isprintable")) ok = tpl_py_isprintable(cp);
            else if (!strcmp(m, "isidentifier")) ok = cp == '_' || tpl_is_cased_letter(cp) || (i > 1 && cp >= '0' && cp <= '9');
            else {
                ok = 1;
                if (tpl_is_cased_letter(cp)) {
                    any_cased = 1;
                    if (tpl_upper(cp) == cp && tpl_lower(cp) != cp) upper = 1;
                    else lower = 1;
                }
            }
            if (!ok) all = 0;
        }
        if (!strcmp(m, "isupper")) all = any_cased && !lower;
        else if (!strcmp(m, "islower")) all = any_cased && !upper;
        else if (!strcmp(m, "istitle")) return tpl_fail(c, line, "str.istitle is not supported");
        *out = tv_bool(all);
        return NB_OK;
    }
    if (!strcmp(m, "splitlines")) {
        NB_TRY(tpl_bind_args(c, line, m, NULL, 0, args, nargs, kwn, kwv, nkw, a));
        tv l = tv_list_new(&c->arena, 0);
        if (!l.u.l) return tpl_oom(c, line);
        size_t st = 0, i = 0, n = s.u.s.n;
        const char *p = s.u.s.p;
        while (i < n) {
            if (p[i] == '\n' || p[i] == '\r') {
                if (tpl_list_push(&c->arena, l.u.l, tv_str(p + st, i - st))) return tpl_oom(c, line);
                if (p[i] == '\r' && i + 1 < n && p[i + 1] == '\n') i++;
                st = ++i;
            } else i++;
        }
        if (st < n && tpl_list_push(&c->arena, l.u.l, tv_str(p + st, n - st))) return tpl_oom(c, line);
        *out = l;
        return NB_OK;
    }
    if (!strcmp(m, "partition") || !strcmp(m, "rpartition")) {
        static const char *const P[] = {"sep"};
        NB_TRY(tpl_bind_args(c, line, m, P, 1, args, nargs, kwn, kwv, nkw, a));
        if (!need_str(a[0]) || a[0].u.s.n == 0) return tpl_fail(c, line, "%s: bad separator", m);
        const char *p = s.u.s.p, *h = NULL;
        size_t n = s.u.s.n, k = a[0].u.s.n;
        if (m[0] == 'p') h = memmem(p, n, a[0].u.s.p, k);
        else
            for (size_t i = n >= k ? n - k + 1 : 0; i > 0; i--)
                if (!memcmp(p + i - 1, a[0].u.s.p, k)) {
                    h = p + i - 1;
                    break;
                }
        tv t = tv_list_new(&c->arena, 3);
        if (!t.u.l) return tpl_oom(c, line);
        t.flag = TV_F_TUPLE;
        t.u.l->n = 3;
        if (!h) {
            tv e = tv_str("", 0);
            t.u.l->v[0] = m[0] == 'p' ? s : e;
            t.u.l->v[1] = e;
            t.u.l->v[2] = m[0] == 'p' ? e : s;
        } else {
            t.u.l->v[0] = tv_str(p, (size_t)(h - p));
            t.u.l->v[1] = a[0];
            t.u.l->v[2] = tv_str(h + k, n - (size_t)(h - p) - k);
        }
        *out = t;
        return NB_OK;
    }
    if (!strcmp(m, "zfill") || !strcmp(m, "center") || !strcmp(m, "ljust") || !strcmp(m, "rjust")) {
        static const char *const P[] = {"width", "fillchar"};
        NB_TRY(tpl_bind_args(c, line, m, P, 2, args, nargs, kwn, kwv, nkw, a));
        if (a[0].t != TV_INT) return tpl_fail(c, line, "%s: width must be an integer", m);
        tv fill = a[1].t == TV_STR ? a[1] : tv_str(m[0] == 'z' ? "0" : " ", 1);
        int64_t len = (int64_t)tpl_utf8_len(s.u.s.p, s.u.s.n), pad = a[0].u.i - len;
        if (pad <= 0) {
            *out = s;
            return NB_OK;
        }
        if (pad > (1 << 20)) return tpl_oom(c, line);
        int64_t left = m[0] == 'r' || m[0] == 'z' ? pad : m[0] == 'l' ? 0 : pad / 2 + (pad & a[0].u.i & 1);
        tpl_buf b = {0};
        size_t st = 0;
        if (m[0] == 'z' && s.u.s.n && (s.u.s.p[0] == '-' || s.u.s.p[0] == '+')) {
            tpl_buf_putc(&b, s.u.s.p[0]);
            st = 1;
        }
        for (int64_t i = 0; i < left; i++) tpl_buf_put(&b, fill.u.s.p, fill.u.s.n);
        tpl_buf_put(&b, s.u.s.p + st, s.u.s.n - st);
        for (int64_t i = left; i < pad; i++) tpl_buf_put(&b, fill.u.s.p, fill.u.s.n);
        return new_str(c, line, &b, out);
    }
    return tpl_fail(c, line, "str.%s() is not supported", m);
}

/* Python's printf-style `fmt % args`: %(key)s mapping keys, flags "#0- +", width,
 * precision, conversions d i u x X o e E f F g G c s r a %. */
nb_status tpl_percent_format(tpl_ctx *c, int line, tv fmt, tv args, tv *out)
{
    const tv *av = &args;
    size_t an = 1, ai = 0;
    int is_tuple = args.t == TV_LIST && (args.flag & TV_F_TUPLE);
    if (is_tuple) {
        av = args.u.l->v;
        an = args.u.l->n;
    }
    tpl_buf b = {0};
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n;
    nb_status st = NB_OK;
    int used_mapping = 0;
    for (size_t i = 0; i < n && st == NB_OK; i++) {
        if (p[i] != '%') {
            tpl_buf_putc(&b, p[i]);
            continue;
        }
        i++;
        tv v = {0};
        int have_v = 0;
        if (i < n && p[i] == '(') {
            size_t j = i + 1;
            while (j < n && p[j] != ')') j++;
            if (j >= n) {
                st = tpl_fail(c, line, "incomplete format key");
                break;
            }
            if (args.t != TV_DICT) {
                st = tpl_fail(c, line, "format requires a mapping");
                break;
            }
            tv *hit = tpl_dict_gets(args.u.d, p + i + 1, j - i - 1);
            if (!hit) {
                st = tpl_fail(c, line, "KeyError: '%.*s'", (int)(j - i - 1), p + i + 1);
                break;
            }
            v = *hit;
            have_v = used_mapping = 1;
            i = j + 1;
        }
        char flags[8];
        int nf = 0, width = -1, prec = -1;
        while (i < n && strchr("#0- +", p[i]) && nf < 7) flags[nf++] = p[i++];
        flags[nf] = 0;
        if (i < n && p[i] >= '0' && p[i] <= '9') {
            width = 0;
            while (i < n && p[i] >= '0' && p[i] <= '9') width = width * 10 + (p[i++] - '0');
        }
        if (i < n && p[i] == '.') {
            i++;
            prec = 0;
            while (i < n && p[i] >= '0' && p[i] <= '9') prec = prec * 10 + (p[i++] - '0');
        }
        while (i < n && (p[i] == 'h' || p[i] == 'l' || p[i] == 'L')) i++;
        if (i >= n) {
            st = tpl_fail(c, line, "incomplete format");
            break;
        }
        if (width > 4096 || prec > 4096) {
            st = tpl_fail(c, line, "format width or precision too large");
            break;
        }
        char conv = p[i];
        if (conv == '%') {
            tpl_buf_putc(&b, '%');
            continue;
        }
        if (!have_v) {
            if (ai >= an) {
                st = tpl_fail(c, line, "not enough arguments for format string");
                break;
            }
            v = av[ai++];
        }
        char spec[32];
        if (strchr("diu", conv)) {
            if (!tv_is_num(v)) {
                st = tpl_fail(c, line, "%%%c format: a real number is required, not %s", conv, tv_type_name(v));
                break;
            }
            long long x = v.t == TV_FLOAT ? (long long)v.u.f : (long long)v.u.i;
            /* C ignores the 0 flag when a precision is given: pass one only when Python had one */
            if (prec < 0) {
                snprintf(spec, sizeof spec, "%%%s*lld", flags);
                tpl_buf_printf(&b, spec, width < 0 ? 0 : width, x);
            } else {
                snprintf(spec, sizeof spec, "%%%s*.*lld", flags);
                tpl_buf_printf(&b, spec, width < 0 ? 0 : width, prec, x);
            }
        } else if (strchr("xXo", conv)) {
            if (v.t != TV_INT && v.t != TV_BOOL) {
                st = tpl_fail(c, line, "%%%c format: an integer is required, not %s", conv, tv_type_name(v));
                break;
            }
            long long x = (long long)v.u.i;
            unsigned long long ux = x < 0 ? (unsigned long long)(-(x + 1)) + 1u : (unsigned long long)x;
            char digits[80];
            snprintf(spec, sizeof spec, "%%.*ll%c", conv);
            snprintf(digits, sizeof digits, spec, prec < 0 ? 1 : prec, ux);
            /* sign, Python's 0x / 0X / 0o prefix and padding by hand (-0xff, 0o17) */
            const char *prefix = !strchr(flags, '#') ? "" : conv == 'x' ? "0x" : conv == 'X' ? "0X" : "0o";
            char body[100];
            snprintf(body, sizeof body, "%s%s%s", x < 0 ? "-" : strchr(flags, '+') ? "+" : strchr(flags, ' ') ? " " : "",
                     prefix, digits);
            int len = (int)strlen(body), pad = width > len ? width - len : 0;
            if (strchr(flags, '-')) {
                tpl_buf_puts(&b, body);
                for (int k = 0; k < pad; k++) tpl_buf_putc(&b, ' ');
            } else if (strchr(flags, '0')) {
                int sign = body[0] == '-' || body[0] == '+' || body[0] == ' ';
                int pre = sign + (int)strlen(prefix);
                tpl_buf_put(&b, body, (size_t)pre);
                for (int k = 0; k < pad; k++) tpl_buf_putc(&b, '0');
                tpl_buf_puts(&b, body + pre);
            } else {
                for (int k = 0; k < pad; k++) tpl_buf_putc(&b, ' ');
                tpl_buf_puts(&b, body);
            }
        } else if (strchr("eEfFgG", conv)) {
            if (!tv_is_num(v)) {
                st = tpl_fail(c, line, "must be real number, not %s", tv_type_name(v));
                break;
            }
            snprintf(spec, sizeof spec, "%%%s*.*%c", flags, conv);
            tpl_buf_printf(&b, spec, width < 0 ? 0 : width, prec < 0 ? 6 : prec, tv_num(v));
        } else if (conv == 's' || conv == 'r' || conv == 'a' || conv == 'c') {
            tpl_buf tmp = {0};
            if (conv == 's') tv_str_to(&tmp, v);
            else if (conv == 'c') {
                if (v.t == TV_INT && v.u.i >= 0 && v.u.i <= 0x10FFFF) tpl_buf_utf8(&tmp, (uint32_t)v.u.i);
                else if (v.t == TV_STR && tpl_utf8_len(v.u.s.p, v.u.s.n) == 1) tpl_buf_put(&tmp, v.u.s.p, v.u.s.n);
                else {
                    st = tpl_fail(c, line, "%%c requires an int or a unicode character");
                    tpl_buf_free(&tmp);
                    break;
                }
            } else tv_repr_to(&tmp, v);
            const char *tp = tmp.p ? tmp.p : "";
            size_t tn = tmp.n;
            if (prec >= 0 && conv != 'c') tn = tpl_utf8_offset(tp, tn, (size_t)prec);
            int len = (int)tpl_utf8_len(tp, tn), pad = width > len ? width - len : 0;
            if (!strchr(flags, '-'))
                for (int k = 0; k < pad; k++) tpl_buf_putc(&b, ' ');
            tpl_buf_put(&b, tp, tn);
            if (strchr(flags, '-'))
                for (int k = 0; k < pad; k++) tpl_buf_putc(&b, ' ');
            tpl_buf_free(&tmp);
        } else st = tpl_fail(c, line, "unsupported format character '%c'", conv);
    }
    if (st == NB_OK && !used_mapping && is_tuple && ai < an)
        st = tpl_fail(c, line, "not all arguments converted during string formatting");
    /* Python tolerates an unused argument only when it has __getitem__ (and is no str) */
    if (st == NB_OK && !used_mapping && !is_tuple && ai == 0 && args.t != TV_DICT && args.t != TV_LIST)
        st = tpl_fail(c, line, "not all arguments converted during string formatting");
    if (st != NB_OK) {
        tpl_buf_free(&b);
        return st;
    }
    return new_str(c, line, &b, out);
}

