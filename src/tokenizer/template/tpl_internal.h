/* Internals of the chat-template interpreter shared by its files (not a public header):
 * the value model (Python-like values living in a per-render arena), the syntax tree the
 * parser builds, the render context, and the entry points each file provides.
 *   tpl_lex.c      source -> tokens (trim_blocks / lstrip_blocks / {%- -%} applied here)
 *   tpl_parse.c    tokens -> tree (statements; expressions in tpl_parse_expr.c)
 *   tpl_value.c    arena, values, Python str()/repr(), equality, ordering, UTF-8 helpers
 *   tpl_json.c     transformers' tojson (json.dumps); cJSON or JSON text -> values
 *   tpl_eval.c     expressions;  tpl_exec.c  statements, macros, scopes
 *   tpl_filters.c  filters and tests;  tpl_methods.c  dict/list methods, globals, arguments
 *   tpl_strings.c  str methods and % formatting
 *   template.c     the public API (template.h)
 * Exercised by tests/template/. */
#ifndef NB_TOKENIZER_TEMPLATE_TPL_INTERNAL_H
#define NB_TOKENIZER_TEMPLATE_TPL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "tokenizer/template/template.h"

/* ---- arena: everything a compile or a render allocates, freed at once ---------------- */
typedef struct tpl_chunk tpl_chunk;
typedef struct tpl_arena {
    tpl_chunk *head;
    size_t used_total, limit; /* limit 0: none */
    int failed;               /* an allocation was refused (limit or malloc) */
} tpl_arena;

void *tpl_alloc(tpl_arena *a, size_t n); /* zeroed; NULL when refused (a->failed set) */
char *tpl_strndup(tpl_arena *a, const char *s, size_t n);
void tpl_arena_free(tpl_arena *a);

/* ---- values ----------------------------------------------------------------------- */
typedef enum tv_type {
    TV_UNDEF = 0, /* jinja2 Undefined: prints "", falsy, iterates empty, errors on use */
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,
    TV_LIST, /* flag TV_F_TUPLE: a tuple (repr with parentheses) */
    TV_DICT,
    TV_NS,   /* namespace(): a dict whose attributes can be assigned */
    TV_LOOP, /* the loop variable of a for */
    TV_FUNC  /* macro, caller, builtin global or bound method */
} tv_type;

#define TV_F_TUPLE 1  /* TV_LIST */
#define TV_F_UNSAFE 2 /* TV_UNDEF: a sandbox-refused attribute; s.p holds the message */
#define TV_F_KEYS 4   /* TV_LIST from dict.keys(): repr "dict_keys([...])" */
#define TV_F_VALUES 8 /* dict.values() */
#define TV_F_ITEMS 16 /* dict.items() */
#define TV_F_GEN 32   /* a list standing for a jinja2 generator / iterator (map, select, ...):
                       * always truthy, no len(), not subscriptable, not JSON */
#define TV_F_NOT_SEQ (TV_F_KEYS | TV_F_VALUES | TV_F_ITEMS | TV_F_GEN) /* not subscriptable */

typedef struct tpl_list tpl_list;
typedef struct tpl_dict tpl_dict;
typedef struct tpl_loop tpl_loop;
typedef struct tpl_func tpl_func;

typedef struct tv {
    uint8_t t, flag;
    union {
        int64_t i; /* TV_BOOL (0/1), TV_INT */
        double f;
        struct {
            const char *p; /* TV_STR: UTF-8, not NUL-terminated; TV_UNDEF: name or NULL */
            size_t n;
        } s;
        tpl_list *l;
        tpl_dict *d; /* TV_DICT, TV_NS */
        tpl_loop *loop;
        tpl_func *fn;
    } u;
} tv;

struct tpl_list {
    tv *v;
    size_t n, cap;
    size_t used; /* TV_F_GEN: items a consumer already took, as from a Python generator */
};
struct tpl_dict {
    tv *k, *v;
    size_t n, cap;
};
struct tpl_loop {
    tpl_list *items; /* the (filtered) sequence iterated; NULL for a lazy range() */
    size_t n;        /* its length */
    int64_t range_start, range_step; /* items == NULL: item i is start + i * step */
    size_t index0;
    int depth;
    tv changed_last; /* loop.changed(): the arguments of its previous call (TV_ABSENT: none) */
};

typedef enum tpl_func_kind {
    TF_MACRO,
    TF_CALLER,
    TF_RANGE,
    TF_DICT,
    TF_NAMESPACE,
    TF_RAISE,
    TF_STRFTIME,
    TF_METHOD,    /* name = method, self = receiver */
    TF_LOOP_CYCLE, /* loop.cycle */
    TF_LOOP_CHANGED /* loop.changed */
} tpl_func_kind;

