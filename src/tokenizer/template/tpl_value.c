/* Template values: the render arena, lists and dicts, Python truthiness / equality /
 * ordering, Python str() and repr() (including float repr), text buffers and the UTF-8 and
 * Unicode character-class helpers the string filters need (through utf8proc).
 * Exercised by tests/template/test_template.c (values, repr) and every render. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/template/tpl_internal.h"

/* ---- arena ---------------------------------------------------------------------------- */
struct tpl_chunk {
    tpl_chunk *next;
    size_t size, used;
    max_align_t data[];
};

void *tpl_alloc(tpl_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    tpl_chunk *h = a->head;
    if (!h || h->size - h->used < n) {
        size_t size = n > 60000 ? n : 64000;
        if (a->limit && a->used_total + size > a->limit) {
            a->failed = 1;
            return NULL;
        }
        h = malloc(sizeof(tpl_chunk) + size);
        if (!h) {
            a->failed = 1;
            return NULL;
        }
        h->size = size;
        h->used = 0;
        h->next = a->head;
        a->head = h;
        a->used_total += size;
    }
    void *p = (char *)h->data + h->used;
    h->used += n;
    memset(p, 0, n);
    return p;
}

char *tpl_strndup(tpl_arena *a, const char *s, size_t n)
{
    char *p = tpl_alloc(a, n + 1);
    if (p && n) memcpy(p, s, n);
    return p;
}

void tpl_arena_free(tpl_arena *a)
{
    tpl_chunk *h = a->head;
    while (h) {
        tpl_chunk *next = h->next;
        free(h);
        h = next;
    }
    a->head = NULL;
    a->used_total = 0;
}

/* ---- lists and dicts ------------------------------------------------------------------ */
tv tv_list_new(tpl_arena *a, size_t cap)
{
    tv v = {0};
    v.t = TV_LIST;
    v.u.l = tpl_alloc(a, sizeof(tpl_list));
    if (v.u.l && cap) {
        v.u.l->v = tpl_alloc(a, cap * sizeof(tv));
        if (!v.u.l->v) v.u.l = NULL;
        else v.u.l->cap = cap;
    }
    return v;
}

