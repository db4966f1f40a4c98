/* The engine's long-context hint for the MLA kernels (engine/forward.h nb_forward_long_ctx,
 * nb_forward_long_ctx_default): a step is long when some token attends to at least the
 * threshold's positions (its position + 1). Thresholds by shape: 512 for one token at fewer than
 * 128 heads and for 3+ tokens, 257 for two tokens or one at 128+ heads (the float32 / wgmma
 * crossings measured on an H100); nb_forward_force_long_ctx overrides every shape; a GQA model
 * is never long. NIBBLE_MLA_LONG_CTX is unset here (read once, before the first call).
 * Label unit, cpu. */
#include <stdlib.h>

#include "engine/forward.h"
#include "nbtest.h"

static nb_model *mla_model(int heads, nb_attn_kind kind)
{
    nb_model *m = calloc(1, sizeof *m);
    NB_ASSERT(m);
    m->cfg.attn = kind;
    m->cfg.num_heads = heads;
    return m;
}

/* One step: n_seqs sequences of n_tokens each, the last token of each at position last. */
static int hint(const nb_model *m, int n_seqs, int n_tokens, int last)
{
    nb_seq_step st[4] = {{0}};
    for (int s = 0; s < n_seqs; s++) st[s].n_tokens = n_tokens, st[s].start_pos = last + 1 - n_tokens;
    nb_batch b = {n_seqs, st};
    return nb_forward_long_ctx(m, &b);
}

static void test_defaults(void)
{
    NB_CHECK(nb_forward_long_ctx_default(64, 1) == NB_FWD_LONG_CTX);
    NB_CHECK(nb_forward_long_ctx_default(64, 2) == NB_FWD_LONG_CTX_WIDE);
    NB_CHECK(nb_forward_long_ctx_default(128, 1) == NB_FWD_LONG_CTX_WIDE);
    NB_CHECK(nb_forward_long_ctx_default(128, 2) == NB_FWD_LONG_CTX_WIDE);
    NB_CHECK(nb_forward_long_ctx_default(64, 3) == NB_FWD_LONG_CTX);
    NB_CHECK(nb_forward_long_ctx_default(128, 1000) == NB_FWD_LONG_CTX);
    NB_CHECK(NB_FWD_LONG_CTX == 512 && NB_FWD_LONG_CTX_WIDE == 257);
}

static void test_steps(void)
{
    nb_model *glm = mla_model(64, NB_ATTN_MLA), *dsv3 = mla_model(128, NB_ATTN_MLA), *gqa = mla_model(64, NB_ATTN_GQA);
    /* GLM-5's 64 heads, one token: long from position 511 (512 positions) */
    NB_CHECK(hint(glm, 1, 1, 510) == 0);
    NB_CHECK(hint(glm, 1, 1, 511) == 1);
    /* two tokens (two sequences or one), long from 257 positions */
    NB_CHECK(hint(glm, 2, 1, 255) == 0);
    NB_CHECK(hint(glm, 2, 1, 256) == 1);
    NB_CHECK(hint(glm, 1, 2, 256) == 1);
    NB_CHECK(hint(glm, 1, 2, 255) == 0);
    /* three tokens and more: 512 again */
    NB_CHECK(hint(glm, 3, 1, 400) == 0);
    NB_CHECK(hint(glm, 4, 8, 511) == 1);
    /* DeepSeek-V3's 128 heads, one token: 257 */
    NB_CHECK(hint(dsv3, 1, 1, 255) == 0);
    NB_CHECK(hint(dsv3, 1, 1, 256) == 1);
    /* a forced threshold holds for every shape; 0 restores the default */
    nb_forward_force_long_ctx(24);
    NB_CHECK(hint(glm, 1, 1, 22) == 0);
    NB_CHECK(hint(glm, 1, 1, 23) == 1);
    NB_CHECK(hint(dsv3, 2, 1, 23) == 1);
    nb_forward_force_long_ctx(0);
    NB_CHECK(hint(glm, 1, 1, 23) == 0);
    /* GQA models are never long */
    NB_CHECK(hint(gqa, 1, 1, 100000) == 0);
    free(glm), free(dsv3), free(gqa);
}

static const nb_test tests[] = {
    {"defaults", test_defaults},
    {"steps", test_steps},
};

int main(int argc, char **argv)
{
    unsetenv("NIBBLE_MLA_LONG_CTX");
    return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
}
