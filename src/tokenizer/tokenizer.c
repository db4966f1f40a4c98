/* The tokenizer: load, encode (added tokens -> normalizer -> pre-tokenizer -> BPE ->
 * post-processor, as HF `tokenizers` encode_single_sequence does), decode, accessors and
 * the built-in byte tokenizer for synthetic models.
 * Exercised by tests/tokenizer/ (test_tokenizer.c, test_vs_hf.py) and
 *   build/nibble tokenize --model DIR --text "hello"  */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/file.h"
#include "base/log.h"
#include "tokenizer/tok_internal.h"

static char *nb_dup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* ---- lookup tables ---------------------------------------------------------------------- */

static const nb_tokenizer *nb_sort_ctx; /* only used during load, under no concurrency */

static int nb_cmp_added_len(const void *a, const void *b)
{
    const nb_added *x = &nb_sort_ctx->added[*(const uint32_t *)a], *y = &nb_sort_ctx->added[*(const uint32_t *)b];
    if (x->match_len != y->match_len) return x->match_len > y->match_len ? -1 : 1;
    return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

static pthread_mutex_t nb_sort_lock = PTHREAD_MUTEX_INITIALIZER;

nb_status nb_tok_finish(nb_tokenizer *t)
{
    NB_TRY(nb_bpe_finish(&t->bpe));
    t->byte_fallback_decoder = t->decoder && nb_dec_has_bytefallback(t->decoder);
    int32_t n = t->bpe.n_ids;
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].id + 1 > n) n = t->added[i].id + 1;
    t->n_vocab = n;
    t->added_by_id = malloc((size_t)(n ? n : 1) * sizeof *t->added_by_id);
    if (!t->added_by_id) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    for (int32_t i = 0; i < n; i++) t->added_by_id[i] = -1;

    nb_tok_scratch sc;
    NB_TRY(nb_tok_scratch_init(&sc));
    nb_tbuf norm = {0};
    nb_status st = NB_OK;
    for (size_t i = 0; i < t->n_added && st == NB_OK; i++) {
        nb_added *a = &t->added[i];
        t->added_by_id[a->id] = (int32_t)i;
        st = nb_strmap_put(&t->added_map, a->content, a->len, (int32_t)i);
        if (st != NB_OK) break;
        /* a normalized token is matched in normalized text, so it is matched by its own
         * normalized form */
        if (a->normalized && t->normalizer) {
            st = nb_normalize(t->normalizer, &sc, a->content, a->len, &norm);
            if (st != NB_OK) break;
            a->match = nb_dup(norm.p ? norm.p : "", norm.n);
            a->match_len = norm.n;
        } else {
            a->match = nb_dup(a->content, a->len);
            a->match_len = a->len;
        }
        if (!a->match) st = nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    nb_tbuf_free(&norm);
    nb_tok_scratch_free(&sc);
    NB_TRY(st);

    for (int w = 0; w < 2; w++) {
        for (size_t i = 0; i < t->n_added; i++) {
            const nb_added *a = &t->added[i];
            if (a->normalized != w || a->match_len == 0) continue;
            unsigned char c = (unsigned char)a->match[0];
            uint32_t *v = realloc(t->first_idx[w][c], (t->first_n[w][c] + 1) * sizeof *v);
            if (!v) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
            v[t->first_n[w][c]++] = (uint32_t)i;
            t->first_idx[w][c] = v;
            t->has_added[w] = 1;
        }
        pthread_mutex_lock(&nb_sort_lock);
        nb_sort_ctx = t;
        for (int c = 0; c < 256; c++)
            if (t->first_n[w][c] > 1) qsort(t->first_idx[w][c], t->first_n[w][c], sizeof(uint32_t), nb_cmp_added_len);
        pthread_mutex_unlock(&nb_sort_lock);
    }

    t->bos_id = t->bos ? nb_tokenizer_token_to_id(t, t->bos) : -1;
    t->pad_id = t->pad ? nb_tokenizer_token_to_id(t, t->pad) : -1;
    if (t->eos) {
        int32_t id = nb_tokenizer_token_to_id(t, t->eos);
        int dup = 0;
        for (size_t i = 0; i < t->n_eos; i++) dup |= t->eos_ids[i] == id;
        if (id >= 0 && !dup) {
            int32_t *v = realloc(t->eos_ids, (t->n_eos + 1) * sizeof *v);
            if (!v) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
            v[t->n_eos++] = id;
            t->eos_ids = v;
        }
    }
    return NB_OK;
}

