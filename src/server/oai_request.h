/* OpenAI request bodies → typed requests. Parses and validates /v1/completions and
 * /v1/chat/completions bodies (OpenAI's parameters plus SGLang's common extensions:
 * top_k, min_p, repetition_penalty, ignore_eos, stop_token_ids, seed, skip_special_tokens,
 * chat_template_kwargs, separate_reasoning) into an nb_oai_request, or fills an
 * nb_oai_error with the HTTP status, OpenAI error type and the offending parameter.
 * Pure: no HTTP, no engine; JSON stays in src/server/.
 * Exercised by tests/server/test_oai_request.c (unit) and the server's fuzz test. */
#ifndef NB_SERVER_OAI_REQUEST_H
#define NB_SERVER_OAI_REQUEST_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "nibble.h"

#define NB_OAI_MAX_STOP 64        /* stop strings per request */
#define NB_OAI_MAX_STOP_LEN 1024  /* bytes per stop string */
#define NB_OAI_MAX_STOP_IDS 1024
#define NB_OAI_MAX_PROMPTS 1024   /* prompts in one batched /v1/completions request */
#define NB_OAI_MAX_N 128

typedef enum nb_oai_kind { NB_OAI_COMPLETIONS = 0, NB_OAI_CHAT } nb_oai_kind;

typedef struct nb_oai_error {
    int http;          /* 400, 404, ... */
    const char *type;  /* "invalid_request_error", "not_found_error", "server_error", ... */
    char param[64];    /* offending parameter ("" when none) */
    char code[48];     /* OpenAI-style code ("" for null) */
    char message[512];
} nb_oai_error;

/* One prompt of /v1/completions: token ids, or text still to be tokenized. */
typedef struct nb_oai_prompt {
    int32_t *ids; /* malloc'd, or NULL */
    int n_ids;
    char *text;   /* malloc'd UTF-8, or NULL */
    size_t text_len;
} nb_oai_prompt;

typedef struct nb_oai_request {
    nb_oai_kind kind;
    char *model; /* NULL when absent */
    /* completions */
    nb_oai_prompt *prompts;
    int n_prompts;
    int echo;
    /* chat (owned, detached cJSON trees) */
    cJSON *messages;     /* normalized: content parts flattened to one string */
    cJSON *tools;        /* or NULL */
    cJSON *template_kwargs; /* object: chat_template_kwargs + enable_thinking; never NULL for chat */
    /* The same three as the request's own JSON text (malloc'd, NUL-terminated), for
     * nb_chat_template_apply_json: numbers keep their spelling ("1.0" stays a float, big
     * integers stay exact), as Python's json hands them to transformers. messages_json is
     * the raw array with only normalized contents re-serialized; tools_json is NULL when
     * tools is; kwargs_json is never NULL for chat. */
    char *messages_json, *tools_json, *kwargs_json;
    int add_generation_prompt;
    int separate_reasoning; /* SGLang's switch; default 1 */
    /* common */
    nb_sampling_params sp;  /* stop/stop_token_ids point into the arrays below */
    char **stop;
    int32_t *stop_ids;
    int max_tokens_given;   /* 0: server default (completions 16, chat up to the context) */
    int stream, include_usage, continuous_usage;
    int logprobs;           /* logprobs requested */
    int top_logprobs;
} nb_oai_request;

/* Parse a body. Returns 0 and fills *req (free with nb_oai_request_free), or -1 with *err
 * set (4xx). max_body guards nothing here: the HTTP layer enforces the size limit. */
int nb_oai_parse(nb_oai_kind kind, const char *body, size_t len, nb_oai_request *req, nb_oai_error *err);
void nb_oai_request_free(nb_oai_request *req);

/* Fill an error. */
void nb_oai_set_error(nb_oai_error *err, int http, const char *type, const char *param, const char *code,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* {"error": {"message", "type", "param", "code"}} as a malloc'd string. */
char *nb_oai_error_json(const nb_oai_error *err);

/* 1 when s[0..n) is valid UTF-8 (no overlongs, surrogates or code points > U+10FFFF). */
int nb_oai_utf8_valid(const char *s, size_t n);

#endif
