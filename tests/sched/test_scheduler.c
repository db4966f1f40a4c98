/* Scheduler unit tests with a simulated model (no forward pass: a step "computes" the
 * planned tokens and samples token 7 for every sequence that finished its pending ones).
 * Admission limits, chunked prefill boundaries, continuous decode steps, preemption and
 * resume, aborts at every stage, and a property test over thousands of random seeds.
 * Run: build-eng/tests/test_scheduler [name-substring] */
#include "sched/scheduler.h"
#include "engine/sampling.h"
#include "nbtest.h"

typedef struct sim {
    nb_kv_pages kv;
    nb_sched s;
    int64_t virt_ns; /* simulated step cost: 1 ms + 0.01 ms per token */
} sim;

static void sim_init(sim *m, int n_pages, int page_size, nb_sched_params p)
{
    memset(m, 0, sizeof *m);
    NB_CHECK_OK(nb_kv_pages_init(&m->kv, n_pages, page_size));
    NB_CHECK_OK(nb_sched_init(&m->s, &p, &m->kv));
}

static void sim_free(sim *m)
{
    nb_sched_destroy(&m->s);
    nb_kv_pages_free_all(&m->kv);
}

static nb_sched_params params(int max_running, int steps, int chunk, int max_prefill)
{
    return (nb_sched_params){max_running, steps, chunk, max_prefill, NB_SCHED_FCFS};
}

static nb_seq *mkseq(int prompt_len, int cap, int ps)
{
    int32_t *p = malloc((size_t)prompt_len * sizeof *p);
    for (int i = 0; i < prompt_len; i++) p[i] = i % 50;
    nb_seq *q = NULL;
    NB_CHECK_OK(nb_seq_new(p, prompt_len, cap, ps, &q));
    free(p);
    return q;
}

/* Every page held by exactly one running sequence; lists match states; slots follow pages. */
static int check_invariants(sim *m)
{
    int bad = 0;
    int ps = m->kv.page_size;
    int *owner = calloc((size_t)m->kv.n_pages, sizeof *owner);
    int held = 0;
    for (int i = 0; i < m->s.n_running; i++) {
        nb_seq *q = m->s.running[i];
        if (q->state != NB_SEQ_RUNNING) bad++;
        if (q->n_pages * ps < q->n_computed) bad++;
        if (i > 0 && m->s.running[i - 1]->admitted >= q->admitted) bad++;
        for (int k = 0; k < q->n_pages; k++) {
            int pg = q->pages[k];
            if (pg < 0 || pg >= m->kv.n_pages) {
                bad++;
                continue;
            }
            if (owner[pg]++ == 0) held++;
            for (int o = 0; o < ps && k * ps + o < q->alloc; o++)
                if (q->slots[k * ps + o] != pg * ps + o) bad++;
        }
    }
    for (int i = 0; i < m->s.n_waiting; i++) {
        nb_seq *q = m->s.waiting[i];
        if (q->state != NB_SEQ_WAITING || q->n_pages != 0) bad++;
        if (i > 0 && m->s.waiting[i - 1]->arrival >= q->arrival) bad++;
    }
    if (held != nb_kv_pages_used(&m->kv)) bad++;
    for (int pg = 0; pg < m->kv.n_pages; pg++)
        if (owner[pg] != m->kv.ref[pg]) bad++; /* every holder counted, shared pages too */
    if (m->s.n_running > m->s.p.max_running_requests) bad++;
    free(owner);
    NB_CHECK_MSG(bad == 0, "%d invariant violations", bad);
    return bad == 0;
}

/* Run one step: plan, commit, sample token 7 where due; sequences reaching cap finish. */
static const nb_plan *sim_step(sim *m)
{
    const nb_plan *pl = nb_sched_plan(&m->s);
    int tokens = 0;
    for (int i = 0; i < pl->n_items; i++) tokens += pl->items[i].n;
    m->virt_ns += 1000000 + 10000LL * tokens;
    nb_sched_commit(&m->s);
    for (int i = 0; i < pl->n_items; i++) {
        nb_seq *q = pl->items[i].seq;
        if (!pl->items[i].want_logits || q->state != NB_SEQ_RUNNING) continue;
        nb_seq_append(q, 7);
        if (q->len == q->cap) nb_sched_remove(&m->s, q);
    }
    check_invariants(m);
    return pl;
}

