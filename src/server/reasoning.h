/* Reasoning parsers: split generated text into `reasoning_content` (inside
 * <think>...</think>) and `content`, incrementally, as SGLang's and vLLM's
 * --reasoning-parser glm45 | qwen3 | deepseek-r1 do:
 *   glm45, qwen3: reasoning only when the output opens with <think> (leading whitespace
 *                 allowed) or the prompt already ends inside an open <think> block;
 *   deepseek-r1:  the output starts in reasoning (the template opened <think>); an
 *                 emitted <think> at the start is dropped.
 * Everything up to </think> is reasoning, after it content. A tag split across deltas is
 * held back until it is resolved. Exercised by tests/server/test_oai_request.c. */
#ifndef NB_SERVER_REASONING_H
#define NB_SERVER_REASONING_H

#include <stdint.h>

#include "server/strbuf.h"

typedef enum nb_reasoning_kind {
    NB_REASONING_NONE = 0,
    NB_REASONING_GLM45,
    NB_REASONING_QWEN3,
    NB_REASONING_DEEPSEEK_R1
} nb_reasoning_kind;

/* "glm45" | "qwen3" | "deepseek-r1" (also "deepseek_r1"); -1 when unknown. */
int nb_reasoning_parse_kind(const char *s);

typedef struct nb_reasoning {
    nb_reasoning_kind kind;
    int state;        /* 0: start (may open), 1: reasoning, 2: content */
    int open_checked; /* the start of the output was checked for <think> */
    char hold[16];    /* bytes that may begin a tag */
    size_t hold_len;
    int32_t open_id, close_id; /* >= 0: the tags are special tokens absent from the text */
} nb_reasoning;

/* prompt_open: the rendered prompt ends inside an unclosed <think>. */
void nb_reasoning_init(nb_reasoning *r, nb_reasoning_kind kind, int prompt_open);
/* Route `n` bytes of new text to *reason and *content. */
void nb_reasoning_feed(nb_reasoning *r, const char *text, size_t n, nb_strbuf *reason, nb_strbuf *content);
/* When <think> and </think> are special tokens that decoding skips, the split follows
 * the token ids instead: call this once after init. */
void nb_reasoning_use_ids(nb_reasoning *r, int32_t open_id, int32_t close_id);
/* Route one engine event (its ids and the text they produced). Text mode ignores ids.
 * In id mode an event holding </think> among other tokens is attributed whole to the
 * side the tag's position favours (before: content, else reasoning): engine events
 * carry one token each in practice. */
void nb_reasoning_feed_tokens(nb_reasoning *r, const int32_t *ids, int n_ids, const char *text, size_t n,
                              nb_strbuf *reason, nb_strbuf *content);
/* End of output: release held bytes. */
void nb_reasoning_flush(nb_reasoning *r, nb_strbuf *reason, nb_strbuf *content);

/* 1 when `prompt` ends inside an open <think> block (last <think> after the last </think>). */
int nb_reasoning_prompt_open(const char *prompt, size_t len);

#endif