/* ---- construction ----------------------------------------------------------------------- */

static nb_status nb_tok_new(nb_tokenizer **out)
{
    nb_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    t->bos_id = t->pad_id = -1;
    nb_status st = nb_bpe_init(&t->bpe);
    if (st != NB_OK) {
        free(t);
        return st;
    }
    *out = t;
    return NB_OK;
}

nb_status nb_tokenizer_load_json(const char *json, size_t len, const char *what, nb_tokenizer **out)
{
    nb_tokenizer *t = NULL;
    *out = NULL;
    NB_TRY(nb_tok_new(&t));
    nb_status st = nb_tok_parse_json(t, json, len, what);
    if (st == NB_OK) st = nb_tok_finish(t);
    if (st != NB_OK) {
        nb_tokenizer_free(t);
        return st;
    }
    *out = t;
    return NB_OK;
}

nb_status nb_tokenizer_load(const char *dir, nb_tokenizer **out)
{
    char path[4096];
    char *json;
    size_t len;
    nb_tokenizer *t = NULL;
    *out = NULL;
    nb_path_join(path, sizeof path, dir, "tokenizer.json");
    NB_TRY(nb_read_file(path, &json, &len, 0));
    nb_status st = nb_tok_new(&t);
    if (st == NB_OK) {
        st = nb_tok_parse_json(t, json, len, path);
        if (st == NB_OK) st = nb_tok_load_configs(t, dir);
        if (st == NB_OK) st = nb_tok_finish(t);
        if (st != NB_OK) nb_tokenizer_free(t);
    }
    free(json);
    NB_TRY(st);
    NB_LOG_DEBUG("tok", "%s: %d ids, %zu added tokens, %zu chat templates", dir, t->n_vocab, t->n_added,
                 t->n_templates);
    *out = t;
    return NB_OK;
}

nb_status nb_tokenizer_builtin_bytes(const char *const *specials, size_t n_specials, nb_tokenizer **out)
{
    nb_tokenizer *t = NULL;
    *out = NULL;
    NB_TRY(nb_tok_new(&t));
    nb_status st = NB_OK;
    t->bpe.id_to_token = calloc(256, sizeof *t->bpe.id_to_token);
    t->added = calloc(n_specials ? n_specials : 1, sizeof *t->added);
    t->pretok = calloc(1, sizeof *t->pretok);
    t->decoder = calloc(1, sizeof *t->decoder);
    if (!t->bpe.id_to_token || !t->added || !t->pretok || !t->decoder) {
        st = nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        goto fail;
    }
    t->bpe.n_ids = 256;
    for (int b = 0; b < 256 && st == NB_OK; b++) {
        char enc[4];
        int k = nb_utf8_put(nb_byte_char[b], enc);
        t->bpe.id_to_token[b] = nb_dup(enc, (size_t)k);
        st = t->bpe.id_to_token[b] ? nb_strmap_put(&t->bpe.vocab, enc, (size_t)k, b)
                                   : nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    for (size_t i = 0; i < n_specials && st == NB_OK; i++) {
        if (!specials[i] || !*specials[i]) {
            st = nb_error(NB_ERR_INVALID_ARG, "nb_tokenizer_builtin_bytes: specials[%zu] is empty", i);
            break;
        }
        nb_added *a = &t->added[t->n_added++];
        a->len = strlen(specials[i]);
        a->content = nb_dup(specials[i], a->len);
        a->id = 256 + (int32_t)i;
        a->special = 1;
        if (!a->content) st = nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    if (st != NB_OK) goto fail;
    t->pretok->kind = NB_PRE_BYTELEVEL; /* no regex: without merges it cannot change the ids */
    t->decoder->kind = NB_DEC_BYTELEVEL;
    for (size_t i = 0; i < n_specials; i++) {
        const char *s = specials[i];
        if (!strcmp(s, "<|endoftext|>") || !strcmp(s, "<|user|>") || !strcmp(s, "<|observation|>")) {
            int32_t *v = realloc(t->eos_ids, (t->n_eos + 1) * sizeof *v);
            if (!v) {
                st = nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
                goto fail;
            }
            v[t->n_eos++] = 256 + (int32_t)i;
            t->eos_ids = v;
            if (!strcmp(s, "<|endoftext|>") && !t->eos) {
                t->eos = nb_dup(s, strlen(s));
                t->pad = nb_dup(s, strlen(s));
            }
        }
    }
    if ((st = nb_tok_finish(t)) != NB_OK) goto fail;
    *out = t;
    return NB_OK;
fail:
    nb_tokenizer_free(t);
    return st;
}

void nb_tokenizer_free(nb_tokenizer *t)
{
    if (!t) return;
    nb_bpe_free(&t->bpe);
    if (t->normalizer) nb_normalizer_free(t->normalizer);
    free(t->normalizer);
    if (t->pretok) nb_pretok_free(t->pretok);
    free(t->pretok);
    if (t->decoder) nb_decoder_free(t->decoder);
    free(t->decoder);
    free(t->post.before);
    free(t->post.after);
    for (size_t i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].match);
    }
    free(t->added);
    nb_strmap_free(&t->added_map);
    free(t->added_by_id);
    for (int w = 0; w < 2; w++)
        for (int c = 0; c < 256; c++) free(t->first_idx[w][c]);
    free(t->bos);
    free(t->eos);
    free(t->pad);
    free(t->eos_ids);
    for (size_t i = 0; i < t->n_templates; i++) {
        free(t->templates[i].name);
        free(t->templates[i].source);
    }
    free(t->templates);
    free(t);
}

