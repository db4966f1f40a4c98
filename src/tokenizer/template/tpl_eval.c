/* Expression evaluator of the chat-template interpreter: Python semantics for
 * arithmetic, comparisons, `in` and truthiness, jinja2's for `~`, `and`/`or`, attribute
 * and item access (with its fallbacks and the sandbox's refusals), slicing and Undefined;
 * runtime errors "template NAME line N: ...". Statements and calls: tpl_exec.c.
 * Exercised by tests/template/test_template.c and the jinja2 comparison checks. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/template/tpl_internal.h"

nb_status tpl_fail(tpl_ctx *c, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nb_error(NB_ERR_INVALID_ARG, "template %s line %d: %s", c->tpl->name, line, msg);
}

nb_status tpl_oom(tpl_ctx *c, int line)
{
    return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s line %d: render exceeded its memory budget", c->tpl->name,
                    line);
}

nb_status tpl_undef_error(tpl_ctx *c, int line, tv v)
{
    if (v.u.s.p) return tpl_fail(c, line, "%s", v.u.s.p);
    return tpl_fail(c, line, "%s", "value is undefined");
}

/* An Undefined carrying jinja2's explanation ("'x' is undefined"). */
tv tpl_undef_msg(tpl_ctx *c, const char *fmt, const char *a, const char *b)
{
    char msg[300];
    snprintf(msg, sizeof msg, fmt, a, b ? b : "");
    return tv_undef(tpl_strndup(&c->arena, msg, strlen(msg)));
}

/* ---- helpers --------------------------------------------------------------------------- */
nb_status tpl_to_str(tpl_ctx *c, int line, tv v, tv *out)
{
    if (v.t == TV_STR) {
        *out = v;
        return NB_OK;
    }
    tpl_buf b = {0};
    tv_str_to(&b, v);
    if (b.failed) {
        tpl_buf_free(&b);
        return tpl_oom(c, line);
    }
    char *p = tpl_strndup(&c->arena, b.p ? b.p : "", b.n);
    size_t n = b.n;
    tpl_buf_free(&b);
    if (!p) return tpl_oom(c, line);
    *out = tv_str(p, n);
    return NB_OK;
}

nb_status tpl_iterate(tpl_ctx *c, int line, tv v, tpl_list **out)
{
    switch (v.t) {
    case TV_LIST:
        if (v.flag & TV_F_GEN) {
            /* a generator yields what is left, once */
            tpl_list *rest = tpl_alloc(&c->arena, sizeof(tpl_list));
            if (!rest) return tpl_oom(c, line);
            rest->v = v.u.l->v + v.u.l->used;
            rest->n = rest->cap = v.u.l->n - v.u.l->used;
            v.u.l->used = v.u.l->n;
            *out = rest;
            return NB_OK;
        }
        *out = v.u.l;
        return NB_OK;
    case TV_UNDEF:
        if (v.flag & TV_F_UNSAFE) return tpl_undef_error(c, line, v);
        /* fallthrough */
    case TV_DICT:
    case TV_STR: {
        tv l = tv_list_new(&c->arena, 0);
        if (!l.u.l) return tpl_oom(c, line);
        if (v.t == TV_DICT) {
            for (size_t i = 0; i < v.u.d->n; i++)
                if (tpl_list_push(&c->arena, l.u.l, v.u.d->k[i])) return tpl_oom(c, line);
        } else if (v.t == TV_STR) {
            size_t i = 0;
            while (i < v.u.s.n) {
                size_t st = i;
                tpl_utf8_next(v.u.s.p, v.u.s.n, &i);
                if (tpl_list_push(&c->arena, l.u.l, tv_str(v.u.s.p + st, i - st))) return tpl_oom(c, line);
            }
        }
        *out = l.u.l;
        return NB_OK;
    }
    default: return tpl_fail(c, line, "'%s' object is not iterable", tv_type_name(v));
    }
}

