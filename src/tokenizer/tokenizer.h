/* Tokenizer: Hugging Face tokenizer.json (BPE) encode/decode, the model's special tokens
 * and chat template source, and a streaming detokenizer. Pure C, no Python.
 *   nb_tokenizer *tok; nb_tokenizer_load("/models/glm-5", &tok);
 *   int32_t *ids; size_t n; nb_tokenizer_encode(tok, text, strlen(text), 1, &ids, &n);
 * Exercised by: tests/tokenizer/ (unit tests; test_vs_hf.py compares with the PyPI
 * `tokenizers` package), `nibble tokenize` / `nibble detokenize`. Details: docs/tokenizer.md.
 *
 * A loaded tokenizer is immutable apart from an internal word cache that is guarded by a
 * lock: encode/decode may be called from several threads at once (each thread keeps a
 * small scratch area, freed when the thread exits). */
#ifndef NB_TOKENIZER_TOKENIZER_H
#define NB_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "nibble.h"

typedef struct nb_tokenizer nb_tokenizer;

/* Load a model folder: tokenizer.json (required), tokenizer_config.json (optional:
 * bos/eos/pad tokens, add_bos_token, chat_template as a string or a list of named
 * templates), chat_template.jinja (optional; overrides the "default" template of
 * tokenizer_config.json), additional_chat_templates/NAME.jinja (optional, named templates)
 * and generation_config.json (optional: eos_token_id int or list).
 * A malformed file is NB_ERR_FORMAT with a message naming the file and the field; an
 * unsupported model/normalizer/pre-tokenizer/decoder type is NB_ERR_UNSUPPORTED. */
nb_status nb_tokenizer_load(const char *dir, nb_tokenizer **out);

/* Build from tokenizer.json text alone (no config files); `what` names it in errors. */
nb_status nb_tokenizer_load_json(const char *json, size_t len, const char *what, nb_tokenizer **out);

/* A built-in byte-level tokenizer for synthetic models: ids 0..255 are the bytes (as the
 * GPT-2 byte<->unicode characters, no merges), then specials[i] gets id 256 + i as a
 * special added token (matched in text, skipped by decode with skip_special). ByteLevel
 * decoder, no post-processor (add_special adds nothing), no bos. Every special whose
 * text is "<|endoftext|>", "<|user|>" or "<|observation|>" is an eos id (GLM's stop
 * set), and "<|endoftext|>" is also the eos/pad token string. */
nb_status nb_tokenizer_builtin_bytes(const char *const *specials, size_t n_specials, nb_tokenizer **out);

void nb_tokenizer_free(nb_tokenizer *tok);

/* Encode `len` bytes of `text` (need not be NUL-terminated; invalid UTF-8 is first
 * replaced by U+FFFD per maximal invalid subsequence, as Python's
 * bytes.decode('utf-8', 'replace') does). add_special: run the post-processor
 * (e.g. prepend bos). *ids is malloc'd (free() it; never NULL on success, even for 0). */
nb_status nb_tokenizer_encode(const nb_tokenizer *tok, const char *text, size_t len, int add_special,
                              int32_t **ids, size_t *n);

/* Decode ids to text, as HF `tokenizer.decode(ids, skip_special_tokens=...)` does
 * (clean_up_tokenization_spaces is not applied). *out is malloc'd and NUL-terminated;
 * *out_len (may be NULL) is its length (the text may contain NUL bytes). Ids outside the
 * vocabulary are skipped, as HF does (a model's embedding table is often padded past the
 * tokenizer's vocabulary). */
nb_status nb_tokenizer_decode(const nb_tokenizer *tok, const int32_t *ids, size_t n, int skip_special,
                              char **out, size_t *out_len);

/* Vocabulary: one past the largest id (model vocab and added tokens). */
int32_t nb_tokenizer_vocab_size(const nb_tokenizer *tok);
/* Id of a token string (model vocab or added token), or -1. */
int32_t nb_tokenizer_token_to_id(const nb_tokenizer *tok, const char *token);
/* Token string of an id (as stored, e.g. "Ġthe"), or NULL. Valid while tok lives. */
const char *nb_tokenizer_id_to_token(const nb_tokenizer *tok, int32_t id);
/* 1 when id is a special added token. */
int nb_tokenizer_is_special(const nb_tokenizer *tok, int32_t id);

/* Special tokens from tokenizer_config.json (NULL when absent) and their ids (-1). */
const char *nb_tokenizer_bos_token(const nb_tokenizer *tok);
const char *nb_tokenizer_eos_token(const nb_tokenizer *tok);
const char *nb_tokenizer_pad_token(const nb_tokenizer *tok);
int32_t nb_tokenizer_bos_id(const nb_tokenizer *tok);
int32_t nb_tokenizer_pad_id(const nb_tokenizer *tok);
/* add_bos_token from tokenizer_config.json (0 when absent). Informational: encode's
 * add_special follows tokenizer.json's post_processor. */
int nb_tokenizer_add_bos(const nb_tokenizer *tok);

/* Stop ids: generation_config.json's eos_token_id (int or list) and the id of
 * tokenizer_config.json's eos_token, without duplicates. *ids stays valid while tok lives. */
size_t nb_tokenizer_eos_ids(const nb_tokenizer *tok, const int32_t **ids);
int nb_tokenizer_is_eos(const nb_tokenizer *tok, int32_t id);

/* Chat templates (Jinja source, rendered by src/tokenizer/template/). Named templates
 * from a list-form chat_template keep their names; a string chat_template or
 * chat_template.jinja is "default". Returns NULL when there is none of that name;
 * name NULL means "default". */
const char *nb_tokenizer_chat_template(const nb_tokenizer *tok, const char *name);
size_t nb_tokenizer_chat_template_count(const nb_tokenizer *tok);
/* The i-th template's name (i < count), or NULL. */
const char *nb_tokenizer_chat_template_name(const nb_tokenizer *tok, size_t i);

/* Streaming detokenizer: push ids one at a time, get the text they add. Text is emitted
 * only once it is complete UTF-8: a character split across tokens (byte-level BPE or
 * <0xNN> byte-fallback tokens) comes out with the token that completes it. The
 * concatenation of all deltas plus the final flush equals nb_tokenizer_decode of all
 * the ids pushed. Not thread-safe (one per request); tok must outlive it. */
typedef struct nb_detok nb_detok;

nb_status nb_detok_new(const nb_tokenizer *tok, int skip_special, nb_detok **out);
/* Push one id; *delta (NUL-terminated, valid until the next call on d) receives the new
 * text, possibly empty; *delta_len (may be NULL) its length. With a ByteFallback decoder,
 * text is also held while the stream ends in a <0xNN> token (a later byte can turn the
 * whole run into U+FFFD). */
nb_status nb_detok_push(nb_detok *d, int32_t id, const char **delta, size_t *delta_len);
/* End of stream: whatever is held back (an incomplete character becomes U+FFFD). The
 * detokenizer is then empty and may be reused for a new stream. */
nb_status nb_detok_flush(nb_detok *d, const char **delta, size_t *delta_len);
void nb_detok_free(nb_detok *d);

#endif