/* ---- added-token matching (AddedVocabulary::find_matches) ------------------------------- */

static int nb_prev_cp(const char *s, size_t end, uint32_t *cp, size_t *start)
{
    if (end == 0) return 0;
    size_t c = end - 1;
    while (c > 0 && ((unsigned char)s[c] & 0xC0) == 0x80) c--;
    nb_utf8_next(s + c, end - c, cp);
    *start = c;
    return 1;
}

/* Split s[0..n) on added tokens of trie `w`; pushes pieces (text copied into p's arena
 * for gaps, empty text for tokens). `origin`: s starts at original offset 0. */
static nb_status nb_split_added(const nb_tokenizer *t, int w, const char *s, size_t n, int origin, nb_pieces *p)
{
    if (!t->has_added[w]) return n ? nb_pieces_push_text(p, s, n, -1, origin) : NB_OK;
    size_t start_offset = 0, i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        int best = -1;
        for (uint32_t k = 0; k < t->first_n[w][c]; k++) {
            const nb_added *a = &t->added[t->first_idx[w][c][k]];
            if (a->match_len <= n - i && !memcmp(s + i, a->match, a->match_len)) {
                best = (int)t->first_idx[w][c][k];
                break;
            }
        }
        if (best < 0) {
            i++;
            continue;
        }
        const nb_added *a = &t->added[best];
        size_t start = i, stop = i + a->match_len;
        i = stop; /* matching resumes after the raw match, whatever happens below */
        uint32_t cp;
        size_t at;
        if (a->single_word) {
            int start_space = start == 0 || !(nb_prev_cp(s, start, &cp, &at) && nb_uc_is_word(cp));
            int stop_space = stop == n || (nb_utf8_next(s + stop, n - stop, &cp), !nb_uc_is_word(cp));
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (nb_prev_cp(s, ns, &cp, &at) && nb_uc_is_whitespace(cp)) ns = at;
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            while (stop < n) {
                int k = nb_utf8_next(s + stop, n - stop, &cp);
                if (!nb_uc_is_whitespace(cp)) break;
                stop += (size_t)k;
            }
        }
        if (start_offset < start)
            NB_TRY(nb_pieces_push_text(p, s + start_offset, start - start_offset, -1, origin && start_offset == 0));
        NB_TRY(nb_pieces_push(p, p->arena.n, 0, a->id, 0));
        start_offset = stop;
    }
    if (start_offset < n) NB_TRY(nb_pieces_push_text(p, s + start_offset, n - start_offset, -1, origin && start_offset == 0));
    return NB_OK;
}

/* ---- encode ----------------------------------------------------------------------------- */

