/* Tokenizer utilities: growable buffers, UTF-8 scanning with U+FFFD replacement, Unicode
 * properties as Rust defines them, the GPT-2 byte<->unicode map, and a string hash map.
 * Exercised by tests/tokenizer/test_tokenizer.c (utf8_* and bytes tests). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/error.h"
#include "tokenizer/tok_internal.h"

nb_status nb_tbuf_reserve(nb_tbuf *b, size_t extra)
{
    if (b->n + extra + 1 <= b->cap) return NB_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (%zu bytes)", cap);
    b->p = p;
    b->cap = cap;
    return NB_OK;
}

nb_status nb_tbuf_put(nb_tbuf *b, const void *s, size_t n)
{
    NB_TRY(nb_tbuf_reserve(b, n));
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return NB_OK;
}

void nb_tbuf_free(nb_tbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- UTF-8 ---------------------------------------------------------------------------- */

int nb_utf8_next(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80 || n < 2) {
        *cp = u[0];
        return 1;
    }
    if (u[0] < 0xE0) {
        *cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
        return 2;
    }
    if (u[0] < 0xF0 || n < 4) {
        *cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) |
          (u[3] & 0x3F);
    return 4;
}

int nb_utf8_put(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Unicode Table 3-7 (well-formed byte sequences): the allowed range of the second byte
 * depends on the first; later bytes are 80..BF. */
size_t nb_utf8_scan(const unsigned char *s, size_t n, int *complete)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
        *complete = 1;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *complete = -1;
        return 1;
    }
    size_t i = 1;
    for (; i < need && i < n; i++) {
        unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
        if (s[i] < lo_i || s[i] > hi_i) {
            *complete = -1;
            return i;
        }
    }
    *complete = i == need ? 1 : 0;
    return i;
}

nb_status nb_utf8_lossy(nb_tbuf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    NB_TRY(nb_tbuf_reserve(b, n));
    size_t i = 0, run = 0; /* run: start of the pending valid stretch */
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int complete;
        size_t k = nb_utf8_scan(u + i, n - i, &complete);
        if (complete == 1) {
            i += k;
            continue;
        }
        NB_TRY(nb_tbuf_put(b, s + run, i - run));
        NB_TRY(nb_tbuf_put(b, "\xEF\xBF\xBD", 3));
        i += k;
        run = i;
    }
    return nb_tbuf_put(b, s + run, n - run);
}

int nb_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int complete;
        size_t k = nb_utf8_scan(u + i, n - i, &complete);
        if (complete != 1) return 0;
        i += k;
    }
    return 1;
}

/* ---- Unicode properties --------------------------------------------------------------- */

