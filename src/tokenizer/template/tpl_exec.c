/* Statement executor of the chat-template interpreter: output, if, for (loop.*, loop
 * filters, else, break / continue), set (names, namespace attributes, tuples, blocks),
 * macros and call blocks (argument binding as jinja2 does it), filter and with blocks,
 * and the scopes: a for-loop iteration, a macro call and a with block get a fresh scope
 * whose parent is where they are written (macros see later changes of it, like Python
 * closures); so do the bodies of block set and filter blocks; if does not.
 * Exercised by tests/template/test_template.c and the jinja2 comparison checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/template/tpl_internal.h"

#define MAX_DEPTH 200
/* Loop iterations plus macro calls one render may make: nested range() loops could
 * otherwise run for hours (jinja2 has no limit). Real chat templates stay far below. */
#define MAX_STEPS 10000000ull

/* A closure keeps its scope and every enclosing one alive: none may be reused. */
static void mark_captured(tpl_scope *s)
{
    for (; s && !s->captured; s = s->parent) s->captured = 1;
}

static nb_status step(tpl_ctx *c, int line)
{
    if (++c->steps > MAX_STEPS)
        return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s line %d: render exceeded its step budget (%llu loop iterations and macro calls)",
                        c->tpl->name, line, (unsigned long long)MAX_STEPS);
    return NB_OK;
}

/* ---- scopes -------------------------------------------------------------------------- */
tpl_scope *tpl_scope_new(tpl_ctx *c, tpl_scope *parent)
{
    tpl_scope *s = tpl_alloc(&c->arena, sizeof(tpl_scope));
    if (s) s->parent = parent;
    return s;
}

tv tpl_scope_lookup(const tpl_scope *s, const char *name, int *found)
{
    for (; s; s = s->parent)
        for (size_t i = s->n; i > 0; i--)
            if (!strcmp(s->names[i - 1], name)) {
                *found = 1;
                return s->vals[i - 1];
            }
    *found = 0;
    return tv_undef(NULL);
}

int tpl_scope_set(tpl_ctx *c, tpl_scope *s, const char *name, tv v)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            s->vals[i] = v;
            return 0;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        const char **nn = tpl_alloc(&c->arena, cap * sizeof(char *));
        tv *nv = tpl_alloc(&c->arena, cap * sizeof(tv));
        if (!nn || !nv) return -1;
        if (s->n) {
            memcpy(nn, s->names, s->n * sizeof(char *));
            memcpy(nv, s->vals, s->n * sizeof(tv));
        }
        s->names = nn;
        s->vals = nv;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
    return 0;
}

void tpl_capture_begin(tpl_ctx *c, tpl_buf **saved, tpl_buf *nb)
{
    memset(nb, 0, sizeof *nb);
    *saved = c->out;
    c->out = nb;
}

nb_status tpl_capture_end(tpl_ctx *c, int line, tpl_buf *saved, tpl_buf *nb, nb_status st, tv *out)
{
    c->out = saved;
    if (st == NB_OK && nb->failed) st = tpl_oom(c, line);
    if (st == NB_OK) {
        char *p = tpl_strndup(&c->arena, nb->p ? nb->p : "", nb->n);
        if (!p) st = tpl_oom(c, line);
        else *out = tv_str(p, nb->n);
    }
    tpl_buf_free(nb);
    return st;
}

