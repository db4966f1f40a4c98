/* Statement parser of the chat-template interpreter: template data, {{ }} output and
 * the tags if/elif/else, for/else (with a loop filter), set (name, namespace attribute,
 * tuple, block with filters), macro, call, filter, with, break, continue, block (rendered
 * in place) and transformers' generation tag ({% raw %} is handled by the lexer); then the
 * checks jinja2 makes when compiling (known filters and tests, break/continue in loops).
 *   tpl_parse(t, src, len) builds t->root. Expressions: tpl_parse_expr.c.
 * Exercised by tests/template/test_template.c (syntax and error cases). */
#include <stdio.h>
#include <string.h>

#include "tokenizer/template/tpl_parse.h"

/* ---- statements -------------------------------------------------------------------- */
static nb_status parse_body(parser *P, const char *const *ends, int nends, const char *open_tag, int open_line,
                            tpl_node **out);

/* After a statement's header: expect its '%}', then parse the body up to one of `ends`
 * (left as the current token). */
static nb_status parse_statements(parser *P, const char *const *ends, int nends, const char *open_tag, int open_line,
                                  tpl_node **out)
{
    NB_TRY(tplp_expect_type(P, TK_BLOCK_END, "end of statement block '%}'"));
    return parse_body(P, ends, nends, open_tag, open_line, out);
}

static nb_status parse_statement(parser *P, tpl_node **out);

static nb_status parse_body_inner(parser *P, const char *const *ends, int nends, const char *open_tag, int open_line,
                                  tpl_node **out);
