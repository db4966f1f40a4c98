/* Continuous-batching policy (see scheduler.h). Tests: tests/sched/test_scheduler.c. */
#include "sched/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"

/* Make room for min(need, cap) entries. 0 when memory ran out. */
static int nb_seq_reserve(nb_seq *s, int need)
{
    if (need > s->cap) need = s->cap;
    if (need <= s->alloc) return 1;
    int na = s->alloc * 2 > need ? s->alloc * 2 : need;
    if (na > s->cap) na = s->cap;
    int32_t *t = realloc(s->tokens, (size_t)na * sizeof *t);
    if (!t) return 0;
    s->tokens = t;
    int32_t *sl = realloc(s->slots, (size_t)na * sizeof *sl);
    if (!sl) return 0;
    s->slots = sl;
    int32_t *pg = realloc(s->pages, (size_t)nb_pages_for(na, s->page_size) * sizeof *pg);
    if (!pg) return 0;
    s->pages = pg;
    s->alloc = na;
    return 1;
}

static int nb_round_up(int n, int m) { return (n + m - 1) / m * m; }

nb_status nb_seq_new(const int32_t *prompt, int prompt_len, int cap, int page_size, nb_seq **out)
{
    if (prompt_len < 1 || cap < prompt_len || page_size < 1)
        return nb_error(NB_ERR_INVALID_ARG, "sequence: prompt_len %d, cap %d", prompt_len, cap);
    nb_seq *s = calloc(1, sizeof *s);
    if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "sequence");
    s->cap = cap;
    s->page_size = page_size;
    if (!nb_seq_reserve(s, nb_round_up(prompt_len + 1, page_size))) {
        nb_seq_free(s);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "sequence of %d tokens", prompt_len);
    }
    memcpy(s->tokens, prompt, (size_t)prompt_len * sizeof *prompt);
    s->prompt_len = s->len = prompt_len;
    *out = s;
    return NB_OK;
}

void nb_seq_free(nb_seq *s)
{
    if (!s) return;
    free(s->tokens);
    free(s->slots);
    free(s->pages);
    free(s);
}

nb_status nb_seq_append(nb_seq *s, int32_t tok)
{
    NB_ASSERT(s->len < s->cap);
    if (!nb_seq_reserve(s, nb_round_up(s->len + 1, s->page_size)))
        return nb_error(NB_ERR_OUT_OF_MEMORY, "sequence: growing to %d tokens", s->len + 1);
    s->tokens[s->len++] = tok;
    return NB_OK;
}

nb_status nb_sched_init(nb_sched *s, const nb_sched_params *p, nb_kv_pages *kv)
{
    memset(s, 0, sizeof *s);
    if (p->max_running_requests < 1)
        return nb_error(NB_ERR_INVALID_ARG, "--max-running-requests %d: must be >= 1", p->max_running_requests);
    if (p->num_continuous_decode_steps < 1)
        return nb_error(NB_ERR_INVALID_ARG, "--num-continuous-decode-steps %d: must be >= 1",
                        p->num_continuous_decode_steps);
    if (p->max_prefill_tokens < 1)
        return nb_error(NB_ERR_INVALID_ARG, "--max-prefill-tokens %d: must be >= 1", p->max_prefill_tokens);
    s->p = *p;
    s->kv = kv;
    int m = p->max_running_requests;
    s->running = calloc((size_t)m, sizeof *s->running);
    s->plan.items = calloc((size_t)m, sizeof *s->plan.items);
    s->plan.preempted = calloc((size_t)m, sizeof *s->plan.preempted);
    s->plan.admitted = calloc((size_t)m, sizeof *s->plan.admitted);
    if (!s->running || !s->plan.items || !s->plan.preempted || !s->plan.admitted) {
        nb_sched_destroy(s);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "scheduler for %d running requests", m);
    }
    return NB_OK;
}

void nb_sched_destroy(nb_sched *s)
{
    free(s->waiting);
    free(s->running);
    free(s->plan.items);
    free(s->plan.preempted);
    free(s->plan.admitted);
    memset(s, 0, sizeof *s);
}

/* Insert into the waiting queue keeping arrival order (preempted sequences go back to
 * where they arrived, ahead of everything that came later). */