/* ---- attribute and item access ------------------------------------------------------ */
static nb_status loop_attr(tpl_ctx *c, int line, tpl_loop *l, const char *name, tv *out)
{
    size_t n = l->n, i = l->index0;
    if (!strcmp(name, "index")) *out = tv_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = tv_int((int64_t)i);
    else if (!strcmp(name, "revindex")) *out = tv_int((int64_t)(n - i));
    else if (!strcmp(name, "revindex0")) *out = tv_int((int64_t)(n - i - 1));
    else if (!strcmp(name, "first")) *out = tv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = tv_bool(i + 1 == n);
    else if (!strcmp(name, "length")) *out = tv_int((int64_t)n);
    else if (!strcmp(name, "depth")) *out = tv_int(l->depth);
    else if (!strcmp(name, "depth0")) *out = tv_int(l->depth - 1);
    else if (!strcmp(name, "previtem"))
        *out = i > 0 ? tpl_loop_item(l, i - 1) : tpl_undef_msg(c, "there is no previous item%s%s", "", NULL);
    else if (!strcmp(name, "nextitem"))
        *out = i + 1 < n ? tpl_loop_item(l, i + 1) : tpl_undef_msg(c, "there is no next item%s%s", "", NULL);
    else if (!strcmp(name, "cycle") || !strcmp(name, "changed")) {
        tpl_func *f = tpl_alloc(&c->arena, sizeof(tpl_func));
        if (!f) return tpl_oom(c, line);
        f->kind = name[1] == 'y' ? TF_LOOP_CYCLE : TF_LOOP_CHANGED;
        f->name = name[1] == 'y' ? "cycle" : "changed";
        f->self.t = TV_LOOP;
        f->self.u.loop = l;
        out->t = TV_FUNC;
        out->u.fn = f;
    } else *out = tpl_undef_msg(c, "'LoopContext object' has no attribute '%s'%s", name, NULL);
    return NB_OK;
}

nb_status tpl_getattr(tpl_ctx *c, int line, tv obj, const char *name, tv *out)
{
    switch (obj.t) {
    case TV_UNDEF: return tpl_undef_error(c, line, obj);
    case TV_LOOP: return loop_attr(c, line, obj.u.loop, name, out);
    case TV_NS: {
        tv *v = tpl_dict_gets(obj.u.d, name, strlen(name));
        *out = v ? *v : tpl_undef_msg(c, "'Namespace object' has no attribute '%s'%s", name, NULL);
        return NB_OK;
    }
    case TV_DICT: {
        if (tpl_method_lookup(c, obj, name, out)) return c->arena.failed ? tpl_oom(c, line) : NB_OK;
        tv *v = tpl_dict_gets(obj.u.d, name, strlen(name));
        *out = v ? *v : tpl_undef_msg(c, "'dict object' has no attribute '%s'%s", name, NULL);
        return NB_OK;
    }
    default:
        if (tpl_method_lookup(c, obj, name, out)) return c->arena.failed ? tpl_oom(c, line) : NB_OK;
        *out = obj.t == TV_NONE ? tpl_undef_msg(c, "'None' has no attribute '%s'%s", name, NULL)
                                : tpl_undef_msg(c, "'%s object' has no attribute '%s'", tv_type_name(obj), name);
        return NB_OK;
    }
}

static int as_index(tv k, int64_t *i)
{
    if (k.t == TV_INT || k.t == TV_BOOL) {
        *i = k.u.i;
        return 1;
    }
    return 0;
}

nb_status tpl_getitem(tpl_ctx *c, int line, tv obj, tv key, tv *out)
{
    int64_t i;
    switch (obj.t) {
    case TV_UNDEF: return tpl_undef_error(c, line, obj);
    case TV_DICT:
    case TV_NS: {
        tv *v = tpl_dict_get(obj.u.d, key);
        if (v) {
            *out = *v;
            return NB_OK;
        }
        break;
    }
    case TV_LIST:
        if (obj.flag & TV_F_NOT_SEQ) break; /* dict views and generators are not subscriptable */
        if (as_index(key, &i)) {
            int64_t n = (int64_t)obj.u.l->n;
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                *out = obj.u.l->v[i];
                return NB_OK;
            }
            *out = tpl_undef_msg(c, "%s index out of range%s", (obj.flag & TV_F_TUPLE) ? "tuple" : "list", NULL);
            return NB_OK;
        }
        break;
    case TV_STR:
        if (as_index(key, &i)) {
            int64_t n = (int64_t)tpl_utf8_len(obj.u.s.p, obj.u.s.n);
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                size_t a = tpl_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)i), b = a;
                tpl_utf8_next(obj.u.s.p, obj.u.s.n, &b);
                *out = tv_str(obj.u.s.p + a, b - a);
                return NB_OK;
            }
            *out = tpl_undef_msg(c, "string index out of range%s%s", "", NULL);
            return NB_OK;
        }
        break;
    default: break;
    }
    if (key.t == TV_STR) {
        /* jinja2 falls back to the attribute of that name */
        char *name = tpl_strndup(&c->arena, key.u.s.p, key.u.s.n);
        if (!name) return tpl_oom(c, line);
        if (obj.t == TV_LOOP) return loop_attr(c, line, obj.u.loop, name, out);
        if (obj.t != TV_NS && tpl_method_lookup(c, obj, name, out)) return NB_OK;
        *out = tpl_undef_msg(c, "'%s object' has no attribute '%s'", tv_type_name(obj), name);
        return NB_OK;
    }
    tpl_buf b = {0};
    tv_repr_to(&b, key);
    *out = tpl_undef_msg(c, "'%s object' has no element %s", tv_type_name(obj), b.p ? b.p : "");
    tpl_buf_free(&b);
    return NB_OK;
}

