/* Normalizers of tokenizer.json: NFC/NFKC/NFD/NFKD (utf8proc), Replace, Prepend,
 * Lowercase, Strip, Sequence. Text only: nibble does not track offsets.
 * Exercised by tests/tokenizer/test_tokenizer.c (normalize_*) and test_vs_hf.py (Qwen: NFC). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/error.h"
#include "tokenizer/tok_internal.h"

static nb_status nb_norm_map(utf8proc_option_t opt, const char *s, size_t n, nb_tbuf *out)
{
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, opt | UTF8PROC_STABLE);
    if (r < 0) {
        free(dst);
        return nb_error(NB_ERR_INVALID_ARG, "tokenizer: unicode normalization failed: %s", utf8proc_errmsg(r));
    }
    nb_status st = nb_tbuf_put(out, dst, (size_t)r);
    free(dst);
    return st;
}

/* Normal forms, applied chunk by chunk: a string may be cut before any ASCII character
 * without changing its normal form (ASCII is never the second half of a canonical
 * composition and, being a starter, never reorders with what precedes it). So ASCII runs
 * are copied, and only each non-ASCII run, with the ASCII character before it (it may be
 * the base of a combining mark: e + U+0301), goes through utf8proc. */
static nb_status nb_norm_unicode(utf8proc_option_t opt, const char *s, size_t n, nb_tbuf *out)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && (unsigned char)s[j] < 0x80) j++;
        if (j == n) return nb_tbuf_put(out, s + i, n - i);
        size_t k = j > i ? j - 1 : j, e = j;
        NB_TRY(nb_tbuf_put(out, s + i, k - i));
        while (e < n && (unsigned char)s[e] >= 0x80) e++;
        NB_TRY(nb_norm_map(opt, s + k, e - k, out));
        i = e;
    }
    return NB_OK;
}

static nb_status nb_norm_one(const nb_normalizer *nm, nb_tok_scratch *sc, const char *s, size_t n, nb_tbuf *out)
{
    switch (nm->kind) {
    case NB_NORM_NFC:
        return nb_norm_unicode(UTF8PROC_COMPOSE, s, n, out);
    case NB_NORM_NFKC:
        return nb_norm_unicode(UTF8PROC_COMPOSE | UTF8PROC_COMPAT, s, n, out);
    case NB_NORM_NFD:
        return nb_norm_unicode(UTF8PROC_DECOMPOSE, s, n, out);
    case NB_NORM_NFKD:
        return nb_norm_unicode(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, s, n, out);
    case NB_NORM_PREPEND:
        if (n) NB_TRY(nb_tbuf_put(out, nm->content, strlen(nm->content)));
        return nb_tbuf_put(out, s, n);
    case NB_NORM_REPLACE: {
        NB_TRY(nb_regex_find(&nm->re, sc, s, n, &sc->spans));
        size_t clen = strlen(nm->content);
        for (size_t i = 0; i < sc->spans.n; i++) {
            nb_span sp = sc->spans.v[i];
            if (sp.is_match)
                NB_TRY(nb_tbuf_put(out, nm->content, clen));
            else
                NB_TRY(nb_tbuf_put(out, s + sp.start, sp.end - sp.start));
        }
        return NB_OK;
    }
    case NB_NORM_LOWERCASE: {
        NB_TRY(nb_tbuf_reserve(out, n));
        size_t i = 0;
        while (i < n) {
            uint32_t cp;
            int k = nb_utf8_next(s + i, n - i, &cp);
            i += (size_t)k;
            char enc[8];
            if (cp == 0x130) { /* İ lowercases to i + combining dot (Rust char::to_lowercase) */
                NB_TRY(nb_tbuf_put(out, "i\xCC\x87", 3));
                continue;
            }
            uint32_t lo = cp < 0x80 ? (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp)
                                    : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
            NB_TRY(nb_tbuf_put(out, enc, (size_t)nb_utf8_put(lo, enc)));
        }
        return NB_OK;
    }
    case NB_NORM_STRIP: {
        size_t a = 0, b = n;
        if (nm->left)
            while (a < b) {
                uint32_t cp;
                int k = nb_utf8_next(s + a, b - a, &cp);
                if (!nb_uc_is_whitespace(cp)) break;
                a += (size_t)k;
            }
        if (nm->right)
            while (b > a) {
                size_t c = b - 1;
                while (c > a && ((unsigned char)s[c] & 0xC0) == 0x80) c--;
                uint32_t cp;
                nb_utf8_next(s + c, b - c, &cp);
                if (!nb_uc_is_whitespace(cp)) break;
                b = c;
            }
        return nb_tbuf_put(out, s + a, b - a);
    }
    case NB_NORM_SEQUENCE: {
        nb_tbuf cur = {0}, nxt = {0};
        nb_status st = nb_tbuf_put(&cur, s, n);
        for (size_t i = 0; st == NB_OK && i < nm->n_sub; i++) {
            nxt.n = 0;
            st = nb_norm_one(&nm->sub[i], sc, cur.p, cur.n, &nxt);
            nb_tbuf t = cur;
            cur = nxt;
            nxt = t;
        }
        if (st == NB_OK) st = nb_tbuf_put(out, cur.p, cur.n);
        nb_tbuf_free(&cur);
        nb_tbuf_free(&nxt);
        return st;
    }
    }
    return nb_error(NB_ERR_INTERNAL, "tokenizer: unknown normalizer kind %d", (int)nm->kind);
}

nb_status nb_normalize(const nb_normalizer *nm, nb_tok_scratch *sc, const char *s, size_t n, nb_tbuf *out)
{
    out->n = 0;
    NB_TRY(nb_tbuf_reserve(out, n));
    out->p[0] = 0;
    if (!nm) return nb_tbuf_put(out, s, n);
    return nb_norm_one(nm, sc, s, n, out);
}

void nb_normalizer_free(nb_normalizer *nm)
{
    if (!nm) return;
    nb_regex_free(&nm->re);
    free(nm->content);
    for (size_t i = 0; i < nm->n_sub; i++) nb_normalizer_free(&nm->sub[i]);
    free(nm->sub);
    nm->sub = NULL;
    nm->n_sub = 0;
    nm->content = NULL;
}