int tpl_list_push(tpl_arena *a, tpl_list *l, tv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        tv *nv = tpl_alloc(a, cap * sizeof(tv));
        if (!nv) return -1;
        if (l->n) memcpy(nv, l->v, l->n * sizeof(tv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

tv tv_dict_new(tpl_arena *a, size_t cap)
{
    tv v = {0};
    v.t = TV_DICT;
    v.u.d = tpl_alloc(a, sizeof(tpl_dict));
    if (v.u.d && cap) {
        v.u.d->k = tpl_alloc(a, cap * sizeof(tv));
        v.u.d->v = tpl_alloc(a, cap * sizeof(tv));
        if (!v.u.d->k || !v.u.d->v) v.u.d = NULL;
        else v.u.d->cap = cap;
    }
    return v;
}

tv *tpl_dict_get(const tpl_dict *d, tv k)
{
    for (size_t i = 0; i < d->n; i++)
        if (tv_eq(d->k[i], k)) return &d->v[i];
    return NULL;
}

tv *tpl_dict_gets(const tpl_dict *d, const char *key, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == TV_STR && d->k[i].u.s.n == n && !memcmp(d->k[i].u.s.p, key, n)) return &d->v[i];
    return NULL;
}

int tpl_dict_set(tpl_arena *a, tpl_dict *d, tv k, tv v)
{
    tv *old = tpl_dict_get(d, k);
    if (old) {
        *old = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        tv *nk = tpl_alloc(a, cap * sizeof(tv)), *nv = tpl_alloc(a, cap * sizeof(tv));
        if (!nk || !nv) return -1;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(tv));
            memcpy(nv, d->v, d->n * sizeof(tv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return 0;
}

/* ---- truthiness, equality, ordering ---------------------------------------------------- */
int tv_truthy(tv v)
{
    switch (v.t) {
    case TV_UNDEF:
    case TV_NONE: return 0;
    case TV_BOOL:
    case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0.0;
    case TV_STR: return v.u.s.n != 0;
    case TV_LIST: return (v.flag & TV_F_GEN) || v.u.l->n != 0;
    case TV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

int tv_is_num(tv v) { return v.t == TV_INT || v.t == TV_FLOAT || v.t == TV_BOOL; }
double tv_num(tv v) { return v.t == TV_FLOAT ? v.u.f : (double)v.u.i; }

int tv_eq(tv a, tv b)
{
    if (tv_is_num(a) && tv_is_num(b)) {
        if (a.t != TV_FLOAT && b.t != TV_FLOAT) return a.u.i == b.u.i;
        return tv_num(a) == tv_num(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case TV_UNDEF:
    case TV_NONE: return 1;
    case TV_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case TV_LIST:
        if (a.flag != b.flag) return 0; /* list vs tuple vs dict views */
        if ((a.flag & (TV_F_VALUES | TV_F_GEN)) && a.u.l != b.u.l) return 0; /* compared by identity */
        if (a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!tv_eq(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case TV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            tv *o = tpl_dict_get(b.u.d, a.u.d->k[i]);
            if (!o || !tv_eq(a.u.d->v[i], *o)) return 0;
        }
        return 1;
    case TV_NS: return a.u.d == b.u.d;
    case TV_LOOP: return a.u.loop == b.u.loop;
    case TV_FUNC: return a.u.fn == b.u.fn;
    default: return 0;
    }
}

int tv_cmp(tv a, tv b, int *cmp)
{
    if (tv_is_num(a) && tv_is_num(b)) {
        if (a.t != TV_FLOAT && b.t != TV_FLOAT) *cmp = (a.u.i > b.u.i) - (a.u.i < b.u.i);
        else {
            double x = tv_num(a), y = tv_num(b);
            *cmp = (x > y) - (x < y);
        }
        return 0;
    }
    if (a.t == TV_STR && b.t == TV_STR) {
        /* UTF-8 byte order is code point order, which is Python's str order. */
        size_t n = NB_MIN(a.u.s.n, b.u.s.n);
        int r = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0;
        if (r == 0) r = (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
        *cmp = (r > 0) - (r < 0);
        return 0;
    }
    if (a.t == TV_LIST && b.t == TV_LIST && (a.flag & TV_F_TUPLE) == (b.flag & TV_F_TUPLE)) {
        size_t n = NB_MIN(a.u.l->n, b.u.l->n);
        for (size_t i = 0; i < n; i++) {
            if (tv_eq(a.u.l->v[i], b.u.l->v[i])) continue;
            return tv_cmp(a.u.l->v[i], b.u.l->v[i], cmp);
        }
        *cmp = (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
        return 0;
    }
    return -1;
}

const char *tv_type_name(tv v)
{
    switch (v.t) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST:
        return (v.flag & TV_F_TUPLE) ? "tuple" : (v.flag & TV_F_KEYS) ? "dict_keys" : (v.flag & TV_F_VALUES) ? "dict_values"
             : (v.flag & TV_F_ITEMS) ? "dict_items" : (v.flag & TV_F_GEN) ? "generator" : "list";
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_LOOP: return "LoopContext";
    case TV_FUNC: return v.u.fn->kind == TF_MACRO || v.u.fn->kind == TF_CALLER ? "Macro" : "function";
    default: return "object";
    }
}

/* ---- buffers ----------------------------------------------------------------------------- */
void tpl_buf_put(tpl_buf *b, const char *s, size_t n)
{
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tpl_buf_puts(tpl_buf *b, const char *s) { tpl_buf_put(b, s, strlen(s)); }
void tpl_buf_putc(tpl_buf *b, char c) { tpl_buf_put(b, &c, 1); }

void tpl_buf_printf(tpl_buf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        tpl_buf_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    tpl_buf_put(b, big, (size_t)n);
    free(big);
}

void tpl_buf_utf8(tpl_buf *b, uint32_t cp)
{
    char s[4];
    if (cp < 0x80) {
        s[0] = (char)cp;
        tpl_buf_put(b, s, 1);
    } else if (cp < 0x800) {
        s[0] = (char)(0xC0 | (cp >> 6));
        s[1] = (char)(0x80 | (cp & 0x3F));
        tpl_buf_put(b, s, 2);
    } else if (cp < 0x10000) {
        s[0] = (char)(0xE0 | (cp >> 12));
        s[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[2] = (char)(0x80 | (cp & 0x3F));
        tpl_buf_put(b, s, 3);
    } else {
        s[0] = (char)(0xF0 | (cp >> 18));
        s[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        s[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[3] = (char)(0x80 | (cp & 0x3F));
        tpl_buf_put(b, s, 4);
    }
}

void tpl_buf_free(tpl_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---- UTF-8 and character classes ------------------------------------------------------ */
uint32_t tpl_utf8_next(const char *s, size_t n, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t k = *i;
    uint32_t c = u[k];
    size_t extra = c >= 0xF0 && c < 0xF8 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    *i = k + 1;
    if (extra == 0 || k + extra >= n) return c;
    uint32_t cp = c & (0x3Fu >> extra);
    for (size_t j = 1; j <= extra; j++) {
        if ((u[k + j] & 0xC0) != 0x80) return c;
        cp = (cp << 6) | (u[k + j] & 0x3F);
    }
    *i = k + extra + 1;
    return cp;
}

size_t tpl_utf8_len(const char *s, size_t n)
{
    size_t i = 0, count = 0;
    while (i < n) {
        tpl_utf8_next(s, n, &i);
        count++;
    }
    return count;
}

size_t tpl_utf8_offset(const char *s, size_t n, size_t cp_index)
{
    size_t i = 0;
    while (i < n && cp_index > 0) {
        tpl_utf8_next(s, n, &i);
        cp_index--;
    }
    return i;
}

int tpl_py_isspace(uint32_t cp)
{
    if ((cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0) return 1;
    if (cp < 0x1680) return 0;
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
        cp == 0x205F || cp == 0x3000)
        return 1;
    return 0;
}

int tpl_py_isprintable(uint32_t cp)
{
    if (cp == ' ') return 1;
    if (cp > 0x10FFFF) return 0;
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    switch (cat) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return 0;
    default: return 1;
    }
}

uint32_t tpl_upper(uint32_t cp) { return cp < 0x80 ? (cp >= 'a' && cp <= 'z' ? cp - 32 : cp) : (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp); }
uint32_t tpl_lower(uint32_t cp) { return cp < 0x80 ? (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); }

/* Python's full case mappings for the SpecialCasing entries likely in chat text (sharp
 * s, dotted capital I, Latin ligatures, n-apostrophe, j-caron); every other code point
 * takes utf8proc's simple mapping. mode: 0 lower, 1 upper, 2 title. */
void tpl_case_to(tpl_buf *b, uint32_t cp, int mode, uint32_t prev, uint32_t next)
{
    static const struct {
        uint32_t cp;
        const char *upper, *title;
    } special[] = {{0xDF, "SS", "Ss"},   {0xFB00, "FF", "Ff"},    {0xFB01, "FI", "Fi"}, {0xFB02, "FL", "Fl"},
                   {0xFB03, "FFI", "Ffi"}, {0xFB04, "FFL", "Ffl"}, {0xFB05, "ST", "St"}, {0xFB06, "ST", "St"},
                   {0x149, "\xCA\xBCN", "\xCA\xBCN"}, {0x1F0, "J\xCC\x8C", "J\xCC\x8C"}};
    if (mode == 0) {
        if (cp == 0x130) {
            tpl_buf_puts(b, "i\xCC\x87");
            return;
        }
        /* final sigma: after a cased letter and not before one */
        if (cp == 0x3A3 && tpl_is_cased_letter(prev) && !tpl_is_cased_letter(next)) {
            tpl_buf_utf8(b, 0x3C2);
            return;
        }
        tpl_buf_utf8(b, tpl_lower(cp));
        return;
    }
    for (size_t i = 0; i < NB_ARRAY_LEN(special); i++)
        if (special[i].cp == cp) {
            tpl_buf_puts(b, mode == 1 ? special[i].upper : special[i].title);
            return;
        }
    if (mode == 1) tpl_buf_utf8(b, tpl_upper(cp));
    else tpl_buf_utf8(b, cp < 0x80 ? tpl_upper(cp) : (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp));
}

int tpl_is_cased_letter(uint32_t cp)
{
    if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

/* ---- str() and repr() ------------------------------------------------------------------- */
void tpl_float_repr(tpl_buf *b, double f)
{
    if (isnan(f)) {
        tpl_buf_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        tpl_buf_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    /* Shortest digits that round-trip, then Python's layout: scientific when the decimal
     * exponent is < -4 or >= 16, else positional with at least one fractional digit. */
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    char digits[24];
    int nd = 0;
    const char *p = tmp;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    if (neg) tpl_buf_putc(b, '-');
    if (exp10 < -4 || exp10 >= 16) {
        tpl_buf_putc(b, digits[0]);
        if (nd > 1) {
            tpl_buf_putc(b, '.');
            tpl_buf_put(b, digits + 1, (size_t)nd - 1);
        }
        tpl_buf_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 < 0) {
        tpl_buf_puts(b, "0.");
        for (int i = 0; i < -exp10 - 1; i++) tpl_buf_putc(b, '0');
        tpl_buf_put(b, digits, (size_t)nd);
    } else {
        for (int i = 0; i <= exp10; i++) tpl_buf_putc(b, i < nd ? digits[i] : '0');
        tpl_buf_putc(b, '.');
        if (nd > exp10 + 1) tpl_buf_put(b, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
        else tpl_buf_putc(b, '0');
    }
}

static void str_repr(tpl_buf *b, const char *s, size_t n)
{
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    tpl_buf_putc(b, q);
    size_t i = 0;
    while (i < n) {
        size_t st = i;
        uint32_t cp = tpl_utf8_next(s, n, &i);
        if (cp == (uint32_t)q || cp == '\\') {
            tpl_buf_putc(b, '\\');
            tpl_buf_putc(b, (char)cp);
        } else if (cp == '\n') tpl_buf_puts(b, "\\n");
        else if (cp == '\r') tpl_buf_puts(b, "\\r");
        else if (cp == '\t') tpl_buf_puts(b, "\\t");
        else if (cp < 0x20 || cp == 0x7F) tpl_buf_printf(b, "\\x%02x", cp);
        else if (cp < 0x80) tpl_buf_putc(b, (char)cp);
        else if (tpl_py_isprintable(cp)) tpl_buf_put(b, s + st, i - st);
        else if (cp < 0x100) tpl_buf_printf(b, "\\x%02x", cp);
        else if (cp < 0x10000) tpl_buf_printf(b, "\\u%04x", cp);
        else tpl_buf_printf(b, "\\U%08x", cp);
    }
    tpl_buf_putc(b, q);
}

static void repr_depth(tpl_buf *b, tv v, int depth);
static void str_depth(tpl_buf *b, tv v, int depth);

/* A namespace can hold itself ({% set ns.me = ns %}): printing stops at this depth. */
#define REPR_MAX_DEPTH 100

static void dict_repr(tpl_buf *b, const tpl_dict *d, int depth)
{
    tpl_buf_putc(b, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i) tpl_buf_puts(b, ", ");
        repr_depth(b, d->k[i], depth + 1);
        tpl_buf_puts(b, ": ");
        repr_depth(b, d->v[i], depth + 1);
    }
    tpl_buf_putc(b, '}');
}

void tv_repr_to(tpl_buf *b, tv v) { repr_depth(b, v, 0); }
void tv_str_to(tpl_buf *b, tv v) { str_depth(b, v, 0); }

static void repr_depth(tpl_buf *b, tv v, int depth)
{
    if (depth > REPR_MAX_DEPTH) {
        tpl_buf_puts(b, "...");
        return;
    }
    switch (v.t) {
    case TV_UNDEF: tpl_buf_puts(b, "Undefined"); break;
    case TV_STR: str_repr(b, v.u.s.p, v.u.s.n); break;
    case TV_LIST: {
        int tup = v.flag & TV_F_TUPLE;
        const char *view = (v.flag & TV_F_KEYS) ? "dict_keys(" : (v.flag & TV_F_VALUES) ? "dict_values("
                         : (v.flag & TV_F_ITEMS) ? "dict_items(" : NULL;
        if (view) tpl_buf_puts(b, view);
        tpl_buf_putc(b, tup ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) tpl_buf_puts(b, ", ");
            repr_depth(b, v.u.l->v[i], depth + 1);
        }
        if (tup && v.u.l->n == 1) tpl_buf_putc(b, ',');
        tpl_buf_putc(b, tup ? ')' : ']');
        if (view) tpl_buf_putc(b, ')');
        break;
    }
    case TV_DICT: dict_repr(b, v.u.d, depth); break;
    default: str_depth(b, v, depth); break;
    }
}

static void str_depth(tpl_buf *b, tv v, int depth)
{
    switch (v.t) {
    case TV_UNDEF: break;
    case TV_NONE: tpl_buf_puts(b, "None"); break;
    case TV_BOOL: tpl_buf_puts(b, v.u.i ? "True" : "False"); break;
    case TV_INT: tpl_buf_printf(b, "%lld", (long long)v.u.i); break;
    case TV_FLOAT: tpl_float_repr(b, v.u.f); break;
    case TV_STR: tpl_buf_put(b, v.u.s.p, v.u.s.n); break;
    case TV_NS:
        tpl_buf_puts(b, "<Namespace ");
        dict_repr(b, v.u.d, depth);
        tpl_buf_putc(b, '>');
        break;
    case TV_LOOP:
        tpl_buf_printf(b, "<LoopContext %zu/%zu>", v.u.loop->index0 + 1, v.u.loop->n);
        break;
    case TV_FUNC:
        if (v.u.fn->kind == TF_MACRO || v.u.fn->kind == TF_CALLER)
            tpl_buf_printf(b, "<Macro '%s'>", v.u.fn->name ? v.u.fn->name : "caller");
        else tpl_buf_printf(b, "<built-in method %s>", v.u.fn->name ? v.u.fn->name : "?");
        break;
    default: repr_depth(b, v, depth); break;
    }
}