static nb_status nb_waiting_insert(nb_sched *s, nb_seq *q)
{
    if (s->n_waiting == s->cap_waiting) {
        int nc = s->cap_waiting ? 2 * s->cap_waiting : 64;
        nb_seq **w = realloc(s->waiting, (size_t)nc * sizeof *w);
        if (!w) return nb_error(NB_ERR_OUT_OF_MEMORY, "scheduler waiting queue of %d", nc);
        s->waiting = w;
        s->cap_waiting = nc;
    }
    int i = s->n_waiting;
    while (i > 0 && s->waiting[i - 1]->arrival > q->arrival) i--;
    memmove(s->waiting + i + 1, s->waiting + i, (size_t)(s->n_waiting - i) * sizeof *s->waiting);
    s->waiting[i] = q;
    s->n_waiting++;
    q->state = NB_SEQ_WAITING;
    return NB_OK;
}

nb_status nb_sched_add(nb_sched *s, nb_seq *q)
{
    NB_ASSERT(q->state == NB_SEQ_NEW);
    q->arrival = s->next_arrival++;
    q->n_computed = 0;
    q->n_pages = 0;
    return nb_waiting_insert(s, q);
}

static void nb_seq_release_pages(nb_sched *s, nb_seq *q)
{
    for (int i = 0; i < q->n_pages; i++) nb_kv_pages_release(s->kv, q->pages[i]);
    q->n_pages = 0;
    q->n_computed = 0;
}

static void nb_list_remove(nb_seq **list, int *n, nb_seq *q)
{
    for (int i = 0; i < *n; i++)
        if (list[i] == q) {
            memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
            (*n)--;
            return;
        }
    NB_ASSERT(!"sequence missing from its scheduler list");
}

void nb_sched_remove(nb_sched *s, nb_seq *q)
{
    if (q->state == NB_SEQ_WAITING) {
        nb_list_remove(s->waiting, &s->n_waiting, q);
    } else if (q->state == NB_SEQ_RUNNING) {
        nb_list_remove(s->running, &s->n_running, q);
        nb_seq_release_pages(s, q);
    } else {
        return;
    }
    q->state = NB_SEQ_DONE;
}

/* Make sure positions [0, upto) have slots; 0 when pages ran out (nothing is undone:
 * pages already taken stay with the sequence). */
static int nb_seq_grow(nb_sched *s, nb_seq *q, int upto)
{
    int ps = s->kv->page_size;
    /* the slot array covers every position a page can hold (see nb_seq.alloc) */
    NB_ASSERT(nb_pages_for(upto, ps) * ps <= q->alloc || q->alloc == q->cap);
    while (q->n_pages * ps < upto) {
        int32_t pg = nb_kv_pages_alloc(s->kv);
        if (pg < 0) return 0;
        q->pages[q->n_pages] = pg;
        for (int o = 0; o < ps && q->n_pages * ps + o < q->alloc; o++) q->slots[q->n_pages * ps + o] = pg * ps + o;
        q->n_pages++;
    }
    return 1;
}

static void nb_preempt(nb_sched *s, nb_seq *q)
{
    nb_list_remove(s->running, &s->n_running, q);
    nb_seq_release_pages(s, q);
    q->n_preempted++;
    s->preemptions++;
    s->plan.preempted[s->plan.n_preempted++] = q;
    NB_LOG_DEBUG("sched", "preempted a sequence of %d tokens (%d free pages)", q->len, s->kv->n_free);
    /* Cannot fail for want of memory: the queue had room for it before admission. */
    nb_status st = nb_waiting_insert(s, q);
    NB_ASSERT(st == NB_OK);
}

static int nb_is_decoding(const nb_seq *q) { return q->n_computed > 0 && q->len - q->n_computed == 1; }

/* Free pages the sequence could use without taking more: the rest of its last page. */
static int nb_seq_room(const nb_sched *s, const nb_seq *q) { return q->n_pages * s->kv->page_size - q->n_computed; }

