/* Decoders of tokenizer.json (HF Decoder::decode_chain): ByteLevel, Metaspace,
 * ByteFallback, Fuse, Strip, Replace, Sequence. Each maps a list of token strings to a
 * list of strings; decode joins the final list.
 * Exercised by tests/tokenizer/test_tokenizer.c (decode_*) and test_vs_hf.py. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_internal.h"

#define NB_FFFD "\xEF\xBF\xBD"

static inline const char *nb_sl_str(const nb_strlist *l, size_t i) { return l->text.p + l->off[i]; }

/* ByteLevel: every token's characters back to bytes (a token with a character outside the
 * GPT-2 map, e.g. an added token, contributes its UTF-8 as is), then one lossy string. */
static nb_status nb_dec_bytelevel(const nb_strlist *in, nb_strlist *out, nb_tbuf *tmp)
{
    tmp->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        const char *s = nb_sl_str(in, i);
        size_t n = in->len[i], start = tmp->n, j = 0;
        int ok = 1;
        NB_TRY(nb_tbuf_reserve(tmp, n));
        while (j < n) {
            uint32_t cp;
            j += (size_t)nb_utf8_next(s + j, n - j, &cp);
            int b = nb_char_byte(cp);
            if (b < 0) {
                ok = 0;
                break;
            }
            tmp->p[tmp->n++] = (char)b;
        }
        if (!ok) {
            tmp->n = start;
            NB_TRY(nb_tbuf_put(tmp, s, n));
        }
    }
    nb_tbuf lossy = {0};
    nb_status st = nb_utf8_lossy(&lossy, tmp->p ? tmp->p : "", tmp->n);
    if (st == NB_OK) st = nb_strlist_push(out, lossy.p ? lossy.p : "", lossy.n);
    nb_tbuf_free(&lossy);
    return st;
}

int nb_dec_has_bytefallback(const nb_decoder *d)
{
    if (d->kind == NB_DEC_BYTEFALLBACK) return 1;
    for (size_t i = 0; i < d->n_sub; i++)
        if (nb_dec_has_bytefallback(&d->sub[i])) return 1;
    return 0;
}

/* "<0xNN>" as Rust's u8::from_str_radix(&t[3..5], 16) reads it (a '+' sign is accepted). */
int nb_byte_token(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0, digits = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            if (i == 3 && c == '+') continue;
            return -1;
        }
        v = v * 16 + d;
        digits++;
    }
    return digits ? v : -1;
}

static nb_status nb_flush_bytes(nb_tbuf *bytes, size_t count, nb_strlist *out)
{
    if (!count) return NB_OK;
    if (nb_utf8_valid(bytes->p, bytes->n)) {
        NB_TRY(nb_strlist_push(out, bytes->p, bytes->n));
    } else {
        for (size_t k = 0; k < count; k++) NB_TRY(nb_strlist_push(out, NB_FFFD, 3));
    }
    bytes->n = 0;
    return NB_OK;
}

static nb_status nb_dec_bytefallback(const nb_strlist *in, nb_strlist *out, nb_tbuf *bytes)
{
    bytes->n = 0;
    size_t count = 0;
    for (size_t i = 0; i < in->n; i++) {
        int b = nb_byte_token(nb_sl_str(in, i), in->len[i]);
        if (b >= 0) {
            char c = (char)b;
            NB_TRY(nb_tbuf_put(bytes, &c, 1));
            count++;
            continue;
        }
        NB_TRY(nb_flush_bytes(bytes, count, out));
        count = 0;
        NB_TRY(nb_strlist_push(out, nb_sl_str(in, i), in->len[i]));
    }
    return nb_flush_bytes(bytes, count, out);
}