/* Rust's char::is_whitespace: the White_Space property. */
int nb_uc_is_whitespace(uint32_t cp)
{
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

/* Rust's char::is_numeric: general categories Nd, Nl, No. */
int nb_uc_is_numeric(uint32_t cp)
{
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

/* The regex crate's Unicode \w: Alphabetic, M, Nd, Pc, Join_Control. utf8proc has no
 * Alphabetic property; letters (L*) and Nl cover it apart from a few Other_Alphabetic
 * marks, which the M test catches. */
int nb_uc_is_word(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == '_';
    if (cp == 0x200C || cp == 0x200D) return 1;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

/* ---- GPT-2 byte map ------------------------------------------------------------------- */
/* Printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves; the others get
 * 256, 257, ... in byte order. */
const uint16_t nb_byte_char[256] = {
    256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271,
    272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287,
    288, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
    48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
    80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95,
    96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
    112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 289,
    290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305,
    306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321,
    322, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175,
    176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191,
    192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207,
    208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223,
    224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239,
    240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255,
};

int nb_char_byte(uint32_t cp)
{
    if (cp < 256) {
        if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || cp >= 174) return (int)cp;
        return -1;
    }
    if (cp > 323) return -1;
    /* 256 + k is the k-th non-printable byte: 0..32, then 127..160, then 173 */
    uint32_t k = cp - 256;
    if (k < 33) return (int)k;
    if (k < 67) return (int)(127 + k - 33);
    return 173;
}

/* ---- hash map ------------------------------------------------------------------------- */

uint64_t nb_hash_bytes(const void *p, size_t n)
{
    /* FNV-1a over 8-byte words then bytes, with a final mix: fast and good enough for
     * vocab strings (not adversarial: the vocabulary is fixed at load time). */
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return h;
}

static nb_status nb_strmap_grow(nb_strmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (hash map)");
    for (size_t i = 0; i < m->n; i++) {
        size_t j = nb_hash_bytes(m->keys[i], m->klen[i]) & (cap - 1);
        while (slots[j]) j = (j + 1) & (cap - 1);
        slots[j] = (uint32_t)i + 1;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return NB_OK;
}

nb_status nb_strmap_put(nb_strmap *m, const char *k, size_t n, int32_t v)
{
    if ((m->n + 1) * 2 > m->cap) NB_TRY(nb_strmap_grow(m));
    size_t j = nb_hash_bytes(k, n) & (m->cap - 1);
    while (m->slots[j]) {
        uint32_t i = m->slots[j] - 1;
        if (m->klen[i] == n && !memcmp(m->keys[i], k, n)) {
            m->vals[i] = v;
            return NB_OK;
        }
        j = (j + 1) & (m->cap - 1);
    }
    if (m->n == m->kcap) {
        size_t kc = m->kcap ? m->kcap * 2 : 1024;
        char **keys = realloc(m->keys, kc * sizeof *keys);
        if (keys) m->keys = keys;
        uint32_t *klen = realloc(m->klen, kc * sizeof *klen);
        if (klen) m->klen = klen;
        int32_t *vals = realloc(m->vals, kc * sizeof *vals);
        if (vals) m->vals = vals;
        if (!keys || !klen || !vals) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (hash map)");
        m->kcap = kc;
    }
    char *copy = malloc(n + 1);
    if (!copy) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (hash map)");
    memcpy(copy, k, n);
    copy[n] = 0;
    m->keys[m->n] = copy;
    m->klen[m->n] = (uint32_t)n;
    m->vals[m->n] = v;
    m->slots[j] = (uint32_t)++m->n;
    return NB_OK;
}

int32_t nb_strmap_get(const nb_strmap *m, const char *k, size_t n)
{
    if (!m->cap) return -1;
    size_t j = nb_hash_bytes(k, n) & (m->cap - 1);
    while (m->slots[j]) {
        uint32_t i = m->slots[j] - 1;
        if (m->klen[i] == n && !memcmp(m->keys[i], k, n)) return m->vals[i];
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void nb_strmap_free(nb_strmap *m)
{
    for (size_t i = 0; i < m->n; i++) free(m->keys[i]);
    free(m->keys);
    free(m->klen);
    free(m->vals);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- pieces and string lists ---------------------------------------------------------- */

nb_status nb_pieces_push(nb_pieces *p, size_t off, size_t len, int32_t id, int origin)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        nb_piece *v = realloc(p->v, cap * sizeof *v);
        if (!v) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (pieces)");
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = (nb_piece){off, len, id, (uint8_t)origin};
    return NB_OK;
}

nb_status nb_pieces_push_text(nb_pieces *p, const char *s, size_t len, int32_t id, int origin)
{
    size_t off = p->arena.n;
    NB_TRY(nb_tbuf_put(&p->arena, s, len));
    return nb_pieces_push(p, off, len, id, origin);
}

void nb_pieces_free(nb_pieces *p)
{
    nb_tbuf_free(&p->arena);
    free(p->v);
    memset(p, 0, sizeof *p);
}

nb_status nb_strlist_push(nb_strlist *l, const char *s, size_t n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        size_t *off = realloc(l->off, cap * sizeof *off);
        if (off) l->off = off;
        size_t *len = realloc(l->len, cap * sizeof *len);
        if (len) l->len = len;
        if (!off || !len) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (decode)");
        l->cap = cap;
    }
    l->off[l->n] = l->text.n;
    l->len[l->n] = n;
    l->n++;
    return nb_tbuf_put(&l->text, s, n);
}

void nb_strlist_free(nb_strlist *l)
{
    nb_tbuf_free(&l->text);
    free(l->off);
    free(l->len);
    memset(l, 0, sizeof *l);
}

nb_status nb_tok_scratch_init(nb_tok_scratch *sc)
{
    memset(sc, 0, sizeof *sc);
    sc->md = pcre2_match_data_create(1, NULL);
    sc->mctx = pcre2_match_context_create(NULL);
    sc->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!sc->md || !sc->mctx || !sc->jit_stack) {
        nb_tok_scratch_free(sc);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (regex match data)");
    }
    pcre2_jit_stack_assign(sc->mctx, NULL, sc->jit_stack);
    return NB_OK;
}

/* One scratch per thread, kept across calls: creating the JIT stack and match data costs
 * more than encoding a short message. Freed by the key's destructor at thread exit. */
static pthread_key_t nb_scratch_key;
static pthread_once_t nb_scratch_once = PTHREAD_ONCE_INIT;
static int nb_scratch_key_ok;

static void nb_scratch_destroy(void *p)
{
    nb_tok_scratch_free(p);
    free(p);
}

static void nb_scratch_key_init(void) { nb_scratch_key_ok = pthread_key_create(&nb_scratch_key, nb_scratch_destroy) == 0; }

nb_status nb_tok_scratch_thread(nb_tok_scratch **out)
{
    pthread_once(&nb_scratch_once, nb_scratch_key_init);
    nb_tok_scratch *sc = nb_scratch_key_ok ? pthread_getspecific(nb_scratch_key) : NULL;
    if (!sc) {
        if (!nb_scratch_key_ok) return nb_error(NB_ERR_INTERNAL, "tokenizer: pthread_key_create failed");
        sc = malloc(sizeof *sc);
        if (!sc) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (scratch)");
        nb_status st = nb_tok_scratch_init(sc);
        if (st != NB_OK) {
            free(sc);
            return st;
        }
        if (pthread_setspecific(nb_scratch_key, sc) != 0) {
            nb_scratch_destroy(sc);
            return nb_error(NB_ERR_INTERNAL, "tokenizer: pthread_setspecific failed");
        }
    }
    /* big one-off inputs should not pin their buffers for the thread's lifetime */
    if (sc->tmp.cap > (1u << 20)) nb_tbuf_free(&sc->tmp);
    if (sc->spans.cap > (1u << 16)) {
        free(sc->spans.v);
        memset(&sc->spans, 0, sizeof sc->spans);
    }
    if (sc->bpe_sym_cap > (1u << 16) || sc->bpe_heap_cap > (1u << 16)) {
        free(sc->bpe_sym);
        free(sc->bpe_heap);
        sc->bpe_sym = sc->bpe_heap = NULL;
        sc->bpe_sym_cap = sc->bpe_heap_cap = 0;
    }
    *out = sc;
    return NB_OK;
}

void nb_tok_scratch_free(nb_tok_scratch *sc)
{
    if (sc->md) pcre2_match_data_free(sc->md);
    if (sc->mctx) pcre2_match_context_free(sc->mctx);
    if (sc->jit_stack) pcre2_jit_stack_free(sc->jit_stack);
    free(sc->spans.v);
    free(sc->bpe_sym);
    free(sc->bpe_heap);
    nb_tbuf_free(&sc->tmp);
    memset(sc, 0, sizeof *sc);
}
