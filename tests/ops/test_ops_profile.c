/* The per-op profiler (ops/profile.h) on the CPU backend, over a decode step of
 * synthetic:glm5-tiny (MLA + DSA + MoE, every op kind the GLM-5 forward uses):
 *   - profiling on or off gives bitwise identical logits;
 *   - the op times sum to no more than the step's wall time, every kind the forward uses is
 *     there, a linear row's bytes are its weight's plus its activations';
 *   - the runners' request skips, counts and serves only decode-only steps;
 *   - one profiled context at a time; end without begin is refused.
 * Run: build-x/tests/test_ops_profile */
#include <stdlib.h>
#include <string.h>

#include "engine/forward.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "nbtest.h"
#include "ops/profile.h"

/* index_topk below the prompt: the DSA selection bites, so dsa_select runs (forward.h nb_forward_dsa_live) */
#define SPEC "synthetic:glm5-tiny:num_hidden_layers=2,index_topk=8"
#define PROMPT 12

typedef struct fixture {
    nb_model_config cfg;
    nb_checkpoint *ck;
    nb_model *m;
    nb_kv_pool pool;
    int32_t slots[2][PROMPT + 1];
    int32_t ids[2][PROMPT + 1];
} fixture;

static int setup(fixture *f)
{
    memset(f, 0, sizeof *f);
    NB_CHECK_OK(nb_synthetic_build(SPEC, &f->cfg, &f->ck));
    if (!f->ck) return 0;
    nb_model_params p = nb_model_default_params();
    p.n_threads = 2;
    NB_CHECK_OK(nb_model_from_checkpoint(&f->cfg, f->ck, &p, &f->m));
    if (!f->m) return 0;
    NB_CHECK_OK(nb_kv_pool_init(&f->pool, &f->cfg, NB_DTYPE_F32, 2 * (PROMPT + 1)));
    for (int s = 0; s < 2; s++)
        for (int i = 0; i <= PROMPT; i++) {
            f->slots[s][i] = 2 * i + s; /* interleaved rows of one pool */
            f->ids[s][i] = (int32_t)((7 + 13 * i + 29 * s) % f->cfg.vocab_size);
        }
    /* both prompts, then the decode step the tests repeat */
    nb_seq_step st[2] = {{f->ids[0], PROMPT, 0, f->slots[0], 0}, {f->ids[1], PROMPT, 0, f->slots[1], 0}};
    nb_batch b = {2, st};
    float *lg = malloc(sizeof(float) * 2 * (size_t)f->cfg.vocab_size);
    NB_CHECK_OK(nb_forward(f->m, &f->pool, &b, lg));
    free(lg);
    return 1;
}

static void teardown(fixture *f)
{
    nb_kv_pool_free(&f->pool);
    nb_model_free(f->m);
    nb_checkpoint_close(f->ck);
    nb_model_config_free(&f->cfg);
}

/* The decode step: one token per sequence at position PROMPT (rewrites the same KV rows). */
static void decode(fixture *f, float *logits)
{
    nb_seq_step st[2] = {{&f->ids[0][PROMPT], 1, PROMPT, f->slots[0], 0},
                         {&f->ids[1][PROMPT], 1, PROMPT, f->slots[1], 0}};
    nb_batch b = {2, st};
    NB_CHECK_OK(nb_forward(f->m, &f->pool, &b, logits));
}

static const nb_op_prof_row *find(const nb_op_prof *p, const char *op, const char *detail)
{
    for (int i = 0; i < p->n_rows; i++)
        if (!strcmp(p->rows[i].op, op) && (!detail || !strcmp(p->rows[i].detail, detail))) return &p->rows[i];
    return NULL;
}