nb_status nb_tokenizer_encode(const nb_tokenizer *tok, const char *text, size_t len, int add_special, int32_t **ids_out,
                              size_t *n_out)
{
    nb_tokenizer *t = (nb_tokenizer *)tok; /* only the BPE cache is written (under its lock) */
    *ids_out = NULL;
    *n_out = 0;
    if (!t || (!text && len)) return nb_error(NB_ERR_INVALID_ARG, "nb_tokenizer_encode: NULL tokenizer or text");
    nb_tok_scratch *sc;
    NB_TRY(nb_tok_scratch_thread(&sc));
    nb_tbuf clean = {0}, norm = {0};
    nb_pieces raw = {0}, p = {0};
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    nb_status st = NB_OK;

    if (len && !nb_utf8_valid(text, len)) { /* the reference sees bytes.decode('utf-8', 'replace') */
        if ((st = nb_utf8_lossy(&clean, text, len)) != NB_OK) goto done;
        text = clean.p;
        len = clean.n;
    }
    /* 1. non-normalized added tokens on the raw text */
    if ((st = nb_split_added(t, 0, text ? text : "", len, 1, &raw)) != NB_OK) goto done;
    /* 2. normalize the other pieces, then split on normalized added tokens */
    for (size_t i = 0; i < raw.n && st == NB_OK; i++) {
        nb_piece pc = raw.v[i];
        if (pc.id >= 0) {
            st = nb_pieces_push(&p, p.arena.n, 0, pc.id, 0);
            continue;
        }
        if (t->normalizer) {
            if ((st = nb_normalize(t->normalizer, sc, raw.arena.p + pc.off, pc.len, &norm)) != NB_OK) break;
            st = nb_split_added(t, 1, norm.p ? norm.p : "", norm.n, pc.origin, &p);
        } else {
            st = nb_split_added(t, 1, raw.arena.p + pc.off, pc.len, pc.origin, &p);
        }
    }
    if (st != NB_OK) goto done;
    /* 3. pre-tokenize, 4. BPE each piece */
    if ((st = nb_pretokenize(t->pretok, sc, &p)) != NB_OK) goto done;
    for (size_t i = 0; i < p.n && st == NB_OK; i++) {
        const nb_piece *pc = &p.v[i];
        if (pc->id >= 0) {
            if (n == cap) {
                size_t c2 = cap ? cap * 2 : 64;
                int32_t *v = realloc(ids, c2 * sizeof *v);
                if (!v) {
                    st = nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (ids)");
                    break;
                }
                ids = v;
                cap = c2;
            }
            ids[n++] = pc->id;
        } else {
            st = nb_bpe_encode_word(&t->bpe, sc, p.arena.p + pc->off, pc->len, &ids, &n, &cap);
        }
    }
    if (st != NB_OK) goto done;
    /* 5. post-processor */
    size_t extra = add_special ? t->post.n_before + t->post.n_after : 0;
    int32_t *res = malloc((n + extra ? n + extra : 1) * sizeof *res);
    if (!res) {
        st = nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (ids)");
        goto done;
    }
    size_t k = 0;
    if (add_special && t->post.n_before) {
        memcpy(res, t->post.before, t->post.n_before * sizeof *res);
        k = t->post.n_before;
    }
    if (n) memcpy(res + k, ids, n * sizeof *res);
    k += n;
    if (add_special && t->post.n_after) {
        memcpy(res + k, t->post.after, t->post.n_after * sizeof *res);
        k += t->post.n_after;
    }
    *ids_out = res;
    *n_out = k;
done:
    free(ids);
    nb_tbuf_free(&clean);
    nb_tbuf_free(&norm);
    nb_pieces_free(&raw);
    nb_pieces_free(&p);
    return st;
}

/* ---- decode ----------------------------------------------------------------------------- */

static const char *nb_token_str(const nb_tokenizer *t, int32_t id, size_t *len, int *special)
{
    *special = 0;
    if (id < 0 || id >= t->n_vocab) return NULL;
    int32_t a = t->added_by_id[id];
    const char *s;
    if (a >= 0) {
        s = t->added[a].content;
        *len = t->added[a].len;
    } else {
        s = id < t->bpe.n_ids ? t->bpe.id_to_token[id] : NULL;
        if (!s) return NULL;
        *len = strlen(s);
    }
    /* HF skips by token text: any token whose text is a special added token */
    int32_t k = nb_strmap_get(&t->added_map, s, *len);
    *special = k >= 0 && t->added[k].special;
    return s;
}

