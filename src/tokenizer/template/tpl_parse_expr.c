/* Expression parser of the chat-template interpreter: jinja2's grammar and precedence
 * (conditional < or < and < not < comparisons / in < + - < ~ < * / // % < ** < unary
 * minus < postfix . [] () with | filters and `is` tests interleaved), literals, calls,
 * slices, assignment targets. Errors name the template and line.
 * Exercised by tests/template/test_template.c and snippets.json (test_vs_jinja2.py). */
#include <stdio.h>
#include <string.h>

#include "tokenizer/template/tpl_parse.h"

nb_status tplp_fail(parser *P, int line, const char *fmt, const char *a)
{
    char msg[256];
    snprintf(msg, sizeof msg, fmt, a ? a : "");
    return nb_error(NB_ERR_FORMAT, "template %s line %d: %s", P->t->name, line, msg);
}

static const char *tok_desc(const tpl_tok *k)
{
    switch (k->type) {
    case TK_DATA: return "template data";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "end of print statement '}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "end of statement block '%}'";
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    case TK_EOF: return "end of template";
    default: return k->p;
    }
}

nb_status tplp_unexpected(parser *P, const char *expected)
{
    char msg[200];
    const tpl_tok *k = CUR(P);
    if (k->type == TK_OP || k->type == TK_NAME) snprintf(msg, sizeof msg, "tplp_unexpected '%s', expected %s", k->p, expected);
    else snprintf(msg, sizeof msg, "tplp_unexpected %s, expected %s", tok_desc(k), expected);
    return tplp_fail(P, CUR(P)->line, "%s", msg);
}

int tplp_is_op(const tpl_tok *k, const char *op)
{
    return k->type == TK_OP && k->n == strlen(op) && !memcmp(k->p, op, k->n);
}
int tplp_is_name(const tpl_tok *k, const char *name) { return k->type == TK_NAME && !strcmp(k->p, name); }

nb_status tplp_expect_op(parser *P, const char *op)
{
    if (!tplp_is_op(CUR(P), op)) {
        char e[16];
        snprintf(e, sizeof e, "'%s'", op);
        return tplp_unexpected(P, e);
    }
    P->i++;
    return NB_OK;
}

nb_status tplp_expect_type(parser *P, int type, const char *what)
{
    if (CUR(P)->type != type) return tplp_unexpected(P, what);
    P->i++;
    return NB_OK;
}

tpl_node *tplp_mk(parser *P, int kind, int line)
{
    tpl_node *n = tpl_alloc(&P->t->arena, sizeof(tpl_node));
    if (n) {
        n->kind = (uint8_t)kind;
        n->line = line;
    }
    return n;
}


nb_status tplp_oom(parser *P) { return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s: out of memory", P->t->name); }


int tplp_nvec_push(parser *P, nvec *a, tpl_node *n, const char *name)
{
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 4;
        tpl_node **nv = tpl_alloc(&P->t->arena, (size_t)cap * sizeof(tpl_node *));
        const char **nn = tpl_alloc(&P->t->arena, (size_t)cap * sizeof(char *));
        if (!nv || !nn) return -1;
        if (a->n) {
            memcpy(nv, a->v, (size_t)a->n * sizeof(tpl_node *));
            memcpy(nn, a->names, (size_t)a->n * sizeof(char *));
        }
        a->v = nv;
        a->names = nn;
        a->cap = cap;
    }
    a->v[a->n] = n;
    a->names[a->n] = name;
    a->n++;
    return 0;
}

static nb_status parse_unary(parser *P, int with_filter, tpl_node **out);
static nb_status parse_primary(parser *P, tpl_node **out);
static nb_status parse_postfix(parser *P, tpl_node **node);

