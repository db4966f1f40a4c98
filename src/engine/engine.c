/* The engine: a step loop on its own thread over the scheduler, the runner and the
 * sampler; thread-safe submit/abort; events to per-request callbacks.
 * Each step: take new requests and aborts → plan (src/sched) → one forward → sample for
 * every sequence that finished its pending tokens → deliver → finish (pages freed).
 * Sampling runs on the runner's backend when it has a sample hook (runner.h; the logits then
 * never come to the host, only ids and log-probabilities), else on the host; both draw the
 * same tokens (ops/sample_math.h). NIBBLE_HOST_SAMPLING=1 forces the host path (A/B runs).
 * Exercised by tests/engine/test_engine.c (fake runner) and nibble generate/bench-offline. */
#include "engine/engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/kv_pages.h"
#include "engine/sampling.h"
#include "engine/stop.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

typedef struct nb_choice {
    nb_seq *seq;
    nb_detok *detok;
    nb_stop_matcher stop;
    uint64_t seed;
    int done;
    int n_out;
} nb_choice;

typedef struct nb_req {
    uint64_t id;
    nb_sampling_params sp;      /* deep copy: arrays below */
    int32_t *stop_ids;
    char **stop_strs;
    int max_tokens;             /* resolved (>= 0) */
    nb_engine_event_fn fn;
    void *user;
    int n;
    int n_done;
    nb_choice *ch;
} nb_req;

struct nb_engine {
    nb_engine_params p;
    char *model_spec;
    nb_engine_parts parts;
    nb_engine_info info;
    nb_kv_pages kv;
    nb_sched sched;
    nb_sampler sampler;
    float *logits;              /* host path only */
    size_t logits_rows;
    nb_seq_step *steps;
    int dev_sample;             /* the runner samples (its sample hook) */
    nb_sample_params *sp_rows;  /* [logits_rows] device-sampling requests */
    nb_sample_out *so_rows;     /* [logits_rows] their results */
    int32_t *h_off;             /* [logits_rows + 1] */
    int32_t *h_tok, *h_cnt;     /* [h_cap] penalty histories */
    size_t h_cap;

    /* engine thread only */
    nb_req **live;
    int n_live, cap_live;
    int32_t tok_buf[1];

    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* work arrived / stop */
    pthread_cond_t idle_cv;     /* step finished (for waiters) */
    /* guarded by mu */
    nb_req **incoming;
    int n_incoming, cap_incoming;
    uint64_t *aborts;
    int n_aborts, cap_aborts;
    int stop;
    int failed;
    uint64_t next_id;
    int idle;
    nb_engine_stats stats;
    int gate, credits;
    uint64_t gated_steps;
    nb_step_record *trace;
    int trace_n, trace_cap;
    double last_forward_ms;
};

/* ------------------------------------------------------------------ parsing helpers */

int nb_schedule_policy_parse(const char *s)
{
    if (!strcmp(s, "fcfs")) return NB_SCHED_FCFS;
    if (!strcmp(s, "lpm")) return NB_SCHED_LPM;
    return -1;
}

int nb_backend_parse(const char *s)
{
    if (!strcmp(s, "cpu")) return NB_BACKEND_CPU;
    if (!strcmp(s, "cuda")) return NB_BACKEND_CUDA;
    return -1;
}

int nb_kv_cache_dtype_parse(const char *s)
{
    if (!strcmp(s, "auto")) return NB_KV_CACHE_AUTO;
    if (!strcmp(s, "float32") || !strcmp(s, "fp32")) return NB_KV_CACHE_F32;
    if (!strcmp(s, "bfloat16") || !strcmp(s, "bf16")) return NB_KV_CACHE_BF16;
    return -1;
}

nb_engine_params nb_engine_default_params(void)
{
    nb_engine_params p;
    memset(&p, 0, sizeof p);
    p.backend = NB_BACKEND_CPU;
    p.page_size = 64;
    p.mem_fraction_static = 0.88;
    p.num_continuous_decode_steps = 1;
    p.chunked_prefill_size = 8192;
    p.max_prefill_tokens = 16384;
    p.schedule_policy = NB_SCHED_FCFS;
    return p;
}

/* ------------------------------------------------------------------ requests */

static void nb_req_free(nb_req *r)
{
    if (!r) return;
    for (int i = 0; i < r->n && r->ch; i++) {
        nb_seq_free(r->ch[i].seq);
        if (r->ch[i].detok) nb_detok_free(r->ch[i].detok);
        nb_stop_free(&r->ch[i].stop);
    }
    free(r->ch);
    free(r->stop_ids);
    for (int i = 0; i < r->sp.n_stop && r->stop_strs; i++) free(r->stop_strs[i]);
    free(r->stop_strs);
    free(r);
}

