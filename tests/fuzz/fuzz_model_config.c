/* libFuzzer harness for config.json parsing (nb_model_config_parse): any text must parse
 * into a config whose layer tables stay within bounds, or fail with a status; never crash
 * or leak. Run: make test-fuzz, or build-fuzz/tests/fuzz_model_config tests/fuzz/corpus/model_config */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "format/model_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    nb_model_config c;
    nb_status s = nb_model_config_parse("fuzz", text, &c);
    free(text);
    if (s != NB_OK) return 0;
    if (c.num_layers < 1 || c.num_layers > NB_MAX_LAYERS || c.n_eos < 0 || c.n_eos > NB_MAX_EOS) abort();
    int moe = 0;
    for (int l = 0; l < c.num_layers; l++) moe += c.layer_is_moe[l];
    if (moe != c.n_moe_layers) abort();
    (void)nb_model_config_param_count(&c);
    for (int i = 0; i < c.quant.n_exclude; i++) (void)nb_quant_excluded(&c.quant, "model.layers.0.mlp.gate");
    nb_model_config_free(&c);
    return 0;
}
