/* Lexer of the chat-template interpreter (internal): Jinja source -> tokens, with jinja2's
 * whitespace rules as transformers configures them (trim_blocks, lstrip_blocks, {%- -%},
 * newline normalisation, one trailing newline dropped) already applied to the text tokens.
 * Exercised by tests/template/test_template.c (whitespace cases) through tpl_parse. */
#ifndef NB_TOKENIZER_TEMPLATE_TPL_LEX_H
#define NB_TOKENIZER_TEMPLATE_TPL_LEX_H

#include "tokenizer/template/tpl_internal.h"

typedef enum tpl_tok_type {
    TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP, TK_EOF
} tpl_tok_type;

typedef struct tpl_tok {
    uint8_t type;
    int line;
    const char *p; /* TK_DATA / TK_STRING: the (unescaped) text; TK_NAME, TK_OP: the spelling */
    size_t n;
    int64_t i;
    double f;
} tpl_tok;

/* Tokenize into *toks (arena-allocated, ending with TK_EOF). Errors name the template
 * (t->name) and line. */
nb_status tpl_lex(nb_template *t, const char *src, size_t len, tpl_tok **toks, size_t *ntoks);

#endif
