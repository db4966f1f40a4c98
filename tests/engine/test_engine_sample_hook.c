/* The engine's backend-sampling path (runner.h sample hook, engine.c nb_sample_on_runner)
 * over the fake runner: a runner that keeps its logits (forward(NULL)) and samples them with
 * the CPU op through engine/dev_sample.c, as the CUDA runner does with the GPU op, must give every request exactly the
 * tokens and log-probabilities of the host path (same seeds, penalties, filters, n > 1,
 * prefill chunks that are skipped). Also: a failing sample hook aborts the live requests.
 * Run: build-smp/tests/test_engine_sample_hook */
#include <pthread.h>

#include "engine/dev_sample.h"
#include "engine/engine.h"
#include "engine/sampling.h"
#include "fake_runner.h"
#include "nbtest.h"
#include "ops/ops.h"

enum { V = 64, NREQ = 24, MAXTOK = 40 };

static nb_status (*g_fake_forward)(nb_runner *, const nb_batch *, float *);
static float *g_keep;
static int g_rows, g_null_forwards, g_sample_calls, g_fail_sample;
static nb_ops_ctx *g_cpu;
static nb_dev_sampler g_ds;

static nb_status keep_forward(nb_runner *r, const nb_batch *b, float *logits)
{
    if (logits) return g_fake_forward(r, b, logits);
    free(g_keep);
    g_keep = malloc((size_t)b->n_seqs * V * sizeof *g_keep);
    g_rows = b->n_seqs;
    g_null_forwards++;
    return g_fake_forward(r, b, g_keep);
}

static nb_status cpu_sample(nb_runner *r, int n, const nb_sample_params *p, const nb_sample_hist *h,
                            nb_sample_out *out)
{
    (void)r;
    g_sample_calls++;
    if (g_fail_sample) return nb_error(NB_ERR_INTERNAL, "test: injected sampling failure");
    /* what the CUDA runner does, with a CPU context: staging, one upload, the op, results back */
    return nb_dev_sample(&g_ds, g_cpu, g_keep, g_rows, V, n, p, h, out);
}

typedef struct {
    pthread_mutex_t mu;
    int32_t toks[NREQ * 2][MAXTOK];
    float lp[NREQ * 2][MAXTOK];
    nb_token_logprob top[NREQ * 2][MAXTOK][3];
    int n[NREQ * 2];
    int aborted;
} col;

static uint64_t g_ids[NREQ];

static void on_ev(const nb_engine_event *ev, void *user)
{
    col *c = user;
    pthread_mutex_lock(&c->mu);
    int req = -1;
    for (int i = 0; i < NREQ; i++)
        if (g_ids[i] == ev->request_id) req = i;
    if (ev->type == NB_EVENT_TOKENS && req >= 0) {
        int s = req * 2 + ev->index, k = c->n[s];
        if (k < MAXTOK) {
            c->toks[s][k] = ev->token_ids[0];
            c->lp[s][k] = ev->logprobs ? ev->logprobs[0] : 0;
            for (int j = 0; j < ev->n_top && j < 3; j++) c->top[s][k][j] = ev->top_logprobs[j];
            c->n[s]++;
        }
    }
    if (ev->type == NB_EVENT_FINISH && ev->finish_reason == NB_FINISH_ABORT) c->aborted++;
    pthread_mutex_unlock(&c->mu);
}