static nb_status nb_dec_one(const nb_decoder *d, nb_tok_scratch *sc, const nb_strlist *in, nb_strlist *out)
{
    switch (d->kind) {
    case NB_DEC_BYTELEVEL:
        return nb_dec_bytelevel(in, out, &sc->tmp);
    case NB_DEC_BYTEFALLBACK:
        return nb_dec_bytefallback(in, out, &sc->tmp);
    case NB_DEC_FUSE:
        return nb_strlist_push(out, in->text.p ? in->text.p : "", in->text.n);
    case NB_DEC_METASPACE:
        for (size_t i = 0; i < in->n; i++) {
            const char *s = nb_sl_str(in, i);
            size_t n = in->len[i];
            sc->tmp.n = 0;
            NB_TRY(nb_tbuf_reserve(&sc->tmp, n));
            for (size_t j = 0; j < n;) {
                uint32_t cp;
                size_t k = (size_t)nb_utf8_next(s + j, n - j, &cp);
                if (cp == d->replacement) {
                    if (!(i == 0 && d->prepend != NB_PREPEND_NEVER)) NB_TRY(nb_tbuf_put(&sc->tmp, " ", 1));
                } else {
                    NB_TRY(nb_tbuf_put(&sc->tmp, s + j, k));
                }
                j += k;
            }
            NB_TRY(nb_strlist_push(out, sc->tmp.p ? sc->tmp.p : "", sc->tmp.n));
        }
        return NB_OK;
    case NB_DEC_STRIP:
        for (size_t i = 0; i < in->n; i++) {
            const char *s = nb_sl_str(in, i);
            size_t n = in->len[i], a = 0, b = n;
            for (int k = 0; k < d->strip_start && a < n; k++) {
                uint32_t cp;
                size_t l = (size_t)nb_utf8_next(s + a, n - a, &cp);
                if (cp != d->strip_content) break;
                a += l;
            }
            /* HF counts `stop` characters back from the end of the whole token */
            for (int k = 0; k < d->strip_stop && b > 0; k++) {
                size_t c = b - 1;
                while (c > 0 && ((unsigned char)s[c] & 0xC0) == 0x80) c--;
                uint32_t cp;
                nb_utf8_next(s + c, b - c, &cp);
                if (cp != d->strip_content) break;
                b = c;
            }
            if (b < a) b = a;
            NB_TRY(nb_strlist_push(out, s + a, b - a));
        }
        return NB_OK;
    case NB_DEC_REPLACE: {
        size_t clen = strlen(d->content);
        for (size_t i = 0; i < in->n; i++) {
            const char *s = nb_sl_str(in, i);
            NB_TRY(nb_regex_find(&d->re, sc, s, in->len[i], &sc->spans));
            sc->tmp.n = 0;
            for (size_t j = 0; j < sc->spans.n; j++) {
                nb_span sp = sc->spans.v[j];
                if (sp.is_match)
                    NB_TRY(nb_tbuf_put(&sc->tmp, d->content, clen));
                else
                    NB_TRY(nb_tbuf_put(&sc->tmp, s + sp.start, sp.end - sp.start));
            }
            NB_TRY(nb_strlist_push(out, sc->tmp.p ? sc->tmp.p : "", sc->tmp.n));
        }
        return NB_OK;
    }
    case NB_DEC_SEQUENCE:
        break;
    }
    return nb_error(NB_ERR_INTERNAL, "tokenizer: bad decoder kind %d", (int)d->kind);
}

nb_status nb_decode_chain(const nb_decoder *d, nb_tok_scratch *sc, nb_strlist *l)
{
    if (d->kind == NB_DEC_SEQUENCE) {
        for (size_t i = 0; i < d->n_sub; i++) NB_TRY(nb_decode_chain(&d->sub[i], sc, l));
        return NB_OK;
    }
    nb_strlist out = {0};
    nb_status st = nb_dec_one(d, sc, l, &out);
    nb_strlist_free(l);
    *l = out;
    return st;
}

void nb_decoder_free(nb_decoder *d)
{
    if (!d) return;
    nb_regex_free(&d->re);
    free(d->content);
    for (size_t i = 0; i < d->n_sub; i++) nb_decoder_free(&d->sub[i]);
    free(d->sub);
    d->sub = NULL;
    d->n_sub = 0;
    d->content = NULL;
}
