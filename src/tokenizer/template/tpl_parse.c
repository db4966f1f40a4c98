/* Parser of the chat-template interpreter: tokens (tpl_lex.c) -> syntax tree, following
 * jinja2's grammar and operator precedence (or < and < not < comparisons/in < + - < ~ <
 * * / // % < ** < unary minus < postfix . [] () with | filters and `is` tests). Errors
 * name the template and line. Statements: if/elif/else, for/else (with a loop filter),
 * set (plain, namespace attribute, tuple, block), macro, call, filter, with, break,
 * continue, raw (lexer), block (rendered in place) and transformers' generation tag.
 * Exercised by tests/template/test_template.c (syntax and error cases). */
#include <stdio.h>
#include <string.h>

#include "tokenizer/template/tpl_lex.h"

typedef struct parser {
    nb_template *t;
    tpl_tok *tk;
    size_t ntk, i;
    int depth; /* recursion depth: bounded so hostile input cannot exhaust the stack */
} parser;

#define MAX_NESTING 200

#define CUR(P) (&(P)->tk[(P)->i])
#define PEEK(P, k) (&(P)->tk[(P)->i + (k) < (P)->ntk ? (P)->i + (k) : (P)->ntk - 1])

static nb_status pfail(parser *P, int line, const char *fmt, const char *a)
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

static nb_status unexpected(parser *P, const char *expected)
{
    char msg[200];
    const tpl_tok *k = CUR(P);
    if (k->type == TK_OP || k->type == TK_NAME) snprintf(msg, sizeof msg, "unexpected '%s', expected %s", k->p, expected);
    else snprintf(msg, sizeof msg, "unexpected %s, expected %s", tok_desc(k), expected);
    return pfail(P, CUR(P)->line, "%s", msg);
}

static int is_op(const tpl_tok *k, const char *op)
{
    return k->type == TK_OP && k->n == strlen(op) && !memcmp(k->p, op, k->n);
}
static int is_name(const tpl_tok *k, const char *name) { return k->type == TK_NAME && !strcmp(k->p, name); }

static nb_status expect_op(parser *P, const char *op)
{
    if (!is_op(CUR(P), op)) {
        char e[16];
        snprintf(e, sizeof e, "'%s'", op);
        return unexpected(P, e);
    }
    P->i++;
    return NB_OK;
}

static nb_status expect_type(parser *P, int type, const char *what)
{
    if (CUR(P)->type != type) return unexpected(P, what);
    P->i++;
    return NB_OK;
}

static tpl_node *mk(parser *P, int kind, int line)
{
    tpl_node *n = tpl_alloc(&P->t->arena, sizeof(tpl_node));
    if (n) {
        n->kind = (uint8_t)kind;
        n->line = line;
    }
    return n;
}

#define MK(var, kind, line)                                                             \
    tpl_node *var = mk(P, kind, line);                                                  \
    if (!var) return oom(P)