/* ---- calls ---------------------------------------------------------------------------- */
static nb_status call_macro(tpl_ctx *c, int line, tpl_func *f, const tv *args, int nargs, const char **kwn,
                            const tv *kwv, int nkw, tv *out)
{
    const tpl_node *m = f->node;
    NB_TRY(step(c, line));
    if (c->depth >= MAX_DEPTH)
        return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s line %d: macro recursion deeper than %d", c->tpl->name,
                        line, MAX_DEPTH);
    tpl_scope *s = tpl_scope_new(c, f->closure);
    if (!s) return tpl_oom(c, line);
    tv varargs = {0}, kwargs = {0};
    if (m->flags & MACRO_USES_VARARGS) {
        varargs = tv_list_new(&c->arena, 0);
        if (!varargs.u.l) return tpl_oom(c, line);
        varargs.flag = TV_F_TUPLE;
    }
    if (m->flags & MACRO_USES_KWARGS) {
        kwargs = tv_dict_new(&c->arena, 0);
        if (!kwargs.u.d) return tpl_oom(c, line);
    }
    const char *mname = f->kind == TF_MACRO ? f->name : "caller";
    /* jinja2 refuses extra arguments unless the body reads varargs / kwargs */
    if (nargs > m->nkw && !(m->flags & MACRO_USES_VARARGS))
        return tpl_fail(c, line, "macro '%s' takes not more than %d argument(s)", mname, m->nkw);
    if (f->caller && !(m->flags & MACRO_USES_CALLER))
        return tpl_fail(c, line, "macro '%s' takes no keyword argument 'caller'", mname);
    for (int k = 0; k < nkw; k++) {
        int p;
        for (p = 0; p < m->nkw; p++)
            if (!strcmp(m->kwn[p], kwn[k])) break;
        if (p < m->nkw && p >= nargs) continue;
        if (!(m->flags & MACRO_USES_KWARGS))
            return tpl_fail(c, line, "macro '%s' takes no keyword argument '%s'", mname, kwn[k]);
        if (tpl_dict_set(&c->arena, kwargs.u.d, tv_str(kwn[k], strlen(kwn[k])), kwv[k])) return tpl_oom(c, line);
    }
    for (int p = 0; p < m->nkw; p++) {
        tv v;
        int have = 0;
        if (p < nargs) {
            v = args[p];
            have = 1;
        }
        for (int k = 0; k < nkw && !have; k++)
            if (!strcmp(m->kwn[p], kwn[k])) {
                v = kwv[k];
                have = 1;
            }
        if (!have) {
            if (m->kwv[p]) NB_TRY(tpl_eval(c, s, m->kwv[p], &v));
            else v = tpl_undef_msg(c, "parameter '%s' was not provided%s", m->kwn[p], NULL);
        }
        if (tpl_scope_set(c, s, m->kwn[p], v)) return tpl_oom(c, line);
    }
    for (int i = m->nkw; i < nargs; i++)
        if (tpl_list_push(&c->arena, varargs.u.l, args[i])) return tpl_oom(c, line);
    if ((m->flags & MACRO_USES_VARARGS) && tpl_scope_set(c, s, "varargs", varargs)) return tpl_oom(c, line);
    if ((m->flags & MACRO_USES_KWARGS) && tpl_scope_set(c, s, "kwargs", kwargs)) return tpl_oom(c, line);
    if (f->caller) {
        tv cv = {0};
        cv.t = TV_FUNC;
        cv.u.fn = f->caller;
        if (tpl_scope_set(c, s, "caller", cv)) return tpl_oom(c, line);
    }
    tpl_buf *saved, nb;
    tpl_capture_begin(c, &saved, &nb);
    int saved_flow = c->flow;
    c->depth++;
    nb_status st = tpl_exec(c, s, m->body);
    c->depth--;
    c->flow = saved_flow;
    return tpl_capture_end(c, line, saved, &nb, st, out);
}

nb_status tpl_call_value(tpl_ctx *c, int line, tv fn, const tv *args, int nargs, const char **kwn, const tv *kwv,
                         int nkw, tv *out)
{
    if (fn.t == TV_UNDEF) return tpl_undef_error(c, line, fn);
    if (fn.t != TV_FUNC) return tpl_fail(c, line, "'%s' object is not callable", tv_type_name(fn));
    tpl_func *f = fn.u.fn;
    switch (f->kind) {
    case TF_MACRO:
    case TF_CALLER: return call_macro(c, line, f, args, nargs, kwn, kwv, nkw, out);
    case TF_METHOD: return tpl_call_method(c, line, f->self, f->name, args, nargs, kwn, kwv, nkw, out);
    default: return tpl_call_builtin(c, line, f, args, nargs, kwn, kwv, nkw, out);
    }
}

/* ---- statements --------------------------------------------------------------------- */
static nb_status assign(tpl_ctx *c, tpl_scope *s, const tpl_node *target, tv v, int line)
{
    if (target->kind == N_NAME) {
        if (tpl_scope_set(c, s, target->name, v)) return tpl_oom(c, line);
        return NB_OK;
    }
    if (target->kind == N_GETATTR) {
        int found;
        tv ns = tpl_scope_lookup(s, target->a->name, &found);
        if (!found || ns.t != TV_NS) return tpl_fail(c, line, "cannot assign attribute on non-namespace object");
        if (tpl_dict_set(&c->arena, ns.u.d, tv_str(target->name, strlen(target->name)), v)) return tpl_oom(c, line);
        return NB_OK;
    }
    /* tuple unpacking */
    tpl_list *items;
    NB_TRY(tpl_iterate(c, line, v, &items));
    if ((int)items->n != target->nargs)
        return tpl_fail(c, line, items->n > (size_t)target->nargs ? "too many values to unpack (expected %d)"
                                                                  : "not enough values to unpack (expected %d)",
                        target->nargs);
    for (int i = 0; i < target->nargs; i++) NB_TRY(assign(c, s, target->args[i], items->v[i], line));
    return NB_OK;
}