/* Python slice semantics over n elements. */
static nb_status slice_indices(tpl_ctx *c, int line, int64_t n, tv start, tv stop, tv step, int64_t *a, int64_t *b,
                               int64_t *st)
{
    int64_t s = 1;
    if (step.t != TV_NONE && step.t != TV_UNDEF) {
        if (!as_index(step, &s)) return tpl_fail(c, line, "slice indices must be integers or None");
        if (s == 0) return tpl_fail(c, line, "slice step cannot be zero");
    }
    int64_t lo = s < 0 ? -1 : 0, hi = s < 0 ? n - 1 : n;
    int64_t x = s < 0 ? hi : lo, y = s < 0 ? lo : hi;
    if (start.t != TV_NONE && start.t != TV_UNDEF) {
        if (!as_index(start, &x)) return tpl_fail(c, line, "slice indices must be integers or None");
        if (x < 0) x += n;
        x = x < lo ? lo : x > hi ? hi : x;
    }
    if (stop.t != TV_NONE && stop.t != TV_UNDEF) {
        if (!as_index(stop, &y)) return tpl_fail(c, line, "slice indices must be integers or None");
        if (y < 0) y += n;
        y = y < lo ? lo : y > hi ? hi : y;
    }
    *a = x;
    *b = y;
    *st = s;
    return NB_OK;
}

static nb_status do_slice(tpl_ctx *c, int line, tv obj, tv start, tv stop, tv step, tv *out)
{
    if (obj.t == TV_UNDEF) return tpl_undef_error(c, line, obj);
    /* jinja2 compiles slices to a plain Python subscript (no getitem fallback) */
    if (obj.t == TV_DICT) return tpl_fail(c, line, "unhashable type: 'slice'");
    if ((obj.t != TV_LIST && obj.t != TV_STR) || (obj.t == TV_LIST && (obj.flag & TV_F_NOT_SEQ)))
        return tpl_fail(c, line, "'%s' object is not subscriptable", tv_type_name(obj));
    int64_t a, b, s;
    if (obj.t == TV_LIST) {
        NB_TRY(slice_indices(c, line, (int64_t)obj.u.l->n, start, stop, step, &a, &b, &s));
        tv l = tv_list_new(&c->arena, 0);
        if (!l.u.l) return tpl_oom(c, line);
        l.flag = obj.flag;
        for (int64_t i = a; s > 0 ? i < b : i > b; i += s)
            if (tpl_list_push(&c->arena, l.u.l, obj.u.l->v[i])) return tpl_oom(c, line);
        *out = l;
        return NB_OK;
    }
    /* strings: index code points */
    const char *p = obj.u.s.p;
    size_t n = obj.u.s.n, ncp = 0;
    size_t *offs = NULL;
    int ascii = 1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] >= 0x80) {
            ascii = 0;
            break;
        }
    if (ascii) ncp = n;
    else {
        offs = tpl_alloc(&c->arena, (n + 1) * sizeof(size_t));
        if (!offs) return tpl_oom(c, line);
        size_t i = 0;
        while (i < n) {
            offs[ncp++] = i;
            tpl_utf8_next(p, n, &i);
        }
        offs[ncp] = n;
    }
    NB_TRY(slice_indices(c, line, (int64_t)ncp, start, stop, step, &a, &b, &s));
    if (s == 1) {
        size_t x = a < b ? (size_t)a : 0, y = a < b ? (size_t)b : 0;
        size_t bx = ascii ? x : offs[x], by = ascii ? y : offs[y];
        *out = tv_str(p + bx, by - bx);
        return NB_OK;
    }
    tpl_buf buf = {0};
    for (int64_t i = a; s > 0 ? i < b : i > b; i += s) {
        size_t bx = ascii ? (size_t)i : offs[i], by = ascii ? (size_t)i + 1 : offs[i + 1];
        tpl_buf_put(&buf, p + bx, by - bx);
    }
    char *r = tpl_strndup(&c->arena, buf.p ? buf.p : "", buf.n);
    size_t rn = buf.n;
    int failed = buf.failed;
    tpl_buf_free(&buf);
    if (!r || failed) return tpl_oom(c, line);
    *out = tv_str(r, rn);
    return NB_OK;
}