struct tpl_node;
struct tpl_scope;
struct tpl_func {
    tpl_func_kind kind;
    const char *name;
    tv self;
    const struct tpl_node *node;   /* TF_MACRO: the macro; TF_CALLER: the call block */
    struct tpl_scope *closure;     /* where the macro / call block was defined */
    struct tpl_func *caller;       /* TF_MACRO called through {% call %} */
};

static inline tv tv_undef(const char *name) { tv v = {0}; v.t = TV_UNDEF; v.u.s.p = name; return v; }
static inline tv tv_none(void) { tv v = {0}; v.t = TV_NONE; return v; }
static inline tv tv_bool(int b) { tv v = {0}; v.t = TV_BOOL; v.u.i = b ? 1 : 0; return v; }
static inline tv tv_int(int64_t i) { tv v = {0}; v.t = TV_INT; v.u.i = i; return v; }
static inline tv tv_float(double f) { tv v = {0}; v.t = TV_FLOAT; v.u.f = f; return v; }
static inline tv tv_str(const char *p, size_t n) { tv v = {0}; v.t = TV_STR; v.u.s.p = p; v.u.s.n = n; return v; }

tv tv_list_new(tpl_arena *a, size_t cap);               /* t = TV_LIST (u.l NULL on OOM) */
int tpl_list_push(tpl_arena *a, tpl_list *l, tv v);      /* 0 ok, -1 OOM */
tv tv_dict_new(tpl_arena *a, size_t cap);
int tpl_dict_set(tpl_arena *a, tpl_dict *d, tv k, tv v); /* replaces an equal key */
tv *tpl_dict_get(const tpl_dict *d, tv k);               /* NULL when absent */
tv *tpl_dict_gets(const tpl_dict *d, const char *key, size_t n);

int tv_truthy(tv v);
int tv_is_num(tv v); /* int, float or bool */
double tv_num(tv v);
int tv_eq(tv a, tv b);
/* Python ordering: *cmp < 0, 0, > 0; returns -1 when the types do not order. */
int tv_cmp(tv a, tv b, int *cmp);
const char *tv_type_name(tv v); /* Python's type name: "str", "int", "dict", ... */

/* ---- growable text buffers (malloc'd) ------------------------------------------------ */
typedef struct tpl_buf {
    char *p;
    size_t n, cap;
    int failed;
} tpl_buf;
void tpl_buf_put(tpl_buf *b, const char *s, size_t n);
void tpl_buf_puts(tpl_buf *b, const char *s);
void tpl_buf_putc(tpl_buf *b, char c);
void tpl_buf_printf(tpl_buf *b, const char *fmt, ...) NB_PRINTF(2, 3);
void tpl_buf_utf8(tpl_buf *b, uint32_t cp);
void tpl_buf_free(tpl_buf *b);

/* Python str(v) / repr(v) appended to b. */
void tv_str_to(tpl_buf *b, tv v);
void tv_repr_to(tpl_buf *b, tv v);
void tpl_float_repr(tpl_buf *b, double f); /* Python float repr ("1.0", "1e-05", "inf") */

/* ---- UTF-8 and Python character classes --------------------------------------------- */
/* Decode one code point at s[*i] (advancing *i); invalid bytes decode as themselves. */
uint32_t tpl_utf8_next(const char *s, size_t n, size_t *i);
size_t tpl_utf8_len(const char *s, size_t n);         /* code points */
size_t tpl_utf8_offset(const char *s, size_t n, size_t cp_index); /* byte offset of a code point */
int tpl_py_isspace(uint32_t cp);
int tpl_py_isprintable(uint32_t cp);
uint32_t tpl_upper(uint32_t cp);
uint32_t tpl_lower(uint32_t cp);
int tpl_is_cased_letter(uint32_t cp);
/* Append cp case-mapped as Python's str methods do (mode 0 lower, 1 upper, 2 title);
 * prev / next (0 at the ends) decide the final-sigma rule. */
void tpl_case_to(tpl_buf *b, uint32_t cp, int mode, uint32_t prev, uint32_t next);

/* ---- syntax tree ---------------------------------------------------------------------- */
typedef enum tpl_node_kind {
    /* expressions */
    N_CONST, N_NAME, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_BINOP, N_NEG,
    N_POS, N_NOT, N_AND, N_OR, N_COMPARE, N_COND, N_LIST, N_TUPLE, N_DICT, N_PLACEHOLDER,
    /* statements */
    N_BODY, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_MACRO, N_CALLBLOCK,
    N_FILTERBLOCK, N_WITH, N_BREAK, N_CONTINUE
} tpl_node_kind;

