/* Streaming detokenizer: ids in, text deltas out, only once the text is complete.
 * It keeps a small window of recent ids and decodes it twice (the window without and with
 * the new id), emitting the difference when the decoded text grew and does not end in
 * U+FFFD (an incomplete UTF-8 sequence, from byte-level pieces or <0xNN> byte-fallback
 * tokens, decodes to U+FFFD until its last byte arrives). Decoding a window rather than
 * one id keeps context-dependent decoders right (Metaspace drops the leading space of
 * the first token only; ByteFallback joins byte runs). This is the scheme of HF
 * `tokenizers` DecodeStream, plus a flush for the end of the stream, plus one rule HF
 * lacks: with a ByteFallback decoder, text is held while the stream ends in a <0xNN>
 * token, because a later byte can make the whole run invalid (all U+FFFD), and text
 * already emitted cannot be taken back (HF's DecodeStream raises "Invalid prefix").
 * Exercised by tests/tokenizer/test_tokenizer.c (detok_*) and test_vs_hf.py. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "tokenizer/tok_internal.h"

struct nb_detok {
    const nb_tokenizer *tok;
    int skip_special;
    int32_t *ids; /* window */
    size_t n, cap;
    size_t prefix_index; /* the window decodes to `prefix` (all emitted); ids before prefix_index are
                          * context that the next slide drops */
    int in_byte_run;     /* the last kept id is a <0xNN> byte-fallback token */
    nb_tbuf prefix, cur, delta;
    nb_tok_scratch sc;
};

static int nb_ends_fffd(const nb_tbuf *b)
{
    return b->n >= 3 && !memcmp(b->p + b->n - 3, "\xEF\xBF\xBD", 3);
}

nb_status nb_detok_new(const nb_tokenizer *tok, int skip_special, nb_detok **out)
{
    *out = NULL;
    if (!tok) return nb_error(NB_ERR_INVALID_ARG, "nb_detok_new: NULL tokenizer");
    nb_detok *d = calloc(1, sizeof *d);
    if (!d) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (detok)");
    d->tok = tok;
    d->skip_special = skip_special;
    nb_status st = nb_tok_scratch_init(&d->sc);
    if (st == NB_OK) st = nb_tbuf_put(&d->prefix, "", 0);
    if (st == NB_OK) st = nb_tbuf_put(&d->delta, "", 0);
    if (st != NB_OK) {
        nb_detok_free(d);
        return st;
    }
    *out = d;
    return NB_OK;
}

static nb_status nb_detok_set_delta(nb_detok *d, const char *s, size_t n, const char **delta, size_t *len)
{
    d->delta.n = 0;
    NB_TRY(nb_tbuf_put(&d->delta, s, n));
    *delta = d->delta.p;
    if (len) *len = d->delta.n;
    return NB_OK;
}

nb_status nb_detok_push(nb_detok *d, int32_t id, const char **delta, size_t *delta_len)
{
    *delta = "";
    if (delta_len) *delta_len = 0;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 16;
        int32_t *v = realloc(d->ids, cap * sizeof *v);
        if (!v) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (detok)");
        d->ids = v;
        d->cap = cap;
    }
    d->ids[d->n++] = id;
    int cls = nb_tok_stream_class(d->tok, id, d->skip_special);
    if (cls >= 0) d->in_byte_run = cls;
    if (d->in_byte_run) return nb_detok_set_delta(d, "", 0, delta, delta_len);
    NB_TRY(nb_tok_decode_into(d->tok, &d->sc, d->ids, d->n, d->skip_special, &d->cur));
    if (d->cur.n <= d->prefix.n || nb_ends_fffd(&d->cur)) return nb_detok_set_delta(d, "", 0, delta, delta_len);
    if (memcmp(d->cur.p, d->prefix.p, d->prefix.n)) {
        /* the decoder rewrote earlier text: nothing sane to emit yet (HF reports an error) */
        NB_LOG_DEBUG("tok", "detok: decoded text no longer starts with the emitted prefix");
        return nb_detok_set_delta(d, "", 0, delta, delta_len);
    }
    NB_TRY(nb_detok_set_delta(d, d->cur.p + d->prefix.n, d->cur.n - d->prefix.n, delta, delta_len));
    /* slide the window: keep the ids after the old prefix as context */
    size_t keep_from = d->prefix_index, new_prefix_index = d->n - d->prefix_index;
    memmove(d->ids, d->ids + keep_from, (d->n - keep_from) * sizeof *d->ids);
    d->n -= keep_from;
    NB_TRY(nb_tok_decode_into(d->tok, &d->sc, d->ids, d->n, d->skip_special, &d->prefix));
    d->prefix_index = new_prefix_index;
    return NB_OK;
}

nb_status nb_detok_flush(nb_detok *d, const char **delta, size_t *delta_len)
{
    *delta = "";
    if (delta_len) *delta_len = 0;
    NB_TRY(nb_tok_decode_into(d->tok, &d->sc, d->ids, d->n, d->skip_special, &d->cur));
    size_t from = d->cur.n >= d->prefix.n && !memcmp(d->cur.p, d->prefix.p, d->prefix.n) ? d->prefix.n : d->cur.n;
    NB_TRY(nb_detok_set_delta(d, d->cur.p + from, d->cur.n - from, delta, delta_len));
    d->n = 0;
    d->prefix_index = 0;
    d->in_byte_run = 0;
    d->prefix.n = 0;
    d->prefix.p[0] = 0;
    return NB_OK;
}

void nb_detok_free(nb_detok *d)
{
    if (!d) return;
    free(d->ids);
    nb_tbuf_free(&d->prefix);
    nb_tbuf_free(&d->cur);
    nb_tbuf_free(&d->delta);
    nb_tok_scratch_free(&d->sc);
    free(d);
}
