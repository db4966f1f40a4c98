/* Internal structures of the tokenizer (the src/tokenizer C files only; the API is tokenizer.h).
 * The pipeline mirrors HF `tokenizers` (encode_single_sequence):
 *   added-token split (non-normalized) -> normalizer -> added-token split (normalized)
 *   -> pre-tokenizer -> BPE per piece -> post-processor.
 * Text moves through it as a list of pieces (byte ranges of one growing arena); a piece
 * that is an added token carries its id and is left alone by later stages. */
#ifndef NB_TOKENIZER_TOK_INTERNAL_H
#define NB_TOKENIZER_TOK_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tokenizer.h"

/* ---- growable byte buffer ---------------------------------------------------------- */
typedef struct nb_tbuf {
    char *p;
    size_t n, cap;
} nb_tbuf;

nb_status nb_tbuf_reserve(nb_tbuf *b, size_t extra);
nb_status nb_tbuf_put(nb_tbuf *b, const void *s, size_t n);
void nb_tbuf_free(nb_tbuf *b);

/* ---- UTF-8 -------------------------------------------------------------------------- */
/* Decode one code point at s[0..n) (n >= 1) of valid UTF-8; returns its byte length. */
int nb_utf8_next(const char *s, size_t n, uint32_t *cp);
/* Encode cp into out (4 bytes room); returns the length. */
int nb_utf8_put(uint32_t cp, char *out);
/* Length of the maximal prefix of s[0..n) that is a well-formed UTF-8 sequence or a
 * truncated start of one: returns k > 0 with *complete set to 1 when s[0..k) is one whole
 * character, or 0 when it is a valid but incomplete start (needs more bytes, k == n);
 * returns the number of bytes of the maximal invalid subpart with *complete = -1 when
 * the bytes can never become valid. */
size_t nb_utf8_scan(const unsigned char *s, size_t n, int *complete);
/* Append s as UTF-8 to b, each maximal invalid subpart replaced by U+FFFD (what Python's
 * bytes.decode('utf-8', 'replace') and Rust's from_utf8_lossy do). */
nb_status nb_utf8_lossy(nb_tbuf *b, const char *s, size_t n);
/* 1 when s[0..n) is valid UTF-8. */
int nb_utf8_valid(const char *s, size_t n);

/* Unicode properties as Rust's char methods define them (via utf8proc). */
int nb_uc_is_whitespace(uint32_t cp);
int nb_uc_is_numeric(uint32_t cp);
int nb_uc_is_word(uint32_t cp); /* regex \w: alphabetic, digit, mark, connector punct */

/* GPT-2 byte <-> unicode map: nb_byte_char[b] is the code point standing for byte b;
 * nb_char_byte(cp) the byte, or -1. */
extern const uint16_t nb_byte_char[256];
int nb_char_byte(uint32_t cp);

/* ---- string -> int32 hash map (vocab, added tokens) --------------------------------- */
typedef struct nb_strmap {
    uint32_t *slots; /* index+1 into keys, 0 = empty */
    size_t cap;      /* power of two */
    size_t n;
    char **keys;
    uint32_t *klen;
    int32_t *vals;
    size_t kcap;
} nb_strmap;

nb_status nb_strmap_put(nb_strmap *m, const char *k, size_t n, int32_t v); /* overwrites */
int32_t nb_strmap_get(const nb_strmap *m, const char *k, size_t n);       /* -1 if absent */
void nb_strmap_free(nb_strmap *m);
uint64_t nb_hash_bytes(const void *p, size_t n);

/* ---- regex (PCRE2, UTF + UCP + JIT) with Oniguruma's find-iteration ----------------- */
typedef struct nb_regex {
    pcre2_code *code;
} nb_regex;

/* Compile an HF (Oniguruma) pattern; `literal` escapes it first. `what` names it. */
nb_status nb_regex_compile(nb_regex *re, const char *pattern, int literal, const char *what);
void nb_regex_free(nb_regex *re);

/* One match or gap: [start, end) with is_match. */
typedef struct nb_span {
    size_t start, end;
    int is_match;
} nb_span;

typedef struct nb_spans {
    nb_span *v;
    size_t n, cap;
} nb_spans;

/* HF Pattern::find_matches: the whole of s[0..n) as alternating gaps and matches (sc is the
 * caller's per-call scratch: match data and JIT stack). */
struct nb_tok_scratch;
nb_status nb_regex_find(const nb_regex *re, struct nb_tok_scratch *sc, const char *s, size_t n, nb_spans *out);

/* ---- pieces ------------------------------------------------------------------------- */
typedef struct nb_piece {
    size_t off, len; /* into nb_pieces.arena */
    int32_t id;      /* added-token id, or -1 */
    uint8_t origin;  /* starts at original offset 0 (Metaspace prepend_scheme "first") */
} nb_piece;

typedef struct nb_pieces {
    nb_tbuf arena;
    nb_piece *v;
    size_t n, cap;
} nb_pieces;