/* (args, name=value, ...) after the '(' has been seen. */
static nb_status parse_call_args(parser *P, tpl_node *call)
{
    NB_TRY(tplp_expect_op(P, "("));
    nvec args = {0}, kw = {0};
    while (!tplp_is_op(CUR(P), ")")) {
        if (args.n || kw.n) NB_TRY(tplp_expect_op(P, ","));
        if (tplp_is_op(CUR(P), ")")) break;
        if (tplp_is_op(CUR(P), "*") || tplp_is_op(CUR(P), "**"))
            return tplp_fail(P, CUR(P)->line, "%s", "*args / **kwargs in calls are not supported");
        if (CUR(P)->type == TK_NAME && tplp_is_op(PEEK(P, 1), "=")) {
            const char *name = CUR(P)->p;
            P->i += 2;
            tpl_node *v;
            NB_TRY(tplp_expression(P, 1, &v));
            if (tplp_nvec_push(P, &kw, v, name)) return tplp_oom(P);
        } else {
            if (kw.n) return tplp_fail(P, CUR(P)->line, "%s", "positional argument after keyword argument");
            tpl_node *v;
            NB_TRY(tplp_expression(P, 1, &v));
            if (tplp_nvec_push(P, &args, v, NULL)) return tplp_oom(P);
        }
    }
    P->i++;
    call->args = args.v;
    call->nargs = args.n;
    call->kwv = kw.v;
    call->kwn = kw.names;
    call->nkw = kw.n;
    return NB_OK;
}

static nb_status parse_subscribed(parser *P, tpl_node **out)
{
    int line = CUR(P)->line;
    tpl_node *parts[3] = {NULL, NULL, NULL};
    if (!tplp_is_op(CUR(P), ":")) {
        NB_TRY(tplp_expression(P, 1, &parts[0]));
        if (!tplp_is_op(CUR(P), ":")) {
            *out = parts[0];
            return NB_OK;
        }
    }
    P->i++; /* ':' */
    if (!tplp_is_op(CUR(P), "]") && !tplp_is_op(CUR(P), ",") && !tplp_is_op(CUR(P), ":")) NB_TRY(tplp_expression(P, 1, &parts[1]));
    if (tplp_is_op(CUR(P), ":")) {
        P->i++;
        if (!tplp_is_op(CUR(P), "]") && !tplp_is_op(CUR(P), ",")) NB_TRY(tplp_expression(P, 1, &parts[2]));
    }
    MK(s, N_SLICE, line);
    s->b = parts[0];
    s->c = parts[1];
    s->d = parts[2];
    *out = s;
    return NB_OK;
}

static nb_status parse_postfix(parser *P, tpl_node **node)
{
    for (;;) {
        tpl_tok *k = CUR(P);
        if (tplp_is_op(k, ".")) {
            P->i++;
            tpl_tok *a = CUR(P);
            if (a->type == TK_NAME) {
                MK(g, N_GETATTR, k->line);
                g->a = *node;
                g->name = a->p;
                P->i++;
                *node = g;
            } else if (a->type == TK_INT) {
                MK(g, N_GETITEM, k->line);
                MK(c, N_CONST, a->line);
                c->val = tv_int(a->i);
                g->a = *node;
                g->b = c;
                P->i++;
                *node = g;
            } else return tplp_unexpected(P, "name or number after '.'");
        } else if (tplp_is_op(k, "[")) {
            P->i++;
            nvec items = {0};
            while (!tplp_is_op(CUR(P), "]")) {
                if (items.n) NB_TRY(tplp_expect_op(P, ","));
                if (tplp_is_op(CUR(P), "]")) break;
                tpl_node *it = NULL;
                NB_TRY(parse_subscribed(P, &it));
                if (tplp_nvec_push(P, &items, it, NULL)) return tplp_oom(P);
            }
            P->i++;
            if (items.n == 0) return tplp_fail(P, k->line, "%s", "expected a subscript");
            tpl_node *key = items.v[0];
            if (items.n > 1) {
                /* x[a:b, c]: a tuple of slices indexes nothing jinja2 templates can build */
                for (int j = 0; j < items.n; j++)
                    if (items.v[j]->kind == N_SLICE) return tplp_fail(P, k->line, "%s", "a slice inside a tuple subscript is not supported");
                MK(t, N_TUPLE, k->line);
                t->args = items.v;
                t->nargs = items.n;
                key = t;
            }
            if (key->kind == N_SLICE) {
                key->a = *node;
                *node = key;
            } else {
                MK(g, N_GETITEM, k->line);
                g->a = *node;
                g->b = key;
                *node = g;
            }
        } else if (tplp_is_op(k, "(")) {
            MK(c, N_CALL, k->line);
            c->a = *node;
            NB_TRY(parse_call_args(P, c));
            *node = c;
        } else break;
    }
    return NB_OK;
}

