/* Lexer of the chat-template interpreter: Jinja source -> tokens. Whitespace control
 * follows jinja2's lexer as transformers configures it: "\r\n" and "\r" become "\n", one
 * trailing newline is dropped (keep_trailing_newline=False), "{%-"/"{{-"/"{#-" strip all
 * whitespace before the tag, "-%}"/"-}}"/"-#}" all whitespace after it, trim_blocks drops
 * the newline right after a block or comment tag, and lstrip_blocks drops the spaces and
 * tabs between the start of a line and a block or comment tag ("{%+" opts out).
 * Exercised by tests/template/test_template.c and every template the checks render. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/template/tpl_lex.h"

typedef struct lexer {
    nb_template *t;
    const char *s;
    size_t n, pos;
    int line;
    tpl_tok *toks;
    size_t ntoks, cap;
} lexer;

static nb_status lex_fail(lexer *L, int line, const char *msg, const char *detail)
{
    return nb_error(NB_ERR_FORMAT, "template %s line %d: %s%s", L->t->name, line, msg, detail ? detail : "");
}

static tpl_tok *push(lexer *L, int type, int line)
{
    if (L->ntoks == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        tpl_tok *nt = tpl_alloc(&L->t->arena, cap * sizeof(tpl_tok));
        if (!nt) return NULL;
        if (L->ntoks) memcpy(nt, L->toks, L->ntoks * sizeof(tpl_tok));
        L->toks = nt;
        L->cap = cap;
    }
    tpl_tok *k = &L->toks[L->ntoks++];
    memset(k, 0, sizeof *k);
    k->type = (uint8_t)type;
    k->line = line;
    return k;
}

/* Python's \s for the characters that can occur here (the text is UTF-8). Returns the
 * byte length of the whitespace character at s[i] or 0. */
static size_t ws_len(const char *s, size_t n, size_t i)
{
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) return tpl_py_isspace(c) ? 1 : 0;
    size_t j = i;
    uint32_t cp = tpl_utf8_next(s, n, &j);
    return tpl_py_isspace(cp) ? j - i : 0;
}

/* Length of text[0..n) with trailing Python whitespace removed. */
static size_t rstrip_len(const char *s, size_t n)
{
    size_t end = n, i = 0, last_non_ws = 0;
    while (i < end) {
        size_t w = ws_len(s, n, i);
        if (w) i += w;
        else {
            size_t j = i;
            tpl_utf8_next(s, n, &j);
            i = j;
            last_non_ws = i;
        }
    }
    return last_non_ws;
}

static int count_nl(const char *s, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

static nb_status emit_data(lexer *L, const char *p, size_t n, int line)
{
    if (!n) return NB_OK;
    tpl_tok *k = push(L, TK_DATA, line);
    if (!k) return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s: out of memory", L->t->name);
    k->p = p;
    k->n = n;
    return NB_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Unescape a string literal body as Python's "unicode-escape" codec does (what jinja2's
 * lexer applies); unknown escapes keep their backslash. */
static nb_status unescape(lexer *L, int line, const char *s, size_t n, tpl_tok *k)
{
    tpl_buf b = {0};
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            tpl_buf_putc(&b, s[i]);
            continue;
        }
        char e = s[++i];
        int hex_digits = 0;
        switch (e) {
        case '\n': break;
        case '\\': tpl_buf_putc(&b, '\\'); break;
        case '\'': tpl_buf_putc(&b, '\''); break;
        case '"': tpl_buf_putc(&b, '"'); break;
        case 'a': tpl_buf_putc(&b, '\a'); break;
        case 'b': tpl_buf_putc(&b, '\b'); break;
        case 'f': tpl_buf_putc(&b, '\f'); break;
        case 'n': tpl_buf_putc(&b, '\n'); break;
        case 'r': tpl_buf_putc(&b, '\r'); break;
        case 't': tpl_buf_putc(&b, '\t'); break;
        case 'v': tpl_buf_putc(&b, '\v'); break;
        case 'x': hex_digits = 2; break;
        case 'u': hex_digits = 4; break;
        case 'U': hex_digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                uint32_t v = 0;
                int d = 0;
                while (d < 3 && i < n && s[i] >= '0' && s[i] <= '7') v = v * 8 + (uint32_t)(s[i++] - '0'), d++;
                i--;
                tpl_buf_utf8(&b, v);
            } else {
                tpl_buf_putc(&b, '\\');
                tpl_buf_putc(&b, e);
            }
        }
        if (hex_digits) {
            uint32_t v = 0;
            for (int d = 0; d < hex_digits; d++) {
                int h = i + 1 + (size_t)d < n ? hexval(s[i + 1 + (size_t)d]) : -1;
                if (h < 0) {
                    tpl_buf_free(&b);
                    return lex_fail(L, line, "invalid escape in string literal", NULL);
                }
                v = v * 16 + (uint32_t)h;
            }
            i += (size_t)hex_digits;
            if (v > 0x10FFFF) {
                tpl_buf_free(&b);
                return lex_fail(L, line, "invalid \\U escape in string literal", NULL);
            }
            tpl_buf_utf8(&b, v);
        }
    }
    if (b.failed) {
        tpl_buf_free(&b);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s: out of memory", L->t->name);
    }
    k->p = tpl_strndup(&L->t->arena, b.p ? b.p : "", b.n);
    k->n = b.n;
    tpl_buf_free(&b);
    if (!k->p) return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s: out of memory", L->t->name);
    return NB_OK;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_name_char(char c) { return is_name_start(c) || is_digit(c); }

