/* The engine over a fake model (tests/engine/fake_runner.c): outputs equal a direct
 * reference computation alone or batched, with or without preemption and chunking;
 * aborts at every stage free their pages within one step; every choice finishes exactly
 * once under concurrent submitters and random aborts; queue limits; validation.
 * Run: build-eng/tests/test_engine [name-substring] */
#include <pthread.h>
#include <unistd.h>

#include "engine/sampling.h"
#include "fake_runner.h"
#include "nbtest.h"

#define MAXTOK 512
#define MAXCH 4

typedef struct col {
    pthread_mutex_t mu;
    int n;
    int32_t toks[MAXCH][MAXTOK];
    float lp[MAXCH][MAXTOK];
    nb_token_logprob top[MAXCH][3];
    int ntok[MAXCH], finish[MAXCH], completion[MAXCH], prompt_tokens;
    nb_finish_reason why[MAXCH];
    int32_t stop_token[MAXCH];
    int last, after_last;
} col;

static void on_ev(const nb_engine_event *ev, void *u)
{
    col *c = u;
    pthread_mutex_lock(&c->mu);
    if (c->last) c->after_last++;
    int i = ev->index;
    if (ev->type == NB_EVENT_TOKENS) {
        for (int t = 0; t < ev->n_tokens && c->ntok[i] < MAXTOK; t++) {
            if (ev->logprobs) c->lp[i][c->ntok[i]] = ev->logprobs[t];
            if (ev->top_logprobs && c->ntok[i] == 0)
                for (int k = 0; k < ev->n_top && k < 3; k++) c->top[i][k] = ev->top_logprobs[k];
            c->toks[i][c->ntok[i]++] = ev->token_ids[t];
        }
    } else {
        c->finish[i]++;
        c->why[i] = ev->finish_reason;
        c->completion[i] = ev->completion_tokens;
        c->prompt_tokens = ev->prompt_tokens;
        c->stop_token[i] = ev->stop_token;
        if (ev->last) c->last++;
    }
    pthread_mutex_unlock(&c->mu);
}

