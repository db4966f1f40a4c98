/* Methods and globals of the chat-template interpreter: method lookup for str / dict /
 * list values (str methods themselves are in tpl_strings.c), dict and list methods
 * (items, keys, values, get, index, count), the
 * sandbox's refusal of mutating methods (list.append, dict.update: "unsafe" as in
 * jinja2's ImmutableSandboxedEnvironment), the globals range / dict / namespace /
 * raise_exception / strftime_now, and the argument binder every builtin uses.
 * Exercised by tests/template/test_template.c and the jinja2 comparison checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/template/tpl_internal.h"

nb_status tpl_bind_args(tpl_ctx *c, int line, const char *fname, const char *const *params, int nparams,
                        const tv *args, int nargs, const char **kwn, const tv *kwv, int nkw, tv *slot)
{
    for (int i = 0; i < nparams; i++) slot[i].t = TV_ABSENT;
    if (nargs > nparams)
        return tpl_fail(c, line, "%s() takes at most %d argument%s (%d given)", fname, nparams, nparams == 1 ? "" : "s",
                        nargs);
    for (int i = 0; i < nargs; i++) slot[i] = args[i];
    for (int k = 0; k < nkw; k++) {
        int p;
        for (p = 0; p < nparams; p++)
            if (!strcmp(params[p], kwn[k])) break;
        if (p == nparams) return tpl_fail(c, line, "%s() got an unexpected keyword argument '%s'", fname, kwn[k]);
        if (slot[p].t != TV_ABSENT) return tpl_fail(c, line, "%s() got multiple values for argument '%s'", fname, kwn[k]);
        slot[p] = kwv[k];
    }
    return NB_OK;
}

static tv mkfunc(tpl_ctx *c, tpl_func_kind kind, const char *name, tv self)
{
    tv v = {0};
    tpl_func *f = tpl_alloc(&c->arena, sizeof(tpl_func));
    if (!f) return tv_undef(NULL);
    f->kind = kind;
    f->name = name;
    f->self = self;
    v.t = TV_FUNC;
    v.u.fn = f;
    return v;
}

static const char *const STR_METHODS[] = {
    "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "replace", "upper", "lower",
    "title", "capitalize", "find", "rfind", "count", "format", "join", "isdigit", "isalpha", "isalnum",
    "isspace", "isupper", "islower", "splitlines", "index", "swapcase", "casefold", "zfill", "center",
    "ljust", "rjust", "partition", "rpartition", "removeprefix", "removesuffix", "isnumeric", "isdecimal",
    "istitle", "expandtabs", "encode", "rindex", "isidentifier", "isprintable", "isascii", "format_map"};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", "copy"};
static const char *const DICT_UNSAFE[] = {"pop", "popitem", "update", "clear", "setdefault"};
static const char *const LIST_METHODS[] = {"index", "count", "copy"};
static const char *const LIST_UNSAFE[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};

static int in_list(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(name, list[i])) return 1;
    return 0;
}

int tpl_method_lookup(tpl_ctx *c, tv v, const char *name, tv *out)
{
    const char *unsafe_type = NULL;
    if (v.t == TV_STR && in_list(name, STR_METHODS, NB_ARRAY_LEN(STR_METHODS))) {
        *out = mkfunc(c, TF_METHOD, name, v);
        return 1;
    }
    if (v.t == TV_DICT) {
        if (in_list(name, DICT_METHODS, NB_ARRAY_LEN(DICT_METHODS))) {
            *out = mkfunc(c, TF_METHOD, name, v);
            return 1;
        }
        if (in_list(name, DICT_UNSAFE, NB_ARRAY_LEN(DICT_UNSAFE))) unsafe_type = "dict";
    }
    if (v.t == TV_LIST) {
        if (in_list(name, LIST_METHODS, NB_ARRAY_LEN(LIST_METHODS)) && !((v.flag & TV_F_TUPLE) && !strcmp(name, "copy"))) {
            *out = mkfunc(c, TF_METHOD, name, v);
            return 1;
        }
        if (!(v.flag & TV_F_TUPLE) && in_list(name, LIST_UNSAFE, NB_ARRAY_LEN(LIST_UNSAFE))) unsafe_type = "list";
    }
    if (unsafe_type) {
        char msg[160];
        snprintf(msg, sizeof msg, "access to attribute '%s' of '%s' object is unsafe.", name, unsafe_type);
        *out = tv_undef(tpl_strndup(&c->arena, msg, strlen(msg)));
        out->flag = TV_F_UNSAFE;
        return 1;
    }
    return 0;
}

static nb_status call_dict_method(tpl_ctx *c, int line, tv d, const char *m, const tv *args, int nargs,
                                  const char **kwn, const tv *kwv, int nkw, tv *out)
{
    tv a[2];
    if (!strcmp(m, "get")) {
        static const char *const P[] = {"key", "default"};
        NB_TRY(tpl_bind_args(c, line, "get", P, 2, args, nargs, kwn, kwv, nkw, a));
        if (a[0].t == TV_ABSENT) return tpl_fail(c, line, "get expected at least 1 argument, got 0");
        tv *v = tpl_dict_get(d.u.d, a[0]);
        *out = v ? *v : a[1].t == TV_ABSENT ? tv_none() : a[1];
        return NB_OK;
    }
    NB_TRY(tpl_bind_args(c, line, m, NULL, 0, args, nargs, kwn, kwv, nkw, a));
    if (!strcmp(m, "copy")) {
        tv r = tv_dict_new(&c->arena, d.u.d->n);
        if (!r.u.d) return tpl_oom(c, line);
        for (size_t i = 0; i < d.u.d->n; i++)
            if (tpl_dict_set(&c->arena, r.u.d, d.u.d->k[i], d.u.d->v[i])) return tpl_oom(c, line);
        *out = r;
        return NB_OK;
    }
    tv l = tv_list_new(&c->arena, d.u.d->n);
    if (!l.u.l) return tpl_oom(c, line);
    for (size_t i = 0; i < d.u.d->n; i++) {
        if (m[0] == 'k') l.u.l->v[i] = d.u.d->k[i];
        else if (m[0] == 'v') l.u.l->v[i] = d.u.d->v[i];
        else {
            tv t = tv_list_new(&c->arena, 2);
            if (!t.u.l) return tpl_oom(c, line);
            t.flag = TV_F_TUPLE;
            t.u.l->v[0] = d.u.d->k[i];
            t.u.l->v[1] = d.u.d->v[i];
            t.u.l->n = 2;
            l.u.l->v[i] = t;
        }
    }
    l.u.l->n = d.u.d->n;
    l.flag = m[0] == 'k' ? TV_F_KEYS : m[0] == 'v' ? TV_F_VALUES : TV_F_ITEMS;
    *out = l;
    return NB_OK;
}

nb_status tpl_call_method(tpl_ctx *c, int line, tv self, const char *name, const tv *args, int nargs,
                          const char **kwn, const tv *kwv, int nkw, tv *out)
{
    if (self.t == TV_STR) return tpl_call_str_method(c, line, self, name, args, nargs, kwn, kwv, nkw, out);
    if (self.t == TV_DICT) return call_dict_method(c, line, self, name, args, nargs, kwn, kwv, nkw, out);
    if (self.t == TV_LIST) {
        tv a[1];
        if (!strcmp(name, "copy")) {
            NB_TRY(tpl_bind_args(c, line, name, NULL, 0, args, nargs, kwn, kwv, nkw, a));
            tv l = tv_list_new(&c->arena, self.u.l->n);
            if (!l.u.l) return tpl_oom(c, line);
            for (size_t i = 0; i < self.u.l->n; i++) l.u.l->v[l.u.l->n++] = self.u.l->v[i];
            *out = l;
            return NB_OK;
        }
        static const char *const P[] = {"value"};
        NB_TRY(tpl_bind_args(c, line, name, P, 1, args, nargs, kwn, kwv, nkw, a));
        if (a[0].t == TV_ABSENT) return tpl_fail(c, line, "%s() takes exactly one argument", name);
        int64_t cnt = 0, at = -1;
        for (size_t i = 0; i < self.u.l->n; i++)
            if (tv_eq(self.u.l->v[i], a[0])) {
                cnt++;
                if (at < 0) at = (int64_t)i;
            }
        if (name[0] == 'c') *out = tv_int(cnt);
        else {
            if (at < 0) return tpl_fail(c, line, "list.index(x): x not in list");
            *out = tv_int(at);
        }
        return NB_OK;
    }
    return tpl_fail(c, line, "'%s' object has no method '%s'", tv_type_name(self), name);
}

/* ---- globals -------------------------------------------------------------------------- */
static tpl_func G_RANGE = {.kind = TF_RANGE, .name = "range"};
static tpl_func G_DICT = {.kind = TF_DICT, .name = "dict"};
static tpl_func G_NAMESPACE = {.kind = TF_NAMESPACE, .name = "namespace"};
static tpl_func G_RAISE = {.kind = TF_RAISE, .name = "raise_exception"};
static tpl_func G_STRFTIME = {.kind = TF_STRFTIME, .name = "strftime_now"};