static nb_status oom(parser *P) { return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s: out of memory", P->t->name); }

/* Growable node-pointer arrays in the arena. */
typedef struct nvec {
    tpl_node **v;
    const char **names;
    int n, cap;
} nvec;

static int nvec_push(parser *P, nvec *a, tpl_node *n, const char *name)
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

static nb_status parse_expression(parser *P, int with_condexpr, tpl_node **out);
static nb_status parse_tuple(parser *P, int simplified, int with_condexpr, const char *extra_end, int explicit_parens,
                             tpl_node **out);
static nb_status parse_unary(parser *P, int with_filter, tpl_node **out);
static nb_status parse_primary(parser *P, tpl_node **out);
static nb_status parse_postfix(parser *P, tpl_node **node);
static nb_status parse_filter_chain(parser *P, tpl_node **node, int start_inline);

/* (args, name=value, ...) after the '(' has been seen. */
static nb_status parse_call_args(parser *P, tpl_node *call)
{
    NB_TRY(expect_op(P, "("));
    nvec args = {0}, kw = {0};
    while (!is_op(CUR(P), ")")) {
        if (args.n || kw.n) NB_TRY(expect_op(P, ","));
        if (is_op(CUR(P), ")")) break;
        if (is_op(CUR(P), "*") || is_op(CUR(P), "**"))
            return pfail(P, CUR(P)->line, "%s", "*args / **kwargs in calls are not supported");
        if (CUR(P)->type == TK_NAME && is_op(PEEK(P, 1), "=")) {
            const char *name = CUR(P)->p;
            P->i += 2;
            tpl_node *v;
            NB_TRY(parse_expression(P, 1, &v));
            if (nvec_push(P, &kw, v, name)) return oom(P);
        } else {
            if (kw.n) return pfail(P, CUR(P)->line, "%s", "positional argument after keyword argument");
            tpl_node *v;
            NB_TRY(parse_expression(P, 1, &v));
            if (nvec_push(P, &args, v, NULL)) return oom(P);
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
    if (!is_op(CUR(P), ":")) {
        NB_TRY(parse_expression(P, 1, &parts[0]));
        if (!is_op(CUR(P), ":")) {
            *out = parts[0];
            return NB_OK;
        }
    }
    P->i++; /* ':' */
    if (!is_op(CUR(P), "]") && !is_op(CUR(P), ",") && !is_op(CUR(P), ":")) NB_TRY(parse_expression(P, 1, &parts[1]));
    if (is_op(CUR(P), ":")) {
        P->i++;
        if (!is_op(CUR(P), "]") && !is_op(CUR(P), ",")) NB_TRY(parse_expression(P, 1, &parts[2]));
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
        if (is_op(k, ".")) {
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
            } else return unexpected(P, "name or number after '.'");
        } else if (is_op(k, "[")) {
            P->i++;
            nvec items = {0};
            while (!is_op(CUR(P), "]")) {
                if (items.n) NB_TRY(expect_op(P, ","));
                if (is_op(CUR(P), "]")) break;
                tpl_node *it = NULL;
                NB_TRY(parse_subscribed(P, &it));
                if (nvec_push(P, &items, it, NULL)) return oom(P);
            }
            P->i++;
            if (items.n == 0) return pfail(P, k->line, "%s", "expected a subscript");
            tpl_node *key = items.v[0];
            if (items.n > 1) {
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
        } else if (is_op(k, "(")) {
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
    if (CUR(P)->type != TK_NAME) return unexpected(P, "a name");
    const char *name = CUR(P)->p;
    P->i++;
    while (is_op(CUR(P), ".") && PEEK(P, 1)->type == TK_NAME) {
        size_t a = strlen(name), b = strlen(PEEK(P, 1)->p);
        char *j = tpl_alloc(&P->t->arena, a + b + 2);
        if (!j) return oom(P);
        memcpy(j, name, a);
        j[a] = '.';
        memcpy(j + a + 1, PEEK(P, 1)->p, b);
        name = j;
        P->i += 2;
    }
    *out = name;
    return NB_OK;
}

static nb_status parse_filter_chain(parser *P, tpl_node **node, int start_inline)
{
    while (is_op(CUR(P), "|") || start_inline) {
        if (!start_inline) P->i++;
        start_inline = 0;
        MK(f, N_FILTER, CUR(P)->line);
        NB_TRY(dotted_name(P, &f->name));
        if (is_op(CUR(P), "(")) NB_TRY(parse_call_args(P, f));
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
    if (is_name(CUR(P), "not")) {
        negated = 1;
        P->i++;
    }
    MK(t, N_TEST, line);
    NB_TRY(dotted_name(P, &t->name));
    tpl_tok *k = CUR(P);
    if (is_op(k, "(")) NB_TRY(parse_call_args(P, t));
    else if ((k->type == TK_NAME || k->type == TK_STRING || k->type == TK_INT || k->type == TK_FLOAT ||
              is_op(k, "(") || is_op(k, "[") || is_op(k, "{")) &&
             !is_name(k, "else") && !is_name(k, "or") && !is_name(k, "and")) {
        if (is_name(k, "is")) return pfail(P, k->line, "%s", "you cannot chain multiple tests with is");
        tpl_node *arg;
        NB_TRY(parse_primary(P, &arg));
        NB_TRY(parse_postfix(P, &arg));
        t->args = tpl_alloc(&P->t->arena, sizeof(tpl_node *));
        if (!t->args) return oom(P);
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
        if (is_op(CUR(P), "|")) NB_TRY(parse_filter_chain(P, node, 0));
        else if (is_name(CUR(P), "is")) NB_TRY(parse_test(P, node));
        else if (is_op(CUR(P), "(")) {
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
        if (!s) return oom(P);
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
    if (is_op(k, "(")) {
        P->i++;
        NB_TRY(parse_tuple(P, 0, 1, NULL, 1, out));
        return expect_op(P, ")");
    }
    if (is_op(k, "[")) {
        P->i++;
        nvec items = {0};
        while (!is_op(CUR(P), "]")) {
            if (items.n) NB_TRY(expect_op(P, ","));
            if (is_op(CUR(P), "]")) break;
            tpl_node *it;
            NB_TRY(parse_expression(P, 1, &it));
            if (nvec_push(P, &items, it, NULL)) return oom(P);
        }
        P->i++;
        MK(l, N_LIST, k->line);
        l->args = items.v;
        l->nargs = items.n;
        *out = l;
        return NB_OK;
    }
    if (is_op(k, "{")) {
        P->i++;
        nvec keys = {0}, vals = {0};
        while (!is_op(CUR(P), "}")) {
            if (keys.n) NB_TRY(expect_op(P, ","));
            if (is_op(CUR(P), "}")) break;
            tpl_node *key, *val;
            NB_TRY(parse_expression(P, 1, &key));
            NB_TRY(expect_op(P, ":"));
            NB_TRY(parse_expression(P, 1, &val));
            if (nvec_push(P, &keys, key, NULL) || nvec_push(P, &vals, val, NULL)) return oom(P);
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
    return unexpected(P, "an expression");
}

static nb_status nesting_fail(parser *P)
{
    return pfail(P, CUR(P)->line, "nesting deeper than %s levels", "200");
}

static nb_status parse_unary_inner(parser *P, int with_filter, tpl_node **out);
static nb_status parse_unary(parser *P, int with_filter, tpl_node **out)
{
    if (P->depth >= MAX_NESTING) return nesting_fail(P);
    P->depth++;
    nb_status st = parse_unary_inner(P, with_filter, out);
    P->depth--;
    return st;
}

static nb_status parse_unary_inner(parser *P, int with_filter, tpl_node **out)
{
    tpl_tok *k = CUR(P);
    if (is_op(k, "-") || is_op(k, "+")) {
        P->i++;
        MK(u, is_op(k, "-") ? N_NEG : N_POS, k->line);
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
    if (!b->ops) return oom(P);
    b->ops[0] = (uint8_t)op;
    b->a = l;
    b->b = r;
    *out = b;
    return NB_OK;
}

static nb_status parse_pow(parser *P, tpl_node **out)
{
    NB_TRY(parse_unary(P, 1, out));
    while (is_op(CUR(P), "**")) {
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
        int op = is_op(k, "*") ? OP_MUL : is_op(k, "/") ? OP_DIV : is_op(k, "//") ? OP_FLOORDIV : is_op(k, "%") ? OP_MOD : -1;
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
    while (is_op(CUR(P), "~")) {
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
        int op = is_op(k, "+") ? OP_ADD : is_op(k, "-") ? OP_SUB : -1;
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
    if (nvec_push(P, &operands, first, NULL)) return oom(P);
    for (;;) {
        tpl_tok *k = CUR(P);
        int op = is_op(k, "==") ? OP_EQ : is_op(k, "!=") ? OP_NE : is_op(k, "<") ? OP_LT : is_op(k, "<=") ? OP_LE
               : is_op(k, ">") ? OP_GT : is_op(k, ">=") ? OP_GE : is_name(k, "in") ? OP_IN : -1;
        if (op < 0 && is_name(k, "not") && is_name(PEEK(P, 1), "in")) {
            op = OP_NOTIN;
            P->i++;
        }
        if (op < 0) break;
        if (nops == (int)sizeof ops) return pfail(P, k->line, "%s", "comparison chain too long");
        P->i++;
        tpl_node *r;
        NB_TRY(parse_math1(P, &r));
        ops[nops++] = (uint8_t)op;
        if (nvec_push(P, &operands, r, NULL)) return oom(P);
    }
    if (!nops) {
        *out = first;
        return NB_OK;
    }
    MK(c, N_COMPARE, line);
    c->args = operands.v;
    c->nargs = operands.n;
    c->ops = tpl_alloc(&P->t->arena, (size_t)nops);
    if (!c->ops) return oom(P);
    memcpy(c->ops, ops, (size_t)nops);
    *out = c;
    return NB_OK;
}

static nb_status parse_not(parser *P, tpl_node **out)
{
    if (is_name(CUR(P), "not")) {
        if (P->depth >= MAX_NESTING) return nesting_fail(P);
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
    while (is_name(CUR(P), "and")) {
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
    while (is_name(CUR(P), "or")) {
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
    while (is_name(CUR(P), "if")) {
        MK(c, N_COND, CUR(P)->line);
        P->i++;
        c->b = *out;
        NB_TRY(parse_or(P, &c->a));
        if (is_name(CUR(P), "else")) {
            P->i++;
            NB_TRY(parse_condexpr(P, &c->c));
        }
        *out = c;
    }
    return NB_OK;
}

static nb_status parse_expression(parser *P, int with_condexpr, tpl_node **out)
{
    return with_condexpr ? parse_condexpr(P, out) : parse_or(P, out);
}

static int tuple_end(parser *P, const char *extra_end)
{
    tpl_tok *k = CUR(P);
    if (k->type == TK_VAR_END || k->type == TK_BLOCK_END || k->type == TK_EOF || is_op(k, ")")) return 1;
    return extra_end && is_name(k, extra_end);
}

static nb_status parse_tuple(parser *P, int simplified, int with_condexpr, const char *extra_end, int explicit_parens,
                             tpl_node **out)
{
    int line = CUR(P)->line;
    nvec items = {0};
    int is_tuple = 0;
    for (;;) {
        if (items.n) NB_TRY(expect_op(P, ","));
        if (tuple_end(P, extra_end)) break;
        tpl_node *it;
        if (simplified) {
            NB_TRY(parse_primary(P, &it));
        } else NB_TRY(parse_expression(P, with_condexpr, &it));
        if (nvec_push(P, &items, it, NULL)) return oom(P);
        if (is_op(CUR(P), ",")) is_tuple = 1;
        else break;
    }
    if (!is_tuple) {
        if (items.n) {
            *out = items.v[0];
            return NB_OK;
        }
        if (!explicit_parens) return unexpected(P, "an expression");
    }
    MK(t, N_TUPLE, line);
    t->args = items.v;
    t->nargs = items.n;
    *out = t;
    return NB_OK;
}

/* Assignment target: name, ns.attr (when with_ns), or a tuple of names. */
static nb_status parse_assign_target(parser *P, int with_ns, const char *extra_end, tpl_node **out)
{
    int line = CUR(P)->line;
    if (with_ns && CUR(P)->type == TK_NAME && is_op(PEEK(P, 1), ".") && PEEK(P, 2)->type == TK_NAME) {
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
    NB_TRY(parse_tuple(P, 1, 1, extra_end, 0, &t));
    if (t->kind == N_NAME) {
        *out = t;
        return NB_OK;
    }
    if (t->kind == N_TUPLE) {
        for (int i = 0; i < t->nargs; i++)
            if (t->args[i]->kind != N_NAME) return pfail(P, line, "%s", "can't assign to this expression");
        *out = t;
        return NB_OK;
    }
    return pfail(P, line, "%s", "can't assign to this expression");
}

/* ---- statements -------------------------------------------------------------------- */
static nb_status parse_body(parser *P, const char *const *ends, int nends, const char *open_tag, int open_line,
                            tpl_node **out);

/* After a statement's header: expect its '%}', then parse the body up to one of `ends`
 * (left as the current token). */
static nb_status parse_statements(parser *P, const char *const *ends, int nends, const char *open_tag, int open_line,
                                  tpl_node **out)
{
    NB_TRY(expect_type(P, TK_BLOCK_END, "end of statement block '%}'"));
    return parse_body(P, ends, nends, open_tag, open_line, out);
}

static nb_status parse_statement(parser *P, tpl_node **out);

static nb_status parse_body_inner(parser *P, const char *const *ends, int nends, const char *open_tag, int open_line,
                                  tpl_node **out);
static nb_status parse_body(parser *P, const char *const *ends, int nends, const char *open_tag, int open_line,
                            tpl_node **out)
{
    if (P->depth >= MAX_NESTING) return nesting_fail(P);
    P->depth++;
    nb_status st = parse_body_inner(P, ends, nends, open_tag, open_line, out);
    P->depth--;
    return st;
}

static nb_status parse_body_inner(parser *P, const char *const *ends, int nends, const char *open_tag, int open_line,
                                  tpl_node **out)
{
    nvec st = {0};
    MK(body, N_BODY, CUR(P)->line);
    for (;;) {
        tpl_tok *k = CUR(P);
        if (k->type == TK_EOF) {
            if (!nends) break;
            char msg[200];
            snprintf(msg, sizeof msg, "unexpected end of template: the '%s' block opened on line %d is not closed (expected '%s')",
                     open_tag, open_line, ends[nends - 1]);
            return pfail(P, k->line, "%s", msg);
        }
        if (k->type == TK_DATA) {
            MK(t, N_TEXT, k->line);
            t->val = tv_str(k->p, k->n);
            if (nvec_push(P, &st, t, NULL)) return oom(P);
            P->i++;
        } else if (k->type == TK_VAR_BEGIN) {
            P->i++;
            MK(o, N_OUTPUT, k->line);
            NB_TRY(parse_tuple(P, 0, 1, NULL, 0, &o->a));
            NB_TRY(expect_type(P, TK_VAR_END, "end of print statement '}}'"));
            if (nvec_push(P, &st, o, NULL)) return oom(P);
        } else if (k->type == TK_BLOCK_BEGIN) {
            P->i++;
            tpl_tok *nm = CUR(P);
            for (int e = 0; e < nends; e++)
                if (is_name(nm, ends[e])) goto done;
            tpl_node *s = NULL;
            NB_TRY(parse_statement(P, &s));
            NB_TRY(expect_type(P, TK_BLOCK_END, "end of statement block '%}'"));
            if (s && nvec_push(P, &st, s, NULL)) return oom(P);
        } else return unexpected(P, "template data or a tag");
    }
done:
    body->args = st.v;
    body->nargs = st.n;
    *out = body;
    return NB_OK;
}

static nb_status parse_if(parser *P, int line, tpl_node **out)
{
    static const char *const ends[] = {"elif", "else", "endif"};
    MK(n, N_IF, line);
    NB_TRY(parse_tuple(P, 0, 0, NULL, 0, &n->a));
    NB_TRY(parse_statements(P, ends, 3, "if", line, &n->body));
    *out = n;
    tpl_node *cur = n;
    for (;;) {
        tpl_tok *k = CUR(P);
        P->i++;
        if (is_name(k, "elif")) {
            MK(e, N_IF, k->line);
            NB_TRY(parse_tuple(P, 0, 0, NULL, 0, &e->a));
            NB_TRY(parse_statements(P, ends, 3, "elif", k->line, &e->body));
            MK(wrap, N_BODY, k->line);
            wrap->args = tpl_alloc(&P->t->arena, sizeof(tpl_node *));
            if (!wrap->args) return oom(P);
            wrap->args[0] = e;
            wrap->nargs = 1;
            cur->orelse = wrap;
            cur = e;
        } else if (is_name(k, "else")) {
            static const char *const end_if[] = {"endif"};
            NB_TRY(parse_statements(P, end_if, 1, "else", k->line, &cur->orelse));
            P->i++;
            return NB_OK;
        } else return NB_OK; /* endif */
    }
}

static nb_status parse_for(parser *P, int line, tpl_node **out)
{
    static const char *const ends[] = {"else", "endfor"};
    static const char *const end_for[] = {"endfor"};
    MK(n, N_FOR, line);
    NB_TRY(parse_assign_target(P, 0, "in", &n->a));
    if (!is_name(CUR(P), "in")) return unexpected(P, "'in'");
    P->i++;
    NB_TRY(parse_tuple(P, 0, 0, "recursive", 0, &n->b));
    if (is_name(CUR(P), "if")) {
        P->i++;
        NB_TRY(parse_expression(P, 1, &n->c));
    }
    if (is_name(CUR(P), "recursive")) return pfail(P, CUR(P)->line, "%s", "recursive for loops are not supported");
    NB_TRY(parse_statements(P, ends, 2, "for", line, &n->body));
    if (is_name(CUR(P), "else")) {
        P->i++;
        NB_TRY(parse_statements(P, end_for, 1, "for", line, &n->orelse));
    }
    P->i++; /* endfor */
    *out = n;
    return NB_OK;
}

static nb_status parse_signature(parser *P, tpl_node *n)
{
    NB_TRY(expect_op(P, "("));
    nvec params = {0};
    while (!is_op(CUR(P), ")")) {
        if (params.n) NB_TRY(expect_op(P, ","));
        if (CUR(P)->type != TK_NAME) return unexpected(P, "a parameter name");
        const char *name = CUR(P)->p;
        P->i++;
        tpl_node *dflt = NULL;
        if (is_op(CUR(P), "=")) {
            P->i++;
            NB_TRY(parse_expression(P, 1, &dflt));
        }
        if (nvec_push(P, &params, dflt, name)) return oom(P);
    }
    P->i++;
    n->kwn = params.names;
    n->kwv = params.v;
    n->nkw = params.n;
    return NB_OK;
}

/* Which of varargs / kwargs / caller a macro body reads (nested bodies included, as
 * jinja2's analysis does): decides whether extra arguments are accepted. */
static uint8_t uses_specials(const tpl_node *n, int depth)
{
    if (!n || depth > 4 * MAX_NESTING) return 0;
    uint8_t f = 0;
    if (n->kind == N_NAME) {
        if (!strcmp(n->name, "varargs")) f |= MACRO_USES_VARARGS;
        else if (!strcmp(n->name, "kwargs")) f |= MACRO_USES_KWARGS;
        else if (!strcmp(n->name, "caller")) f |= MACRO_USES_CALLER;
    }
    const tpl_node *kids[6] = {n->a, n->b, n->c, n->d, n->body, n->orelse};
    for (int i = 0; i < 6; i++) f |= uses_specials(kids[i], depth + 1);
    if (n->kind != N_CONST && n->kind != N_TEXT) {
        for (int i = 0; i < n->nargs; i++) f |= uses_specials(n->args[i], depth + 1);
        for (int i = 0; i < n->nkw; i++) f |= uses_specials(n->kwv[i], depth + 1);
    }
    return f;
}

static nb_status parse_statement(parser *P, tpl_node **out)
{
    tpl_tok *k = CUR(P);
    int line = k->line;
    if (k->type != TK_NAME) return unexpected(P, "a statement name");
    const char *w = k->p;
    P->i++;
    if (!strcmp(w, "if")) return parse_if(P, line, out);
    if (!strcmp(w, "for")) return parse_for(P, line, out);
    if (!strcmp(w, "set")) {
        tpl_node *target;
        NB_TRY(parse_assign_target(P, 1, NULL, &target));
        if (is_op(CUR(P), "=")) {
            P->i++;
            MK(n, N_SET, line);
            n->a = target;
            NB_TRY(parse_tuple(P, 0, 1, NULL, 0, &n->b));
            *out = n;
            return NB_OK;
        }
        static const char *const ends[] = {"endset"};
        MK(n, N_SET_BLOCK, line);
        n->a = target;
        if (is_op(CUR(P), "|")) {
            MK(ph, N_PLACEHOLDER, line);
            n->c = ph;
            NB_TRY(parse_filter_chain(P, &n->c, 0));
        }
        NB_TRY(parse_statements(P, ends, 1, "set", line, &n->body));
        P->i++;
        *out = n;
        return NB_OK;
    }
    if (!strcmp(w, "macro")) {
        static const char *const ends[] = {"endmacro"};
        MK(n, N_MACRO, line);
        if (CUR(P)->type != TK_NAME) return unexpected(P, "a macro name");
        n->name = CUR(P)->p;
        P->i++;
        NB_TRY(parse_signature(P, n));
        NB_TRY(parse_statements(P, ends, 1, "macro", line, &n->body));
        n->flags = uses_specials(n->body, 0);
        P->i++;
        if (CUR(P)->type == TK_NAME && !strcmp(CUR(P)->p, n->name)) P->i++;
        *out = n;
        return NB_OK;
    }
    if (!strcmp(w, "call")) {
        static const char *const ends[] = {"endcall"};
        MK(n, N_CALLBLOCK, line);
        if (is_op(CUR(P), "(")) NB_TRY(parse_signature(P, n));
        NB_TRY(parse_expression(P, 1, &n->a));
        if (n->a->kind != N_CALL) return pfail(P, line, "%s", "expected a call in {% call %}");
        NB_TRY(parse_statements(P, ends, 1, "call", line, &n->body));
        n->flags = uses_specials(n->body, 0);
        P->i++;
        *out = n;
        return NB_OK;
    }
    if (!strcmp(w, "filter")) {
        static const char *const ends[] = {"endfilter"};
        MK(n, N_FILTERBLOCK, line);
        MK(ph, N_PLACEHOLDER, line);
        n->a = ph;
        NB_TRY(parse_filter_chain(P, &n->a, 1));
        NB_TRY(parse_statements(P, ends, 1, "filter", line, &n->body));
        P->i++;
        *out = n;
        return NB_OK;
    }
    if (!strcmp(w, "with")) {
        static const char *const ends[] = {"endwith"};
        MK(n, N_WITH, line);
        nvec vals = {0};
        while (CUR(P)->type != TK_BLOCK_END) {
            if (vals.n) NB_TRY(expect_op(P, ","));
            if (CUR(P)->type != TK_NAME) return unexpected(P, "a name");
            const char *name = CUR(P)->p;
            P->i++;
            NB_TRY(expect_op(P, "="));
            tpl_node *v;
            NB_TRY(parse_expression(P, 1, &v));
            if (nvec_push(P, &vals, v, name)) return oom(P);
        }
        n->kwn = vals.names;
        n->kwv = vals.v;
        n->nkw = vals.n;
        NB_TRY(parse_statements(P, ends, 1, "with", line, &n->body));
        P->i++;
        *out = n;
        return NB_OK;
    }
    if (!strcmp(w, "block") || !strcmp(w, "generation")) {
        /* {% block %} renders in place in a template without inheritance; transformers'
         * {% generation %} marks assistant text and renders its body unchanged. */
        static const char *const end_block[] = {"endblock"}, *const end_gen[] = {"endgeneration"};
        int is_block = w[0] == 'b';
        if (is_block) {
            if (CUR(P)->type != TK_NAME) return unexpected(P, "a block name");
            P->i++;
        }
        MK(n, N_WITH, line);
        NB_TRY(parse_statements(P, is_block ? end_block : end_gen, 1, w, line, &n->body));
        P->i++;
        if (is_block && CUR(P)->type == TK_NAME) P->i++;
        *out = n;
        return NB_OK;
    }
    if (!strcmp(w, "break") || !strcmp(w, "continue")) {
        MK(n, w[0] == 'b' ? N_BREAK : N_CONTINUE, line);
        *out = n;
        return NB_OK;
    }
    if (!strcmp(w, "elif") || !strcmp(w, "else") || !strncmp(w, "end", 3))
        return pfail(P, line, "unexpected '%s': no block is open that it could close", w);
    return pfail(P, line, "unknown or unsupported tag '%s'", w);
}

/* Checks jinja2 makes when it compiles: break / continue sit inside a for loop, and every
 * filter and test named exists. */
static nb_status check_tree(parser *P, const tpl_node *n, int in_loop)
{
    if (!n) return NB_OK;
    if ((n->kind == N_BREAK || n->kind == N_CONTINUE) && !in_loop)
        return pfail(P, n->line, "'%s' outside of a loop", n->kind == N_BREAK ? "break" : "continue");
    if (n->kind == N_FILTER && !tpl_filter_exists(n->name)) return pfail(P, n->line, "no filter named '%s'", n->name);
    if (n->kind == N_TEST && !tpl_test_exists(n->name)) return pfail(P, n->line, "no test named '%s'", n->name);
    int body_loop = n->kind == N_FOR ? 1 : (n->kind == N_MACRO || n->kind == N_CALLBLOCK) ? 0 : in_loop;
    const tpl_node *kids[4] = {n->a, n->b, n->c, n->d};
    for (int i = 0; i < 4; i++) NB_TRY(check_tree(P, kids[i], in_loop));
    if (n->kind != N_CONST && n->kind != N_TEXT) {
        for (int i = 0; i < n->nargs; i++) NB_TRY(check_tree(P, n->args[i], in_loop));
        for (int i = 0; i < n->nkw; i++) NB_TRY(check_tree(P, n->kwv[i], in_loop));
    }
    NB_TRY(check_tree(P, n->body, body_loop));
    return check_tree(P, n->orelse, in_loop);
}

nb_status tpl_parse(nb_template *t, const char *src, size_t len)
{
    parser P = {.t = t};
    NB_TRY(tpl_lex(t, src, len, &P.tk, &P.ntk));
    NB_TRY(parse_body(&P, NULL, 0, NULL, 0, &t->root));
    return check_tree(&P, t->root, 0);
}