static void test_admission_limit(void)
{
    sim m;
    sim_init(&m, 100, 16, params(3, 1, 8192, 16384));
    nb_seq *q[5];
    for (int i = 0; i < 5; i++) {
        q[i] = mkseq(10, 14, 16);
        NB_CHECK_OK(nb_sched_add(&m.s, q[i]));
    }
    const nb_plan *pl = sim_step(&m);
    NB_CHECK(pl->n_admitted == 3 && m.s.n_running == 3 && m.s.n_waiting == 2);
    NB_CHECK(pl->n_prefill_tokens == 30);
    /* while 3 run, nobody else gets in */
    for (int s = 0; s < 3; s++) {
        pl = sim_step(&m);
        NB_CHECK(pl->n_admitted == 0 && pl->n_decode == 3);
    }
    /* the first three reach cap (10 + 4) at the 4th step; the rest are admitted next */
    NB_CHECK(m.s.n_running == 0 && m.s.n_waiting == 2);
    pl = sim_step(&m);
    NB_CHECK(pl->n_admitted == 2);
    NB_CHECK(pl->admitted[0] == q[3] && pl->admitted[1] == q[4]);
    for (int s = 0; s < 4; s++) sim_step(&m);
    NB_CHECK(m.s.n_running == 0 && m.s.n_waiting == 0 && m.kv.n_free == 100);
    for (int i = 0; i < 5; i++) nb_seq_free(q[i]);
    sim_free(&m);
}

static void test_chunked_prefill(void)
{
    sim m;
    sim_init(&m, 100, 16, params(8, 1, 100, 1000));
    nb_seq *a = mkseq(30, 32, 16), *b = mkseq(250, 252, 16), *c = mkseq(20, 22, 16);
    nb_sched_add(&m.s, a);
    nb_sched_add(&m.s, b);
    nb_sched_add(&m.s, c);
    /* step 1: a whole (30), then 70 tokens of b; chunking b ends admission */
    const nb_plan *pl = sim_step(&m);
    NB_CHECK(pl->n_items == 2 && pl->n_prefill_tokens == 100);
    NB_CHECK(pl->items[0].seq == a && pl->items[0].n == 30 && pl->items[0].want_logits);
    NB_CHECK(pl->items[1].seq == b && pl->items[1].n == 70 && !pl->items[1].want_logits);
    NB_CHECK(m.s.n_waiting == 1);
    /* step 2: a decodes; b continues with the full budget of 100 */
    pl = sim_step(&m);
    NB_CHECK(pl->n_decode == 1 && pl->n_prefill_tokens == 100);
    NB_CHECK(pl->items[1].seq == b && pl->items[1].start == 70 && pl->items[1].n == 100 && !pl->items[1].want_logits);
    /* step 3: b's last 80 tokens (logits wanted), c admitted with the remaining 20 */
    pl = sim_step(&m);
    NB_CHECK(pl->n_prefill_tokens == 100);
    NB_CHECK(pl->n_items == 2 + 0 || pl->n_items == 3);
    int saw_b = 0, saw_c = 0;
    for (int i = 0; i < pl->n_items; i++) {
        if (pl->items[i].seq == b) saw_b = pl->items[i].start == 170 && pl->items[i].n == 80 && pl->items[i].want_logits;
        if (pl->items[i].seq == c) saw_c = pl->items[i].n == 20 && pl->items[i].want_logits;
    }
    NB_CHECK(saw_b && saw_c);
    while (m.s.n_running) sim_step(&m);
    NB_CHECK(m.kv.n_free == 100);
    nb_seq_free(a);
    nb_seq_free(b);
    nb_seq_free(c);
    sim_free(&m);
}

static void test_no_chunking_max_prefill(void)
{
    sim m;
    sim_init(&m, 200, 16, params(8, 1, 0, 1000));
    nb_seq *a = mkseq(600, 601, 16), *b = mkseq(600, 601, 16), *c = mkseq(1500, 1501, 16);
    nb_sched_add(&m.s, a);
    nb_sched_add(&m.s, b);
    nb_sched_add(&m.s, c);
    const nb_plan *pl = sim_step(&m); /* a alone: a+b would exceed 1000 */
    NB_CHECK(pl->n_admitted == 1 && pl->items[0].seq == a && pl->items[0].n == 600);
    pl = sim_step(&m); /* b */
    NB_CHECK(pl->n_admitted == 1 && pl->items[0].seq == b);
    pl = sim_step(&m); /* c is over max_prefill_tokens: admitted alone, unchunked */
    NB_CHECK(pl->n_admitted == 1 && pl->items[0].seq == c && pl->items[0].n == 1500);
    nb_seq_free(a);
    nb_seq_free(b);
    nb_seq_free(c);
    sim_free(&m);
}