/* name(.name)* for filters and tests. */
static nb_status dotted_name(parser *P, const char **out)
{
    if (CUR(P)->type != TK_NAME) return tplp_unexpected(P, "a name");
    const char *name = CUR(P)->p;
    P->i++;
    while (tplp_is_op(CUR(P), ".") && PEEK(P, 1)->type == TK_NAME) {
        size_t a = strlen(name), b = strlen(PEEK(P, 1)->p);
        char *j = tpl_alloc(&P->t->arena, a + b + 2);
        if (!j) return tplp_oom(P);
        memcpy(j, name, a);
        j[a] = '.';
        memcpy(j + a + 1, PEEK(P, 1)->p, b);
        name = j;
        P->i += 2;
    }
    *out = name;
    return NB_OK;
}

nb_status tplp_filter_chain(parser *P, tpl_node **node, int start_inline)
{
    while (tplp_is_op(CUR(P), "|") || start_inline) {
        if (!start_inline) P->i++;
        start_inline = 0;
        MK(f, N_FILTER, CUR(P)->line);
        NB_TRY(dotted_name(P, &f->name));
        if (tplp_is_op(CUR(P), "(")) NB_TRY(parse_call_args(P, f));
        f->a = *node;
        *node = f;
    }
    return NB_OK;
}

static nb_status parse_test(parser *P, tpl_node **node)
{
    int line = CUR(P)->line;
    P->i++; /* is */
    int negated = 0;
    if (tplp_is_name(CUR(P), "not")) {
        negated = 1;
        P->i++;
    }
    MK(t, N_TEST, line);
    NB_TRY(dotted_name(P, &t->name));
    tpl_tok *k = CUR(P);
    if (tplp_is_op(k, "(")) NB_TRY(parse_call_args(P, t));
    else if ((k->type == TK_NAME || k->type == TK_STRING || k->type == TK_INT || k->type == TK_FLOAT ||
              tplp_is_op(k, "(") || tplp_is_op(k, "[") || tplp_is_op(k, "{")) &&
             !tplp_is_name(k, "else") && !tplp_is_name(k, "or") && !tplp_is_name(k, "and")) {
        if (tplp_is_name(k, "is")) return tplp_fail(P, k->line, "%s", "you cannot chain multiple tests with is");
        tpl_node *arg;
        NB_TRY(parse_primary(P, &arg));
        NB_TRY(parse_postfix(P, &arg));
        t->args = tpl_alloc(&P->t->arena, sizeof(tpl_node *));
        if (!t->args) return tplp_oom(P);
        t->args[0] = arg;
        t->nargs = 1;
    }
    t->a = *node;
    *node = t;
    if (negated) {
        MK(n, N_NOT, line);
        n->a = t;
        *node = n;
    }
    return NB_OK;
}

static nb_status parse_filter_expr(parser *P, tpl_node **node)
{
    for (;;) {
        if (tplp_is_op(CUR(P), "|")) NB_TRY(tplp_filter_chain(P, node, 0));
        else if (tplp_is_name(CUR(P), "is")) NB_TRY(parse_test(P, node));
        else if (tplp_is_op(CUR(P), "(")) {
            MK(c, N_CALL, CUR(P)->line);
            c->a = *node;
            NB_TRY(parse_call_args(P, c));
            *node = c;
        } else break;
    }
    return NB_OK;
}