static void nb_emit_finish(nb_engine *e, nb_req *r, int ci, nb_finish_reason why, int32_t stop_tok, int stop_str)
{
    nb_choice *c = &r->ch[ci];
    if (c->done) return;
    c->done = 1;
    r->n_done++;
    nb_sched_remove(&e->sched, c->seq);
    nb_engine_event ev = {.type = NB_EVENT_FINISH,
                          .request_id = r->id,
                          .index = ci,
                          .text = c->detok ? "" : NULL,
                          .text_len = 0,
                          .finish_reason = why,
                          .stop_token = stop_tok,
                          .stop_string = stop_str,
                          .prompt_tokens = c->seq->prompt_len,
                          .completion_tokens = c->n_out,
                          .last = r->n_done == r->n};
    pthread_mutex_lock(&e->mu);
    if (why == NB_FINISH_ABORT)
        e->stats.requests_aborted++;
    else
        e->stats.requests_finished++;
    pthread_mutex_unlock(&e->mu);
    r->fn(&ev, r->user);
}

static void nb_live_remove_done(nb_engine *e)
{
    int j = 0;
    for (int i = 0; i < e->n_live; i++) {
        if (e->live[i]->n_done == e->live[i]->n)
            nb_req_free(e->live[i]);
        else
            e->live[j++] = e->live[i];
    }
    e->n_live = j;
}

static void nb_abort_req(nb_engine *e, nb_req *r)
{
    for (int i = 0; i < r->n; i++) nb_emit_finish(e, r, i, NB_FINISH_ABORT, -1, -1);
}

nb_status nb_engine_submit(nb_engine *e, const int32_t *prompt, int prompt_len, const nb_sampling_params *spp,
                           nb_engine_event_fn fn, void *user, uint64_t *request_id)
{
    nb_sampling_params dflt = nb_sampling_default_params();
    const nb_sampling_params *sp = spp ? spp : &dflt;
    if (!e || !fn) return nb_error(NB_ERR_INVALID_ARG, "nb_engine_submit: engine and callback are required");
    if (prompt_len < 1 || !prompt) return nb_error(NB_ERR_INVALID_ARG, "prompt: empty");
    for (int i = 0; i < prompt_len; i++)
        if (prompt[i] < 0 || prompt[i] >= e->info.vocab_size)
            return nb_error(NB_ERR_INVALID_ARG, "prompt: token %d at position %d is outside the vocabulary of %d",
                            prompt[i], i, e->info.vocab_size);
    NB_TRY(nb_sampling_validate(sp, e->info.vocab_size));
    if (sp->n_stop > 0 && !e->parts.tokenizer)
        return nb_error(NB_ERR_INVALID_ARG, "stop: stop strings need a tokenizer and this model has none");
    int ctx = e->info.context_length;
    if (prompt_len >= ctx)
        return nb_error(NB_ERR_INVALID_ARG, "prompt: %d tokens leave no room in the context length of %d", prompt_len,
                        ctx);
    int max_tokens = sp->max_tokens < 0 ? ctx - prompt_len : sp->max_tokens;
    if ((int64_t)prompt_len + max_tokens > ctx)
        return nb_error(NB_ERR_INVALID_ARG,
                        "max_tokens: prompt of %d tokens + max_tokens %d exceeds the context length of %d",
                        prompt_len, max_tokens, ctx);

    nb_req *r = calloc(1, sizeof *r);
    if (!r) return nb_error(NB_ERR_OUT_OF_MEMORY, "request");
    r->sp = *sp;
    r->fn = fn;
    r->user = user;
    r->n = sp->n;
    r->max_tokens = max_tokens;
    if (sp->n_stop_token_ids > 0) {
        r->stop_ids = malloc((size_t)sp->n_stop_token_ids * sizeof *r->stop_ids);
        if (!r->stop_ids) goto oom;
        memcpy(r->stop_ids, sp->stop_token_ids, (size_t)sp->n_stop_token_ids * sizeof *r->stop_ids);
    }
    r->sp.stop_token_ids = r->stop_ids;
    if (sp->n_stop > 0) {
        r->stop_strs = calloc((size_t)sp->n_stop, sizeof *r->stop_strs);
        if (!r->stop_strs) goto oom;
        for (int i = 0; i < sp->n_stop; i++)
            if (!(r->stop_strs[i] = strdup(sp->stop[i]))) goto oom;
    }
    r->sp.stop = (const char *const *)r->stop_strs;
    r->ch = calloc((size_t)r->n, sizeof *r->ch);
    if (!r->ch) goto oom;
    for (int i = 0; i < r->n; i++) {
        nb_choice *c = &r->ch[i];
        nb_status st = nb_seq_new(prompt, prompt_len, prompt_len + max_tokens, e->info.page_size, &c->seq);
        if (st != NB_OK) {
            nb_req_free(r);
            return st;
        }
        c->seq->owner = r;
        c->seq->index = i;
        c->seq->share_from = i > 0 ? r->ch[0].seq : NULL;
        nb_stop_init(&c->stop, r->sp.stop, r->sp.n_stop);
        if (e->parts.tokenizer) {
            st = nb_detok_new(e->parts.tokenizer, sp->skip_special_tokens, &c->detok);
            if (st != NB_OK) {
                nb_req_free(r);
                return st;
            }
        }
    }

    pthread_mutex_lock(&e->mu);
    nb_status st = NB_OK;
    if (e->stop || e->failed) {
        st = nb_error(NB_ERR_ABORTED, "engine: %s", e->failed ? "failed; no new requests" : "shutting down");
    } else if (e->p.max_queued_requests > 0 && e->stats.waiting + e->n_incoming >= e->p.max_queued_requests) {
        st = nb_error(NB_ERR_BUSY, "engine: %d requests already waiting (--max-queued-requests %d)",
                      e->stats.waiting + e->n_incoming, e->p.max_queued_requests);
    } else if (e->n_incoming == e->cap_incoming) {
        int nc = e->cap_incoming ? 2 * e->cap_incoming : 64;
        nb_req **q = realloc(e->incoming, (size_t)nc * sizeof *q);
        if (!q)
            st = nb_error(NB_ERR_OUT_OF_MEMORY, "engine: incoming queue");
        else {
            e->incoming = q;
            e->cap_incoming = nc;
        }
    }
    if (st == NB_OK) {
        r->id = ++e->next_id;
        uint64_t base = sp->seed >= 0 ? (uint64_t)sp->seed : nb_mix64(e->p.random_seed ^ nb_mix64(r->id));
        for (int i = 0; i < r->n; i++) r->ch[i].seed = base + (uint64_t)i;
        e->incoming[e->n_incoming++] = r;
        e->idle = 0;
        if (request_id) *request_id = r->id;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (st != NB_OK) nb_req_free(r);
    return st;
oom:
    nb_req_free(r);
    return nb_error(NB_ERR_OUT_OF_MEMORY, "request copy");
}

nb_status nb_engine_abort(nb_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->mu);
    if (id == 0 || id > e->next_id) {
        pthread_mutex_unlock(&e->mu);
        return nb_error(NB_ERR_NOT_FOUND, "abort: no request %llu", (unsigned long long)id);
    }
    if (e->n_aborts == e->cap_aborts) {
        int nc = e->cap_aborts ? 2 * e->cap_aborts : 64;
        uint64_t *a = realloc(e->aborts, (size_t)nc * sizeof *a);
        if (!a) {
            pthread_mutex_unlock(&e->mu);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "abort queue");
        }
        e->aborts = a;
        e->cap_aborts = nc;
    }
    e->aborts[e->n_aborts++] = id;
    e->idle = 0;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return NB_OK;
}