/* ---- operators ------------------------------------------------------------------------- */
static const char *const OP_SYM[] = {"+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=",
                                     "in", "not in"};

static nb_status type_error(tpl_ctx *c, int line, int op, tv a, tv b)
{
    return tpl_fail(c, line, "unsupported operand type(s) for %s: '%s' and '%s'", OP_SYM[op], tv_type_name(a),
                    tv_type_name(b));
}

static nb_status concat_lists(tpl_ctx *c, int line, tv a, tv b, tv *out)
{
    tv l = tv_list_new(&c->arena, a.u.l->n + b.u.l->n);
    if (!l.u.l) return tpl_oom(c, line);
    l.flag = a.flag;
    for (size_t i = 0; i < a.u.l->n; i++) l.u.l->v[l.u.l->n++] = a.u.l->v[i];
    for (size_t i = 0; i < b.u.l->n; i++) l.u.l->v[l.u.l->n++] = b.u.l->v[i];
    *out = l;
    return NB_OK;
}

static nb_status repeat(tpl_ctx *c, int line, tv seq, int64_t k, tv *out)
{
    if (k < 0) k = 0;
    if (seq.t == TV_STR) {
        if (seq.u.s.n && (uint64_t)k > (64u << 20) / seq.u.s.n) return tpl_oom(c, line);
        size_t total = seq.u.s.n * (size_t)k;
        char *p = tpl_alloc(&c->arena, total + 1);
        if (!p) return tpl_oom(c, line);
        for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * seq.u.s.n, seq.u.s.p, seq.u.s.n);
        *out = tv_str(p, total);
        return NB_OK;
    }
    if (seq.u.l->n && (uint64_t)k > (1u << 22) / seq.u.l->n) return tpl_oom(c, line);
    tv l = tv_list_new(&c->arena, seq.u.l->n * (size_t)k);
    if (!l.u.l) return tpl_oom(c, line);
    l.flag = seq.flag;
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq.u.l->n; j++) l.u.l->v[l.u.l->n++] = seq.u.l->v[j];
    *out = l;
    return NB_OK;
}

static double py_fmod(double a, double b)
{
    double m = fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return m;
}

