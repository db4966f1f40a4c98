/* libFuzzer harness: any bytes as a /v1/completions or /v1/chat/completions body must parse
 * to a request or a 4xx error with a message, never crash or leak (ASan/UBSan); a chat
 * request's raw JSON texts (messages_json, tools_json, kwargs_json) must parse back to the
 * same trees as its cJSON fields (the span scanner stays in step with cJSON), and a 5xx
 * (which a scanner that lost step would give) is a failure.
 *   make test-fuzz (build-fuzz/tests/fuzz_oai_request) */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "raw_json_check.h"
#include "server/oai_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    nb_oai_kind kind = data[0] & 1 ? NB_OAI_CHAT : NB_OAI_COMPLETIONS;
    nb_oai_request r;
    nb_oai_error e = {0};
    if (nb_oai_parse(kind, (const char *)data + 1, size - 1, &r, &e) == 0) {
        if (kind == NB_OAI_CHAT && !nb_raw_json_agrees(&r)) abort();
        nb_oai_request_free(&r);
    } else {
        if (e.http < 400 || e.http > 499 || !e.message[0]) abort();
        char *j = nb_oai_error_json(&e);
        if (!j) abort();
        free(j);
    }
    return 0;
}