/* Digits with jinja2's optional single underscores between them ("1_000"). */
static size_t scan_digits(const char *s, size_t n, size_t i)
{
    size_t j = i;
    while (j < n && is_digit(s[j])) {
        j++;
        if (j + 1 < n && s[j] == '_' && is_digit(s[j + 1])) j++;
    }
    return j;
}

static double parse_number_text(const char *s, size_t n)
{
    char tmp[128];
    size_t k = 0;
    for (size_t i = 0; i < n && k < sizeof tmp - 1; i++)
        if (s[i] != '_') tmp[k++] = s[i];
    tmp[k] = 0;
    return strtod(tmp, NULL);
}

static const char *const OPS[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                  "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};

/* Tokens inside {{ }} or {% %} up to and including the end tag. */
static nb_status lex_tag(lexer *L, int is_block, int begin_line, int *line_starting)
{
    const char *s = L->s;
    size_t n = L->n;
    int depth = 0;
    const char *end2 = is_block ? "%}" : "}}";
    for (;;) {
        while (L->pos < n) {
            size_t w = ws_len(s, n, L->pos);
            if (!w) break;
            if (s[L->pos] == '\n') L->line++;
            L->pos += w;
        }
        if (L->pos >= n)
            return lex_fail(L, begin_line, is_block ? "unexpected end of template: missing '%}'" : "unexpected end of template: missing '}}'", NULL);
        size_t p = L->pos;
        if (depth == 0) {
            int dash = s[p] == '-' && p + 3 <= n && !memcmp(s + p + 1, end2, 2);
            if (dash || (p + 2 <= n && !memcmp(s + p, end2, 2))) {
                if (!push(L, is_block ? TK_BLOCK_END : TK_VAR_END, L->line)) return NB_ERR_OUT_OF_MEMORY;
                L->pos = p + (dash ? 3 : 2);
                *line_starting = 0;
                if (dash) {
                    size_t w;
                    while (L->pos < n && (w = ws_len(s, n, L->pos))) {
                        if (s[L->pos] == '\n') L->line++, *line_starting = 1;
                        else *line_starting = 0;
                        L->pos += w;
                    }
                } else if (is_block && L->pos < n && s[L->pos] == '\n') {
                    L->pos++;
                    L->line++;
                    *line_starting = 1;
                }
                return NB_OK;
            }
        }
        char c = s[p];
        tpl_tok *k;
        /* a number right after '.' is an integer item index (x.0.name), never a float */
        int after_dot = L->ntoks && L->toks[L->ntoks - 1].type == TK_OP && L->toks[L->ntoks - 1].n == 1 &&
                        L->toks[L->ntoks - 1].p[0] == '.' && p > 0 && s[p - 1] == '.';
        if (is_digit(c)) {
            size_t j = scan_digits(s, n, p);
            int is_float = 0;
            if (!after_dot) {
                size_t q = j;
                if (q + 1 < n && s[q] == '.' && is_digit(s[q + 1])) {
                    q = scan_digits(s, n, q + 1);
                    is_float = 1;
                }
                if (q < n && (s[q] == 'e' || s[q] == 'E')) {
                    size_t r = q + 1;
                    if (r < n && (s[r] == '+' || s[r] == '-')) r++;
                    if (r < n && is_digit(s[r])) {
                        q = scan_digits(s, n, r);
                        is_float = 1;
                    }
                }
                if (is_float) j = q;
            }
            k = push(L, is_float ? TK_FLOAT : TK_INT, L->line);
            if (!k) return NB_ERR_OUT_OF_MEMORY;
            k->p = s + p;
            k->n = j - p;
            if (is_float) k->f = parse_number_text(s + p, j - p);
            else {
                double d = parse_number_text(s + p, j - p);
                if (d > 9.2e18) return lex_fail(L, L->line, "integer literal too large", NULL);
                int64_t v = 0;
                for (size_t q = p; q < j; q++)
                    if (s[q] != '_') v = v * 10 + (s[q] - '0');
                k->i = v;
            }
            L->pos = j;
            continue;
        }
        if (is_name_start(c)) {
            size_t j = p;
            while (j < n && is_name_char(s[j])) j++;
            k = push(L, TK_NAME, L->line);
            if (!k) return NB_ERR_OUT_OF_MEMORY;
            k->p = tpl_strndup(&L->t->arena, s + p, j - p);
            k->n = j - p;
            L->pos = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = p + 1;
            int line0 = L->line;
            while (j < n && s[j] != c) {
                if (s[j] == '\\' && j + 1 < n) j++;
                j++;
            }
            if (j >= n) return lex_fail(L, line0, "unterminated string literal", NULL);
            k = push(L, TK_STRING, line0);
            if (!k) return NB_ERR_OUT_OF_MEMORY;
            NB_TRY(unescape(L, line0, s + p + 1, j - p - 1, k));
            L->line += count_nl(s + p, j - p);
            L->pos = j + 1;
            continue;
        }
        size_t oi;
        for (oi = 0; oi < NB_ARRAY_LEN(OPS); oi++) {
            size_t ol = strlen(OPS[oi]);
            if (p + ol <= n && !memcmp(s + p, OPS[oi], ol)) break;
        }
        if (oi == NB_ARRAY_LEN(OPS)) {
            char what[8] = {c, '\'', 0};
            return lex_fail(L, L->line, "unexpected character '", what);
        }
        k = push(L, TK_OP, L->line);
        if (!k) return NB_ERR_OUT_OF_MEMORY;
        k->p = OPS[oi];
        k->n = strlen(OPS[oi]);
        if (c == '(' || c == '[' || c == '{') depth++;
        else if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
        L->pos = p + k->n;
    }
}

/* After "{%" (and its modifier) at p: is this `word` followed by the tag end? Sets
 * *after to just past the tag end: "-%}" also takes the whitespace after it, "%}" the
 * newline after it when trim (jinja2 trims after endraw, not after raw). */
static int match_raw(lexer *L, size_t p, const char *word, size_t *after, int trim)
{
    const char *s = L->s;
    size_t n = L->n, wl = strlen(word);
    while (p < n && ws_len(s, n, p)) p += ws_len(s, n, p);
    if (p + wl > n || memcmp(s + p, word, wl) || (p + wl < n && is_name_char(s[p + wl]))) return 0;
    p += wl;
    while (p < n && ws_len(s, n, p)) p += ws_len(s, n, p);
    if (p + 3 <= n && !memcmp(s + p, "-%}", 3)) {
        p += 3;
        while (p < n && ws_len(s, n, p)) p += ws_len(s, n, p);
    } else if (p + 2 <= n && !memcmp(s + p, "%}", 2)) {
        p += 2;
        if (trim && p < n && s[p] == '\n') p++;
    } else return 0;
    *after = p;
    return 1;
}

nb_status tpl_lex(nb_template *t, const char *src, size_t len, tpl_tok **toks, size_t *ntoks)
{
    /* normalise newlines and drop one trailing newline */
    char *s = tpl_alloc(&t->arena, len + 1);
    if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s: out of memory", t->name);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else s[n++] = src[i];
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;

    lexer L = {.t = t, .s = s, .n = n, .pos = 0, .line = 1};
    int line_starting = 1;
    while (L.pos < n) {
        const char *tag = NULL;
        size_t start = L.pos;
        for (; start + 1 < n; start++) {
            if (s[start] == '{' && (s[start + 1] == '{' || s[start + 1] == '%' || s[start + 1] == '#')) {
                tag = s + start;
                break;
            }
        }
        if (!tag) {
            NB_TRY(emit_data(&L, s + L.pos, n - L.pos, L.line));
            break;
        }
        char kind = tag[1];
        char mod = start + 2 < n && (s[start + 2] == '-' || s[start + 2] == '+') ? s[start + 2] : 0;
        size_t text_n = start - L.pos;
        const char *text = s + L.pos;
        int text_line = L.line;
        if (mod == '-') text_n = rstrip_len(text, text_n);
        else if (mod != '+' && kind != '{') {
            size_t l_pos = 0;
            for (size_t i = text_n; i > 0; i--)
                if (text[i - 1] == '\n') {
                    l_pos = i;
                    break;
                }
            if (l_pos > 0 || line_starting) {
                size_t i = l_pos;
                while (i < text_n && ws_len(text, text_n, i)) i += ws_len(text, text_n, i);
                if (i == text_n) text_n = l_pos;
            }
        }
        NB_TRY(emit_data(&L, text, text_n, text_line));
        L.line += count_nl(s + L.pos, start - L.pos);
        size_t p = start + 2 + (mod ? 1 : 0);
        int tag_line = L.line;

        if (kind == '#') {
            const char *e = NULL;
            for (size_t i = p; i + 1 < n; i++)
                if (s[i] == '#' && s[i + 1] == '}') {
                    e = s + i;
                    break;
                }
            if (!e) return lex_fail(&L, tag_line, "missing end of comment tag", NULL);
            size_t epos = (size_t)(e - s);
            L.line += count_nl(s + p, epos - p);
            L.pos = epos + 2;
            line_starting = 0;
            if (epos > p && s[epos - 1] == '-') {
                size_t w;
                while (L.pos < n && (w = ws_len(s, n, L.pos))) {
                    line_starting = s[L.pos] == '\n';
                    if (s[L.pos] == '\n') L.line++;
                    L.pos += w;
                }
            } else if (L.pos < n && s[L.pos] == '\n') {
                L.pos++;
                L.line++;
                line_starting = 1;
            }
            continue;
        }
        size_t after;
        if (kind == '%' && match_raw(&L, p, "raw", &after, 0)) {
            /* raw: data up to {% endraw %}, taken literally */
            size_t i = after;
            size_t end_start = 0, end_after = 0;
            for (; i + 1 < n; i++) {
                if (s[i] == '{' && s[i + 1] == '%') {
                    size_t q = i + 2;
                    char m2 = q < n && (s[q] == '-' || s[q] == '+') ? s[q] : 0;
                    if (match_raw(&L, q + (m2 ? 1 : 0), "endraw", &end_after, 1)) {
                        end_start = i;
                        size_t body_n = end_start - after;
                        if (m2 == '-') body_n = rstrip_len(s + after, body_n);
                        else if (m2 != '+') {
                            /* lstrip_blocks: spaces between the body's last newline and endraw */
                            const char *body = s + after;
                            size_t l_pos = 0;
                            for (size_t k = body_n; k > 0; k--)
                                if (body[k - 1] == '\n') {
                                    l_pos = k;
                                    break;
                                }
                            size_t k = l_pos;
                            while (l_pos > 0 && k < body_n && ws_len(body, body_n, k)) k += ws_len(body, body_n, k);
                            if (l_pos > 0 && k == body_n) body_n = l_pos;
                        }
                        L.line += count_nl(s + start, after - start);
                        NB_TRY(emit_data(&L, s + after, body_n, L.line));
                        break;
                    }
                }
            }
            if (!end_after) return lex_fail(&L, tag_line, "missing {% endraw %}", NULL);
            L.line += count_nl(s + after, end_after - after);
            L.pos = end_after;
            line_starting = end_after > 0 && s[end_after - 1] == '\n';
            continue;
        }
        if (!push(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, tag_line))
            return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s: out of memory", t->name);
        L.pos = p;
        nb_status st = lex_tag(&L, kind == '%', tag_line, &line_starting);
        if (st == NB_ERR_OUT_OF_MEMORY) return nb_error(st, "template %s: out of memory", t->name);
        if (st != NB_OK) return st;
    }
    if (!push(&L, TK_EOF, L.line)) return nb_error(NB_ERR_OUT_OF_MEMORY, "template %s: out of memory", t->name);
    *toks = L.toks;
    *ntoks = L.ntoks;
    return NB_OK;
}
