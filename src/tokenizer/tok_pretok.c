/* Pre-tokenizers of tokenizer.json: ByteLevel, Split (regex or literal, five delimiter
 * behaviors, invert), Digits, Metaspace, WhitespaceSplit, Sequence. Each one rewrites the
 * list of pieces; added-token pieces pass through untouched and empty pieces are dropped,
 * as PreTokenizedString::split does in HF `tokenizers`.
 * Exercised by tests/tokenizer/test_tokenizer.c (split_*) and test_vs_hf.py. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_internal.h"

/* Per-character matches of a predicate (HF's Pattern for Fn(char) -> bool and char). */
typedef int (*nb_char_pred)(uint32_t cp, uint32_t arg);

static int nb_pred_eq(uint32_t cp, uint32_t arg) { return cp == arg; }
static int nb_pred_numeric(uint32_t cp, uint32_t arg) { (void)arg; return nb_uc_is_numeric(cp); }
static int nb_pred_space(uint32_t cp, uint32_t arg) { (void)arg; return nb_uc_is_whitespace(cp); }

static nb_status nb_span_add(nb_spans *o, size_t a, size_t b, int m)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        nb_span *v = realloc(o->v, cap * sizeof *v);
        if (!v) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (spans)");
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = (nb_span){a, b, m};
    return NB_OK;
}

static nb_status nb_char_find(nb_char_pred pred, uint32_t arg, const char *s, size_t n, nb_spans *out)
{
    out->n = 0;
    if (n == 0) return nb_span_add(out, 0, 0, 0);
    size_t last = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = (size_t)nb_utf8_next(s + i, n - i, &cp);
        if (pred(cp, arg)) {
            if (last < i) NB_TRY(nb_span_add(out, last, i, 0));
            NB_TRY(nb_span_add(out, i, i + k, 1));
            last = i + k;
        }
        i += k;
    }
    if (last < n) NB_TRY(nb_span_add(out, last, n, 0));
    return NB_OK;
}

/* NormalizedString::split: turn matches into pieces by behavior. Spans are rewritten in
 * place to (start, end, remove). */
static void nb_apply_behavior(nb_spans *sp, nb_split_behavior b, int invert)
{
    if (invert)
        for (size_t i = 0; i < sp->n; i++) sp->v[i].is_match = !sp->v[i].is_match;
    size_t w = 0;
    int prev = 0;
    switch (b) {
    case NB_SPLIT_REMOVED:
        return;
    case NB_SPLIT_ISOLATED:
        for (size_t i = 0; i < sp->n; i++) sp->v[i].is_match = 0;
        return;
    case NB_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < sp->n; i++) {
            int m = sp->v[i].is_match;
            if (m == prev && w > 0)
                sp->v[w - 1].end = sp->v[i].end;
            else
                sp->v[w++] = (nb_span){sp->v[i].start, sp->v[i].end, 0};
            prev = m;
        }
        sp->n = w;
        return;
    case NB_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < sp->n; i++) {
            int m = sp->v[i].is_match;
            if (m && !prev && w > 0)
                sp->v[w - 1].end = sp->v[i].end;
            else
                sp->v[w++] = (nb_span){sp->v[i].start, sp->v[i].end, 0};
            prev = m;
        }
        sp->n = w;
        return;
    case NB_SPLIT_MERGED_NEXT: {
        /* fold from the right, writing from the right end of the array */
        size_t r = sp->n; /* output occupies v[r..n) */
        for (size_t i = sp->n; i-- > 0;) {
            nb_span cur = sp->v[i];
            if (cur.is_match && !prev && r < sp->n)
                sp->v[r].start = cur.start;
            else
                sp->v[--r] = (nb_span){cur.start, cur.end, 0};
            prev = cur.is_match;
        }
        memmove(sp->v, sp->v + r, (sp->n - r) * sizeof *sp->v);
        sp->n -= r;
        return;
    }
    }
}

/* Emit the kept spans of piece `pc` (text at base) as pieces of out. */
static nb_status nb_emit_spans(const nb_spans *sp, const nb_piece *pc, nb_pieces *out)
{
    for (size_t i = 0; i < sp->n; i++) {
        const nb_span *s = &sp->v[i];
        if (s->is_match || s->end == s->start) continue;
        NB_TRY(nb_pieces_push(out, pc->off + s->start, s->end - s->start, -1, pc->origin && s->start == 0));
    }
    return NB_OK;
}

static nb_status nb_pretok_one(const nb_pretok *pt, nb_tok_scratch *sc, nb_pieces *p);

/* Rebuild p->v by running fn over each non-added piece; fn pushes onto `out`, whose
 * arena is p->arena (new text may be appended to it). */