/* N_BINOP / N_COMPARE operators */
typedef enum tpl_op {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN
} tpl_op;

typedef struct tpl_node tpl_node;
struct tpl_node {
    uint8_t kind;
    uint8_t flags; /* N_MACRO / N_CALLBLOCK: MACRO_USES_* (names the body reads) */
    int line;
    const char *name;      /* N_NAME, N_GETATTR attr, N_FILTER/N_TEST name, N_MACRO name */
    tv val;                /* N_CONST; N_TEXT (a TV_STR) */
    tpl_node *a, *b, *c, *d;
    tpl_node **args;       /* call args, list items, dict keys, statements, compare operands */
    int nargs;
    const char **kwn;      /* keyword names; macro / caller parameter names; with targets */
    tpl_node **kwv;        /* keyword values; macro defaults (NULL: none); dict values */
    int nkw;
    uint8_t *ops;          /* N_COMPARE: nargs-1 operators; N_BINOP: ops[0] */
    tpl_node *body, *orelse;
};

#define MACRO_USES_VARARGS 1
#define MACRO_USES_KWARGS 2
#define MACRO_USES_CALLER 4

/* ---- compiled template ---------------------------------------------------------------- */
struct nb_template {
    char *name;
    tpl_arena arena; /* the tree and its strings */
    tpl_node *root;  /* N_BODY */
};

/* Lexer + parser: build t->root in t->arena. Errors name the template and line. */
nb_status tpl_parse(nb_template *t, const char *src, size_t len);

/* ---- rendering -------------------------------------------------------------------------- */
typedef struct tpl_scope {
    struct tpl_scope *parent;
    const char **names;
    tv *vals;
    size_t n, cap;
    int captured; /* a macro or call block closes over it: it must outlive its block */
} tpl_scope;

typedef struct tpl_ctx {
    const nb_template *tpl;
    tpl_arena arena;
    tpl_buf *out;   /* where output goes now (captures swap it) */
    int flow;       /* FLOW_* after break / continue */
    int depth;      /* macro / caller nesting */
    uint64_t steps; /* loop iterations and macro calls so far (bounded: see tpl_exec.c) */
    tv placeholder; /* the value a filter block or set-block filter applies to */
} tpl_ctx;

enum { FLOW_NONE = 0, FLOW_BREAK, FLOW_CONTINUE };

/* Record a runtime error "template NAME line N: ..." (NB_ERR_INVALID_ARG) and return it. */
nb_status tpl_fail(tpl_ctx *c, int line, const char *fmt, ...) NB_PRINTF(3, 4);
nb_status tpl_oom(tpl_ctx *c, int line);
/* Error for using an undefined value (names it as jinja2 does). */
nb_status tpl_undef_error(tpl_ctx *c, int line, tv v);

/* An Undefined whose use fails with this message (fmt has two %s: a, b or ""). */
tv tpl_undef_msg(tpl_ctx *c, const char *fmt, const char *a, const char *b);
/* Evaluate a call node's positional and keyword argument expressions. */
nb_status tpl_eval_args(tpl_ctx *c, tpl_scope *s, const tpl_node *n, tv **args, tv **kwv);
/* Redirect output into *nb (saving the current buffer), then restore it and turn what was
 * captured into an arena string (st passes through; the buffer is freed either way). */
void tpl_capture_begin(tpl_ctx *c, tpl_buf **saved, tpl_buf *nb);
nb_status tpl_capture_end(tpl_ctx *c, int line, tpl_buf *saved, tpl_buf *nb, nb_status st, tv *out);

tv tpl_scope_lookup(const tpl_scope *s, const char *name, int *found);
int tpl_scope_set(tpl_ctx *c, tpl_scope *s, const char *name, tv v);
tpl_scope *tpl_scope_new(tpl_ctx *c, tpl_scope *parent);

nb_status tpl_eval(tpl_ctx *c, tpl_scope *s, const tpl_node *n, tv *out); /* tpl_eval.c */
nb_status tpl_exec(tpl_ctx *c, tpl_scope *s, const tpl_node *n);          /* tpl_exec.c */
/* Call a callable value with evaluated arguments. */
nb_status tpl_call_value(tpl_ctx *c, int line, tv fn, const tv *args, int nargs, const char **kwn,
                         const tv *kwv, int nkw, tv *out);