static nb_status binop(tpl_ctx *c, int line, int op, tv a, tv b, tv *out)
{
    if (op == OP_CONCAT) {
        tpl_buf buf = {0};
        tv_str_to(&buf, a);
        tv_str_to(&buf, b);
        char *r = tpl_strndup(&c->arena, buf.p ? buf.p : "", buf.n);
        size_t rn = buf.n;
        int failed = buf.failed;
        tpl_buf_free(&buf);
        if (!r || failed) return tpl_oom(c, line);
        *out = tv_str(r, rn);
        return NB_OK;
    }
    if (a.t == TV_UNDEF) return tpl_undef_error(c, line, a);
    if (b.t == TV_UNDEF) return tpl_undef_error(c, line, b);
    if (tv_is_num(a) && tv_is_num(b)) {
        int ints = a.t != TV_FLOAT && b.t != TV_FLOAT;
        double x = tv_num(a), y = tv_num(b);
        int64_t i = a.u.i, j = b.u.i, r;
        switch (op) {
        case OP_ADD:
            if (ints) {
                if (__builtin_add_overflow(i, j, &r)) return tpl_fail(c, line, "integer overflow");
                *out = tv_int(r);
            } else *out = tv_float(x + y);
            return NB_OK;
        case OP_SUB:
            if (ints) {
                if (__builtin_sub_overflow(i, j, &r)) return tpl_fail(c, line, "integer overflow");
                *out = tv_int(r);
            } else *out = tv_float(x - y);
            return NB_OK;
        case OP_MUL:
            if (ints) {
                if (__builtin_mul_overflow(i, j, &r)) return tpl_fail(c, line, "integer overflow");
                *out = tv_int(r);
            } else *out = tv_float(x * y);
            return NB_OK;
        case OP_DIV:
            if (y == 0) return tpl_fail(c, line, "division by zero");
            *out = tv_float(x / y);
            return NB_OK;
        case OP_FLOORDIV:
            if (y == 0) return tpl_fail(c, line, "integer division or modulo by zero");
            if (ints) {
                if (i == INT64_MIN && j == -1) return tpl_fail(c, line, "integer overflow");
                int64_t q = i / j;
                if ((i % j != 0) && ((i < 0) != (j < 0))) q--;
                *out = tv_int(q);
            } else *out = tv_float(floor(x / y));
            return NB_OK;
        case OP_MOD:
            if (y == 0) return tpl_fail(c, line, "integer division or modulo by zero");
            if (ints) {
                if (j == -1) {
                    *out = tv_int(0);
                    return NB_OK;
                }
                int64_t m = i % j;
                if (m != 0 && ((m < 0) != (j < 0))) m += j;
                *out = tv_int(m);
            } else *out = tv_float(py_fmod(x, y));
            return NB_OK;
        case OP_POW:
            if (ints && j >= 0) {
                int64_t acc = 1, base = i;
                for (int64_t e = j; e > 0; e--)
                    if (__builtin_mul_overflow(acc, base, &acc)) return tpl_fail(c, line, "integer overflow");
                *out = tv_int(acc);
            } else {
                if (x == 0 && y < 0) return tpl_fail(c, line, "0.0 cannot be raised to a negative power");
                *out = tv_float(pow(x, y));
            }
            return NB_OK;
        default: break;
        }
    }
    if (op == OP_ADD) {
        if (a.t == TV_STR && b.t == TV_STR) {
            char *p = tpl_alloc(&c->arena, a.u.s.n + b.u.s.n + 1);
            if (!p) return tpl_oom(c, line);
            memcpy(p, a.u.s.p, a.u.s.n);
            memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
            *out = tv_str(p, a.u.s.n + b.u.s.n);
            return NB_OK;
        }
        if (a.t == TV_LIST && b.t == TV_LIST && (a.flag & TV_F_TUPLE) == (b.flag & TV_F_TUPLE))
            return concat_lists(c, line, a, b, out);
    }
    if (op == OP_MUL) {
        if ((a.t == TV_STR || a.t == TV_LIST) && (b.t == TV_INT || b.t == TV_BOOL)) return repeat(c, line, a, b.u.i, out);
        if ((b.t == TV_STR || b.t == TV_LIST) && (a.t == TV_INT || a.t == TV_BOOL)) return repeat(c, line, b, a.u.i, out);
    }
    if (op == OP_MOD && a.t == TV_STR) return tpl_percent_format(c, line, a, b, out);
    return type_error(c, line, op, a, b);
}

static nb_status contains(tpl_ctx *c, int line, tv needle, tv hay, int *out)
{
    switch (hay.t) {
    case TV_UNDEF:
        if (hay.flag & TV_F_UNSAFE) return tpl_undef_error(c, line, hay);
        *out = 0;
        return NB_OK;
    case TV_STR:
        if (needle.t == TV_UNDEF) return tpl_undef_error(c, line, needle);
        if (needle.t != TV_STR)
            return tpl_fail(c, line, "'in <string>' requires string as left operand, not %s", tv_type_name(needle));
        *out = needle.u.s.n == 0 || memmem(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n) != NULL;
        return NB_OK;
    case TV_LIST: {
        size_t i0 = (hay.flag & TV_F_GEN) ? hay.u.l->used : 0;
        for (size_t i = i0; i < hay.u.l->n; i++)
            if (tv_eq(hay.u.l->v[i], needle)) {
                if (hay.flag & TV_F_GEN) hay.u.l->used = i + 1; /* `in` consumes up to the match */
                *out = 1;
                return NB_OK;
            }
        if (hay.flag & TV_F_GEN) hay.u.l->used = hay.u.l->n;
        *out = 0;
        return NB_OK;
    }
    case TV_DICT: *out = tpl_dict_get(hay.u.d, needle) != NULL; return NB_OK;
    default: return tpl_fail(c, line, "argument of type '%s' is not iterable", tv_type_name(hay));
    }
}

