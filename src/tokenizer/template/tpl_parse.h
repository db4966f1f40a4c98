/* Parser internals shared by tpl_parse_expr.c (expressions) and tpl_parse.c (statements):
 * the token cursor, node allocation, error helpers. Not a public header.
 * Exercised by tests/template/test_template.c through tpl_parse(). */
#ifndef NB_TOKENIZER_TEMPLATE_TPL_PARSE_H
#define NB_TOKENIZER_TEMPLATE_TPL_PARSE_H

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

/* Growable node-pointer arrays (with optional names) in the template's arena. */
typedef struct nvec {
    tpl_node **v;
    const char **names;
    int n, cap;
} nvec;

/* Allocate a node or return the out-of-memory status from the enclosing function. */
#define MK(var, kind, line)                                                             \
    tpl_node *var = tplp_mk(P, kind, line);                                             \
    if (!var) return tplp_oom(P)

/* Errors: "template NAME line N: ..." (NB_ERR_FORMAT). fmt has one %s for a. */
nb_status tplp_fail(parser *P, int line, const char *fmt, const char *a);
nb_status tplp_unexpected(parser *P, const char *expected);
nb_status tplp_nesting_fail(parser *P);
nb_status tplp_oom(parser *P);
int tplp_is_op(const tpl_tok *k, const char *op);
int tplp_is_name(const tpl_tok *k, const char *name);
nb_status tplp_expect_op(parser *P, const char *op);
nb_status tplp_expect_type(parser *P, int type, const char *what);
tpl_node *tplp_mk(parser *P, int kind, int line);
int tplp_nvec_push(parser *P, nvec *a, tpl_node *n, const char *name); /* 0 ok, -1 OOM */

/* Expressions (tpl_parse_expr.c), following jinja2's parser functions of the same role. */
nb_status tplp_expression(parser *P, int with_condexpr, tpl_node **out);
nb_status tplp_tuple(parser *P, int simplified, int with_condexpr, const char *extra_end, int explicit_parens,
                     tpl_node **out);
nb_status tplp_assign_target(parser *P, int with_ns, const char *extra_end, tpl_node **out);
/* `| name(args) | ...` applied to *node (start_inline: the first filter has no '|'). */
nb_status tplp_filter_chain(parser *P, tpl_node **node, int start_inline);

#endif