nb_status nb_pieces_push(nb_pieces *p, size_t off, size_t len, int32_t id, int origin);
/* Append text to the arena and push it as a piece. */
nb_status nb_pieces_push_text(nb_pieces *p, const char *s, size_t len, int32_t id, int origin);
void nb_pieces_free(nb_pieces *p);

/* Per-call scratch: match data and reusable buffers. */
typedef struct nb_tok_scratch {
    pcre2_match_data *md;
    pcre2_match_context *mctx; /* with a JIT stack large enough for long inputs */
    pcre2_jit_stack *jit_stack;
    nb_spans spans;
    nb_tbuf tmp;
    void *bpe_sym, *bpe_heap; /* BPE word buffers (tok_bpe.c), reused across words */
    size_t bpe_sym_cap, bpe_heap_cap;
} nb_tok_scratch;

/* ---- normalizers -------------------------------------------------------------------- */
typedef enum nb_norm_kind {
    NB_NORM_NFC,
    NB_NORM_NFKC,
    NB_NORM_NFD,
    NB_NORM_NFKD,
    NB_NORM_REPLACE,
    NB_NORM_PREPEND,
    NB_NORM_LOWERCASE,
    NB_NORM_STRIP,
    NB_NORM_SEQUENCE,
} nb_norm_kind;

typedef struct nb_normalizer {
    nb_norm_kind kind;
    nb_regex re;        /* REPLACE */
    char *content;      /* REPLACE: replacement; PREPEND: prefix */
    int left, right;    /* STRIP */
    struct nb_normalizer *sub;
    size_t n_sub;       /* SEQUENCE */
} nb_normalizer;

/* Normalize s[0..n) into out (cleared first). */
nb_status nb_normalize(const nb_normalizer *nm, nb_tok_scratch *sc, const char *s, size_t n, nb_tbuf *out);
void nb_normalizer_free(nb_normalizer *nm);

/* ---- pre-tokenizers ----------------------------------------------------------------- */
typedef enum nb_split_behavior {
    NB_SPLIT_REMOVED,
    NB_SPLIT_ISOLATED,
    NB_SPLIT_MERGED_PREV,
    NB_SPLIT_MERGED_NEXT,
    NB_SPLIT_CONTIGUOUS,
} nb_split_behavior;

typedef enum nb_pretok_kind {
    NB_PRE_BYTELEVEL,
    NB_PRE_SPLIT,
    NB_PRE_DIGITS,
    NB_PRE_METASPACE,
    NB_PRE_WHITESPACE_SPLIT,
    NB_PRE_SEQUENCE,
} nb_pretok_kind;

typedef enum nb_prepend_scheme { NB_PREPEND_ALWAYS, NB_PREPEND_FIRST, NB_PREPEND_NEVER } nb_prepend_scheme;

typedef struct nb_pretok {
    nb_pretok_kind kind;
    int add_prefix_space, use_regex; /* BYTELEVEL */
    nb_regex re;                     /* SPLIT; BYTELEVEL with use_regex */
    nb_split_behavior behavior;
    int invert;
    int individual_digits;      /* DIGITS */
    uint32_t replacement;       /* METASPACE */
    nb_prepend_scheme prepend;  /* METASPACE */
    int split;                  /* METASPACE */
    struct nb_pretok *sub;
    size_t n_sub;
} nb_pretok;

/* Apply to every non-added piece of *p (rebuilds *p). */
nb_status nb_pretokenize(const nb_pretok *pt, nb_tok_scratch *sc, nb_pieces *p);
void nb_pretok_free(nb_pretok *pt);

/* ---- BPE model ---------------------------------------------------------------------- */
typedef struct nb_merge_slot {
    uint64_t key; /* (left id + 1) << 32 | (right id + 1); 0 = empty */
    int32_t rank, new_id;
} nb_merge_slot;

#define NB_BPE_CACHE_SLOTS 16384
#define NB_BPE_CACHE_MAXLEN 256

typedef struct nb_bpe_cache_entry {
    uint64_t hash;
    char *key;
    uint32_t klen;
    uint32_t n;
    int32_t *ids;
} nb_bpe_cache_entry;

typedef struct nb_bpe {
    nb_strmap vocab;
    char **id_to_token; /* by id (NULL for holes) */
    int32_t n_ids;      /* one past the largest vocab id */
    nb_merge_slot *merges;
    size_t merges_cap;
    int32_t unk_id; /* -1 none */
    char *unk_token;
    int fuse_unk, byte_fallback, ignore_merges;
    char *cont_prefix, *end_suffix; /* continuing_subword_prefix, end_of_word_suffix */
    int32_t byte_ids[256];          /* <0xNN> ids for byte_fallback, -1 when absent */
    pthread_mutex_t cache_lock;
    nb_bpe_cache_entry *cache; /* NB_BPE_CACHE_SLOTS, direct-mapped */
} nb_bpe;