/* ------------------------------------------------------------------ one step */

static int nb_is_stop_token(const nb_engine *e, const nb_req *r, int32_t t)
{
    if (!r->sp.ignore_eos)
        for (int i = 0; i < e->info.n_eos; i++)
            if (e->info.eos_ids[i] == t) return 1;
    for (int i = 0; i < r->sp.n_stop_token_ids; i++)
        if (r->stop_ids[i] == t) return 1;
    return 0;
}

/* Deliver the token sampled for choice ci, finish if due. */
static void nb_deliver(nb_engine *e, nb_req *r, int ci, const nb_sample *smp_in)
{
    nb_choice *c = &r->ch[ci];
    nb_seq *q = c->seq;
    nb_sample smp = *smp_in;
    if (nb_seq_append(q, smp.token) != NB_OK) {
        NB_LOG_ERROR("engine", "request %llu: %s; aborting it", (unsigned long long)r->id, nb_last_error());
        nb_emit_finish(e, r, ci, NB_FINISH_ABORT, -1, -1);
        return;
    }
    c->n_out++;

    const char *text = NULL;
    size_t text_len = 0;
    int stop_str = -1;
    char *joined = NULL;
    if (c->detok) {
        const char *d = "";
        size_t dl = 0;
        if (nb_detok_push(c->detok, smp.token, &d, &dl) != NB_OK) {
            d = "";
            dl = 0;
        }
        stop_str = nb_stop_push(&c->stop, d, dl, &text, &text_len);
        if (stop_str == -2) stop_str = -1;
    }
    /* decide the finish before delivering, so that text held back (a possible stop
     * string prefix, an unfinished character) goes out with this last token */
    nb_finish_reason why = NB_FINISH_NONE;
    int32_t stop_tok = -1;
    if (stop_str >= 0) {
        why = NB_FINISH_STOP;
    } else if (nb_is_stop_token(e, r, smp.token)) {
        why = NB_FINISH_STOP;
        stop_tok = smp.token;
    } else if (c->n_out >= r->max_tokens || q->len >= q->cap) {
        why = NB_FINISH_LENGTH;
    }
    if (why != NB_FINISH_NONE && stop_str < 0 && c->detok) {
        joined = malloc(text_len + 1);
        if (joined) {
            memcpy(joined, text, text_len);
            size_t jl = text_len;
            const char *d = "", *t = "";
            size_t dl = 0, tl = 0;
            int m = -1;
            if (nb_detok_flush(c->detok, &d, &dl) == NB_OK && dl) m = nb_stop_push(&c->stop, d, dl, &t, &tl);
            if (m >= 0) {
                why = NB_FINISH_STOP;
                stop_tok = -1;
                stop_str = m;
            }
            if (m == -1) { /* nothing can complete a stop string any more: release the rest */
                const char *rest = "";
                size_t rl = 0;
                char *tcopy = malloc(tl + 1);
                if (tcopy) memcpy(tcopy, t, tl);
                nb_stop_flush(&c->stop, &rest, &rl);
                char *nj = realloc(joined, jl + tl + rl + 1);
                if (nj && tcopy) {
                    joined = nj;
                    memcpy(joined + jl, tcopy, tl);
                    memcpy(joined + jl + tl, rest, rl);
                    jl += tl + rl;
                }
                free(tcopy);
            } else if (m >= 0) {
                char *nj = realloc(joined, jl + tl + 1);
                if (nj) {
                    joined = nj;
                    memcpy(joined + jl, t, tl);
                    jl += tl;
                }
            }
            joined[jl] = 0;
            text = joined;
            text_len = jl;
        }
    }
    int want_lp = r->sp.logprobs || r->sp.top_logprobs > 0;
    nb_engine_event ev = {.type = NB_EVENT_TOKENS,
                          .request_id = r->id,
                          .index = ci,
                          .token_ids = &q->tokens[q->len - 1],
                          .n_tokens = 1,
                          .text = text,
                          .text_len = text_len,
                          .logprobs = want_lp ? &smp.logprob : NULL,
                          .top_logprobs = r->sp.top_logprobs > 0 ? smp.top : NULL,
                          .n_top = r->sp.top_logprobs > 0 ? smp.n_top : 0,
                          .stop_token = -1,
                          .stop_string = -1};
    r->fn(&ev, r->user);
    free(joined);
    pthread_mutex_lock(&e->mu);
    e->stats.generation_tokens_total++;
    pthread_mutex_unlock(&e->mu);
    if (why != NB_FINISH_NONE) nb_emit_finish(e, r, ci, why, stop_tok, stop_str);
}

