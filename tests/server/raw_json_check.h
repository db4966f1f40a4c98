/* Shared by test_oai_request.c and fuzz_oai_request.c: the chat variables' raw JSON text
 * (nb_oai_request.messages_json, tools_json, kwargs_json) must parse back to exactly the
 * trees the cJSON path built. Compared member by member in order, keys included, because
 * cJSON_Compare looks keys up by name and so cannot tell duplicate keys apart. */
#ifndef NB_TESTS_SERVER_RAW_JSON_CHECK_H
#define NB_TESTS_SERVER_RAW_JSON_CHECK_H

#include <cjson/cJSON.h>
#include <string.h>

#include "server/oai_request.h"

static inline int nb_json_same(const cJSON *a, const cJSON *b)
{
    if (!a || !b) return a == b;
    if ((a->type & 0xFF) != (b->type & 0xFF)) return 0;
    if (cJSON_IsNumber(a)) return a->valuedouble == b->valuedouble;
    if (cJSON_IsString(a)) return !strcmp(a->valuestring, b->valuestring);
    const cJSON *x = a->child, *y = b->child;
    for (; x && y; x = x->next, y = y->next) {
        /* keys of members only: a duplicated subtree keeps the key it had in its parent */
        if ((x->string == NULL) != (y->string == NULL) || (x->string && strcmp(x->string, y->string))) return 0;
        if (!nb_json_same(x, y)) return 0;
    }
    return !x && !y;
}

/* 1 when the raw texts of a parsed chat request agree with its cJSON trees. */
static inline int nb_raw_json_agrees(const nb_oai_request *r)
{
    if (!r->messages_json || !r->kwargs_json || (!r->tools) != (!r->tools_json)) return 0;
    cJSON *m = cJSON_Parse(r->messages_json), *k = cJSON_Parse(r->kwargs_json);
    cJSON *t = r->tools_json ? cJSON_Parse(r->tools_json) : NULL;
    int ok = m && k && nb_json_same(m, r->messages) && nb_json_same(k, r->template_kwargs) &&
             (!r->tools || (t && nb_json_same(t, r->tools)));
    cJSON_Delete(m);
    cJSON_Delete(k);
    cJSON_Delete(t);
    return ok;
}

#endif
