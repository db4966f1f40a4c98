/* Raw text spans of JSON values, so the server can hand the chat template the request's own
 * JSON text (cJSON turns every number into a double: "1.0" would render "1", and integers
 * past 2^53 change). Works on text that cJSON already accepted: the scanner does not
 * validate, it only finds where the n-th member of an object or array begins and ends.
 * Exercised by tests/server/test_oai_request.c (unit) and fuzz_oai_request. */
#ifndef NB_SERVER_JSON_SPAN_H
#define NB_SERVER_JSON_SPAN_H

#include <stddef.h>

/* First offset at or after `pos` that is not whitespace as cJSON counts it (any byte <= 32),
 * n when none. */
size_t nb_json_skip_ws(const char *s, size_t n, size_t pos);

/* End offset (one past) of the value starting at s[pos] (no leading whitespace), or
 * (size_t)-1 when the text ends first or s[pos] starts no value. */
size_t nb_json_value_end(const char *s, size_t n, size_t pos);

/* Walks the members of one object or array in text order, duplicates included (cJSON keeps
 * them in its child list in the same order, so the k-th child is the k-th member). */
typedef struct nb_json_iter {
    const char *s;
    size_t n, pos;
    int obj;     /* 1: object, 0: array */
    int started; /* a member was returned */
} nb_json_iter;

/* Start at the '{' or '[' at s[start]. Returns 0, or -1 when there is none. */
int nb_json_iter_begin(nb_json_iter *it, const char *s, size_t n, size_t start);

/* The next member: *ks..*ke its key's quoted text (objects; 0..0 for arrays), *vs..*ve its
 * value's text. Returns 1, 0 after the last member, -1 on malformed text. */
int nb_json_iter_next(nb_json_iter *it, size_t *ks, size_t *ke, size_t *vs, size_t *ve);

#endif