/* Attribute (x.name) and item (x[k]) access with jinja2's sandboxed semantics. */
nb_status tpl_getattr(tpl_ctx *c, int line, tv obj, const char *name, tv *out);
nb_status tpl_getitem(tpl_ctx *c, int line, tv obj, tv key, tv *out);
/* Python str(v) as a new arena string. */
nb_status tpl_to_str(tpl_ctx *c, int line, tv v, tv *out);
/* Make a list of the items iteration over v yields (dict: keys; str: characters). */
nb_status tpl_iterate(tpl_ctx *c, int line, tv v, tpl_list **out);

/* Filters and tests (tpl_filters.c); `name` unknown is a runtime error naming it. */
nb_status tpl_filter(tpl_ctx *c, int line, const char *name, tv v, const tv *args, int nargs,
                     const char **kwn, const tv *kwv, int nkw, tv *out);
nb_status tpl_test(tpl_ctx *c, int line, const char *name, tv v, const tv *args, int nargs,
                   const char **kwn, const tv *kwv, int nkw, int *out);
int tpl_filter_exists(const char *name);
int tpl_test_exists(const char *name);

/* Methods and globals (tpl_methods.c). tpl_method_lookup returns 1 and sets *out to a
 * bound method (or an unsafe-undefined for sandbox-refused ones) when `name` is an
 * attribute of v's Python type. */
int tpl_method_lookup(tpl_ctx *c, tv v, const char *name, tv *out);
nb_status tpl_call_method(tpl_ctx *c, int line, tv self, const char *name, const tv *args, int nargs,
                          const char **kwn, const tv *kwv, int nkw, tv *out);
/* Python str.strip family (which: 1 left, 2 right, 3 both; chars not a str: whitespace),
 * per-code-point case mapping (mode 0 lower, 1 upper, 2 capitalize, 3 str.title,
 * 4 swapcase) and str.replace (count < 0: all). */
tv tpl_str_strip(tv s, tv chars, int which);
nb_status tpl_str_case(tpl_ctx *c, int line, tv s, int mode, tv *out);
nb_status tpl_str_replace(tpl_ctx *c, int line, tv s, tv old, tv rep, int64_t count, tv *out);
/* A str method call (tpl_strings.c); unknown names are runtime errors. */
nb_status tpl_call_str_method(tpl_ctx *c, int line, tv s, const char *m, const tv *args, int nargs, const char **kwn,
                              const tv *kwv, int nkw, tv *out);
/* Python's `fmt % args` (args a tuple, a mapping for %(key)s, or one value). */
nb_status tpl_percent_format(tpl_ctx *c, int line, tv fmt, tv args, tv *out);
int tpl_global_lookup(const char *name, tv *out);
/* range(args): validate as Python does (ints, non-zero step, the sandbox's 100000-item
 * limit) and give start, step and the number of items. */
nb_status tpl_range_params(tpl_ctx *c, int line, const tv *args, int nargs, int nkw, int64_t *start, int64_t *step,
                           size_t *count);
/* Item i of a loop (materialised list or lazy range). */
tv tpl_loop_item(const tpl_loop *l, size_t i);
nb_status tpl_call_builtin(tpl_ctx *c, int line, tpl_func *f, const tv *args, int nargs, const char **kwn,
                           const tv *kwv, int nkw, tv *out);

/* JSON (tpl_json.c). tojson with transformers' defaults; cJSON -> values (strings point
 * into the cJSON tree, which must outlive the render). */
nb_status tpl_tojson(tpl_ctx *c, int line, tv v, int ensure_ascii, const char *indent, size_t indent_n,
                     int has_indent, const char *item_sep, const char *key_sep, int sort_keys, tv *out);
nb_status tpl_from_cjson(tpl_ctx *c, const cJSON *j, tv *out);
/* JSON text -> values as Python's json.loads reads it (ints stay ints, "1.0" a float;
 * NaN / Infinity accepted); `what` names the text in errors (NB_ERR_INVALID_ARG). */
nb_status tpl_parse_json(tpl_ctx *c, const char *what, const char *s, size_t n, tv *out);

/* Argument binding for builtins: fill slot[i] for params[i] from positional then keyword
 * arguments; unfilled slots get .t = TV_ABSENT. Errors name the function. */
#define TV_ABSENT 255
nb_status tpl_bind_args(tpl_ctx *c, int line, const char *fname, const char *const *params, int nparams,
                        const tv *args, int nargs, const char **kwn, const tv *kwv, int nkw, tv *slot);

#endif