static nb_status nb_grow_buffers(nb_engine *e, int rows)
{
    if ((size_t)rows <= e->logits_rows) return NB_OK;
    size_t nr = e->logits_rows ? e->logits_rows : 16;
    while (nr < (size_t)rows) nr *= 2;
    if (e->dev_sample) { /* the logits stay on the backend: requests and results only */
        nb_sample_params *sp = realloc(e->sp_rows, nr * sizeof *sp);
        if (sp) e->sp_rows = sp;
        nb_sample_out *so = realloc(e->so_rows, nr * sizeof *so);
        if (so) e->so_rows = so;
        int32_t *off = realloc(e->h_off, (nr + 1) * sizeof *off);
        if (off) e->h_off = off;
        if (!sp || !so || !off) return nb_error(NB_ERR_OUT_OF_MEMORY, "sampling requests for %zu rows", nr);
    } else {
        float *l = realloc(e->logits, nr * (size_t)e->info.vocab_size * sizeof *l);
        if (!l) return nb_error(NB_ERR_OUT_OF_MEMORY, "logits buffer for %zu rows", nr);
        e->logits = l;
    }
    nb_seq_step *s = realloc(e->steps, nr * sizeof *s);
    if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "batch of %zu sequences", nr);
    e->steps = s;
    e->logits_rows = nr;
    return NB_OK;
}

static int nb_has_penalty(const nb_sampling_params *sp)
{
    return sp->repetition_penalty != 1.0f || sp->frequency_penalty != 0.0f || sp->presence_penalty != 0.0f;
}

/* Sample every row that wants a token on the runner's backend: one request per logits row
 * (skip for prefill chunks that are not done), penalty histories as CSR. */