static void test_decode_steps(void)
{
    for (int N = 1; N <= 5; N++) {
        sim m;
        sim_init(&m, 400, 16, params(16, N, 8192, 16384));
        nb_seq *a = mkseq(5, 105, 16);
        nb_sched_add(&m.s, a);
        const nb_plan *pl = sim_step(&m);
        NB_CHECK(pl->admission_step);
        /* a request arriving at every step must be admitted within N steps, and
         * admissions happen exactly on every N-th step while a decodes */
        nb_seq *late[12];
        int admit_steps = 0;
        for (int s = 0; s < 12; s++) {
            late[s] = mkseq(5, 60, 16);
            nb_sched_add(&m.s, late[s]);
            pl = sim_step(&m);
            NB_CHECK_MSG(pl->n_decode >= 1, "N=%d step %d", N, s);
            NB_CHECK_MSG(pl->admission_step == ((s + 1) % N == 0), "N=%d step %d admission %d", N, s,
                         pl->admission_step);
            admit_steps += pl->admission_step;
            NB_CHECK(m.s.n_waiting <= N);
        }
        NB_CHECK(admit_steps == 12 / N);
        nb_seq_free(a);
        for (int s = 0; s < 12; s++) nb_seq_free(late[s]);
        sim_free(&m);
    }
}

static void test_preemption(void)
{
    /* 6 pages of 4 tokens = 24 slots; two sequences of prompt 8 growing to 20 */
    sim m;
    sim_init(&m, 6, 4, params(4, 1, 8192, 16384));
    nb_seq *a = mkseq(8, 20, 4), *b = mkseq(8, 20, 4);
    nb_sched_add(&m.s, a);
    nb_sched_add(&m.s, b);
    const nb_plan *pl = sim_step(&m);
    NB_CHECK(pl->n_admitted == 2 && m.kv.n_free == 2);
    int preempted = 0, steps = 0;
    while ((m.s.n_running || m.s.n_waiting) && steps < 200) {
        pl = sim_step(&m);
        steps++;
        for (int i = 0; i < pl->n_preempted; i++) {
            preempted++;
            NB_CHECK(pl->preempted[i] == b); /* the most recently admitted gives way */
            NB_CHECK(b->state == NB_SEQ_WAITING && b->n_computed == 0 && b->n_pages == 0);
        }
        /* when b comes back, its whole prefix (prompt + output so far) is recomputed */
        for (int i = 0; i < pl->n_admitted; i++)
            if (pl->admitted[i] == b) NB_CHECK(pl->items[pl->n_items - 1].n == b->len - 1 && b->len > 9);
    }
    NB_CHECK(preempted >= 1 && m.s.preemptions == (uint64_t)preempted);
    NB_CHECK(a->len == 20 && b->len == 20);
    NB_CHECK(a->state == NB_SEQ_DONE && b->state == NB_SEQ_DONE && m.kv.n_free == 6);
    nb_seq_free(a);
    nb_seq_free(b);
    sim_free(&m);
}

static void test_aborts_every_stage(void)
{
    /* stage 0 waiting, 1 mid-chunked-prefill, 2 decoding, 3 preempted (back in waiting) */
    for (int stage = 0; stage < 4; stage++) {
        sim m;
        sim_init(&m, stage == 3 ? 6 : 64, 4, params(4, 1, stage == 1 ? 8 : 8192, 16384));
        nb_seq *a = mkseq(8, 20, 4), *b = mkseq(stage == 1 ? 30 : 8, stage == 1 ? 40 : 20, 4);
        nb_sched_add(&m.s, a);
        nb_sched_add(&m.s, b);
        nb_seq *victim = b;
        if (stage == 0) {
            nb_sched_remove(&m.s, b);
        } else if (stage == 1) {
            sim_step(&m);
            sim_step(&m); /* a: 8 tokens, then b: chunks of 8 */
            NB_CHECK(b->state == NB_SEQ_RUNNING && b->n_computed > 0 && b->n_computed < b->len);
            nb_sched_remove(&m.s, b);
        } else if (stage == 2) {
            sim_step(&m);
            sim_step(&m);
            NB_CHECK(b->state == NB_SEQ_RUNNING && b->len - b->n_computed == 1);
            nb_sched_remove(&m.s, b);
        } else {
            int guard = 0;
            while (b->n_preempted == 0 && guard++ < 100) sim_step(&m);
            NB_CHECK(b->state == NB_SEQ_WAITING);
            nb_sched_remove(&m.s, b);
        }
        NB_CHECK(victim->state == NB_SEQ_DONE && victim->n_pages == 0);
        check_invariants(&m);
        int guard = 0;
        while ((m.s.n_running || m.s.n_waiting) && guard++ < 100) sim_step(&m);
        NB_CHECK(a->state == NB_SEQ_DONE && a->len == 20);
        NB_CHECK_MSG(m.kv.n_free == m.kv.n_pages, "stage %d: %d of %d pages free", stage, m.kv.n_free, m.kv.n_pages);
        nb_seq_free(a);
        nb_seq_free(b);
        sim_free(&m);
    }
}