static nb_status compare(tpl_ctx *c, int line, int op, tv a, tv b, int *out)
{
    switch (op) {
    case OP_EQ: *out = tv_eq(a, b); return NB_OK;
    case OP_NE: *out = !tv_eq(a, b); return NB_OK;
    case OP_IN: return contains(c, line, a, b, out);
    case OP_NOTIN:
        NB_TRY(contains(c, line, a, b, out));
        *out = !*out;
        return NB_OK;
    default: {
        if (a.t == TV_UNDEF) return tpl_undef_error(c, line, a);
        if (b.t == TV_UNDEF) return tpl_undef_error(c, line, b);
        int r;
        if (tv_cmp(a, b, &r))
            return tpl_fail(c, line, "'%s' not supported between instances of '%s' and '%s'", OP_SYM[op],
                            tv_type_name(a), tv_type_name(b));
        *out = op == OP_LT ? r < 0 : op == OP_LE ? r <= 0 : op == OP_GT ? r > 0 : r >= 0;
        return NB_OK;
    }
    }
}

/* ---- expressions ------------------------------------------------------------------------ */
nb_status tpl_eval_args(tpl_ctx *c, tpl_scope *s, const tpl_node *n, tv **args, tv **kwv)
{
    *args = n->nargs ? tpl_alloc(&c->arena, (size_t)n->nargs * sizeof(tv)) : NULL;
    *kwv = n->nkw ? tpl_alloc(&c->arena, (size_t)n->nkw * sizeof(tv)) : NULL;
    if ((n->nargs && !*args) || (n->nkw && !*kwv)) return tpl_oom(c, n->line);
    for (int i = 0; i < n->nargs; i++) NB_TRY(tpl_eval(c, s, n->args[i], &(*args)[i]));
    for (int i = 0; i < n->nkw; i++) NB_TRY(tpl_eval(c, s, n->kwv[i], &(*kwv)[i]));
    return NB_OK;
}

