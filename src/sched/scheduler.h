/* Continuous-batching policy: which sequences run in the next forward step.
 *
 * Pure bookkeeping over sequences and the KV page allocator (no threads, no model), so
 * it is unit-tested with a fake model: tests/sched/test_scheduler.c.
 *
 * A sequence (one choice of a request) holds tokens = prompt followed by its output so
 * far; n_computed of them have KV rows in the cache. Every step each running sequence
 * computes its pending tokens [n_computed, len): one for a decoding sequence, a chunk
 * for a prefilling one. Each step:
 *   1. Decodes: every running sequence with one pending token gets a slot; when no page
 *      is free, the most recently admitted running sequence is preempted (pages freed,
 *      back to the waiting queue in arrival order; n_computed = 0 so its prompt and
 *      output so far are recomputed when it is readmitted).
 *   2. Admission (only every num_continuous_decode_steps-th step while sequences are
 *      decoding; every step otherwise): continue the partially prefilled sequence, then
 *      admit waiting sequences in policy order while running < max_running_requests, the
 *      step's prefill budget min(chunked_prefill_size, max_prefill_tokens) lasts, and the
 *      whole pending input fits in the free pages minus one page of headroom per running
 *      sequence. A sequence longer than the budget is chunked (at most one at a time);
 *      with chunking off, a longer one is admitted only alone. A sequence with a
 *      share_from sibling takes (refcounted) the sibling's full prompt pages once the
 *      sibling has computed them, and computes only the rest; while the sibling is still
 *      computing them, admission stops for this step.
 * Invariant: every sequence is in exactly one of waiting / running / neither (done). */
#ifndef NB_SCHED_SCHEDULER_H
#define NB_SCHED_SCHEDULER_H

#include <stdint.h>

#include "engine/kv_pages.h"
#include "nibble.h"

typedef enum nb_seq_state { NB_SEQ_NEW = 0, NB_SEQ_WAITING, NB_SEQ_RUNNING, NB_SEQ_DONE } nb_seq_state;

typedef struct nb_seq nb_seq;
struct nb_seq {
    uint64_t arrival;   /* submit order (set by nb_sched_add) */
    uint64_t admitted;  /* admission counter at the last admission; larger = more recent */
    int32_t *tokens;    /* [alloc]: prompt then output */
    int32_t *slots;     /* [alloc]: KV slot of each position with a page */
    int32_t *pages;     /* [ceil(alloc / page_size)] */
    int prompt_len, len, cap;
    int alloc;          /* entries allocated: grows with len (a sequence may have a cap of
                           200k tokens and stop after 10), always >= min(cap, len rounded
                           up to a page) */
    int page_size;
    int n_computed;
    int n_pages;
    int n_preempted;
    nb_seq_state state;
    void *owner;        /* the engine's request */
    int index;          /* the engine's choice index */
    struct nb_seq *share_from; /* a sibling with the same prompt (choice 0 of the request)
                           whose full prompt pages this one may share instead of
                           recomputing them; NULL: none */
};

/* A sequence that may grow to `cap` tokens, starting with the prompt. */
nb_status nb_seq_new(const int32_t *prompt, int prompt_len, int cap, int page_size, nb_seq **out);
void nb_seq_free(nb_seq *s);
/* Append a sampled token (len < cap required). NB_ERR_OUT_OF_MEMORY when its arrays
 * cannot grow (the sequence is unchanged). */
nb_status nb_seq_append(nb_seq *s, int32_t tok);

typedef struct nb_sched_params {
    int max_running_requests;        /* >= 1 */
    int num_continuous_decode_steps; /* >= 1 */
    int chunked_prefill_size;        /* <= 0: off */
    int max_prefill_tokens;          /* >= 1 */
    nb_schedule_policy policy;
} nb_sched_params;

typedef struct nb_plan_item {
    nb_seq *seq;
    int start;          /* = seq->n_computed */
    int n;              /* tokens computed this step */
    int want_logits;    /* start + n == seq->len: sample a token after this step */
    int is_prefill;     /* 0: a decode token */
} nb_plan_item;

typedef struct nb_plan {
    nb_plan_item *items;
    int n_items;
    int n_decode, n_prefill_tokens;
    nb_seq **preempted; /* sequences preempted while planning this step */
    int n_preempted;
    nb_seq **admitted;  /* sequences admitted this step */
    int n_admitted;
    int admission_step; /* 1 when new work was allowed this step */
} nb_plan;

typedef struct nb_sched {
    nb_sched_params p;
    nb_kv_pages *kv;
    nb_seq **waiting;   /* sorted by arrival */
    int n_waiting, cap_waiting;
    nb_seq **running;   /* sorted by admission */
    int n_running;
    uint64_t next_arrival, next_admit;
    int decode_run;     /* decode-only steps since the last admission step */
    uint64_t preemptions;
    nb_plan plan;
} nb_sched;

nb_status nb_sched_init(nb_sched *s, const nb_sched_params *p, nb_kv_pages *kv);
/* Frees the scheduler's arrays, not the sequences. */
void nb_sched_destroy(nb_sched *s);

/* Queue a new sequence (state NEW → WAITING). NB_ERR_OUT_OF_MEMORY. */
nb_status nb_sched_add(nb_sched *s, nb_seq *q);
/* Take a sequence out wherever it is (finish or abort): its pages are freed at once and
 * it becomes DONE. A DONE or NEW sequence is left as is. */
void nb_sched_remove(nb_sched *s, nb_seq *q);

/* Plan the next step (the result lives in s->plan until the next call). Items may be
 * empty (nothing to run, or nothing fits yet). */
const nb_plan *nb_sched_plan(nb_sched *s);
/* The step ran: advance n_computed of every planned sequence. */
void nb_sched_commit(nb_sched *s);

/* Pages needed for n tokens. */
static inline int nb_pages_for(int n, int page_size) { return (n + page_size - 1) / page_size; }

#endif