static nb_status parse_primary(parser *P, tpl_node **out)
{
    tpl_tok *k = CUR(P);
    if (k->type == TK_NAME) {
        P->i++;
        if (!strcmp(k->p, "true") || !strcmp(k->p, "True") || !strcmp(k->p, "false") || !strcmp(k->p, "False")) {
            MK(c, N_CONST, k->line);
            c->val = tv_bool(k->p[0] == 't' || k->p[0] == 'T');
            *out = c;
        } else if (!strcmp(k->p, "none") || !strcmp(k->p, "None")) {
            MK(c, N_CONST, k->line);
            c->val = tv_none();
            *out = c;
        } else {
            MK(nm, N_NAME, k->line);
            nm->name = k->p;
            *out = nm;
        }
        return NB_OK;
    }
    if (k->type == TK_STRING) {
        /* adjacent literals concatenate */
        size_t total = 0, j = P->i;
        while (P->tk[j].type == TK_STRING) total += P->tk[j++].n;
        char *s = tpl_alloc(&P->t->arena, total + 1);
        if (!s) return tplp_oom(P);
        size_t off = 0;
        while (CUR(P)->type == TK_STRING) {
            memcpy(s + off, CUR(P)->p, CUR(P)->n);
            off += CUR(P)->n;
            P->i++;
        }
        MK(c, N_CONST, k->line);
        c->val = tv_str(s, total);
        *out = c;
        return NB_OK;
    }
    if (k->type == TK_INT || k->type == TK_FLOAT) {
        P->i++;
        MK(c, N_CONST, k->line);
        c->val = k->type == TK_INT ? tv_int(k->i) : tv_float(k->f);
        *out = c;
        return NB_OK;
    }
    if (tplp_is_op(k, "(")) {
        P->i++;
        NB_TRY(tplp_tuple(P, 0, 1, NULL, 1, out));
        return tplp_expect_op(P, ")");
    }
    if (tplp_is_op(k, "[")) {
        P->i++;
        nvec items = {0};
        while (!tplp_is_op(CUR(P), "]")) {
            if (items.n) NB_TRY(tplp_expect_op(P, ","));
            if (tplp_is_op(CUR(P), "]")) break;
            tpl_node *it;
            NB_TRY(tplp_expression(P, 1, &it));
            if (tplp_nvec_push(P, &items, it, NULL)) return tplp_oom(P);
        }
        P->i++;
        MK(l, N_LIST, k->line);
        l->args = items.v;
        l->nargs = items.n;
        *out = l;
        return NB_OK;
    }
    if (tplp_is_op(k, "{")) {
        P->i++;
        nvec keys = {0}, vals = {0};
        while (!tplp_is_op(CUR(P), "}")) {
            if (keys.n) NB_TRY(tplp_expect_op(P, ","));
            if (tplp_is_op(CUR(P), "}")) break;
            tpl_node *key, *val;
            NB_TRY(tplp_expression(P, 1, &key));
            NB_TRY(tplp_expect_op(P, ":"));
            NB_TRY(tplp_expression(P, 1, &val));
            if (tplp_nvec_push(P, &keys, key, NULL) || tplp_nvec_push(P, &vals, val, NULL)) return tplp_oom(P);
        }
        P->i++;
        MK(d, N_DICT, k->line);
        d->args = keys.v;
        d->kwv = vals.v;
        d->nargs = keys.n;
        d->nkw = keys.n;
        *out = d;
        return NB_OK;
    }
    return tplp_unexpected(P, "an expression");
}

nb_status tplp_nesting_fail(parser *P)
{
    return tplp_fail(P, CUR(P)->line, "nesting deeper than %s levels", "200");
}

static nb_status parse_unary_inner(parser *P, int with_filter, tpl_node **out);
static nb_status parse_unary(parser *P, int with_filter, tpl_node **out)
{
    if (P->depth >= MAX_NESTING) return tplp_nesting_fail(P);
    P->depth++;
    nb_status st = parse_unary_inner(P, with_filter, out);
    P->depth--;
    return st;
}

static nb_status parse_unary_inner(parser *P, int with_filter, tpl_node **out)
{
    tpl_tok *k = CUR(P);
    if (tplp_is_op(k, "-") || tplp_is_op(k, "+")) {
        P->i++;
        MK(u, tplp_is_op(k, "-") ? N_NEG : N_POS, k->line);
        NB_TRY(parse_unary(P, 0, &u->a));
        *out = u;
    } else NB_TRY(parse_primary(P, out));
    NB_TRY(parse_postfix(P, out));
    if (with_filter) NB_TRY(parse_filter_expr(P, out));
    return NB_OK;
}

static nb_status binop(parser *P, int op, int line, tpl_node *l, tpl_node *r, tpl_node **out)
{
    MK(b, N_BINOP, line);
    b->ops = tpl_alloc(&P->t->arena, 1);
    if (!b->ops) return tplp_oom(P);
    b->ops[0] = (uint8_t)op;
    b->a = l;
    b->b = r;
    *out = b;
    return NB_OK;
}