/* Random arrivals, lengths, knobs and aborts over thousands of seeds: every sequence
 * ends exactly once (finished or aborted), invariants hold at every step, all pages
 * return to the free list, and nobody starves. */
static void test_property_random(void)
{
    int failures_before = nb_test_failures_;
    int64_t total_steps = 0, total_preempt = 0, shared_steps = 0;
    for (uint64_t seed = 1; seed <= 3000 && nb_test_failures_ == failures_before; seed++) {
        uint64_t k = 0;
#define RND(n) ((int)(nb_mix64(seed * 1000003ULL + k++) % (uint64_t)(n)))
        int ps = 1 + RND(8);
        int n_pages = 4 + RND(40);
        int max_len = n_pages * ps; /* a lone sequence always fits */
        int mr = 1 + RND(8), ds = 1 + RND(4), chunk = RND(3) ? 1 + RND(40) : 0, mp = 1 + RND(60);
        nb_sched_params p = params(mr, ds, chunk, mp);
        sim m;
        sim_init(&m, n_pages, ps, p);
        int n = 5 + RND(30);
        nb_seq **q = calloc((size_t)n, sizeof *q);
        int *ended = calloc((size_t)n, sizeof *ended);
        int arrived = 0, steps = 0;
        while (steps < 20000) {
            /* arrivals */
            while (arrived < n && RND(3) == 0) {
                int pl = 1 + RND(NB_MAX(1, max_len / 2));
                int cap = pl + RND(max_len - pl + 1);
                if (cap < pl + 1) cap = NB_MIN(pl + 1, max_len);
                if (pl >= cap) pl = cap - 1;
                if (pl < 1) { pl = 1; cap = NB_MAX(cap, 2); }
                /* a third of the time: a sibling of an earlier sequence (same prompt) that
                 * may share its full prompt pages */
                int sib = arrived > 0 && RND(3) == 0 ? RND(arrived) : -1;
                if (sib >= 0) {
                    pl = q[sib]->prompt_len;
                    cap = NB_MAX(cap, pl + 1);
                    cap = NB_MIN(cap, max_len);
                    if (cap <= pl) sib = -1;
                }
                if (sib < 0 && pl >= cap) pl = cap - 1;
                q[arrived] = mkseq(pl, cap, ps);
                if (sib >= 0) q[arrived]->share_from = q[sib];
                NB_CHECK_OK(nb_sched_add(&m.s, q[arrived]));
                arrived++;
            }
            /* aborts at any stage */
            if (arrived && RND(10) == 0) {
                int i = RND(arrived);
                if (q[i]->state != NB_SEQ_DONE) {
                    nb_sched_remove(&m.s, q[i]);
                    ended[i]++;
                }
            }
            int idle_before = m.s.n_running == 0 && m.s.n_waiting > 0;
            const nb_plan *pl = nb_sched_plan(&m.s);
            /* progress: with nothing running, the head of the queue always fits */
            NB_CHECK_MSG(!(idle_before && pl->n_items == 0), "seed %llu: stalled", (unsigned long long)seed);
            total_preempt += pl->n_preempted;
            nb_sched_commit(&m.s);
            for (int i = 0; i < pl->n_items; i++) {
                nb_seq *s = pl->items[i].seq;
                if (!pl->items[i].want_logits) continue;
                nb_seq_append(s, 7);
                if (s->len == s->cap) {
                    nb_sched_remove(&m.s, s);
                    for (int j = 0; j < arrived; j++)
                        if (q[j] == s) ended[j]++;
                }
            }
            if (!check_invariants(&m)) break;
            for (int pg = 0; pg < m.kv.n_pages; pg++) shared_steps += m.kv.ref[pg] > 1;
            steps++;
            if (arrived == n && m.s.n_running == 0 && m.s.n_waiting == 0) break;
        }
        total_steps += steps;
        NB_CHECK_MSG(steps < 20000, "seed %llu: did not drain", (unsigned long long)seed);
        for (int i = 0; i < n; i++) {
            NB_CHECK_MSG(ended[i] == 1, "seed %llu: sequence %d ended %d times", (unsigned long long)seed, i,
                         ended[i]);
            NB_CHECK(q[i]->state == NB_SEQ_DONE);
            nb_seq_free(q[i]);
        }
        NB_CHECK_MSG(m.kv.n_free == m.kv.n_pages, "seed %llu: %d pages leaked", (unsigned long long)seed,
                     m.kv.n_pages - m.kv.n_free);
        free(q);
        free(ended);
        sim_free(&m);
#undef RND
    }
    fprintf(stderr, "  3000 seeds: %lld steps, %lld preemptions, %lld page-steps shared\n", (long long)total_steps,
            (long long)total_preempt, (long long)shared_steps);
    NB_CHECK(total_preempt > 0 && shared_steps > 0);
}