static col *col_new(void)
{
    col *c = calloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

/* Reference: the same sampler over the fake's logits, one sequence alone, no engine. */
static int ref_generate(const nb_fake_runner *f, const int32_t *prompt, int n, const nb_sampling_params *sp,
                        uint64_t seed, int32_t *out)
{
    int V = f->base.vocab_size;
    nb_sampler s;
    nb_sampler_init(&s, V);
    int32_t *all = malloc((size_t)(n + MAXTOK) * sizeof *all);
    memcpy(all, prompt, (size_t)n * sizeof *all);
    float *lg = malloc((size_t)V * sizeof *lg);
    int len = n, k = 0;
    while (k < sp->max_tokens) {
        nb_fake_logits(f, all, len, lg);
        nb_sample smp;
        nb_sample_token(&s, lg, sp, seed, all, n, len, &smp);
        all[len++] = smp.token;
        out[k++] = smp.token;
        int stop = !sp->ignore_eos && smp.token == V - 1;
        for (int i = 0; i < sp->n_stop_token_ids; i++) stop |= smp.token == sp->stop_token_ids[i];
        if (stop) break;
    }
    free(all);
    free(lg);
    nb_sampler_free(&s);
    return k;
}

static nb_engine_params small_params(int64_t kv_tokens, int page)
{
    nb_engine_params p = nb_engine_default_params();
    p.max_total_tokens = kv_tokens;
    p.page_size = page;
    return p;
}

static void test_basic(void)
{
    nb_engine *e;
    nb_fake_runner *f;
    NB_CHECK_OK(nb_fake_engine(small_params(4096, 16), 64, 2048, 0, &e, &f));
    int32_t prompt[3] = {1, 2, 3};
    nb_sampling_params sp = nb_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = 10;
    sp.ignore_eos = 1;
    sp.logprobs = 1;
    sp.top_logprobs = 3;
    col *c = col_new();
    uint64_t id = 0;
    NB_CHECK_OK(nb_engine_submit(e, prompt, 3, &sp, on_ev, c, &id));
    NB_CHECK(id > 0);
    nb_engine_wait_idle(e);
    int32_t want[MAXTOK];
    int n = ref_generate(f, prompt, 3, &sp, 0, want);
    NB_CHECK(n == 10 && c->ntok[0] == 10);
    for (int i = 0; i < n && i < c->ntok[0]; i++) NB_CHECK(c->toks[0][i] == want[i]);
    NB_CHECK(c->finish[0] == 1 && c->why[0] == NB_FINISH_LENGTH && c->last == 1 && c->after_last == 0);
    NB_CHECK(c->completion[0] == 10 && c->prompt_tokens == 3);
    /* logprobs: greedy token is the top alternative; its logprob is log-softmax */
    float lg[64];
    nb_fake_logits(f, prompt, 3, lg);
    double m = -1e30, z = 0;
    for (int v = 0; v < 64; v++) m = lg[v] > m ? lg[v] : m;
    for (int v = 0; v < 64; v++) z += exp(lg[v] - m);
    NB_CHECK_NEAR(c->lp[0][0], lg[want[0]] - m - log(z), 1e-4);
    NB_CHECK(c->top[0][0].id == want[0] && c->top[0][0].logprob >= c->top[0][1].logprob &&
             c->top[0][1].logprob >= c->top[0][2].logprob);
    nb_engine_stats st;
    nb_engine_get_stats(e, &st);
    NB_CHECK(st.generation_tokens_total == 10 && st.prompt_tokens_total == 3 && st.kv_used_tokens == 0);
    NB_CHECK(st.running == 0 && st.waiting == 0 && st.requests_finished == 1);
    nb_engine_destroy(e);
    free(c);
}

/* Many requests with temperature, top-p and seeds: identical outputs run one at a time on
 * a roomy cache and all together on a cache so small that preemption must happen, with
 * chunked prefill and several continuous decode steps. */
static void run_invariance(int decode_steps, int chunk)
{
    enum { NR = 24 };
    int32_t prompts[NR][64];
    int plen[NR];
    nb_sampling_params sp[NR];
    for (int r = 0; r < NR; r++) {
        plen[r] = 5 + (int)(nb_mix64((uint64_t)r * 7 + 1) % 55);
        for (int i = 0; i < plen[r]; i++) prompts[r][i] = (int32_t)(nb_mix64((uint64_t)(r * 100 + i)) % 63);
        sp[r] = nb_sampling_default_params();
        sp[r].temperature = r % 3 == 0 ? 0.0f : 0.9f;
        sp[r].top_p = 0.9f;
        sp[r].seed = 1000 + r;
        sp[r].max_tokens = 10 + (int)(nb_mix64((uint64_t)r * 13) % 50);
        sp[r].ignore_eos = r % 2;
    }
    nb_engine *big, *small;
    nb_fake_runner *fb, *fs;
    nb_engine_params pb = small_params(1 << 16, 16);
    pb.max_running_requests = 1;
    NB_CHECK_OK(nb_fake_engine(pb, 64, 2048, -2, &big, &fb));
    nb_engine_params ps = small_params(256, 8);
    ps.num_continuous_decode_steps = decode_steps;
    ps.chunked_prefill_size = chunk;
    NB_CHECK_OK(nb_fake_engine(ps, 64, 256, -2, &small, &fs));
    col *ca[NR], *cb[NR];
    for (int r = 0; r < NR; r++) {
        ca[r] = col_new();
        cb[r] = col_new();
        NB_CHECK_OK(nb_engine_submit(big, prompts[r], plen[r], &sp[r], on_ev, ca[r], NULL));
        NB_CHECK_OK(nb_engine_submit(small, prompts[r], plen[r], &sp[r], on_ev, cb[r], NULL));
    }
    nb_engine_wait_idle(big);
    nb_engine_wait_idle(small);
    nb_engine_stats st;
    nb_engine_get_stats(small, &st);
    NB_CHECK_MSG(st.preemptions > 0, "decode_steps %d chunk %d: no preemption happened", decode_steps, chunk);
    NB_CHECK(st.kv_used_tokens == 0 && st.running == 0 && st.waiting == 0);
    for (int r = 0; r < NR; r++) {
        int32_t want[MAXTOK];
        int n = ref_generate(fb, prompts[r], plen[r], &sp[r], (uint64_t)sp[r].seed, want);
        NB_CHECK_MSG(ca[r]->ntok[0] == n && cb[r]->ntok[0] == n, "request %d: %d / %d tokens, want %d", r,
                     ca[r]->ntok[0], cb[r]->ntok[0], n);
        int same = 1;
        for (int i = 0; i < n && i < cb[r]->ntok[0] && i < ca[r]->ntok[0]; i++)
            same &= ca[r]->toks[0][i] == want[i] && cb[r]->toks[0][i] == want[i];
        NB_CHECK_MSG(same, "request %d differs (decode_steps %d, chunk %d)", r, decode_steps, chunk);
        NB_CHECK(ca[r]->finish[0] == 1 && cb[r]->finish[0] == 1 && cb[r]->last == 1);
        free(ca[r]);
        free(cb[r]);
    }
    nb_engine_destroy(big);
    nb_engine_destroy(small);
}

static void test_invariance_preemption(void)
{
    run_invariance(1, 8192);
    run_invariance(3, 16);
    run_invariance(1, 0);
}

static void wait_steps(nb_engine *e, int n) { nb_engine_test_step(e, n); }

static void test_aborts_every_stage(void)
{
    nb_engine_params p = small_params(64, 4);
    p.chunked_prefill_size = 8;
    nb_engine *e;
    nb_fake_runner *f;
    NB_CHECK_OK(nb_fake_engine(p, 64, 64, -10, &e, &f));
    nb_engine_test_gate(e, 1);
    nb_sampling_params sp = nb_sampling_default_params();
    sp.temperature = 0;
    sp.ignore_eos = 1;
    sp.max_tokens = 20;
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = i % 60;
    nb_engine_stats st;

    /* 1. waiting: aborted before any step */
    col *c1 = col_new();
    uint64_t id;
    NB_CHECK_OK(nb_engine_submit(e, prompt, 10, &sp, on_ev, c1, &id));
    NB_CHECK_OK(nb_engine_abort(e, id));
    wait_steps(e, 1);
    NB_CHECK(c1->finish[0] == 1 && c1->why[0] == NB_FINISH_ABORT && c1->ntok[0] == 0 && c1->last == 1);

    /* 2. in the middle of a chunked prefill (40 tokens in chunks of 8) */
    col *c2 = col_new();
    NB_CHECK_OK(nb_engine_submit(e, prompt, 40, &sp, on_ev, c2, &id));
    wait_steps(e, 2);
    nb_engine_get_stats(e, &st);
    NB_CHECK(st.running == 1 && st.kv_used_tokens == 16 && c2->ntok[0] == 0);
    NB_CHECK_OK(nb_engine_abort(e, id));
    wait_steps(e, 1);
    nb_engine_get_stats(e, &st);
    NB_CHECK(c2->finish[0] == 1 && c2->why[0] == NB_FINISH_ABORT && st.kv_used_tokens == 0 && st.running == 0);

    /* 3. decoding */
    col *c3 = col_new();
    NB_CHECK_OK(nb_engine_submit(e, prompt, 5, &sp, on_ev, c3, &id));
    wait_steps(e, 3);
    NB_CHECK(c3->ntok[0] == 3);
    NB_CHECK_OK(nb_engine_abort(e, id));
    wait_steps(e, 1);
    nb_engine_get_stats(e, &st);
    NB_CHECK(c3->finish[0] == 1 && c3->why[0] == NB_FINISH_ABORT && c3->ntok[0] == 3 && st.kv_used_tokens == 0);

    /* 4. preempted: two sequences outgrow 64 slots; the younger is preempted, then aborted */
    col *c4a = col_new(), *c4b = col_new();
    uint64_t ida, idb;
    sp.max_tokens = 40;
    NB_CHECK_OK(nb_engine_submit(e, prompt, 20, &sp, on_ev, c4a, &ida));
    NB_CHECK_OK(nb_engine_submit(e, prompt + 1, 8, &sp, on_ev, c4b, &idb));
    int guard = 0;
    do {
        wait_steps(e, 1);
        nb_engine_get_stats(e, &st);
    } while (st.preemptions == 0 && guard++ < 100);
    NB_CHECK(st.preemptions == 1 && st.waiting == 1 && c4b->finish[0] == 0);
    NB_CHECK_OK(nb_engine_abort(e, idb));
    wait_steps(e, 1);
    NB_CHECK(c4b->finish[0] == 1 && c4b->why[0] == NB_FINISH_ABORT);
    nb_engine_test_gate(e, 0);
    nb_engine_wait_idle(e);
    NB_CHECK(c4a->finish[0] == 1 && c4a->why[0] == NB_FINISH_LENGTH && c4a->ntok[0] == 40);
    nb_engine_get_stats(e, &st);
    NB_CHECK(st.kv_used_tokens == 0 && st.requests_aborted == 4 && st.requests_finished == 1);

    /* 5. after it finished: accepted and ignored; never issued: NOT_FOUND */
    NB_CHECK_OK(nb_engine_abort(e, ida));
    NB_CHECK_STATUS(nb_engine_abort(e, 999999), NB_ERR_NOT_FOUND);
    nb_engine_wait_idle(e);
    NB_CHECK(c4a->finish[0] == 1 && c4a->after_last == 0);
    nb_engine_destroy(e);
    free(c1);
    free(c2);
    free(c3);
    free(c4a);
    free(c4b);
}

static void test_queue_busy_and_validation(void)
{
    nb_engine_params p = small_params(1024, 16);
    p.max_queued_requests = 2;
    nb_engine *e;
    NB_CHECK_OK(nb_fake_engine(p, 64, 128, 0, &e, NULL));
    nb_engine_test_gate(e, 1);
    nb_sampling_params sp = nb_sampling_default_params();
    sp.max_tokens = 4;
    int32_t prompt[4] = {1, 2, 3, 4};
    col *c = col_new();
    NB_CHECK_OK(nb_engine_submit(e, prompt, 4, &sp, on_ev, c, NULL));
    NB_CHECK_OK(nb_engine_submit(e, prompt, 4, &sp, on_ev, c, NULL));
    NB_CHECK_STATUS(nb_engine_submit(e, prompt, 4, &sp, on_ev, c, NULL), NB_ERR_BUSY);
    /* validation */
    NB_CHECK_STATUS(nb_engine_submit(e, prompt, 0, &sp, on_ev, c, NULL), NB_ERR_INVALID_ARG);
    int32_t badtok[2] = {1, 64};
    NB_CHECK_STATUS(nb_engine_submit(e, badtok, 2, &sp, on_ev, c, NULL), NB_ERR_INVALID_ARG);
    sp.max_tokens = 125;
    NB_CHECK_STATUS(nb_engine_submit(e, prompt, 4, &sp, on_ev, c, NULL), NB_ERR_INVALID_ARG);
    NB_CHECK(strstr(nb_last_error(), "context length of 128") != NULL);
    sp.max_tokens = 4;
    const char *stops[1] = {"x"};
    sp.stop = stops;
    sp.n_stop = 1;
    NB_CHECK_STATUS(nb_engine_submit(e, prompt, 4, &sp, on_ev, c, NULL), NB_ERR_INVALID_ARG);
    sp.n_stop = 0;
    sp.top_p = 0;
    NB_CHECK_STATUS(nb_engine_submit(e, prompt, 4, &sp, on_ev, c, NULL), NB_ERR_INVALID_ARG);
    NB_CHECK(strstr(nb_last_error(), "top_p") != NULL);
    nb_engine_test_gate(e, 0);
    nb_engine_wait_idle(e);
    NB_CHECK(c->last == 2);
    nb_engine_destroy(e);
    free(c);
}

static void test_n_choices_and_stops(void)
{
    nb_engine *e;
    nb_fake_runner *f;
    NB_CHECK_OK(nb_fake_engine(small_params(4096, 16), 64, 512, -3, &e, &f));
    int32_t prompt[5] = {9, 8, 7, 6, 5};
    nb_sampling_params sp = nb_sampling_default_params();
    sp.temperature = 1.0f;
    sp.seed = 5;
    sp.n = 3;
    sp.max_tokens = 12;
    sp.ignore_eos = 1;
    col *c = col_new();
    NB_CHECK_OK(nb_engine_submit(e, prompt, 5, &sp, on_ev, c, NULL));
    nb_engine_wait_idle(e);
    NB_CHECK(c->last == 1 && c->after_last == 0);
    int distinct = 0;
    for (int i = 0; i < 3; i++) {
        NB_CHECK(c->finish[i] == 1 && c->ntok[i] == 12);
        int32_t want[MAXTOK];
        nb_sampling_params one = sp;
        one.n = 1;
        ref_generate(f, prompt, 5, &one, 5 + (uint64_t)i, want);
        NB_CHECK(!memcmp(want, c->toks[i], 12 * sizeof(int32_t)));
        if (i > 0) distinct += memcmp(c->toks[i], c->toks[0], 12 * sizeof(int32_t)) != 0;
    }
    NB_CHECK(distinct >= 1);

    /* a 40-token prompt, pages of 16: choices 1 and 2 share choice 0's two full prompt
     * pages and compute 8 prompt tokens each; outputs still equal the reference */
    {
        nb_engine *e2;
        nb_fake_runner *f2;
        NB_CHECK_OK(nb_fake_engine(small_params(4096, 16), 64, 512, -3, &e2, &f2));
        int32_t longp[40];
        for (int i = 0; i < 40; i++) longp[i] = (i * 7) % 60;
        col *cl = col_new();
        NB_CHECK_OK(nb_engine_submit(e2, longp, 40, &sp, on_ev, cl, NULL));
        nb_engine_wait_idle(e2);
        nb_engine_stats st2;
        nb_engine_get_stats(e2, &st2);
        NB_CHECK_MSG(st2.prefill_tokens_computed == 40 + 8 + 8, "computed %llu prompt tokens",
                     (unsigned long long)st2.prefill_tokens_computed);
        for (int i = 0; i < 3; i++) {
            int32_t w[MAXTOK];
            nb_sampling_params one = sp;
            one.n = 1;
            ref_generate(f2, longp, 40, &one, 5 + (uint64_t)i, w);
            NB_CHECK(cl->finish[i] == 1 && cl->ntok[i] == 12 && !memcmp(w, cl->toks[i], 12 * sizeof(int32_t)));
        }
        NB_CHECK(st2.kv_used_tokens == 0);
        nb_engine_destroy(e2);
        free(cl);
    }

    /* stop token id: the 3rd greedy token stops it */
    nb_sampling_params g = nb_sampling_default_params();
    g.temperature = 0;
    g.max_tokens = 10;
    g.ignore_eos = 1;
    int32_t want[MAXTOK];
    ref_generate(f, prompt, 5, &g, 0, want);
    int32_t stop_id = want[2];
    int first = 0;
    while (want[first] != stop_id) first++;
    g.stop_token_ids = &stop_id;
    g.n_stop_token_ids = 1;
    col *c2 = col_new();
    NB_CHECK_OK(nb_engine_submit(e, prompt, 5, &g, on_ev, c2, NULL));
    nb_engine_wait_idle(e);
    NB_CHECK(c2->why[0] == NB_FINISH_STOP && c2->stop_token[0] == stop_id && c2->ntok[0] == first + 1);

    /* EOS: with a strong EOS bias greedy stops at once unless ignore_eos */
    nb_engine_destroy(e);
    NB_CHECK_OK(nb_fake_engine(small_params(4096, 16), 64, 512, 50, &e, &f));
    g.n_stop_token_ids = 0;
    col *c3 = col_new(), *c4 = col_new();
    NB_CHECK_OK(nb_engine_submit(e, prompt, 5, &g, on_ev, c3, NULL));
    g.ignore_eos = 0;
    NB_CHECK_OK(nb_engine_submit(e, prompt, 5, &g, on_ev, c4, NULL));
    nb_engine_wait_idle(e);
    NB_CHECK(c3->why[0] == NB_FINISH_LENGTH && c3->ntok[0] == 10);
    NB_CHECK(c4->why[0] == NB_FINISH_STOP && c4->ntok[0] == 1 && c4->stop_token[0] == 63);
    /* max_tokens 0: finishes at once with no token */
    g.max_tokens = 0;
    col *c5 = col_new();
    NB_CHECK_OK(nb_engine_submit(e, prompt, 5, &g, on_ev, c5, NULL));
    nb_engine_wait_idle(e);
    NB_CHECK(c5->why[0] == NB_FINISH_LENGTH && c5->ntok[0] == 0 && c5->last == 1);
    nb_engine_destroy(e);
    free(c);
    free(c2);
    free(c3);
    free(c4);
    free(c5);
}

static void test_forward_failure(void)
{
    nb_engine *e;
    nb_fake_runner *f;
    NB_CHECK_OK(nb_fake_engine(small_params(4096, 16), 64, 512, -10, &e, &f));
    f->fail_at_step = 3;
    nb_sampling_params sp = nb_sampling_default_params();
    sp.max_tokens = 50;
    sp.ignore_eos = 1;
    int32_t prompt[3] = {1, 2, 3};
    col *c = col_new();
    NB_CHECK_OK(nb_engine_submit(e, prompt, 3, &sp, on_ev, c, NULL));
    nb_engine_wait_idle(e);
    NB_CHECK(c->why[0] == NB_FINISH_ABORT && c->finish[0] == 1 && c->ntok[0] == 2);
    NB_CHECK_STATUS(nb_engine_submit(e, prompt, 3, &sp, on_ev, c, NULL), NB_ERR_ABORTED);
    nb_engine_stats st;
    nb_engine_get_stats(e, &st);
    NB_CHECK(st.kv_used_tokens == 0);
    nb_engine_destroy(e);
    free(c);
}

/* Several threads submit and abort at random while the engine runs on a cache small
 * enough to preempt: every choice finishes exactly once, last exactly once, greedy
 * survivors equal the reference, and all pages come back. */
typedef struct thr_arg {
    nb_engine *e;
    nb_fake_runner *f;
    int t;
    int bad;
} thr_arg;

static void *submitter(void *arg)
{
    thr_arg *a = arg;
    enum { NQ = 60 };
    col *cs[NQ];
    uint64_t ids[NQ];
    int32_t prompts[NQ][40];
    int plen[NQ];
    nb_sampling_params sps[NQ];
    for (int i = 0; i < NQ; i++) {
        uint64_t r = nb_mix64((uint64_t)(a->t * 1000 + i));
        plen[i] = 1 + (int)(r % 40);
        for (int j = 0; j < plen[i]; j++) prompts[i][j] = (int32_t)(nb_mix64(r + (uint64_t)j) % 63);
        sps[i] = nb_sampling_default_params();
        sps[i].temperature = (r >> 8) % 2 ? 0.0f : 0.7f;
        sps[i].seed = (int64_t)(r % 1000);
        sps[i].max_tokens = 1 + (int)((r >> 16) % 40);
        sps[i].n = 1 + (int)((r >> 24) % 2);
        sps[i].ignore_eos = 1;
        cs[i] = col_new();
        if (nb_engine_submit(a->e, prompts[i], plen[i], &sps[i], on_ev, cs[i], &ids[i]) != NB_OK) a->bad++;
        if ((r >> 32) % 4 == 0) usleep((useconds_t)((r >> 40) % 500));
        if ((r >> 36) % 5 == 0) nb_engine_abort(a->e, ids[i - (int)((r >> 44) % (uint64_t)(i + 1))]);
    }
    for (int i = 0; i < NQ; i++) {
        int waited = 0;
        for (;;) {
            pthread_mutex_lock(&cs[i]->mu);
            int l = cs[i]->last;
            pthread_mutex_unlock(&cs[i]->mu);
            if (l || waited > 20000) break;
            usleep(1000);
            waited++;
        }
        col *c = cs[i];
        if (c->last != 1 || c->after_last) a->bad++;
        for (int k = 0; k < sps[i].n; k++) {
            if (c->finish[k] != 1) a->bad++;
            if (c->why[k] == NB_FINISH_LENGTH) {
                int32_t want[MAXTOK];
                int n = ref_generate(a->f, prompts[i], plen[i], &sps[i], (uint64_t)sps[i].seed + (uint64_t)k, want);
                if (n != c->ntok[k] || memcmp(want, c->toks[k], (size_t)n * sizeof(int32_t))) a->bad++;
            }
        }
        free(c);
    }
    return NULL;
}

static void test_concurrent_property(void)
{
    nb_engine_params p = small_params(160, 4);
    p.chunked_prefill_size = 12;
    p.num_continuous_decode_steps = 2;
    nb_engine *e;
    nb_fake_runner *f;
    NB_CHECK_OK(nb_fake_engine(p, 64, 160, 0, &e, &f));
    pthread_t th[4];
    thr_arg args[4];
    for (int t = 0; t < 4; t++) {
        args[t] = (thr_arg){e, f, t, 0};
        pthread_create(&th[t], NULL, submitter, &args[t]);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        NB_CHECK_MSG(args[t].bad == 0, "thread %d: %d bad requests", t, args[t].bad);
    }
    nb_engine_wait_idle(e);
    nb_engine_stats st;
    nb_engine_get_stats(e, &st);
    NB_CHECK(st.kv_used_tokens == 0 && st.running == 0 && st.waiting == 0);
    fprintf(stderr, "  %llu finished, %llu aborted, %llu preemptions, %llu steps\n",
            (unsigned long long)st.requests_finished, (unsigned long long)st.requests_aborted,
            (unsigned long long)st.preemptions, (unsigned long long)st.steps);
    NB_CHECK(st.preemptions > 0 && st.requests_aborted > 0);
    nb_engine_destroy(e);
}

/* The KV pool leaves the largest step's activations free (runner->act_bytes_per_token x (max
 * running + a prefill chunk)): 1 GiB budget, 1024 B per KV token, 1000 B of activations per token
 * of a step of 1000 + 8192 tokens. */
static void test_kv_activation_reserve(void)
{
    int64_t tok[2];
    for (int k = 0; k < 2; k++) {
        nb_engine_params p = small_params(0, 16);
        p.mem_fraction_static = 1.0;
        p.max_running_requests = 1000;
        p.chunked_prefill_size = 8192;
        p.max_prefill_tokens = 16384;
        nb_engine_parts parts;
        memset(&parts, 0, sizeof parts);
        parts.runner = nb_fake_runner_new(64, 4096, 0);
        parts.runner->act_bytes_per_token = k ? 1000 : 0;
        snprintf(parts.model_name, sizeof parts.model_name, "fake");
        parts.mem_budget_bytes = 1 << 30;
        p.model = "fake";
        nb_engine *e = NULL;
        NB_CHECK(nb_engine_create_from_parts(&p, &parts, &e) == NB_OK);
        if (!e) return;
        nb_engine_info in;
        NB_CHECK(nb_engine_get_info(e, &in) == NB_OK);
        tok[k] = in.max_total_tokens;
        nb_engine_destroy(e);
    }
    NB_CHECK_MSG(tok[0] == (1 << 30) / 1024, "no reserve: %lld tokens", (long long)tok[0]);
    const int64_t want = ((1 << 30) - 1000LL * (1000 + 8192)) / 1024 / 16 * 16;
    NB_CHECK_MSG(tok[1] == want, "reserve: %lld tokens, want %lld", (long long)tok[1], (long long)want);
}

static void test_shutdown_aborts(void)
{
    nb_engine *e;
    NB_CHECK_OK(nb_fake_engine(small_params(4096, 16), 64, 512, -10, &e, NULL));
    nb_engine_test_gate(e, 1);
    nb_sampling_params sp = nb_sampling_default_params();
    sp.max_tokens = 100;
    int32_t prompt[3] = {1, 2, 3};
    col *a = col_new(), *b = col_new();
    NB_CHECK_OK(nb_engine_submit(e, prompt, 3, &sp, on_ev, a, NULL));
    nb_engine_test_step(e, 2);
    NB_CHECK_OK(nb_engine_submit(e, prompt, 3, &sp, on_ev, b, NULL));
    nb_engine_destroy(e);
    NB_CHECK(a->last == 1 && a->why[0] == NB_FINISH_ABORT && a->ntok[0] == 2);
    NB_CHECK(b->last == 1 && b->why[0] == NB_FINISH_ABORT && b->ntok[0] == 0);
    free(a);
    free(b);
}

/* Engine-level property over many seeds: random knobs, arrivals, aborts (at any stage)
 * interleaved step by step; every choice finishes exactly once, the last flag exactly
 * once per request, unaborted outputs equal the reference, all pages come back. */
static void test_property_seeds(void)
{
    int bad_total = 0;
    uint64_t preempt = 0, aborted = 0;
    for (uint64_t seed = 1; seed <= 300 && !bad_total; seed++) {
        uint64_t k = 0;
#define RND(n) ((int)(nb_mix64(seed * 7919 + k++) % (uint64_t)(n)))
        int page = 1 + RND(8);
        nb_engine_params p = small_params((int64_t)page * (8 + RND(24)), page);
        p.chunked_prefill_size = RND(3) ? 1 + RND(24) : 0;
        p.max_prefill_tokens = 1 + RND(64);
        p.num_continuous_decode_steps = 1 + RND(4);
        p.max_running_requests = 1 + RND(6);
        nb_engine *e;
        nb_fake_runner *f;
        if (nb_fake_engine(p, 32, 100000, -1, &e, &f) != NB_OK) {
            bad_total++;
            break;
        }
        nb_engine_info info;
        nb_engine_get_info(e, &info);
        nb_engine_test_gate(e, 1);
        enum { NQ = 12 };
        col *cs[NQ];
        uint64_t ids[NQ];
        int32_t prompts[NQ][32];
        int plen[NQ];
        nb_sampling_params sps[NQ];
        int n_sub = 0, was_aborted[NQ] = {0};
        for (int step = 0; step < 4000; step++) {
            if (n_sub < NQ && RND(3) == 0) {
                int i = n_sub;
                int maxlen = NB_MIN(info.context_length, 40);
                plen[i] = 1 + RND(NB_MIN(30, maxlen - 1));
                for (int j = 0; j < plen[i]; j++) prompts[i][j] = RND(31);
                sps[i] = nb_sampling_default_params();
                sps[i].temperature = RND(2) ? 0.0f : 0.8f;
                sps[i].seed = RND(100);
                sps[i].max_tokens = 1 + RND(maxlen - plen[i]);
                sps[i].n = 1 + RND(2);
                sps[i].ignore_eos = RND(2);
                cs[i] = col_new();
                if (nb_engine_submit(e, prompts[i], plen[i], &sps[i], on_ev, cs[i], &ids[i]) != NB_OK) {
                    fprintf(stderr, "  seed %llu: submit: %s\n", (unsigned long long)seed, nb_last_error());
                    bad_total++;
                    free(cs[i]);
                    break;
                }
                n_sub++;
            }
            if (n_sub && RND(8) == 0) {
                int i = RND(n_sub);
                was_aborted[i] = 1;
                nb_engine_abort(e, ids[i]);
            }
            nb_engine_test_step(e, 1);
            nb_engine_stats st;
            nb_engine_get_stats(e, &st);
            if (n_sub == NQ && st.running == 0 && st.waiting == 0) break;
        }
        nb_engine_test_gate(e, 0);
        nb_engine_wait_idle(e);
        nb_engine_stats st;
        nb_engine_get_stats(e, &st);
        preempt += st.preemptions;
        aborted += st.requests_aborted;
        int bad = st.kv_used_tokens != 0 || st.running != 0 || st.waiting != 0;
        for (int i = 0; i < n_sub; i++) {
            col *c = cs[i];
            bad += c->last != 1 || c->after_last != 0;
            for (int ch = 0; ch < sps[i].n; ch++) {
                bad += c->finish[ch] != 1;
                if (c->why[ch] == NB_FINISH_ABORT) {
                    bad += !was_aborted[i];
                    continue;
                }
                int32_t want[MAXTOK];
                int n = ref_generate(f, prompts[i], plen[i], &sps[i], (uint64_t)sps[i].seed + (uint64_t)ch, want);
                bad += n != c->ntok[ch] || memcmp(want, c->toks[ch], (size_t)n * sizeof(int32_t)) != 0;
            }
            free(c);
        }
        nb_engine_destroy(e);
        if (bad) fprintf(stderr, "  seed %llu: %d violations\n", (unsigned long long)seed, bad);
        bad_total += bad;
#undef RND
    }
    fprintf(stderr, "  300 seeds: %llu preemptions, %llu aborted choices\n", (unsigned long long)preempt,
            (unsigned long long)aborted);
    NB_CHECK(bad_total == 0);
    NB_CHECK(preempt > 0 && aborted > 0);
}

static const nb_test tests[] = {
    {"property_seeds", test_property_seeds},
    {"basic", test_basic},
    {"invariance_preemption", test_invariance_preemption},
    {"aborts_every_stage", test_aborts_every_stage},
    {"queue_busy_and_validation", test_queue_busy_and_validation},
    {"n_choices_and_stops", test_n_choices_and_stops},
    {"forward_failure", test_forward_failure},
    {"concurrent_property", test_concurrent_property},
    {"shutdown_aborts", test_shutdown_aborts},
    {"kv_activation_reserve", test_kv_activation_reserve},
};

int main(int argc, char **argv)
{
    nb_log_set(NB_LOG_WARN, NULL, NULL);
    return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
}