static nb_status parse_body(parser *P, const char *const *ends, int nends, const char *open_tag, int open_line,
                            tpl_node **out)
{
    if (P->depth >= MAX_NESTING) return tplp_nesting_fail(P);
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
            snprintf(msg, sizeof msg, "tplp_unexpected end of template: the '%s' block opened on line %d is not closed (expected '%s')",
                     open_tag, open_line, ends[nends - 1]);
            return tplp_fail(P, k->line, "%s", msg);
        }
        if (k->type == TK_DATA) {
            MK(t, N_TEXT, k->line);
            t->val = tv_str(k->p, k->n);
            if (tplp_nvec_push(P, &st, t, NULL)) return tplp_oom(P);
            P->i++;
        } else if (k->type == TK_VAR_BEGIN) {
            P->i++;
            MK(o, N_OUTPUT, k->line);
            NB_TRY(tplp_tuple(P, 0, 1, NULL, 0, &o->a));
            NB_TRY(tplp_expect_type(P, TK_VAR_END, "end of print statement '}}'"));
            if (tplp_nvec_push(P, &st, o, NULL)) return tplp_oom(P);
        } else if (k->type == TK_BLOCK_BEGIN) {
            P->i++;
            tpl_tok *nm = CUR(P);
            for (int e = 0; e < nends; e++)
                if (tplp_is_name(nm, ends[e])) goto done;
            tpl_node *s = NULL;
            NB_TRY(parse_statement(P, &s));
            NB_TRY(tplp_expect_type(P, TK_BLOCK_END, "end of statement block '%}'"));
            if (s && tplp_nvec_push(P, &st, s, NULL)) return tplp_oom(P);
        } else return tplp_unexpected(P, "template data or a tag");
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
    NB_TRY(tplp_tuple(P, 0, 0, NULL, 0, &n->a));
    NB_TRY(parse_statements(P, ends, 3, "if", line, &n->body));
    *out = n;
    tpl_node *cur = n;
    for (;;) {
        tpl_tok *k = CUR(P);
        P->i++;
        if (tplp_is_name(k, "elif")) {
            MK(e, N_IF, k->line);
            NB_TRY(tplp_tuple(P, 0, 0, NULL, 0, &e->a));
            NB_TRY(parse_statements(P, ends, 3, "elif", k->line, &e->body));
            MK(wrap, N_BODY, k->line);
            wrap->args = tpl_alloc(&P->t->arena, sizeof(tpl_node *));
            if (!wrap->args) return tplp_oom(P);
            wrap->args[0] = e;
            wrap->nargs = 1;
            cur->orelse = wrap;
            cur = e;
        } else if (tplp_is_name(k, "else")) {
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
    NB_TRY(tplp_assign_target(P, 0, "in", &n->a));
    if (!tplp_is_name(CUR(P), "in")) return tplp_unexpected(P, "'in'");
    P->i++;
    NB_TRY(tplp_tuple(P, 0, 0, "recursive", 0, &n->b));
    if (tplp_is_name(CUR(P), "if")) {
        P->i++;
        NB_TRY(tplp_expression(P, 1, &n->c));
    }
    if (tplp_is_name(CUR(P), "recursive")) return tplp_fail(P, CUR(P)->line, "%s", "recursive for loops are not supported");
    NB_TRY(parse_statements(P, ends, 2, "for", line, &n->body));
    if (tplp_is_name(CUR(P), "else")) {
        P->i++;
        NB_TRY(parse_statements(P, end_for, 1, "for", line, &n->orelse));
    }
    P->i++; /* endfor */
    *out = n;
    return NB_OK;
}

static nb_status parse_signature(parser *P, tpl_node *n)
{
    NB_TRY(tplp_expect_op(P, "("));
    nvec params = {0};
    while (!tplp_is_op(CUR(P), ")")) {
        if (params.n) NB_TRY(tplp_expect_op(P, ","));
        if (CUR(P)->type != TK_NAME) return tplp_unexpected(P, "a parameter name");
        const char *name = CUR(P)->p;
        P->i++;
        tpl_node *dflt = NULL;
        if (tplp_is_op(CUR(P), "=")) {
            P->i++;
            NB_TRY(tplp_expression(P, 1, &dflt));
        }
        if (tplp_nvec_push(P, &params, dflt, name)) return tplp_oom(P);
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
    if (k->type != TK_NAME) return tplp_unexpected(P, "a statement name");
    const char *w = k->p;
    P->i++;
    if (!strcmp(w, "if")) return parse_if(P, line, out);
    if (!strcmp(w, "for")) return parse_for(P, line, out);
    if (!strcmp(w, "set")) {
        tpl_node *target;
        NB_TRY(tplp_assign_target(P, 1, NULL, &target));
        if (tplp_is_op(CUR(P), "=")) {
            P->i++;
            MK(n, N_SET, line);
            n->a = target;
            NB_TRY(tplp_tuple(P, 0, 1, NULL, 0, &n->b));
            *out = n;
            return NB_OK;
        }
        static const char *const ends[] = {"endset"};
        MK(n, N_SET_BLOCK, line);
        n->a = target;
        if (tplp_is_op(CUR(P), "|")) {
            MK(ph, N_PLACEHOLDER, line);
            n->c = ph;
            NB_TRY(tplp_filter_chain(P, &n->c, 0));
        }
        NB_TRY(parse_statements(P, ends, 1, "set", line, &n->body));
        P->i++;
        *out = n;
        return NB_OK;
    }
    if (!strcmp(w, "macro")) {
        static const char *const ends[] = {"endmacro"};
        MK(n, N_MACRO, line);
        if (CUR(P)->type != TK_NAME) return tplp_unexpected(P, "a macro name");
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
        if (tplp_is_op(CUR(P), "(")) NB_TRY(parse_signature(P, n));
        NB_TRY(tplp_expression(P, 1, &n->a));
        if (n->a->kind != N_CALL) return tplp_fail(P, line, "%s", "expected a call in {% call %}");
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
        NB_TRY(tplp_filter_chain(P, &n->a, 1));
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
            if (vals.n) NB_TRY(tplp_expect_op(P, ","));
            if (CUR(P)->type != TK_NAME) return tplp_unexpected(P, "a name");
            const char *name = CUR(P)->p;
            P->i++;
            NB_TRY(tplp_expect_op(P, "="));
            tpl_node *v;
            NB_TRY(tplp_expression(P, 1, &v));
            if (tplp_nvec_push(P, &vals, v, name)) return tplp_oom(P);
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
            if (CUR(P)->type != TK_NAME) return tplp_unexpected(P, "a block name");
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
        return tplp_fail(P, line, "tplp_unexpected '%s': no block is open that it could close", w);
    return tplp_fail(P, line, "unknown or unsupported tag '%s'", w);
}

/* Checks jinja2 makes when it compiles: break / continue sit inside a for loop, and every
 * filter and test named exists. */
static nb_status check_tree(parser *P, const tpl_node *n, int in_loop)
{
    if (!n) return NB_OK;
    if ((n->kind == N_BREAK || n->kind == N_CONTINUE) && !in_loop)
        return tplp_fail(P, n->line, "'%s' outside of a loop", n->kind == N_BREAK ? "break" : "continue");
    if (n->kind == N_FILTER && !tpl_filter_exists(n->name)) return tplp_fail(P, n->line, "no filter named '%s'", n->name);
    if (n->kind == N_TEST && !tpl_test_exists(n->name)) return tplp_fail(P, n->line, "no test named '%s'", n->name);
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