static nb_status nb_sample_on_runner(nb_engine *e, const nb_plan *pl)
{
    int R = pl->n_items, V = e->info.vocab_size;
    size_t need = 0;
    for (int i = 0; i < R; i++) {
        const nb_plan_item *it = &pl->items[i];
        if (it->want_logits && nb_has_penalty(&((nb_req *)it->seq->owner)->sp))
            need += (size_t)NB_MIN(it->seq->len, V);
    }
    if (need > e->h_cap) {
        size_t nc = NB_MAX(need, 2 * e->h_cap);
        int32_t *t = realloc(e->h_tok, nc * sizeof *t);
        if (t) e->h_tok = t;
        int32_t *c = realloc(e->h_cnt, nc * sizeof *c);
        if (c) e->h_cnt = c;
        if (!t || !c) return nb_error(NB_ERR_OUT_OF_MEMORY, "penalty histories of %zu tokens", nc);
        e->h_cap = nc;
    }
    e->h_off[0] = 0;
    for (int i = 0; i < R; i++) {
        const nb_plan_item *it = &pl->items[i];
        int n = 0;
        if (!it->want_logits) {
            memset(&e->sp_rows[i], 0, sizeof e->sp_rows[i]);
            e->sp_rows[i].skip = 1;
        } else {
            nb_req *r = it->seq->owner;
            const nb_seq *q = it->seq;
            e->sp_rows[i] = nb_sample_params_for(&r->sp, r->ch[q->index].seed, (uint64_t)(q->len - q->prompt_len));
            n = nb_sampler_history(&e->sampler, &r->sp, q->tokens, q->prompt_len, q->len, e->h_tok + e->h_off[i],
                                   e->h_cnt + e->h_off[i]);
        }
        e->h_off[i + 1] = e->h_off[i] + n;
    }
    nb_sample_hist h = {e->h_off, e->h_tok, e->h_cnt, e->h_off[R], NULL};
    nb_runner *rn = e->parts.runner;
    return rn->sample(rn, R, e->sp_rows, &h, e->so_rows);
}

static void nb_update_stats(nb_engine *e, double step_ms, const nb_plan *pl)
{
    int max_ctx = 0;
    for (int i = 0; i < e->sched.n_running; i++) max_ctx = NB_MAX(max_ctx, e->sched.running[i]->len);
    pthread_mutex_lock(&e->mu);
    nb_engine_stats *s = &e->stats;
    s->running = e->sched.n_running;
    s->waiting = e->sched.n_waiting;
    s->kv_used_tokens = (int64_t)nb_kv_pages_used(&e->kv) * e->kv.page_size;
    s->kv_total_tokens = (int64_t)e->kv.n_pages * e->kv.page_size;
    s->kv_usage = (double)s->kv_used_tokens / (double)s->kv_total_tokens;
    s->max_context = max_ctx;
    s->preemptions = e->sched.preemptions;
    if (pl) {
        s->steps++;
        s->last_step_ms = step_ms;
        s->busy_s += step_ms * 1e-3;
        s->prefill_tokens_computed += (uint64_t)pl->n_prefill_tokens;
        if (e->trace && e->trace_n < e->trace_cap)
            e->trace[e->trace_n++] =
                (nb_step_record){step_ms, e->last_forward_ms, pl->n_decode, pl->n_prefill_tokens, pl->n_items};
    }
    pthread_mutex_unlock(&e->mu);
}

/* Run one step over what is live. Returns 0 when there was nothing to run. */
static int nb_step(nb_engine *e)
{
    int64_t t0 = nb_now_ns();
    const nb_plan *pl = nb_sched_plan(&e->sched);
    if (pl->n_items == 0) return 0;
    for (int i = 0; i < pl->n_admitted; i++)
        if (pl->admitted[i]->n_preempted == 0 && pl->admitted[i]->index == 0) { /* once per request */
            pthread_mutex_lock(&e->mu);
            e->stats.prompt_tokens_total += (uint64_t)pl->admitted[i]->prompt_len;
            pthread_mutex_unlock(&e->mu);
        }
    nb_status st = nb_grow_buffers(e, pl->n_items);
    if (st == NB_OK) {
        for (int i = 0; i < pl->n_items; i++) {
            const nb_plan_item *it = &pl->items[i];
            e->steps[i] = (nb_seq_step){.tokens = it->seq->tokens + it->start,
                                        .n_tokens = it->n,
                                        .start_pos = it->start,
                                        .slots = it->seq->slots,
                                        .all_logits = 0};
        }
        nb_batch b = {.n_seqs = pl->n_items, .seqs = e->steps};
        int64_t f0 = nb_now_ns();
        st = e->parts.runner->forward(e->parts.runner, &b, e->dev_sample ? NULL : e->logits);
        /* An asynchronous backend returns from forward once the step is queued; the sampling
         * on it waits for the step, so the device's share of the step ends there. */
        if (st == NB_OK && e->dev_sample) st = nb_sample_on_runner(e, pl);
        e->last_forward_ms = (double)(nb_now_ns() - f0) * 1e-6;
    }
    if (st != NB_OK) {
        /* A failing backend leaves KV rows undefined: end everything that is live. */
        NB_LOG_ERROR("engine", "forward or sampling failed, aborting %d requests: %s", e->n_live, nb_last_error());
        pthread_mutex_lock(&e->mu);
        e->failed = 1;
        pthread_mutex_unlock(&e->mu);
        for (int i = 0; i < e->n_live; i++) nb_abort_req(e, e->live[i]);
        nb_live_remove_done(e);
        nb_update_stats(e, 0, NULL);
        return 1;
    }
    nb_sched_commit(&e->sched);
    for (int i = 0; i < pl->n_items; i++) {
        const nb_plan_item *it = &pl->items[i];
        if (!it->want_logits) continue;
        nb_req *r = it->seq->owner;
        nb_sample smp;
        if (e->dev_sample) {
            nb_sample_from_out(&e->so_rows[i], &smp);
        } else {
            const nb_seq *q = it->seq;
            nb_sample_token(&e->sampler, e->logits + (size_t)i * e->info.vocab_size, &r->sp, r->ch[q->index].seed,
                            q->tokens, q->prompt_len, q->len, &smp);
        }
        nb_deliver(e, r, it->seq->index, &smp);
    }
    double ms = (double)(nb_now_ns() - t0) * 1e-6;
    NB_LOG_TRACE("engine", "step: %d decodes, %d prefill tokens, %d preempted, %.2f ms", pl->n_decode,
                 pl->n_prefill_tokens, pl->n_preempted, ms);
    nb_live_remove_done(e);
    nb_update_stats(e, ms, pl);
    return 1;
}