/* A sequence allowed 200k tokens allocates for what it holds, not for its cap. */
static void test_lazy_growth(void)
{
    sim m;
    sim_init(&m, 64, 16, params(4, 1, 8192, 16384));
    nb_seq *q = mkseq(10, 200000, 16);
    NB_CHECK(q->alloc < 64);
    nb_sched_add(&m.s, q);
    for (int i = 0; i < 100; i++) sim_step(&m);
    NB_CHECK(q->len == 110 && q->alloc >= 112 && q->alloc <= 512);
    NB_CHECK(q->n_pages == 7 && q->n_computed == 109);
    nb_sched_remove(&m.s, q);
    NB_CHECK(m.kv.n_free == 64);
    nb_seq_free(q);
    sim_free(&m);
}

/* A sibling shares the full prompt pages of the first sequence once they are computed:
 * it waits one step, computes only the rest of the prompt, and the shared pages stay
 * allocated until both are gone. */
static void test_prompt_sharing(void)
{
    sim m;
    sim_init(&m, 32, 16, params(4, 1, 8192, 16384));
    nb_seq *a = mkseq(40, 44, 16), *b = mkseq(40, 44, 16), *c = mkseq(40, 50, 16);
    b->share_from = a;
    c->share_from = a;
    nb_sched_add(&m.s, a);
    nb_sched_add(&m.s, b);
    nb_sched_add(&m.s, c);
    const nb_plan *pl = sim_step(&m); /* a alone: b and c wait for a's prompt */
    NB_CHECK(pl->n_admitted == 1 && pl->items[0].seq == a && pl->items[0].n == 40);
    pl = sim_step(&m); /* a decodes; b and c take a's 2 full pages and compute 8 tokens each */
    NB_CHECK(pl->n_admitted == 2 && pl->n_prefill_tokens == 16);
    NB_CHECK(b->pages[0] == a->pages[0] && b->pages[1] == a->pages[1] && c->pages[1] == a->pages[1]);
    NB_CHECK(b->pages[2] != a->pages[2] && m.kv.ref[a->pages[0]] == 3);
    NB_CHECK(pl->items[1].start == 32 && pl->items[1].n == 8 && pl->items[1].want_logits);
    while (a->state != NB_SEQ_DONE) sim_step(&m);
    NB_CHECK(m.kv.ref[b->pages[0]] == 2);
    while (m.s.n_running) sim_step(&m);
    NB_CHECK(m.kv.n_free == 32 && b->len == 44 && c->len == 50);
    nb_seq_free(a);
    nb_seq_free(b);
    nb_seq_free(c);
    sim_free(&m);
}

static const nb_test tests[] = {
    {"prompt_sharing", test_prompt_sharing},
    {"lazy_growth", test_lazy_growth},
    {"admission_limit", test_admission_limit},
    {"chunked_prefill", test_chunked_prefill},
    {"no_chunking_max_prefill", test_no_chunking_max_prefill},
    {"decode_steps", test_decode_steps},
    {"preemption", test_preemption},
    {"aborts_every_stage", test_aborts_every_stage},
    {"property_random", test_property_random},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