static void test_profiled_step(void)
{
    fixture f;
    if (!setup(&f)) return;
    const size_t V = (size_t)f.cfg.vocab_size;
    float *a = malloc(2 * V * sizeof *a), *b = malloc(2 * V * sizeof *b), *c = malloc(2 * V * sizeof *c);
    decode(&f, a);
    nb_op_prof acc = {0};
    NB_CHECK_OK(nb_ops_profile_begin(f.m->ops));
    decode(&f, b);
    NB_CHECK_OK(nb_ops_profile_end(f.m->ops, &acc, 2));
    decode(&f, c);
    NB_CHECK_MSG(!memcmp(a, c, 2 * V * sizeof *a), "the repeated decode step is not deterministic");
    NB_CHECK_MSG(!memcmp(a, b, 2 * V * sizeof *a), "profiling changed the logits");

    NB_CHECK(acc.steps == 1 && acc.tokens == 2);
    NB_CHECK(acc.n_rows > 0);
    NB_CHECK_MSG(acc.op_ms > 0 && acc.op_ms <= acc.wall_ms, "ops %.4f ms, step %.4f ms", acc.op_ms, acc.wall_ms);
    double sum = 0;
    for (int i = 0; i < acc.n_rows; i++) {
        NB_CHECK(acc.rows[i].calls > 0 && acc.rows[i].ms >= 0);
        sum += acc.rows[i].ms;
    }
    NB_CHECK_NEAR(sum, acc.op_ms, 1e-9 * (1 + acc.op_ms));
    /* every op kind of the GLM-5 forward (engine/forward.c, model/glm_moe_dsa.c; the MLA
     * layer's ropes, norms and pool writes go through the fused launches) */
    static const char *const kinds[] = {"embedding", "rmsnorm",   "add_rmsnorm", "linear",    "rope_n",
                                        "norm_n",    "set_rows_n", "dsa_select", "mla_attention",
                                        "moe_route", "moe_experts", "mlp",       "get_rows"};
    for (size_t i = 0; i < NB_ARRAY_LEN(kinds); i++) NB_CHECK_MSG(find(&acc, kinds[i], NULL), "no %s row", kinds[i]);
    /* the logits layer, named by its role: [vocab, hidden], read once, 2 tokens in and 2 rows of
     * logits out */
    const nb_weight *lm = &f.m->lm_head;
    char detail[96];
    static const char *const fmt[] = {"f32", "bf16", "nvfp4", "fp8"};
    snprintf(detail, sizeof detail, "lm_head 2 tok, [%lld x %lld] %s", (long long)lm->n, (long long)lm->k,
             fmt[lm->fmt]);
    const nb_op_prof_row *r = find(&acc, "linear", detail);
    NB_CHECK_MSG(r, "no row '%s'", detail);
    if (r && r->calls == 1) {
        double want = nb_prof_weight_bytes(lm) + 4.0 * 2 * (double)(lm->k + lm->n);
        NB_CHECK_NEAR(r->bytes, want, 0.5);
        NB_CHECK(nb_prof_weight_bytes(lm) >= (double)lm->n * (double)lm->k); /* >= 1 byte per weight (bf16: 2) */
    }
    /* moe_experts: at least top-k distinct experts' weights for two tokens */
    r = find(&acc, "moe_experts", NULL);
    if (r) NB_CHECK(r->bytes > 0);
    /* the sorted table is largest first */
    nb_op_prof_sort(&acc);
    for (int i = 1; i < acc.n_rows; i++) NB_CHECK(acc.rows[i - 1].ms >= acc.rows[i].ms);

    /* a second step adds into the same rows */
    int n_rows = acc.n_rows;
    NB_CHECK_OK(nb_ops_profile_begin(f.m->ops));
    decode(&f, b);
    NB_CHECK_OK(nb_ops_profile_end(f.m->ops, &acc, 2));
    NB_CHECK(acc.steps == 2 && acc.n_rows == n_rows);
    NB_CHECK(!memcmp(a, b, 2 * V * sizeof *a));
    nb_op_prof_free(&acc);
    free(a);
    free(b);
    free(c);
    teardown(&f);
}

static void test_request(void)
{
    fixture f;
    if (!setup(&f)) return;
    float *lg = malloc(2 * (size_t)f.cfg.vocab_size * sizeof *lg);
    nb_op_prof acc = {0};
    nb_ops_profile_request(1, 2, &acc);
    NB_CHECK(!nb_ops_profile_step_begin(f.m->ops, 0, 24)); /* prefill: never */
    NB_CHECK(!nb_ops_profile_step_begin(f.m->ops, 1, 2));  /* skipped */
    int served = 0;
    for (int i = 0; i < 4; i++) {
        int on = nb_ops_profile_step_begin(f.m->ops, 1, 2);
        decode(&f, lg);
        if (on) NB_CHECK_OK(nb_ops_profile_step_end(f.m->ops));
        served += on;
    }
    NB_CHECK_MSG(served == 2 && acc.steps == 2, "served %d, %d steps", served, acc.steps);
    nb_ops_profile_request(0, 0, NULL);
    NB_CHECK(!nb_ops_profile_step_begin(f.m->ops, 1, 2));
    NB_CHECK(acc.op_ms <= acc.wall_ms);
    nb_op_prof_free(&acc);

    /* one context at a time; end needs a begin */
    nb_ops_ctx *other = NULL;
    NB_CHECK_OK(nb_ops_ctx_new_cpu(1, &other));
    NB_CHECK_OK(nb_ops_profile_begin(f.m->ops));
    NB_CHECK_STATUS(nb_ops_profile_begin(other), NB_ERR_BUSY);
    NB_CHECK_STATUS(nb_ops_profile_end(other, &acc, 0), NB_ERR_INVALID_ARG);
    NB_CHECK_OK(nb_ops_profile_end(f.m->ops, &acc, 0));
    NB_CHECK(acc.steps == 1 && acc.n_rows == 0 && acc.op_ms == 0); /* no op ran */
    NB_CHECK_STATUS(nb_ops_profile_end(f.m->ops, &acc, 0), NB_ERR_INVALID_ARG);
    nb_op_prof_free(&acc);
    nb_ops_ctx_free(other);
    free(lg);
    teardown(&f);
}

static const nb_test tests[] = {
    {"profiled_step", test_profiled_step},
    {"request", test_request},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