static nb_status nb_live_add(nb_engine *e, nb_req *r)
{
    if (e->n_live == e->cap_live) {
        int nc = e->cap_live ? 2 * e->cap_live : 64;
        nb_req **l = realloc(e->live, (size_t)nc * sizeof *l);
        if (!l) return nb_error(NB_ERR_OUT_OF_MEMORY, "live request table");
        e->live = l;
        e->cap_live = nc;
    }
    e->live[e->n_live++] = r;
    return NB_OK;
}

static void nb_intake(nb_engine *e, nb_req **in, int n_in, const uint64_t *ab, int n_ab)
{
    for (int i = 0; i < n_in; i++) {
        nb_req *r = in[i];
        if (nb_live_add(e, r) != NB_OK) {
            for (int c = 0; c < r->n; c++) nb_emit_finish(e, r, c, NB_FINISH_ABORT, -1, -1);
            nb_req_free(r);
            continue;
        }
        for (int c = 0; c < r->n; c++) {
            if (r->max_tokens == 0) {
                nb_emit_finish(e, r, c, NB_FINISH_LENGTH, -1, -1);
                continue;
            }
            if (nb_sched_add(&e->sched, r->ch[c].seq) != NB_OK) nb_emit_finish(e, r, c, NB_FINISH_ABORT, -1, -1);
        }
    }
    for (int a = 0; a < n_ab; a++)
        for (int i = 0; i < e->n_live; i++)
            if (e->live[i]->id == ab[a]) {
                nb_abort_req(e, e->live[i]);
                break;
            }
    nb_live_remove_done(e);
}