nb_status tpl_eval(tpl_ctx *c, tpl_scope *s, const tpl_node *n, tv *out)
{
    switch (n->kind) {
    case N_CONST: *out = n->val; return NB_OK;
    case N_PLACEHOLDER: *out = c->placeholder; return NB_OK;
    case N_NAME: {
        int found;
        *out = tpl_scope_lookup(s, n->name, &found);
        if (!found && !tpl_global_lookup(n->name, out)) *out = tpl_undef_msg(c, "'%s' is undefined%s", n->name, NULL);
        return NB_OK;
    }
    case N_GETATTR: {
        tv o;
        NB_TRY(tpl_eval(c, s, n->a, &o));
        return tpl_getattr(c, n->line, o, n->name, out);
    }
    case N_GETITEM: {
        tv o, k;
        NB_TRY(tpl_eval(c, s, n->a, &o));
        NB_TRY(tpl_eval(c, s, n->b, &k));
        return tpl_getitem(c, n->line, o, k, out);
    }
    case N_SLICE: {
        tv o, parts[3] = {tv_none(), tv_none(), tv_none()};
        NB_TRY(tpl_eval(c, s, n->a, &o));
        if (n->b) NB_TRY(tpl_eval(c, s, n->b, &parts[0]));
        if (n->c) NB_TRY(tpl_eval(c, s, n->c, &parts[1]));
        if (n->d) NB_TRY(tpl_eval(c, s, n->d, &parts[2]));
        return do_slice(c, n->line, o, parts[0], parts[1], parts[2], out);
    }
    case N_CALL: {
        tv fn, *args, *kwv;
        NB_TRY(tpl_eval(c, s, n->a, &fn));
        NB_TRY(tpl_eval_args(c, s, n, &args, &kwv));
        return tpl_call_value(c, n->line, fn, args, n->nargs, n->kwn, kwv, n->nkw, out);
    }
    case N_FILTER: {
        tv v, *args, *kwv;
        NB_TRY(tpl_eval(c, s, n->a, &v));
        NB_TRY(tpl_eval_args(c, s, n, &args, &kwv));
        return tpl_filter(c, n->line, n->name, v, args, n->nargs, n->kwn, kwv, n->nkw, out);
    }
    case N_TEST: {
        tv v, *args, *kwv;
        int r;
        NB_TRY(tpl_eval(c, s, n->a, &v));
        NB_TRY(tpl_eval_args(c, s, n, &args, &kwv));
        NB_TRY(tpl_test(c, n->line, n->name, v, args, n->nargs, n->kwn, kwv, n->nkw, &r));
        *out = tv_bool(r);
        return NB_OK;
    }
    case N_BINOP: {
        tv a, b;
        NB_TRY(tpl_eval(c, s, n->a, &a));
        NB_TRY(tpl_eval(c, s, n->b, &b));
        return binop(c, n->line, n->ops[0], a, b, out);
    }
    case N_NEG:
    case N_POS: {
        tv a;
        NB_TRY(tpl_eval(c, s, n->a, &a));
        if (a.t == TV_UNDEF) return tpl_undef_error(c, n->line, a);
        if (!tv_is_num(a))
            return tpl_fail(c, n->line, "bad operand type for unary %s: '%s'", n->kind == N_NEG ? "-" : "+",
                            tv_type_name(a));
        if (n->kind == N_POS) *out = a.t == TV_BOOL ? tv_int(a.u.i) : a;
        else if (a.t == TV_FLOAT) *out = tv_float(-a.u.f);
        else {
            if (a.u.i == INT64_MIN) return tpl_fail(c, n->line, "integer overflow");
            *out = tv_int(-a.u.i);
        }
        return NB_OK;
    }
    case N_NOT: {
        tv a;
        NB_TRY(tpl_eval(c, s, n->a, &a));
        if (a.t == TV_UNDEF && (a.flag & TV_F_UNSAFE)) return tpl_undef_error(c, n->line, a);
        *out = tv_bool(!tv_truthy(a));
        return NB_OK;
    }
    case N_AND:
    case N_OR: {
        NB_TRY(tpl_eval(c, s, n->a, out));
        if (out->t == TV_UNDEF && (out->flag & TV_F_UNSAFE)) return tpl_undef_error(c, n->line, *out);
        int t = tv_truthy(*out);
        if ((n->kind == N_AND) == (t != 0)) return tpl_eval(c, s, n->b, out);
        return NB_OK;
    }
    case N_COMPARE: {
        tv a, b;
        NB_TRY(tpl_eval(c, s, n->args[0], &a));
        int r = 1;
        for (int i = 1; i < n->nargs && r; i++) {
            NB_TRY(tpl_eval(c, s, n->args[i], &b));
            NB_TRY(compare(c, n->line, n->ops[i - 1], a, b, &r));
            a = b;
        }
        *out = tv_bool(r);
        return NB_OK;
    }
    case N_COND: {
        tv t;
        NB_TRY(tpl_eval(c, s, n->a, &t));
        if (t.t == TV_UNDEF && (t.flag & TV_F_UNSAFE)) return tpl_undef_error(c, n->line, t);
        if (tv_truthy(t)) return tpl_eval(c, s, n->b, out);
        if (n->c) return tpl_eval(c, s, n->c, out);
        *out = tpl_undef_msg(c, "the inline if-expression evaluated to false and no else section was defined.%s%s", "",
                         NULL);
        return NB_OK;
    }
    case N_LIST:
    case N_TUPLE: {
        tv l = tv_list_new(&c->arena, (size_t)n->nargs);
        if (!l.u.l) return tpl_oom(c, n->line);
        if (n->kind == N_TUPLE) l.flag = TV_F_TUPLE;
        for (int i = 0; i < n->nargs; i++) NB_TRY(tpl_eval(c, s, n->args[i], &l.u.l->v[l.u.l->n++]));
        *out = l;
        return NB_OK;
    }
    case N_DICT: {
        tv d = tv_dict_new(&c->arena, (size_t)n->nargs);
        if (!d.u.d) return tpl_oom(c, n->line);
        for (int i = 0; i < n->nargs; i++) {
            tv k, v;
            NB_TRY(tpl_eval(c, s, n->args[i], &k));
            NB_TRY(tpl_eval(c, s, n->kwv[i], &v));
            if (k.t == TV_LIST && !(k.flag & TV_F_TUPLE)) return tpl_fail(c, n->line, "unhashable type: 'list'");
            if (k.t == TV_DICT) return tpl_fail(c, n->line, "unhashable type: 'dict'");
            if (tpl_dict_set(&c->arena, d.u.d, k, v)) return tpl_oom(c, n->line);
        }
        *out = d;
        return NB_OK;
    }
    default: return tpl_fail(c, n->line, "internal: node %d is not an expression", n->kind);
    }
}