static nb_status parse_pow(parser *P, tpl_node **out)
{
    NB_TRY(parse_unary(P, 1, out));
    while (tplp_is_op(CUR(P), "**")) {
        int line = CUR(P)->line;
        P->i++;
        tpl_node *r;
        NB_TRY(parse_unary(P, 1, &r));
        NB_TRY(binop(P, OP_POW, line, *out, r, out));
    }
    return NB_OK;
}

static nb_status parse_math2(parser *P, tpl_node **out)
{
    NB_TRY(parse_pow(P, out));
    for (;;) {
        tpl_tok *k = CUR(P);
        int op = tplp_is_op(k, "*") ? OP_MUL : tplp_is_op(k, "/") ? OP_DIV : tplp_is_op(k, "//") ? OP_FLOORDIV : tplp_is_op(k, "%") ? OP_MOD : -1;
        if (op < 0) break;
        P->i++;
        tpl_node *r;
        NB_TRY(parse_pow(P, &r));
        NB_TRY(binop(P, op, k->line, *out, r, out));
    }
    return NB_OK;
}

static nb_status parse_concat(parser *P, tpl_node **out)
{
    NB_TRY(parse_math2(P, out));
    while (tplp_is_op(CUR(P), "~")) {
        int line = CUR(P)->line;
        P->i++;
        tpl_node *r;
        NB_TRY(parse_math2(P, &r));
        NB_TRY(binop(P, OP_CONCAT, line, *out, r, out));
    }
    return NB_OK;
}

static nb_status parse_math1(parser *P, tpl_node **out)
{
    NB_TRY(parse_concat(P, out));
    for (;;) {
        tpl_tok *k = CUR(P);
        int op = tplp_is_op(k, "+") ? OP_ADD : tplp_is_op(k, "-") ? OP_SUB : -1;
        if (op < 0) break;
        P->i++;
        tpl_node *r;
        NB_TRY(parse_concat(P, &r));
        NB_TRY(binop(P, op, k->line, *out, r, out));
    }
    return NB_OK;
}

static nb_status parse_compare(parser *P, tpl_node **out)
{
    int line = CUR(P)->line;
    tpl_node *first;
    NB_TRY(parse_math1(P, &first));
    nvec operands = {0};
    uint8_t ops[64];
    int nops = 0;
    if (tplp_nvec_push(P, &operands, first, NULL)) return tplp_oom(P);
    for (;;) {
        tpl_tok *k = CUR(P);
        int op = tplp_is_op(k, "==") ? OP_EQ : tplp_is_op(k, "!=") ? OP_NE : tplp_is_op(k, "<") ? OP_LT : tplp_is_op(k, "<=") ? OP_LE
               : tplp_is_op(k, ">") ? OP_GT : tplp_is_op(k, ">=") ? OP_GE : tplp_is_name(k, "in") ? OP_IN : -1;
        if (op < 0 && tplp_is_name(k, "not") && tplp_is_name(PEEK(P, 1), "in")) {
            op = OP_NOTIN;
            P->i++;
        }
        if (op < 0) break;
        if (nops == (int)sizeof ops) return tplp_fail(P, k->line, "%s", "comparison chain too long");
        P->i++;
        tpl_node *r;
        NB_TRY(parse_math1(P, &r));
        ops[nops++] = (uint8_t)op;
        if (tplp_nvec_push(P, &operands, r, NULL)) return tplp_oom(P);
    }
    if (!nops) {
        *out = first;
        return NB_OK;
    }
    MK(c, N_COMPARE, line);
    c->args = operands.v;
    c->nargs = operands.n;
    c->ops = tpl_alloc(&P->t->arena, (size_t)nops);
    if (!c->ops) return tplp_oom(P);
    memcpy(c->ops, ops, (size_t)nops);
    *out = c;
    return NB_OK;
}

static nb_status parse_not(parser *P, tpl_node **out)
{
    if (tplp_is_name(CUR(P), "not")) {
        if (P->depth >= MAX_NESTING) return tplp_nesting_fail(P);
        MK(n, N_NOT, CUR(P)->line);
        P->i++;
        P->depth++;
        NB_TRY(parse_not(P, &n->a));
        P->depth--;
        *out = n;
        return NB_OK;
    }
    return parse_compare(P, out);
}