static void *nb_engine_main(void *arg)
{
    nb_engine *e = arg;
    nb_req **in = NULL;
    uint64_t *ab = NULL;
    int cap_in = 0, cap_ab = 0;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        for (;;) {
            if (e->stop) break;
            int has_work = e->n_incoming > 0 || e->n_aborts > 0 || e->n_live > 0;
            if (e->gate ? e->credits > 0 : has_work) break;
            if (!has_work) {
                e->idle = 1;
                pthread_cond_broadcast(&e->idle_cv);
            }
            pthread_cond_wait(&e->cv, &e->mu);
        }
        if (e->stop) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        if (e->gate) e->credits--;
        /* swap the shared queues for our private buffers */
        nb_req **tin = e->incoming;
        int n_in = e->n_incoming, tcap_in = e->cap_incoming;
        e->incoming = in;
        e->cap_incoming = cap_in;
        e->n_incoming = 0;
        in = tin;
        cap_in = tcap_in;
        uint64_t *tab = e->aborts;
        int n_ab = e->n_aborts, tcap_ab = e->cap_aborts;
        e->aborts = ab;
        e->cap_aborts = cap_ab;
        e->n_aborts = 0;
        ab = tab;
        cap_ab = tcap_ab;
        pthread_mutex_unlock(&e->mu);

        nb_intake(e, in, n_in, ab, n_ab);
        int ran = nb_step(e);
        if (!ran) nb_update_stats(e, 0, NULL);
        if (!ran && e->n_live > 0 && !e->gate)
            NB_LOG_DEBUG("engine", "nothing schedulable with %d live requests", e->n_live);

        pthread_mutex_lock(&e->mu);
        if (e->gate) e->gated_steps++;
        pthread_cond_broadcast(&e->idle_cv);
        int spin = !ran && e->n_live > 0 && !e->gate && e->n_incoming == 0 && e->n_aborts == 0 && !e->stop;
        if (spin) {
            /* Cannot happen while a lone sequence always fits the cache; wait briefly
             * rather than spin if it ever does. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        }
        pthread_mutex_unlock(&e->mu);
    }
    /* shutdown: everything still queued or live ends with abort */
    pthread_mutex_lock(&e->mu);
    nb_req **tin = e->incoming;
    int n_in = e->n_incoming;
    e->incoming = NULL;
    e->n_incoming = e->cap_incoming = 0;
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < n_in; i++) {
        nb_abort_req(e, tin[i]);
        nb_req_free(tin[i]);
    }
    free(tin);
    for (int i = 0; i < e->n_live; i++) nb_abort_req(e, e->live[i]);
    nb_live_remove_done(e);
    free(in);
    free(ab);
    pthread_mutex_lock(&e->mu);
    e->idle = 1;
    pthread_cond_broadcast(&e->idle_cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ------------------------------------------------------------------ lifecycle */

static void nb_parts_release(nb_engine_parts *parts)
{
    if (parts->runner && parts->runner->destroy) parts->runner->destroy(parts->runner);
    if (parts->tokenizer) nb_tokenizer_free(parts->tokenizer);
    free(parts->chat_template);
    memset(parts, 0, sizeof *parts);
}

nb_status nb_engine_create_from_parts(const nb_engine_params *p, nb_engine_parts *parts, nb_engine **out)
{
    *out = NULL;
    nb_status st = NB_OK;
    nb_runner *rn = parts->runner;
    if (p->page_size < 1 || p->page_size > 4096) {
        st = nb_error(NB_ERR_INVALID_ARG, "--page-size %d: must be in [1, 4096]", p->page_size);
        goto fail_parts;
    }
    if (p->max_running_requests < 0 || p->num_continuous_decode_steps < 1 || p->max_prefill_tokens < 1 ||
        p->max_queued_requests < 0 || p->context_length < 0) {
        st = nb_error(NB_ERR_INVALID_ARG,
                      "engine: --max-running-requests %d, --num-continuous-decode-steps %d, --max-prefill-tokens %d, "
                      "--max-queued-requests %d, --context-length %d: out of range",
                      p->max_running_requests, p->num_continuous_decode_steps, p->max_prefill_tokens,
                      p->max_queued_requests, p->context_length);
        goto fail_parts;
    }
    /* The activations of the largest step stay free: every running sequence's decode token plus
     * a prefill chunk (the runner's estimate per token; the GPU runner's, where a 1000-request
     * step on an 80 GB card otherwise found no room for them). */
    const int64_t step_max = (int64_t)(p->max_running_requests > 0 ? p->max_running_requests : 4096) +
                             (p->chunked_prefill_size > 0 ? NB_MIN(p->chunked_prefill_size, p->max_prefill_tokens)
                                                          : p->max_prefill_tokens);
    const double act_reserve = (double)rn->act_bytes_per_token * (double)step_max;
    if (act_reserve > 0 && p->max_total_tokens <= 0)
        NB_LOG_INFO("engine", "activations of a step of up to %lld tokens: %.2f GiB kept out of the KV cache",
                    (long long)step_max, act_reserve / 1073741824.0);
    int64_t tokens = 0;
    st = nb_kv_capacity(p->max_total_tokens, parts->mem_budget_bytes, p->mem_fraction_static,
                        rn->weight_bytes + act_reserve, rn->kv_bytes_per_token, p->page_size, &tokens);
    if (st != NB_OK) goto fail_parts;
    if (tokens / p->page_size > INT32_MAX / 2) tokens = (int64_t)(INT32_MAX / 2) / p->page_size * p->page_size;

    nb_engine *e = calloc(1, sizeof *e);
    if (!e) {
        st = nb_error(NB_ERR_OUT_OF_MEMORY, "engine");
        goto fail_parts;
    }
    e->p = *p;
    e->parts = *parts;
    memset(parts, 0, sizeof *parts);
    e->model_spec = p->model ? strdup(p->model) : NULL;
    e->p.model = e->model_spec;
    e->p.tokenizer = NULL;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->idle_cv, NULL);

    nb_engine_info *in = &e->info;
    snprintf(in->model_name, sizeof in->model_name, "%s", e->parts.model_name);
    snprintf(in->model_type, sizeof in->model_type, "%s", rn->model_type);
    in->vocab_size = rn->vocab_size;
    in->page_size = p->page_size;
    in->max_total_tokens = tokens;
    in->kv_bytes = (double)tokens * (double)rn->kv_bytes_per_token;
    int64_t ctx = rn->context_length > 0 ? rn->context_length : tokens;
    if (p->context_length > 0) ctx = NB_MIN(ctx, p->context_length);
    in->context_length = (int)NB_MIN(ctx, tokens);
    int n_pages = (int)(tokens / p->page_size);
    in->max_running_requests = p->max_running_requests > 0 ? p->max_running_requests : NB_MIN(4096, n_pages);
    in->n_eos = NB_MIN(rn->n_eos, 8);
    memcpy(in->eos_ids, rn->eos_ids, sizeof in->eos_ids);
    in->bos_id = rn->bos_id;
    in->backend = p->backend;

    st = nb_kv_pages_init(&e->kv, n_pages, p->page_size);
    if (st == NB_OK) st = rn->reserve_kv ? rn->reserve_kv(rn, tokens) : NB_OK;
    if (st == NB_OK) {
        nb_sched_params sp = {.max_running_requests = in->max_running_requests,
                              .num_continuous_decode_steps = p->num_continuous_decode_steps,
                              .chunked_prefill_size = p->chunked_prefill_size,
                              .max_prefill_tokens = p->max_prefill_tokens,
                              .policy = p->schedule_policy};
        st = nb_sched_init(&e->sched, &sp, &e->kv);
    }
    if (st == NB_OK) st = nb_sampler_init(&e->sampler, in->vocab_size);
    const char *hs = getenv("NIBBLE_HOST_SAMPLING");
    e->dev_sample = rn->sample != NULL && !(hs && hs[0] && strcmp(hs, "0"));
    if (rn->sample)
        NB_LOG_INFO("engine", "sampling on the %s",
                    e->dev_sample ? "backend (logits stay there)" : "host (NIBBLE_HOST_SAMPLING)");
    if (st == NB_OK) st = nb_grow_buffers(e, 16);
    if (st == NB_OK) {
        char line[160];
        nb_kv_format_line(line, sizeof line, tokens, in->kv_bytes, 256);
        NB_LOG_INFO("engine", "%s", line);
        NB_LOG_INFO("engine",
                    "model %s (%s): context %d, page size %d, max running %d, chunked prefill %d, max prefill %d, "
                    "decode steps %d, policy %s",
                    in->model_name, in->model_type, in->context_length, in->page_size, in->max_running_requests,
                    p->chunked_prefill_size, p->max_prefill_tokens, p->num_continuous_decode_steps,
                    p->schedule_policy == NB_SCHED_LPM ? "lpm" : "fcfs");
        nb_update_stats(e, 0, NULL);
        if (pthread_create(&e->thread, NULL, nb_engine_main, e) != 0)
            st = nb_error(NB_ERR_INTERNAL, "engine: cannot start the step thread");
        else
            e->thread_started = 1;
    }
    if (st != NB_OK) {
        nb_engine_destroy(e);
        return st;
    }
    *out = e;
    return NB_OK;
fail_parts:
    nb_parts_release(parts);
    return st;
}

void nb_engine_destroy(nb_engine *e)
{
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    for (int i = 0; i < e->n_incoming; i++) nb_req_free(e->incoming[i]);
    free(e->incoming);
    free(e->aborts);
    free(e->live);
    nb_sched_destroy(&e->sched);
    nb_kv_pages_free_all(&e->kv);
    nb_sampler_free(&e->sampler);
    free(e->logits);
    free(e->steps);
    free(e->sp_rows);
    free(e->so_rows);
    free(e->h_off);
    free(e->h_tok);
    free(e->h_cnt);
    nb_parts_release(&e->parts);
    free(e->model_spec);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->idle_cv);
    free(e);
}

