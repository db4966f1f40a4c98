/* libFuzzer harness for the chat-template interpreter: compile arbitrary bytes as a
 * template and, when that succeeds, render it with a small chat. Built and run only in
 * NIBBLE_FUZZ builds (make test-fuzz); the corpus is tests/template/templates/. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "tokenizer/template/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cJSON *vars;
    if (!vars)
        vars = cJSON_Parse("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
                           "\"content\": [{\"type\": \"text\", \"text\": \"<think>r</think>a\"}], \"tool_calls\": "
                           "[{\"function\": {\"name\": \"f\", \"arguments\": {\"k\": [1, 0.5, null]}}}]}], "
                           "\"tools\": [{\"type\": \"function\"}], \"add_generation_prompt\": true}");
    nb_template *t;
    if (nb_template_compile((const char *)data, size, "fuzz", &t) != NB_OK) return 0;
    char *out;
    if (nb_template_render(t, vars, &out, NULL) == NB_OK) free(out);
    nb_template_free(t);
    return 0;
}
