/* Regex patterns of tokenizer.json through PCRE2 (UTF, UCP, JIT), iterated the way HF
 * `tokenizers` iterates its Oniguruma regexes. HF patterns are Oniguruma (Ruby syntax);
 * the differences that matter for tokenizer patterns are handled here:
 *   - \s differs: Oniguruma's is White_Space (tab..CR, space, U+0085, U+00A0, U+1680,
 *     U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000); PCRE2 10.42's also has
 *     U+180E. \s and \S are spelled out as that explicit class.
 *   - Ruby's ^ and $ are line anchors: PCRE2_MULTILINE.
 *   - an empty match right after the previous match is skipped (one character ahead),
 *     as the onig crate's find_iter does.
 * Exercised by tests/tokenizer/test_tokenizer.c (regex_*) and test_vs_hf.py. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_internal.h"

#define NB_ONIG_SPACE "\\t\\n\\x{0b}\\f\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

/* Rewrite an Oniguruma pattern into PCRE2 syntax (see the top of the file). */
static nb_status nb_regex_translate(const char *pat, int literal, nb_tbuf *out)
{
    size_t n = strlen(pat);
    if (literal) {
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)pat[i];
            if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
                NB_TRY(nb_tbuf_put(out, "\\", 1));
            NB_TRY(nb_tbuf_put(out, &pat[i], 1));
        }
        return NB_OK;
    }
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char d = pat[i + 1];
            if (d == 's') {
                const char *cls = in_class ? NB_ONIG_SPACE : "[" NB_ONIG_SPACE "]";
                NB_TRY(nb_tbuf_put(out, cls, strlen(cls)));
            } else if (d == 'S' && !in_class) {
                const char *cls = "[^" NB_ONIG_SPACE "]";
                NB_TRY(nb_tbuf_put(out, cls, strlen(cls)));
            } else { /* \S inside a class stays PCRE2's (no class subtraction to express it) */
                NB_TRY(nb_tbuf_put(out, pat + i, 2));
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            NB_TRY(nb_tbuf_put(out, pat + i, 1));
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && pat[i + 1] == '^') NB_TRY(nb_tbuf_put(out, pat + ++i, 1));
            if (i + 1 < n && pat[i + 1] == ']') NB_TRY(nb_tbuf_put(out, pat + ++i, 1));
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && pat[i + 1] == ':') {
            /* POSIX class [:alpha:] inside a class */
            const char *end = strstr(pat + i + 2, ":]");
            if (end) {
                size_t k = (size_t)(end + 2 - (pat + i));
                NB_TRY(nb_tbuf_put(out, pat + i, k));
                i += k - 1;
                continue;
            }
        }
        if (in_class && c == ']') in_class = 0;
        NB_TRY(nb_tbuf_put(out, pat + i, 1));
    }
    return NB_OK;
}

nb_status nb_regex_compile(nb_regex *re, const char *pattern, int literal, const char *what)
{
    nb_tbuf t = {0};
    nb_status s = nb_regex_translate(pattern, literal, &t);
    if (s != NB_OK) {
        nb_tbuf_free(&t);
        return s;
    }
    int err;
    PCRE2_SIZE at;
    re->code = pcre2_compile((PCRE2_SPTR)(t.p ? t.p : ""), t.n, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &at,
                             NULL);
    nb_tbuf_free(&t);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return nb_error(NB_ERR_FORMAT, "%s: regex '%s': %s (at offset %zu)", what, pattern, (const char *)msg,
                        (size_t)at);
    }
    /* JIT is an optimization: when it is unavailable pcre2_match interprets. */
    (void)pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
    return NB_OK;
}

void nb_regex_free(nb_regex *re)
{
    if (re->code) pcre2_code_free(re->code);
    re->code = NULL;
}

static nb_status nb_spans_push(nb_spans *o, size_t a, size_t b, int m)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        nb_span *v = realloc(o->v, cap * sizeof *v);
        if (!v) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (regex spans)");
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = (nb_span){a, b, m};
    return NB_OK;
}

nb_status nb_regex_find(const nb_regex *re, nb_tok_scratch *sc, const char *s, size_t n, nb_spans *out)
{
    out->n = 0;
    if (n == 0) return nb_spans_push(out, 0, 0, 0);
    size_t prev = 0, last_end = 0;
    size_t last_match_end = (size_t)-1;
    while (last_end <= n) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, last_end, PCRE2_NO_UTF_CHECK, sc->md, sc->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            /* resource limits are the input's doing (pathological text for the pattern) */
            int limit = rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
                        rc == PCRE2_ERROR_JIT_STACKLIMIT;
            return nb_error(limit ? NB_ERR_INVALID_ARG : NB_ERR_INTERNAL, "tokenizer: regex match failed at byte %zu: %s",
                            last_end, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
        size_t a = ov[0], b = ov[1];
        if (b < a) b = a; /* \K tricks: treat as empty */
        if (a == b && last_match_end == b) {
            if (last_end >= n) break;
            uint32_t cp;
            last_end += (size_t)nb_utf8_next(s + last_end, n - last_end, &cp);
            continue;
        }
        last_end = b;
        last_match_end = b;
        if (prev != a) NB_TRY(nb_spans_push(out, prev, a, 0));
        NB_TRY(nb_spans_push(out, a, b, 1));
        prev = b;
    }
    if (prev != n) NB_TRY(nb_spans_push(out, prev, n, 0));
    return NB_OK;
}