/* ------------------------------------------------------------------ introspection */

nb_status nb_engine_get_info(const nb_engine *e, nb_engine_info *out)
{
    if (!e || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_engine_get_info: NULL argument");
    *out = e->info;
    return NB_OK;
}

void nb_engine_get_stats(nb_engine *e, nb_engine_stats *out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    out->waiting += e->n_incoming;
    pthread_mutex_unlock(&e->mu);
}

const struct nb_tokenizer *nb_engine_tokenizer(const nb_engine *e) { return e->parts.tokenizer; }

const char *nb_engine_chat_template(const nb_engine *e) { return e->parts.chat_template; }

void nb_engine_test_gate(nb_engine *e, int enabled)
{
    pthread_mutex_lock(&e->mu);
    e->gate = enabled;
    e->credits = 0;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void nb_engine_test_step(nb_engine *e, int n)
{
    pthread_mutex_lock(&e->mu);
    uint64_t target = e->gated_steps + (uint64_t)n;
    e->credits += n;
    pthread_cond_broadcast(&e->cv);
    while (e->gated_steps < target && !e->stop) pthread_cond_wait(&e->idle_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

void nb_engine_trace(nb_engine *e, nb_step_record *buf, int cap)
{
    pthread_mutex_lock(&e->mu);
    e->trace = buf;
    e->trace_cap = buf ? cap : 0;
    e->trace_n = 0;
    pthread_mutex_unlock(&e->mu);
}

int nb_engine_trace_count(nb_engine *e)
{
    pthread_mutex_lock(&e->mu);
    int n = e->trace_n;
    pthread_mutex_unlock(&e->mu);
    return n;
}

void nb_engine_wait_idle(nb_engine *e)
{
    pthread_mutex_lock(&e->mu);
    while (!(e->idle && e->n_incoming == 0 && e->n_aborts == 0)) pthread_cond_wait(&e->idle_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}