static nb_status output(tpl_ctx *c, int line, tv v)
{
    if (v.t == TV_STR) tpl_buf_put(c->out, v.u.s.p, v.u.s.n);
    else tv_str_to(c->out, v);
    if (c->out->failed) return tpl_oom(c, line);
    return NB_OK;
}

/* `for x in range(...)` without a loop filter iterates lazily: templates that scan ahead
 * with range(i, messages|length) and break early would otherwise build large lists. */
static int lazy_range(tpl_ctx *c, tpl_scope *s, const tpl_node *n, nb_status *st, int64_t *start, int64_t *stride,
                      size_t *count)
{
    const tpl_node *call = n->b;
    if (n->c || call->kind != N_CALL || call->a->kind != N_NAME || strcmp(call->a->name, "range")) return 0;
    int found;
    tpl_scope_lookup(s, "range", &found);
    if (found) return 0; /* shadowed by a variable */
    tv *args, *kwv;
    *st = tpl_eval_args(c, s, call, &args, &kwv);
    if (*st == NB_OK) *st = tpl_range_params(c, call->line, args, call->nargs, call->nkw, start, stride, count);
    return 1;
}

static nb_status exec_for(tpl_ctx *c, tpl_scope *s, const tpl_node *n)
{
    tpl_list *items = NULL;
    int64_t rstart = 0, rstep = 1;
    size_t count;
    nb_status rst;
    if (lazy_range(c, s, n, &rst, &rstart, &rstep, &count)) {
        NB_TRY(rst);
    } else {
        tv seq;
        NB_TRY(tpl_eval(c, s, n->b, &seq));
        NB_TRY(tpl_iterate(c, n->line, seq, &items));
        count = items->n;
    }
    if (n->c) {
        /* the loop filter sees the loop target, not `loop` */
        tv kept = tv_list_new(&c->arena, 0);
        if (!kept.u.l) return tpl_oom(c, n->line);
        tpl_scope *fs = tpl_scope_new(c, s); /* an expression cannot capture it: reused */
        if (!fs) return tpl_oom(c, n->line);
        for (size_t i = 0; i < items->n; i++) {
            fs->n = 0;
            NB_TRY(assign(c, fs, n->a, items->v[i], n->line));
            tv t;
            NB_TRY(tpl_eval(c, fs, n->c, &t));
            if (tv_truthy(t) && tpl_list_push(&c->arena, kept.u.l, items->v[i])) return tpl_oom(c, n->line);
        }
        items = kept.u.l;
        count = items->n;
    }
    if (count == 0) return n->orelse ? tpl_exec(c, s, n->orelse) : NB_OK;
    tpl_loop *loop = tpl_alloc(&c->arena, sizeof(tpl_loop));
    if (!loop) return tpl_oom(c, n->line);
    loop->items = items;
    loop->n = count;
    loop->range_start = rstart;
    loop->range_step = rstep;
    loop->depth = 1; /* depth counts recursive loop() calls, which are not supported */
    loop->changed_last.t = TV_ABSENT;
    tv lv = {0};
    lv.t = TV_LOOP;
    lv.u.loop = loop;
    nb_status st = NB_OK;
    /* jinja2 runs the else block unless some iteration reached the end of the body: a
     * break or continue in every iteration (or no iteration at all) runs it. */
    int completed = 0;
    tpl_scope *is = NULL;
    for (size_t i = 0; i < count; i++) {
        loop->index0 = i;
        if ((st = step(c, n->line)) != NB_OK) break;
        /* each iteration starts from an empty scope; the previous one is reused unless a
         * macro defined in it still refers to it */
        if (is && !is->captured) is->n = 0;
        else if (!(is = tpl_scope_new(c, s))) {
            st = tpl_oom(c, n->line);
            break;
        }
        if (tpl_scope_set(c, is, "loop", lv)) {
            st = tpl_oom(c, n->line);
            break;
        }
        st = assign(c, is, n->a, tpl_loop_item(loop, i), n->line);
        if (st != NB_OK) break;
        st = tpl_exec(c, is, n->body);
        if (st != NB_OK) break;
        int flow = c->flow;
        c->flow = FLOW_NONE;
        if (flow == FLOW_NONE) completed = 1;
        if (flow == FLOW_BREAK) break;
    }
    if (st == NB_OK && !completed && n->orelse) st = tpl_exec(c, s, n->orelse);
    return st;
}