static nb_status nb_pretok_piece(const nb_pretok *pt, nb_tok_scratch *sc, nb_pieces *p, const nb_piece *pc,
                                 nb_pieces *out)
{
    switch (pt->kind) {
    case NB_PRE_SPLIT:
        NB_TRY(nb_regex_find(&pt->re, sc, out->arena.p + pc->off, pc->len, &sc->spans));
        nb_apply_behavior(&sc->spans, pt->behavior, pt->invert);
        return nb_emit_spans(&sc->spans, pc, out);
    case NB_PRE_DIGITS:
        NB_TRY(nb_char_find(nb_pred_numeric, 0, out->arena.p + pc->off, pc->len, &sc->spans));
        nb_apply_behavior(&sc->spans, pt->individual_digits ? NB_SPLIT_ISOLATED : NB_SPLIT_CONTIGUOUS, 0);
        return nb_emit_spans(&sc->spans, pc, out);
    case NB_PRE_WHITESPACE_SPLIT:
        NB_TRY(nb_char_find(nb_pred_space, 0, out->arena.p + pc->off, pc->len, &sc->spans));
        nb_apply_behavior(&sc->spans, NB_SPLIT_REMOVED, 0);
        return nb_emit_spans(&sc->spans, pc, out);
    case NB_PRE_BYTELEVEL: {
        nb_piece cur = *pc;
        if (pt->add_prefix_space && (cur.len == 0 || out->arena.p[cur.off] != ' ')) {
            size_t off = out->arena.n;
            NB_TRY(nb_tbuf_reserve(&out->arena, cur.len + 1));
            out->arena.p[out->arena.n++] = ' ';
            memcpy(out->arena.p + out->arena.n, out->arena.p + cur.off, cur.len);
            out->arena.n += cur.len;
            cur.off = off;
            cur.len += 1;
        }
        size_t first = out->n;
        if (pt->use_regex) {
            NB_TRY(nb_regex_find(&pt->re, sc, out->arena.p + cur.off, cur.len, &sc->spans));
            nb_apply_behavior(&sc->spans, NB_SPLIT_ISOLATED, 0);
            NB_TRY(nb_emit_spans(&sc->spans, &cur, out));
        } else if (cur.len) {
            NB_TRY(nb_pieces_push(out, cur.off, cur.len, -1, cur.origin));
        }
        /* map every byte to its GPT-2 character */
        for (size_t i = first; i < out->n; i++) {
            nb_piece *q = &out->v[i];
            size_t off = out->arena.n;
            NB_TRY(nb_tbuf_reserve(&out->arena, q->len * 2));
            const unsigned char *src = (const unsigned char *)out->arena.p + q->off;
            char *dst = out->arena.p + off;
            size_t k = 0;
            for (size_t j = 0; j < q->len; j++) {
                uint16_t c = nb_byte_char[src[j]];
                if (c < 0x80) {
                    dst[k++] = (char)c;
                } else {
                    dst[k++] = (char)(0xC0 | (c >> 6));
                    dst[k++] = (char)(0x80 | (c & 0x3F));
                }
            }
            out->arena.n += k;
            out->arena.p[out->arena.n] = 0;
            q->off = off;
            q->len = k;
        }
        return NB_OK;
    }
    case NB_PRE_METASPACE: {
        char rep[4];
        size_t rl = (size_t)nb_utf8_put(pt->replacement, rep);
        size_t off = out->arena.n;
        const char *src0 = out->arena.p + pc->off;
        int starts_rep = pc->len >= rl && !memcmp(src0, rep, rl);
        int starts_space = pc->len >= 1 && src0[0] == ' ';
        int prepend = 0;
        if (!starts_rep && !starts_space) /* a leading space becomes the replacement */
            prepend = pt->prepend == NB_PREPEND_ALWAYS || (pt->prepend == NB_PREPEND_FIRST && pc->origin);
        NB_TRY(nb_tbuf_reserve(&out->arena, pc->len * rl + rl));
        const char *src = out->arena.p + pc->off;
        char *dst = out->arena.p + off;
        size_t k = 0;
        if (prepend) {
            memcpy(dst, rep, rl);
            k = rl;
        }
        for (size_t j = 0; j < pc->len; j++) {
            if (src[j] == ' ') {
                memcpy(dst + k, rep, rl);
                k += rl;
            } else {
                dst[k++] = src[j];
            }
        }
        out->arena.n += k;
        out->arena.p[out->arena.n] = 0;
        nb_piece cur = {off, k, -1, pc->origin};
        if (!pt->split) return k ? nb_pieces_push(out, cur.off, cur.len, -1, cur.origin) : NB_OK;
        NB_TRY(nb_char_find(nb_pred_eq, pt->replacement, out->arena.p + cur.off, cur.len, &sc->spans));
        nb_apply_behavior(&sc->spans, NB_SPLIT_MERGED_NEXT, 0);
        return nb_emit_spans(&sc->spans, &cur, out);
    }
    case NB_PRE_SEQUENCE:
        break;
    }
    (void)p;
    return nb_error(NB_ERR_INTERNAL, "tokenizer: bad pre-tokenizer kind %d", (int)pt->kind);
}

static nb_status nb_pretok_one(const nb_pretok *pt, nb_tok_scratch *sc, nb_pieces *p)
{
    if (pt->kind == NB_PRE_SEQUENCE) {
        for (size_t i = 0; i < pt->n_sub; i++) NB_TRY(nb_pretok_one(&pt->sub[i], sc, p));
        return NB_OK;
    }
    nb_pieces out = {.arena = p->arena};
    nb_status st = NB_OK;
    for (size_t i = 0; i < p->n && st == NB_OK; i++) {
        nb_piece pc = p->v[i];
        if (pc.id >= 0) {
            st = nb_pieces_push(&out, pc.off, pc.len, pc.id, pc.origin);
            continue;
        }
        st = nb_pretok_piece(pt, sc, p, &pc, &out);
    }
    free(p->v);
    p->v = out.v;
    p->n = out.n;
    p->cap = out.cap;
    p->arena = out.arena;
    return st;
}

nb_status nb_pretokenize(const nb_pretok *pt, nb_tok_scratch *sc, nb_pieces *p)
{
    if (!pt) return NB_OK;
    return nb_pretok_one(pt, sc, p);
}

void nb_pretok_free(nb_pretok *pt)
{
    if (!pt) return;
    nb_regex_free(&pt->re);
    for (size_t i = 0; i < pt->n_sub; i++) nb_pretok_free(&pt->sub[i]);
    free(pt->sub);
    pt->sub = NULL;
    pt->n_sub = 0;
}