nb_status nb_tok_decode_into(const nb_tokenizer *t, nb_tok_scratch *sc, const int32_t *ids, size_t n, int skip_special,
                             nb_tbuf *out)
{
    nb_strlist l = {0};
    nb_status st = NB_OK;
    out->n = 0;
    NB_TRY(nb_tbuf_reserve(out, 0));
    out->p[0] = 0;
    for (size_t i = 0; i < n && st == NB_OK; i++) {
        size_t len;
        int special;
        const char *s = nb_token_str(t, ids[i], &len, &special);
        if (!s || (skip_special && special)) continue; /* unknown ids are skipped, as HF does */
        st = nb_strlist_push(&l, s, len);
    }
    if (st == NB_OK && t->decoder) st = nb_decode_chain(t->decoder, sc, &l);
    for (size_t i = 0; i < l.n && st == NB_OK; i++) {
        if (!t->decoder && i) st = nb_tbuf_put(out, " ", 1);
        if (st == NB_OK) st = nb_tbuf_put(out, l.text.p + l.off[i], l.len[i]);
    }
    nb_strlist_free(&l);
    return st;
}

int nb_tok_stream_class(const nb_tokenizer *t, int32_t id, int skip_special)
{
    size_t len;
    int special;
    const char *s = nb_token_str(t, id, &len, &special);
    if (!s || (skip_special && special)) return -1;
    return t->byte_fallback_decoder && nb_byte_token(s, len) >= 0;
}

nb_status nb_tokenizer_decode(const nb_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out,
                              size_t *out_len)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || (!ids && n)) return nb_error(NB_ERR_INVALID_ARG, "nb_tokenizer_decode: NULL tokenizer or ids");
    nb_tok_scratch *sc;
    NB_TRY(nb_tok_scratch_thread(&sc));
    nb_tbuf b = {0};
    nb_status st = nb_tok_decode_into(t, sc, ids, n, skip_special, &b);
    if (st != NB_OK) {
        nb_tbuf_free(&b);
        return st;
    }
    *out = b.p;
    if (out_len) *out_len = b.n;
    return NB_OK;
}

/* ---- accessors -------------------------------------------------------------------------- */

int32_t nb_tokenizer_vocab_size(const nb_tokenizer *t) { return t->n_vocab; }

int32_t nb_tokenizer_token_to_id(const nb_tokenizer *t, const char *token)
{
    size_t n = strlen(token);
    int32_t a = nb_strmap_get(&t->added_map, token, n);
    if (a >= 0) return t->added[a].id;
    return nb_strmap_get(&t->bpe.vocab, token, n);
}

const char *nb_tokenizer_id_to_token(const nb_tokenizer *t, int32_t id)
{
    size_t len;
    int special;
    return nb_token_str(t, id, &len, &special);
}

int nb_tokenizer_is_special(const nb_tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab || t->added_by_id[id] < 0) return 0;
    return t->added[t->added_by_id[id]].special;
}

const char *nb_tokenizer_bos_token(const nb_tokenizer *t) { return t->bos; }
const char *nb_tokenizer_eos_token(const nb_tokenizer *t) { return t->eos; }
const char *nb_tokenizer_pad_token(const nb_tokenizer *t) { return t->pad; }
int32_t nb_tokenizer_bos_id(const nb_tokenizer *t) { return t->bos_id; }
int32_t nb_tokenizer_pad_id(const nb_tokenizer *t) { return t->pad_id; }
int nb_tokenizer_add_bos(const nb_tokenizer *t) { return t->add_bos; }

size_t nb_tokenizer_eos_ids(const nb_tokenizer *t, const int32_t **ids)
{
    *ids = t->eos_ids;
    return t->n_eos;
}

int nb_tokenizer_is_eos(const nb_tokenizer *t, int32_t id)
{
    for (size_t i = 0; i < t->n_eos; i++)
        if (t->eos_ids[i] == id) return 1;
    return 0;
}

const char *nb_tokenizer_chat_template(const nb_tokenizer *t, const char *name)
{
    if (!name) name = "default";
    for (size_t i = 0; i < t->n_templates; i++)
        if (!strcmp(t->templates[i].name, name)) return t->templates[i].source;
    return NULL;
}

size_t nb_tokenizer_chat_template_count(const nb_tokenizer *t) { return t->n_templates; }

const char *nb_tokenizer_chat_template_name(const nb_tokenizer *t, size_t i)
{
    return i < t->n_templates ? t->templates[i].name : NULL;
}
