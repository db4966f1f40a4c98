/* The BPE model: vocabulary, merge ranks and the merge loop of HF `tokenizers`
 * (models/bpe: merge_word + Word::merge_all), with unk/fuse_unk, byte_fallback,
 * ignore_merges, continuing_subword_prefix and end_of_word_suffix; dropout is ignored.
 * Merges are applied lowest rank first, leftmost first among equal ranks, through a
 * binary heap over a linked list of symbols; finished words go to a direct-mapped cache.
 * Exercised by tests/tokenizer/test_tokenizer.c (bpe_*) and test_vs_hf.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_internal.h"

nb_status nb_bpe_init(nb_bpe *m)
{
    memset(m, 0, sizeof *m);
    m->unk_id = -1;
    for (int i = 0; i < 256; i++) m->byte_ids[i] = -1;
    pthread_mutex_init(&m->cache_lock, NULL);
    m->cache = calloc(NB_BPE_CACHE_SLOTS, sizeof *m->cache);
    if (!m->cache) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (BPE cache)");
    return NB_OK;
}

static inline uint64_t nb_merge_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)(b + 1);
}

static inline size_t nb_merge_slot_of(uint64_t k, size_t cap)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

static const nb_merge_slot *nb_merge_find(const nb_bpe *m, int32_t a, int32_t b)
{
    if (!m->merges_cap) return NULL;
    uint64_t k = nb_merge_key(a, b);
    size_t j = nb_merge_slot_of(k, m->merges_cap);
    while (m->merges[j].key) {
        if (m->merges[j].key == k) return &m->merges[j];
        j = (j + 1) & (m->merges_cap - 1);
    }
    return NULL;
}

nb_status nb_bpe_add_merge(nb_bpe *m, int32_t a, int32_t b, int32_t rank, int32_t new_id)
{
    /* ranks are dense (the line number), so rank bounds the count: load factor <= 1/2 */
    static const size_t min_cap = 1024;
    if (!m->merges_cap || (size_t)rank * 2 + 2 > m->merges_cap) {
        size_t cap = m->merges_cap ? m->merges_cap * 2 : min_cap;
        while ((size_t)rank * 2 + 2 > cap) cap *= 2;
        nb_merge_slot *nm = calloc(cap, sizeof *nm);
        if (!nm) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (merges)");
        for (size_t i = 0; i < m->merges_cap; i++) {
            if (!m->merges[i].key) continue;
            size_t j = nb_merge_slot_of(m->merges[i].key, cap);
            while (nm[j].key) j = (j + 1) & (cap - 1);
            nm[j] = m->merges[i];
        }
        free(m->merges);
        m->merges = nm;
        m->merges_cap = cap;
    }
    uint64_t k = nb_merge_key(a, b);
    size_t j = nb_merge_slot_of(k, m->merges_cap);
    while (m->merges[j].key && m->merges[j].key != k) j = (j + 1) & (m->merges_cap - 1);
    /* a repeated pair: the later line wins, as collecting into a HashMap does */
    m->merges[j] = (nb_merge_slot){k, rank, new_id};
    return NB_OK;
}

nb_status nb_bpe_finish(nb_bpe *m)
{
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = nb_strmap_get(&m->vocab, name, 6);
    }
    if (m->unk_token) m->unk_id = nb_strmap_get(&m->vocab, m->unk_token, strlen(m->unk_token));
    return NB_OK;
}

/* ---- the merge loop ------------------------------------------------------------------- */

typedef struct nb_sym {
    int32_t id;
    int32_t prev, next;
    uint32_t len; /* bytes; 0 once merged away */
} nb_sym;

typedef struct nb_heap_item {
    int32_t rank, pos, new_id;
} nb_heap_item;

typedef struct nb_word {
    nb_sym *sym;
    size_t n, cap;
    nb_heap_item *heap;
    size_t hn, hcap;
} nb_word;

static nb_status nb_word_add(nb_word *w, int32_t id, uint32_t len)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 32;
        nb_sym *s = realloc(w->sym, cap * sizeof *s);
        if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (BPE word)");
        w->sym = s;
        w->cap = cap;
    }
    int32_t i = (int32_t)w->n;
    w->sym[i] = (nb_sym){id, i - 1, -1, len};
    if (i > 0) w->sym[i - 1].next = i;
    w->n++;
    return NB_OK;
}