static void run(int hooked, col *c)
{
    nb_engine_params p = nb_engine_default_params();
    p.max_total_tokens = 4096;
    p.page_size = 16;
    p.chunked_prefill_size = 16; /* long prompts take several steps: rows that are skipped */
    nb_engine_parts parts;
    memset(&parts, 0, sizeof parts);
    parts.runner = nb_fake_runner_new(V, 2048, -3);
    if (hooked) {
        g_fake_forward = parts.runner->forward;
        parts.runner->forward = keep_forward;
        parts.runner->sample = cpu_sample;
    }
    snprintf(parts.model_name, sizeof parts.model_name, "fake");
    parts.mem_budget_bytes = 1 << 30;
    p.model = "fake";
    nb_engine *e;
    NB_CHECK_OK(nb_engine_create_from_parts(&p, &parts, &e));
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < NREQ; i++) {
        int32_t prompt[50];
        int plen = 3 + (int)(nb_mix64((uint64_t)i * 31) % 45);
        for (int j = 0; j < plen; j++) prompt[j] = (int32_t)(nb_mix64((uint64_t)(i * 100 + j)) % (V - 1));
        nb_sampling_params sp = nb_sampling_default_params();
        sp.max_tokens = 5 + (int)(nb_mix64((uint64_t)i * 7) % (MAXTOK - 5));
        sp.temperature = i % 5 == 0 ? 0.0f : 0.6f + 0.1f * (float)(i % 4);
        sp.top_p = i % 3 == 0 ? 0.85f : 1.0f;
        sp.top_k = i % 4 == 1 ? 10 : -1;
        sp.min_p = i % 7 == 3 ? 0.05f : 0.0f;
        sp.repetition_penalty = i % 2 ? 1.3f : 1.0f;
        sp.frequency_penalty = i % 3 == 2 ? 0.5f : 0.0f;
        sp.presence_penalty = i % 4 == 3 ? 0.4f : 0.0f;
        sp.logprobs = i % 2 == 0;
        sp.top_logprobs = i % 3;
        sp.seed = i % 6 == 5 ? -1 : 1000 + i; /* -1: the engine's seed, same in both runs */
        sp.n = i % 8 == 4 ? 2 : 1;
        nb_status st = nb_engine_submit(e, prompt, plen, &sp, on_ev, c, &g_ids[i]);
        if (!g_fail_sample) NB_CHECK_OK(st); /* else the engine may have failed already */
    }
    pthread_mutex_unlock(&c->mu);
    nb_engine_wait_idle(e);
    nb_engine_destroy(e);
}

static void test_hook_equals_host(void)
{
    NB_CHECK_OK(nb_ops_ctx_new_cpu(2, &g_cpu));
    static col host, dev;
    g_null_forwards = g_sample_calls = 0;
    run(0, &host);
    NB_CHECK(g_null_forwards == 0 && g_sample_calls == 0);
    run(1, &dev);
    NB_CHECK(g_null_forwards > 0 && g_sample_calls == g_null_forwards);
    int total = 0;
    for (int s = 0; s < NREQ * 2; s++) {
        NB_CHECK_MSG(host.n[s] == dev.n[s], "stream %d: %d tokens on the host path, %d through the hook", s,
                     host.n[s], dev.n[s]);
        for (int k = 0; k < host.n[s] && k < dev.n[s]; k++) {
            NB_CHECK_MSG(host.toks[s][k] == dev.toks[s][k], "stream %d token %d: %d vs %d", s, k, host.toks[s][k],
                         dev.toks[s][k]);
            NB_CHECK(host.lp[s][k] == dev.lp[s][k]);
            for (int j = 0; j < 3; j++)
                NB_CHECK(host.top[s][k][j].id == dev.top[s][k][j].id &&
                         host.top[s][k][j].logprob == dev.top[s][k][j].logprob);
        }
        total += host.n[s];
    }
    fprintf(stderr, "  %d tokens in %d streams identical; %d backend sampling calls\n", total, NREQ, g_sample_calls);
    NB_CHECK(total > NREQ * 5);
    free(g_keep);
    g_keep = NULL;
    nb_dev_sampler_free(&g_ds, g_cpu);
    nb_ops_ctx_free(g_cpu);
    g_cpu = NULL;
}

static void test_failing_hook_aborts(void)
{
    NB_CHECK_OK(nb_ops_ctx_new_cpu(1, &g_cpu));
    static col c;
    g_fail_sample = 1;
    run(1, &c);
    g_fail_sample = 0;
    int toks = 0;
    for (int s = 0; s < NREQ * 2; s++) toks += c.n[s];
    NB_CHECK(toks == 0 && c.aborted >= 1 && g_sample_calls >= 1);
    free(g_keep);
    g_keep = NULL;
    nb_ops_ctx_free(g_cpu);
    g_cpu = NULL;
}

static const nb_test tests[] = {
    {"hook_equals_host", test_hook_equals_host},
    {"failing_hook_aborts", test_failing_hook_aborts},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