int tpl_global_lookup(const char *name, tv *out)
{
    tpl_func *f = !strcmp(name, "range") ? &G_RANGE : !strcmp(name, "dict") ? &G_DICT
                : !strcmp(name, "namespace") ? &G_NAMESPACE : !strcmp(name, "raise_exception") ? &G_RAISE
                : !strcmp(name, "strftime_now") ? &G_STRFTIME : NULL;
    if (!f) return 0;
    memset(out, 0, sizeof *out);
    out->t = TV_FUNC;
    out->u.fn = f;
    return 1;
}

nb_status tpl_range_params(tpl_ctx *c, int line, const tv *args, int nargs, int nkw, int64_t *start, int64_t *step,
                           size_t *count)
{
    if (nkw) return tpl_fail(c, line, "range() takes no keyword arguments");
    if (nargs < 1 || nargs > 3) return tpl_fail(c, line, "range expected 1 to 3 arguments, got %d", nargs);
    int64_t v[3] = {0, 0, 1};
    for (int i = 0; i < nargs; i++)
        if (args[i].t != TV_INT && args[i].t != TV_BOOL)
            return tpl_fail(c, line, "'%s' object cannot be interpreted as an integer", tv_type_name(args[i]));
    if (nargs == 1) v[1] = args[0].u.i;
    else {
        v[0] = args[0].u.i;
        v[1] = args[1].u.i;
        if (nargs == 3) v[2] = args[2].u.i;
    }
    if (v[2] == 0) return tpl_fail(c, line, "range() arg 3 must not be zero");
    __int128 lo = v[0], hi = v[1], st = v[2];
    __int128 n = st > 0 ? (hi > lo ? (hi - lo + st - 1) / st : 0) : (lo > hi ? (lo - hi - st - 1) / -st : 0);
    /* jinja2's sandbox refuses ranges over MAX_RANGE (100000) items */
    if (n > 100000) return tpl_fail(c, line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    *start = v[0];
    *step = v[2];
    *count = (size_t)n;
    return NB_OK;
}

tv tpl_loop_item(const tpl_loop *l, size_t i)
{
    return l->items ? l->items->v[i] : tv_int(l->range_start + (int64_t)i * l->range_step);
}

nb_status tpl_call_builtin(tpl_ctx *c, int line, tpl_func *f, const tv *args, int nargs, const char **kwn,
                           const tv *kwv, int nkw, tv *out)
{
    switch (f->kind) {
    case TF_RANGE: {
        int64_t start, step;
        size_t count;
        NB_TRY(tpl_range_params(c, line, args, nargs, nkw, &start, &step, &count));
        tv l = tv_list_new(&c->arena, count);
        if (!l.u.l) return tpl_oom(c, line);
        for (size_t i = 0; i < count; i++) l.u.l->v[i] = tv_int(start + (int64_t)i * step);
        l.u.l->n = count;
        *out = l;
        return NB_OK;
    }
    case TF_DICT:
    case TF_NAMESPACE: {
        tv d = tv_dict_new(&c->arena, 0);
        if (!d.u.d) return tpl_oom(c, line);
        if (nargs > 1) return tpl_fail(c, line, "%s expected at most 1 argument, got %d", f->name, nargs);
        if (nargs == 1) {
            if (args[0].t == TV_DICT) {
                for (size_t i = 0; i < args[0].u.d->n; i++)
                    if (tpl_dict_set(&c->arena, d.u.d, args[0].u.d->k[i], args[0].u.d->v[i])) return tpl_oom(c, line);
            } else {
                tpl_list *items;
                NB_TRY(tpl_iterate(c, line, args[0], &items));
                for (size_t i = 0; i < items->n; i++) {
                    tv it = items->v[i];
                    if (it.t != TV_LIST || it.u.l->n != 2)
                        return tpl_fail(c, line, "%s(): sequence element #%zu is not a pair", f->name, i);
                    if (tpl_dict_set(&c->arena, d.u.d, it.u.l->v[0], it.u.l->v[1])) return tpl_oom(c, line);
                }
            }
        }
        for (int k = 0; k < nkw; k++)
            if (tpl_dict_set(&c->arena, d.u.d, tv_str(kwn[k], strlen(kwn[k])), kwv[k])) return tpl_oom(c, line);
        if (f->kind == TF_NAMESPACE) d.t = TV_NS;
        *out = d;
        return NB_OK;
    }
    case TF_RAISE: {
        tv msg = nargs ? args[0] : nkw ? kwv[0] : tv_str("", 0);
        tpl_buf b = {0};
        tv_str_to(&b, msg);
        nb_status st = tpl_fail(c, line, "raise_exception: %s", b.p ? b.p : "");
        tpl_buf_free(&b);
        return st;
    }
    case TF_STRFTIME: {
        static const char *const P[] = {"format"};
        tv a[1];
        NB_TRY(tpl_bind_args(c, line, "strftime_now", P, 1, args, nargs, kwn, kwv, nkw, a));
        if (a[0].t != TV_STR) return tpl_fail(c, line, "strftime_now() argument must be str");
        char *fmt = tpl_strndup(&c->arena, a[0].u.s.p, a[0].u.s.n);
        if (!fmt) return tpl_oom(c, line);
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        char buf[512];
        size_t n = strftime(buf, sizeof buf, fmt, &tmv);
        char *p = tpl_strndup(&c->arena, buf, n);
        if (!p) return tpl_oom(c, line);
        *out = tv_str(p, n);
        return NB_OK;
    }
    case TF_LOOP_CHANGED: {
        tv now = tv_list_new(&c->arena, (size_t)nargs);
        if (!now.u.l) return tpl_oom(c, line);
        for (int i = 0; i < nargs; i++) now.u.l->v[now.u.l->n++] = args[i];
        tpl_loop *l = f->self.u.loop;
        int changed = l->changed_last.t == TV_ABSENT || !tv_eq(l->changed_last, now);
        l->changed_last = now;
        *out = tv_bool(changed);
        return NB_OK;
    }
    case TF_LOOP_CYCLE: {
        if (nargs == 0) return tpl_fail(c, line, "no items for cycling given");
        *out = args[f->self.u.loop->index0 % (size_t)nargs];
        return NB_OK;
    }
    default: return tpl_fail(c, line, "'%s' is not callable here", f->name ? f->name : "?");
    }
}