static inline int nb_heap_less(nb_heap_item a, nb_heap_item b)
{
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static nb_status nb_heap_push(nb_word *w, nb_heap_item it)
{
    if (w->hn == w->hcap) {
        size_t cap = w->hcap ? w->hcap * 2 : 32;
        nb_heap_item *h = realloc(w->heap, cap * sizeof *h);
        if (!h) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (BPE heap)");
        w->heap = h;
        w->hcap = cap;
    }
    size_t i = w->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!nb_heap_less(it, w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = it;
    return NB_OK;
}

static nb_heap_item nb_heap_pop(nb_word *w)
{
    nb_heap_item top = w->heap[0], last = w->heap[--w->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->hn) break;
        if (c + 1 < w->hn && nb_heap_less(w->heap[c + 1], w->heap[c])) c++;
        if (!nb_heap_less(w->heap[c], last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->hn) w->heap[i] = last;
    return top;
}

static nb_status nb_word_merge_all(const nb_bpe *m, nb_word *w)
{
    w->hn = 0;
    for (size_t i = 0; i + 1 < w->n; i++) {
        const nb_merge_slot *mg = nb_merge_find(m, w->sym[i].id, w->sym[i + 1].id);
        if (mg) NB_TRY(nb_heap_push(w, (nb_heap_item){mg->rank, (int32_t)i, mg->new_id}));
    }
    while (w->hn) {
        nb_heap_item top = nb_heap_pop(w);
        nb_sym *cur = &w->sym[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        int32_t next_pos = cur->next;
        nb_sym right = w->sym[next_pos];
        const nb_merge_slot *mg = nb_merge_find(m, cur->id, right.id);
        if (!mg || mg->new_id != top.new_id) continue; /* stale entry */
        cur->id = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        w->sym[next_pos].len = 0;
        if (right.next >= 0 && (size_t)right.next < w->n) w->sym[right.next].prev = top.pos;
        if (cur->prev >= 0) {
            const nb_merge_slot *pm = nb_merge_find(m, w->sym[cur->prev].id, cur->id);
            if (pm) NB_TRY(nb_heap_push(w, (nb_heap_item){pm->rank, cur->prev, pm->new_id}));
            cur = &w->sym[top.pos];
        }
        if (cur->next >= 0) {
            const nb_merge_slot *nm = nb_merge_find(m, cur->id, w->sym[cur->next].id);
            if (nm) NB_TRY(nb_heap_push(w, (nb_heap_item){nm->rank, top.pos, nm->new_id}));
        }
    }
    return NB_OK;
}

/* merge_word: split w into characters (vocab lookups with prefix/suffix, byte fallback,
 * unk), then merge. */
static nb_status nb_bpe_merge_word(const nb_bpe *m, const char *s, size_t n, nb_word *w)
{
    w->n = 0;
    int32_t unk_id = -1;
    uint32_t unk_len = 0;
    int have_unk = 0;
    char small[64];
    size_t plen = m->cont_prefix ? strlen(m->cont_prefix) : 0;
    size_t slen = m->end_suffix ? strlen(m->end_suffix) : 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = (size_t)nb_utf8_next(s + i, n - i, &cp);
        int first = i == 0, last = i + k >= n;
        const char *key = s + i;
        size_t klen = k;
        if ((!first && plen) || (last && slen)) {
            if (plen + k + slen > sizeof small) return nb_error(NB_ERR_INTERNAL, "tokenizer: BPE affix too long");
            size_t o = 0;
            if (!first && plen) {
                memcpy(small, m->cont_prefix, plen);
                o = plen;
            }
            memcpy(small + o, s + i, k);
            o += k;
            if (last && slen) {
                memcpy(small + o, m->end_suffix, slen);
                o += slen;
            }
            key = small;
            klen = o;
        }
        int32_t id = nb_strmap_get(&m->vocab, key, klen);
        if (id >= 0) {
            if (have_unk) {
                NB_TRY(nb_word_add(w, unk_id, unk_len));
                have_unk = 0;
            }
            NB_TRY(nb_word_add(w, id, (uint32_t)k));
        } else {
            int done = 0;
            if (m->byte_fallback) {
                int all = 1;
                for (size_t j = 0; j < klen; j++) all &= m->byte_ids[(unsigned char)key[j]] >= 0;
                if (all) {
                    for (size_t j = 0; j < klen; j++) NB_TRY(nb_word_add(w, m->byte_ids[(unsigned char)key[j]], 1));
                    done = 1;
                }
            }
            if (!done && m->unk_token) {
                if (m->unk_id < 0)
                    return nb_error(NB_ERR_FORMAT, "tokenizer.json: model.unk_token '%s' is not in the vocabulary",
                                    m->unk_token);
                if (have_unk && m->fuse_unk) {
                    unk_len += (uint32_t)k;
                } else {
                    if (have_unk) NB_TRY(nb_word_add(w, unk_id, unk_len));
                    unk_id = m->unk_id;
                    unk_len = (uint32_t)k;
                    have_unk = 1;
                }
            }
            /* no unk token: the character is dropped, as HF does */
        }
        i += k;
    }
    if (have_unk) NB_TRY(nb_word_add(w, unk_id, unk_len));
    return nb_word_merge_all(m, w);
}

static nb_status nb_ids_reserve(int32_t **ids, size_t *n, size_t *cap, size_t extra)
{
    if (*n + extra <= *cap) return NB_OK;
    size_t c = *cap ? *cap : 64;
    while (c < *n + extra) c *= 2;
    int32_t *p = realloc(*ids, c * sizeof *p);
    if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (ids)");
    *ids = p;
    *cap = c;
    return NB_OK;
}

nb_status nb_bpe_encode_word(nb_bpe *m, nb_tok_scratch *sc, const char *s, size_t n, int32_t **ids, size_t *nids,
                             size_t *cap)
{
    if (n == 0) return NB_OK;
    if (m->ignore_merges) {
        int32_t id = nb_strmap_get(&m->vocab, s, n);
        if (id >= 0) {
            NB_TRY(nb_ids_reserve(ids, nids, cap, 1));
            (*ids)[(*nids)++] = id;
            return NB_OK;
        }
    }
    uint64_t h = 0;
    nb_bpe_cache_entry *ce = NULL;
    if (n < NB_BPE_CACHE_MAXLEN) {
        h = nb_hash_bytes(s, n);
        ce = &m->cache[h & (NB_BPE_CACHE_SLOTS - 1)];
        pthread_mutex_lock(&m->cache_lock);
        if (ce->key && ce->hash == h && ce->klen == n && !memcmp(ce->key, s, n)) {
            nb_status st = nb_ids_reserve(ids, nids, cap, ce->n);
            if (st == NB_OK && ce->n) { /* a word can encode to nothing (characters dropped) */
                memcpy(*ids + *nids, ce->ids, ce->n * sizeof(int32_t));
                *nids += ce->n;
            }
            pthread_mutex_unlock(&m->cache_lock);
            return st;
        }
        pthread_mutex_unlock(&m->cache_lock);
    }
    /* the symbol and heap arrays live in the caller's scratch, reused across words */
    nb_word w = {sc->bpe_sym, 0, sc->bpe_sym_cap, sc->bpe_heap, 0, sc->bpe_heap_cap};
    nb_status st = nb_bpe_merge_word(m, s, n, &w);
    sc->bpe_sym = w.sym;
    sc->bpe_sym_cap = w.cap;
    sc->bpe_heap = w.heap;
    sc->bpe_heap_cap = w.hcap;
    size_t first = *nids;
    for (int32_t i = 0; st == NB_OK && w.n && i >= 0; i = w.sym[i].next) {
        st = nb_ids_reserve(ids, nids, cap, 1);
        if (st == NB_OK) (*ids)[(*nids)++] = w.sym[i].id;
    }
    if (st != NB_OK || !ce) return st;
    size_t cnt = *nids - first;
    char *key = malloc(n);
    int32_t *cids = malloc(cnt ? cnt * sizeof *cids : 1);
    if (!key || !cids) {
        free(key);
        free(cids);
        return NB_OK; /* caching is optional */
    }
    memcpy(key, s, n);
    if (cnt) memcpy(cids, *ids + first, cnt * sizeof *cids);
    pthread_mutex_lock(&m->cache_lock);
    free(ce->key);
    free(ce->ids);
    *ce = (nb_bpe_cache_entry){h, key, (uint32_t)n, (uint32_t)cnt, cids};
    pthread_mutex_unlock(&m->cache_lock);
    return NB_OK;
}

void nb_bpe_free(nb_bpe *m)
{
    nb_strmap_free(&m->vocab);
    if (m->id_to_token) {
        for (int32_t i = 0; i < m->n_ids; i++) free(m->id_to_token[i]);
        free(m->id_to_token);
    }
    free(m->merges);
    free(m->unk_token);
    free(m->cont_prefix);
    free(m->end_suffix);
    if (m->cache) {
        for (size_t i = 0; i < NB_BPE_CACHE_SLOTS; i++) {
            if (!m->cache[i].key) continue;
            free(m->cache[i].key);
            free(m->cache[i].ids);
        }
        free(m->cache);
        pthread_mutex_destroy(&m->cache_lock);
    }
    memset(m, 0, sizeof *m);
}
