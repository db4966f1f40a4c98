/* cJSON helpers with errors that name the file and the field.
 * JSON stays in base/, format/ (model files), tokenizer/ and server/: never in the
 * engine's or ops' interfaces. */
#ifndef NB_BASE_JSON_H
#define NB_BASE_JSON_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include "nibble.h"

/* Parse a JSON file; on a syntax error the message names the file, line and column. */
nb_status nb_json_load_file(const char *path, cJSON **out);

/* Parse a buffer; `what` names it in errors ("request body", "config.json"). */
nb_status nb_json_parse(const char *what, const char *text, size_t len, cJSON **out);

/* Typed getters. `found` (may be NULL) says whether the key was present; a present key
 * of the wrong type is an NB_ERR_FORMAT naming `what` and the key. Absent: *out = dflt. */
nb_status nb_json_int(const cJSON *obj, const char *key, int64_t dflt, int64_t *out, const char *what, int *found);
nb_status nb_json_num(const cJSON *obj, const char *key, double dflt, double *out, const char *what, int *found);
nb_status nb_json_bool(const cJSON *obj, const char *key, int dflt, int *out, const char *what, int *found);
/* *out points into the cJSON tree (NULL when absent and dflt is NULL). */
nb_status nb_json_str(const cJSON *obj, const char *key, const char *dflt, const char **out, const char *what, int *found);

#endif