nb_status nb_bpe_init(nb_bpe *m);
/* Register a merge of tokens a and b (by id) producing new_id at `rank`. */
nb_status nb_bpe_add_merge(nb_bpe *m, int32_t a, int32_t b, int32_t rank, int32_t new_id);
/* Finish loading (byte-fallback ids, unk id). */
nb_status nb_bpe_finish(nb_bpe *m);
/* Tokenize one pre-tokenized word, appending ids to *ids (n used, cap allocated). */
nb_status nb_bpe_encode_word(nb_bpe *m, nb_tok_scratch *sc, const char *w, size_t n, int32_t **ids, size_t *nids,
                             size_t *cap);
void nb_bpe_free(nb_bpe *m);

/* ---- decoders ----------------------------------------------------------------------- */
typedef enum nb_dec_kind {
    NB_DEC_BYTELEVEL,
    NB_DEC_METASPACE,
    NB_DEC_BYTEFALLBACK,
    NB_DEC_FUSE,
    NB_DEC_STRIP,
    NB_DEC_REPLACE,
    NB_DEC_SEQUENCE,
} nb_dec_kind;

typedef struct nb_decoder {
    nb_dec_kind kind;
    uint32_t replacement;      /* METASPACE */
    nb_prepend_scheme prepend; /* METASPACE */
    uint32_t strip_content;    /* STRIP */
    int strip_start, strip_stop;
    nb_regex re; /* REPLACE */
    char *content;
    struct nb_decoder *sub;
    size_t n_sub;
} nb_decoder;

/* A list of token strings, transformed by decode_chain. */
typedef struct nb_strlist {
    nb_tbuf text;
    size_t *off, *len;
    size_t n, cap;
} nb_strlist;

nb_status nb_strlist_push(nb_strlist *l, const char *s, size_t n);
void nb_strlist_free(nb_strlist *l);

/* HF Decoder::decode_chain: replaces *l by the decoded chunks. */
nb_status nb_decode_chain(const nb_decoder *d, nb_tok_scratch *sc, nb_strlist *l);
void nb_decoder_free(nb_decoder *d);
int nb_dec_has_bytefallback(const nb_decoder *d);
/* The byte of a "<0xNN>" token as the ByteFallback decoder reads it, or -1. */
int nb_byte_token(const char *s, size_t n);

/* ---- added tokens ------------------------------------------------------------------- */
typedef struct nb_added {
    char *content;
    size_t len;
    char *match; /* the text matched: content, normalized when `normalized` */
    size_t match_len;
    int32_t id;
    uint8_t special, lstrip, rstrip, normalized, single_word;
} nb_added;

/* ---- post-processor ----------------------------------------------------------------- */
typedef struct nb_postproc {
    int32_t *before, *after; /* ids added around the single sequence with add_special */
    size_t n_before, n_after;
} nb_postproc;

/* ---- the tokenizer ------------------------------------------------------------------ */
typedef struct nb_chat_template {
    char *name, *source;
} nb_chat_template;

struct nb_tokenizer {
    nb_bpe bpe;
    nb_normalizer *normalizer;
    nb_pretok *pretok;
    nb_decoder *decoder;
    int byte_fallback_decoder; /* the decoder chain has ByteFallback */
    nb_postproc post;
    nb_added *added;
    size_t n_added;
    nb_strmap added_map;   /* content -> index into added */
    int32_t *added_by_id;  /* id -> index into added, or -1; n_vocab entries */
    int32_t n_vocab;       /* one past the largest id */
    /* added-token matching: per first byte, indices into added sorted by length desc */
    uint32_t *first_idx[2][256]; /* [0] non-normalized, [1] normalized */
    uint32_t first_n[2][256];
    int has_added[2];
    char *bos, *eos, *pad;
    int32_t bos_id, pad_id;
    int add_bos;
    int32_t *eos_ids;
    size_t n_eos;
    nb_chat_template *templates;
    size_t n_templates;
};

/* Loading (tok_load.c). */
nb_status nb_tok_parse_json(nb_tokenizer *t, const char *json, size_t len, const char *what);
nb_status nb_tok_finish(nb_tokenizer *t); /* build lookup tables after the parts are set */
nb_status nb_tok_load_configs(nb_tokenizer *t, const char *dir);

/* Scratch lifetime. */
nb_status nb_tok_scratch_init(nb_tok_scratch *sc);
void nb_tok_scratch_free(nb_tok_scratch *sc);
/* This thread's scratch (created on first use, freed at thread exit). Not reentrant: only
 * the outermost API call (encode, decode) uses it. */
nb_status nb_tok_scratch_thread(nb_tok_scratch **out);

/* For the streaming detokenizer: 1 when id decodes through a ByteFallback decoder as a
 * <0xNN> byte token (a later byte token can still turn it into U+FFFD, so its text must
 * wait); -1 when the id is dropped (unknown, or special with skip_special); else 0. */
int nb_tok_stream_class(const nb_tokenizer *t, int32_t id, int skip_special);

/* Raw decode used by decode and the streaming detokenizer: the HF decode result. */
nb_status nb_tok_decode_into(const nb_tokenizer *t, nb_tok_scratch *sc, const int32_t *ids, size_t n,
                             int skip_special, nb_tbuf *out);

#endif