const nb_plan *nb_sched_plan(nb_sched *s)
{
    nb_plan *pl = &s->plan;
    int ps = s->kv->page_size;
    pl->n_items = pl->n_decode = pl->n_prefill_tokens = pl->n_preempted = pl->n_admitted = 0;

    int any_decoding = 0;
    for (int i = 0; i < s->n_running; i++) any_decoding |= nb_is_decoding(s->running[i]);
    int admit = !any_decoding || s->decode_run + 1 >= s->p.num_continuous_decode_steps;
    pl->admission_step = admit;
    s->decode_run = admit ? 0 : s->decode_run + 1;

    /* 1. decodes, oldest first; the most recently admitted gives way when pages run out */
    for (int i = 0; i < s->n_running; i++) {
        nb_seq *q = s->running[i];
        if (!nb_is_decoding(q)) continue;
        int ok = 1;
        while (!nb_seq_grow(s, q, q->len)) {
            nb_seq *victim = s->running[s->n_running - 1];
            nb_preempt(s, victim);
            if (victim == q) {
                ok = 0;
                break;
            }
        }
        if (!ok) break; /* q was the newest: everything after it is gone too */
        pl->items[pl->n_items++] = (nb_plan_item){q, q->n_computed, 1, 1, 0};
        pl->n_decode++;
    }
    if (!admit) return pl;

    int chunking = s->p.chunked_prefill_size > 0;
    int rem = chunking ? NB_MIN(s->p.chunked_prefill_size, s->p.max_prefill_tokens) : s->p.max_prefill_tokens;

    /* 2a. continue partially prefilled sequences */
    for (int i = 0; i < s->n_running && rem > 0; i++) {
        nb_seq *q = s->running[i];
        int pending = q->len - q->n_computed;
        if (pending < 1 || nb_is_decoding(q)) continue;
        int take = NB_MIN(pending, rem);
        int fit = nb_seq_room(s, q) + s->kv->n_free * ps;
        take = NB_MIN(take, fit);
        if (take <= 0) continue;
        int ok = nb_seq_grow(s, q, q->n_computed + take);
        NB_ASSERT(ok);
        pl->items[pl->n_items++] = (nb_plan_item){q, q->n_computed, take, q->n_computed + take == q->len, 1};
        pl->n_prefill_tokens += take;
        rem -= take;
    }

    /* 2b. admit waiting sequences (fcfs; lpm orders the same way until a prefix cache
     * exists, since no waiting sequence can share cached pages yet) */
    while (s->n_waiting > 0 && s->n_running < s->p.max_running_requests && rem > 0) {
        nb_seq *q = s->waiting[0];
        int pending = q->len;
        int take;
        if (pending <= rem)
            take = pending;
        else if (chunking)
            take = rem;
        else if (pl->n_prefill_tokens == 0)
            take = pending; /* a prompt over max_prefill_tokens runs alone */
        else
            break;
        /* full prompt pages of a sibling, keeping at least one token to compute */
        int shared = 0;
        nb_seq *src = q->share_from;
        int k = (q->prompt_len - 1) / ps;
        if (src && k > 0 && src->state == NB_SEQ_RUNNING) {
            if (src->n_computed < k * ps) break; /* wait for the sibling's prompt */
            shared = k;
            pending = q->len - k * ps;
            take = NB_MIN(take, pending);
        }
        int headroom = s->n_running; /* one page for each running sequence's next decode */
        if (nb_pages_for(q->len, ps) - shared > s->kv->n_free - headroom) break;
        memmove(s->waiting, s->waiting + 1, (size_t)(s->n_waiting - 1) * sizeof *s->waiting);
        s->n_waiting--;
        q->state = NB_SEQ_RUNNING;
        q->admitted = ++s->next_admit;
        for (int i = 0; i < shared; i++) {
            int32_t pg = src->pages[i];
            nb_kv_pages_share(s->kv, pg);
            q->pages[i] = pg;
            for (int o = 0; o < ps; o++) q->slots[i * ps + o] = pg * ps + o;
        }
        q->n_pages = shared;
        q->n_computed = shared * ps;
        s->running[s->n_running++] = q;
        int ok = nb_seq_grow(s, q, q->n_computed + take);
        NB_ASSERT(ok);
        pl->items[pl->n_items++] = (nb_plan_item){q, q->n_computed, take, q->n_computed + take == q->len, 1};
        pl->admitted[pl->n_admitted++] = q;
        pl->n_prefill_tokens += take;
        rem -= take;
        if (take < pending) break; /* one chunked sequence at a time */
    }
    return pl;
}

void nb_sched_commit(nb_sched *s)
{
    for (int i = 0; i < s->plan.n_items; i++) {
        nb_plan_item *it = &s->plan.items[i];
        if (it->seq->state != NB_SEQ_RUNNING) continue;
        NB_ASSERT(it->seq->n_computed == it->start);
        it->seq->n_computed += it->n;
    }
}