nb_status tpl_exec(tpl_ctx *c, tpl_scope *s, const tpl_node *n)
{
    switch (n->kind) {
    case N_BODY:
        for (int i = 0; i < n->nargs; i++) {
            NB_TRY(tpl_exec(c, s, n->args[i]));
            if (c->flow) break;
        }
        return NB_OK;
    case N_TEXT:
        tpl_buf_put(c->out, n->val.u.s.p, n->val.u.s.n);
        return c->out->failed ? tpl_oom(c, n->line) : NB_OK;
    case N_OUTPUT: {
        tv v;
        NB_TRY(tpl_eval(c, s, n->a, &v));
        return output(c, n->line, v);
    }
    case N_IF: {
        tv t;
        NB_TRY(tpl_eval(c, s, n->a, &t));
        if (t.t == TV_UNDEF && (t.flag & TV_F_UNSAFE)) return tpl_undef_error(c, n->line, t);
        if (tv_truthy(t)) return tpl_exec(c, s, n->body);
        return n->orelse ? tpl_exec(c, s, n->orelse) : NB_OK;
    }
    case N_FOR: return exec_for(c, s, n);
    case N_SET: {
        tv v;
        NB_TRY(tpl_eval(c, s, n->b, &v));
        return assign(c, s, n->a, v, n->line);
    }
    case N_SET_BLOCK: {
        /* the body runs in its own scope: its assignments do not leak (as in jinja2) */
        tpl_buf *saved, nb;
        tv v;
        tpl_scope *bs = tpl_scope_new(c, s);
        if (!bs) return tpl_oom(c, n->line);
        tpl_capture_begin(c, &saved, &nb);
        NB_TRY(tpl_capture_end(c, n->line, saved, &nb, tpl_exec(c, bs, n->body), &v));
        if (n->c) {
            tv saved_ph = c->placeholder;
            c->placeholder = v;
            nb_status st = tpl_eval(c, s, n->c, &v);
            c->placeholder = saved_ph;
            NB_TRY(st);
        }
        return assign(c, s, n->a, v, n->line);
    }
    case N_MACRO: {
        tpl_func *f = tpl_alloc(&c->arena, sizeof(tpl_func));
        if (!f) return tpl_oom(c, n->line);
        f->kind = TF_MACRO;
        f->name = n->name;
        f->node = n;
        f->closure = s;
        mark_captured(s);
        tv v = {0};
        v.t = TV_FUNC;
        v.u.fn = f;
        if (tpl_scope_set(c, s, n->name, v)) return tpl_oom(c, n->line);
        return NB_OK;
    }
    case N_CALLBLOCK: {
        const tpl_node *call = n->a;
        tv fn, *args, *kwv, r;
        NB_TRY(tpl_eval(c, s, call->a, &fn));
        NB_TRY(tpl_eval_args(c, s, call, &args, &kwv));
        if (fn.t != TV_FUNC || fn.u.fn->kind != TF_MACRO) {
            if (fn.t == TV_UNDEF) return tpl_undef_error(c, n->line, fn);
            return tpl_fail(c, n->line, "{%% call %%} needs a macro, got '%s'", tv_type_name(fn));
        }
        tpl_func *caller = tpl_alloc(&c->arena, sizeof(tpl_func)), *bound = tpl_alloc(&c->arena, sizeof(tpl_func));
        if (!caller || !bound) return tpl_oom(c, n->line);
        caller->kind = TF_CALLER;
        caller->name = "caller";
        caller->node = n;
        caller->closure = s;
        mark_captured(s);
        *bound = *fn.u.fn;
        bound->caller = caller;
        tv bv = {0};
        bv.t = TV_FUNC;
        bv.u.fn = bound;
        NB_TRY(tpl_call_value(c, n->line, bv, args, call->nargs, call->kwn, kwv, call->nkw, &r));
        return output(c, n->line, r);
    }
    case N_FILTERBLOCK: {
        tpl_buf *saved, nb;
        tv v;
        tpl_scope *bs = tpl_scope_new(c, s);
        if (!bs) return tpl_oom(c, n->line);
        tpl_capture_begin(c, &saved, &nb);
        NB_TRY(tpl_capture_end(c, n->line, saved, &nb, tpl_exec(c, bs, n->body), &v));
        tv saved_ph = c->placeholder;
        c->placeholder = v;
        nb_status st = tpl_eval(c, s, n->a, &v);
        c->placeholder = saved_ph;
        NB_TRY(st);
        return output(c, n->line, v);
    }
    case N_WITH: {
        tpl_scope *ws = tpl_scope_new(c, s);
        if (!ws) return tpl_oom(c, n->line);
        for (int i = 0; i < n->nkw; i++) {
            tv v;
            NB_TRY(tpl_eval(c, s, n->kwv[i], &v));
            if (tpl_scope_set(c, ws, n->kwn[i], v)) return tpl_oom(c, n->line);
        }
        return tpl_exec(c, ws, n->body);
    }
    case N_BREAK: c->flow = FLOW_BREAK; return NB_OK;
    case N_CONTINUE: c->flow = FLOW_CONTINUE; return NB_OK;
    default: return tpl_fail(c, n->line, "internal: node %d is not a statement", n->kind);
    }
}