static nb_status parse_and(parser *P, tpl_node **out)
{
    NB_TRY(parse_not(P, out));
    while (tplp_is_name(CUR(P), "and")) {
        MK(n, N_AND, CUR(P)->line);
        P->i++;
        n->a = *out;
        NB_TRY(parse_not(P, &n->b));
        *out = n;
    }
    return NB_OK;
}

static nb_status parse_or(parser *P, tpl_node **out)
{
    NB_TRY(parse_and(P, out));
    while (tplp_is_name(CUR(P), "or")) {
        MK(n, N_OR, CUR(P)->line);
        P->i++;
        n->a = *out;
        NB_TRY(parse_and(P, &n->b));
        *out = n;
    }
    return NB_OK;
}

static nb_status parse_condexpr(parser *P, tpl_node **out)
{
    NB_TRY(parse_or(P, out));
    while (tplp_is_name(CUR(P), "if")) {
        MK(c, N_COND, CUR(P)->line);
        P->i++;
        c->b = *out;
        NB_TRY(parse_or(P, &c->a));
        if (tplp_is_name(CUR(P), "else")) {
            P->i++;
            NB_TRY(parse_condexpr(P, &c->c));
        }
        *out = c;
    }
    return NB_OK;
}

nb_status tplp_expression(parser *P, int with_condexpr, tpl_node **out)
{
    return with_condexpr ? parse_condexpr(P, out) : parse_or(P, out);
}

static int tuple_end(parser *P, const char *extra_end)
{
    tpl_tok *k = CUR(P);
    if (k->type == TK_VAR_END || k->type == TK_BLOCK_END || k->type == TK_EOF || tplp_is_op(k, ")")) return 1;
    return extra_end && tplp_is_name(k, extra_end);
}

nb_status tplp_tuple(parser *P, int simplified, int with_condexpr, const char *extra_end, int explicit_parens,
                             tpl_node **out)
{
    int line = CUR(P)->line;
    nvec items = {0};
    int is_tuple = 0;
    for (;;) {
        if (items.n) NB_TRY(tplp_expect_op(P, ","));
        if (tuple_end(P, extra_end)) break;
        tpl_node *it;
        if (simplified) {
            NB_TRY(parse_primary(P, &it));
        } else NB_TRY(tplp_expression(P, with_condexpr, &it));
        if (tplp_nvec_push(P, &items, it, NULL)) return tplp_oom(P);
        if (tplp_is_op(CUR(P), ",")) is_tuple = 1;
        else break;
    }
    if (!is_tuple) {
        if (items.n) {
            *out = items.v[0];
            return NB_OK;
        }
        if (!explicit_parens) return tplp_unexpected(P, "an expression");
    }
    MK(t, N_TUPLE, line);
    t->args = items.v;
    t->nargs = items.n;
    *out = t;
    return NB_OK;
}

/* Assignment target: name, ns.attr (when with_ns), or a tuple of names. */
nb_status tplp_assign_target(parser *P, int with_ns, const char *extra_end, tpl_node **out)
{
    int line = CUR(P)->line;
    if (with_ns && CUR(P)->type == TK_NAME && tplp_is_op(PEEK(P, 1), ".") && PEEK(P, 2)->type == TK_NAME) {
        MK(nm, N_NAME, line);
        nm->name = CUR(P)->p;
        MK(g, N_GETATTR, line);
        g->a = nm;
        g->name = PEEK(P, 2)->p;
        P->i += 3;
        *out = g;
        return NB_OK;
    }
    tpl_node *t;
    NB_TRY(tplp_tuple(P, 1, 1, extra_end, 0, &t));
    if (t->kind == N_NAME) {
        *out = t;
        return NB_OK;
    }
    if (t->kind == N_TUPLE) {
        for (int i = 0; i < t->nargs; i++)
            if (t->args[i]->kind != N_NAME) return tplp_fail(P, line, "%s", "can't assign to this expression");
        *out = t;
        return NB_OK;
    }
    return tplp_fail(P, line, "%s", "can't assign to this expression");
}

