/* Sampling (src/engine/sampling.c): chi-square of many seeded draws against the filtered
 * distribution computed here independently from the documented definition; seeds
 * reproduce; greedy ties; penalties; log-probabilities.
 * Also: the CPU op's kept-set search (threshold + partial sort) against a full sort of the
 * documented ranking, the id-order draw written out plainly, and the batched op (CSR
 * history) against nb_sample_token row by row.
 * Run: build-smp/tests/test_sampling [name-substring] */
#include "engine/sampling.h"
#include "nbtest.h"
#include "ops/cpu/sample.h"
#include "ops/sample_math.h"

#define V 10
static const float base_logits[V] = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 0.3f, 1.2f, -2.0f};

/* The documented filter, written out plainly: softmax(l/T), sort desc (ties by id), keep
 * i when i < top_k, mass before i <= top_p, p_i >= min_p * p_max; renormalize. */
static void expected_dist(const float *l, const nb_sampling_params *sp, double *q)
{
    double p[V], m = -1e30, z = 0;
    for (int i = 0; i < V; i++) m = l[i] > m ? l[i] : m;
    for (int i = 0; i < V; i++) z += p[i] = exp((l[i] - m) / sp->temperature);
    for (int i = 0; i < V; i++) p[i] /= z;
    int ord[V];
    for (int i = 0; i < V; i++) ord[i] = i;
    for (int i = 0; i < V; i++)
        for (int j = i + 1; j < V; j++)
            if (p[ord[j]] > p[ord[i]] || (p[ord[j]] == p[ord[i]] && ord[j] < ord[i])) {
                int t = ord[i];
                ord[i] = ord[j];
                ord[j] = t;
            }
    double before = 0, mass = 0;
    for (int i = 0; i < V; i++) q[i] = 0;
    for (int r = 0; r < V; r++) {
        int t = ord[r];
        int keep = r == 0 || ((sp->top_k <= 0 || r < sp->top_k) && before <= sp->top_p + 1e-12 &&
                              p[t] >= sp->min_p * p[ord[0]]);
        if (!keep) break;
        q[t] = p[t];
        before += p[t];
        mass += p[t];
    }
    for (int i = 0; i < V; i++) q[i] /= mass;
}

/* Chi-square critical value for df degrees of freedom at p = 1e-4 (Wilson-Hilferty). */
static double chi2_crit(int df)
{
    double z = 3.719, a = 2.0 / (9.0 * df);
    double c = 1 - a + z * sqrt(a);
    return df * c * c * c;
}

static void check_dist(const char *name, const nb_sampling_params *sp, const float *logits, const int32_t *hist,
                       int prompt_len, int len, const double *q)
{
    nb_sampler s;
    NB_CHECK_OK(nb_sampler_init(&s, V));
    enum { N = 100000 };
    int count[V] = {0};
    float l[V];
    for (int d = 0; d < N; d++) {
        memcpy(l, logits, sizeof l);
        nb_sample smp;
        nb_sample_token(&s, l, sp, (uint64_t)d * 7919 + 1, hist, prompt_len, len, &smp);
        count[smp.token]++;
    }
    double chi = 0;
    int df = -1, leak = 0;
    for (int i = 0; i < V; i++) {
        if (q[i] == 0) {
            leak += count[i];
            continue;
        }
        double ex = q[i] * N;
        chi += (count[i] - ex) * (count[i] - ex) / ex;
        df++;
    }
    NB_CHECK_MSG(leak == 0, "%s: %d draws of filtered-out tokens", name, leak);
    if (df > 0) NB_CHECK_MSG(chi < chi2_crit(df), "%s: chi2 %.2f >= %.2f (df %d)", name, chi, chi2_crit(df), df);
    else NB_CHECK(df == 0);
    fprintf(stderr, "  %-28s chi2 %7.2f  df %d  crit %.2f\n", name, chi, df, df > 0 ? chi2_crit(df) : 0);
    nb_sampler_free(&s);
}

static void test_filters_chi_square(void)
{
    struct {
        const char *name;
        float t;
        int k;
        float p, minp;
    } cases[] = {
        {"temperature 1", 1.0f, -1, 1.0f, 0},   {"temperature 0.5", 0.5f, -1, 1.0f, 0},
        {"temperature 2", 2.0f, 0, 1.0f, 0},    {"top_k 3", 1.0f, 3, 1.0f, 0},
        {"top_p 0.6", 1.0f, -1, 0.6f, 0},       {"min_p 0.3", 1.0f, -1, 1.0f, 0.3f},
        {"k5 p0.8 minp0.1 t0.7", 0.7f, 5, 0.8f, 0.1f}, {"top_k 1", 1.0f, 1, 1.0f, 0},
        {"top_p 0.01", 1.3f, -1, 0.01f, 0},
    };
    int32_t hist[1] = {0};
    for (size_t c = 0; c < NB_ARRAY_LEN(cases); c++) {
        nb_sampling_params sp = nb_sampling_default_params();
        sp.temperature = cases[c].t;
        sp.top_k = cases[c].k;
        sp.top_p = cases[c].p;
        sp.min_p = cases[c].minp;
        double q[V];
        expected_dist(base_logits, &sp, q);
        check_dist(cases[c].name, &sp, base_logits, hist, 1, 1, q);
    }
}

static void test_penalties(void)
{
    /* prompt {0, 5}, output {1, 1, 8} */
    int32_t hist[5] = {0, 5, 1, 1, 8};
    nb_sampling_params sp = nb_sampling_default_params();
    sp.repetition_penalty = 1.3f;
    sp.frequency_penalty = 0.5f;
    sp.presence_penalty = 0.3f;
    float want[V];
    memcpy(want, base_logits, sizeof want);
    int seen[V] = {0}, cnt[V] = {0};
    for (int i = 0; i < 5; i++) {
        seen[hist[i]] = 1;
        if (i >= 2) cnt[hist[i]]++;
    }
    for (int i = 0; i < V; i++) {
        if (seen[i]) want[i] = want[i] > 0 ? want[i] / 1.3f : want[i] * 1.3f;
        if (cnt[i]) want[i] -= 0.5f * cnt[i] + 0.3f;
    }
    /* greedy sees the penalized logits */
    nb_sampler s;
    nb_sampler_init(&s, V);
    float l[V];
    memcpy(l, base_logits, sizeof l);
    sp.temperature = 0;
    nb_sample smp;
    nb_sample_token(&s, l, &sp, 1, hist, 2, 5, &smp);
    for (int i = 0; i < V; i++) NB_CHECK_NEAR(l[i], want[i], 1e-6);
    int am = 0;
    for (int i = 1; i < V; i++)
        if (want[i] > want[am]) am = i;
    NB_CHECK(smp.token == am);
    nb_sampler_free(&s);
    sp.temperature = 0.8f;
    double q[V];
    expected_dist(want, &sp, q);
    check_dist("penalties t0.8", &sp, base_logits, hist, 2, 5, q);
}

static void test_seeds_and_greedy(void)
{
    nb_sampler s;
    nb_sampler_init(&s, V);
    nb_sampling_params sp = nb_sampling_default_params();
    int32_t hist[64] = {3};
    int32_t a[50], b[50], c[50];
    float l[V];
    for (int pass = 0; pass < 3; pass++) {
        int32_t *out = pass == 0 ? a : pass == 1 ? b : c;
        uint64_t seed = pass == 2 ? 43 : 42;
        for (int k = 0; k < 50; k++) {
            memcpy(l, base_logits, sizeof l);
            nb_sample smp;
            nb_sample_token(&s, l, &sp, seed, hist, 1, 1 + k, &smp);
            out[k] = smp.token;
        }
    }
    NB_CHECK(!memcmp(a, b, sizeof a));
    NB_CHECK(memcmp(a, c, sizeof a) != 0);
    /* greedy: ties go to the lowest id */
    float tie[V] = {0, 3, 1, 3, 0, 0, 0, 0, 0, 3};
    sp.temperature = 0;
    nb_sample smp;
    nb_sample_token(&s, tie, &sp, 0, hist, 1, 1, &smp);
    NB_CHECK(smp.token == 1);
    /* the generator is uniform enough: mean of 1e5 draws */
    double mean = 0;
    for (int i = 0; i < 100000; i++) mean += nb_rng_uniform(7, (uint64_t)i);
    NB_CHECK_NEAR(mean / 100000, 0.5, 0.005);
    nb_sampler_free(&s);
}

static void test_logprobs(void)
{
    nb_sampler s;
    nb_sampler_init(&s, V);
    nb_sampling_params sp = nb_sampling_default_params();
    sp.temperature = 0;
    sp.logprobs = 1;
    sp.top_logprobs = 4;
    sp.repetition_penalty = 2.0f; /* logprobs stay those of the raw logits */
    int32_t hist[1] = {0};
    float l[V];
    memcpy(l, base_logits, sizeof l);
    nb_sample smp;
    nb_sample_token(&s, l, &sp, 0, hist, 1, 1, &smp);
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(base_logits[i]);
    NB_CHECK(smp.token == 1); /* token 0 (2.0) penalized to 1.0 < 1.5 */
    NB_CHECK_NEAR(smp.logprob, base_logits[1] - log(z), 1e-5);
    int want_ids[4] = {0, 1, 8, 2};
    NB_CHECK(smp.n_top == 4);
    for (int k = 0; k < 4; k++) {
        NB_CHECK(smp.top[k].id == want_ids[k]);
        NB_CHECK_NEAR(smp.top[k].logprob, base_logits[want_ids[k]] - log(z), 1e-5);
    }
    nb_sampler_free(&s);
}

static void test_validate(void)
{
    nb_sampling_params sp = nb_sampling_default_params();
    NB_CHECK_OK(nb_sampling_validate(&sp, V));
    sp.temperature = -1;
    NB_CHECK_STATUS(nb_sampling_validate(&sp, V), NB_ERR_INVALID_ARG);
    NB_CHECK(strstr(nb_last_error(), "temperature"));
    sp = nb_sampling_default_params();
    sp.top_logprobs = 21;
    NB_CHECK_STATUS(nb_sampling_validate(&sp, V), NB_ERR_INVALID_ARG);
    sp = nb_sampling_default_params();
    int32_t bad = V;
    sp.stop_token_ids = &bad;
    sp.n_stop_token_ids = 1;
    NB_CHECK_STATUS(nb_sampling_validate(&sp, V), NB_ERR_INVALID_ARG);
    sp = nb_sampling_default_params();
    sp.n = 0;
    NB_CHECK_STATUS(nb_sampling_validate(&sp, V), NB_ERR_INVALID_ARG);
}

/* The definition in sampling.h spelled out with a full sort: weights, ranking, kept prefix,
 * id-order walk. The op must pick the same token for every row. */
static int cmp_u64_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x > y ? -1 : x < y;
}

static int reference_draw(const float *l, int n, const nb_sample_params *p)
{
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = nb_sm_clean(l[i]) > m ? nb_sm_clean(l[i]) : m;
    float inv_t = 1.0f / p->temperature;
    uint64_t *keys = malloc((size_t)n * sizeof *keys), *w = malloc((size_t)n * sizeof *w), total = 0;
    float *e = malloc((size_t)n * sizeof *e);
    int *kept = calloc((size_t)n, sizeof *kept);
    for (int i = 0; i < n; i++) {
        e[i] = nb_sm_weight_e(nb_sm_clean(l[i]), m, inv_t);
        w[i] = nb_sm_weight(e[i]);
        keys[i] = nb_sm_key(NB_SM_FBITS(e[i]), i);
        total += w[i];
    }
    qsort(keys, (size_t)n, sizeof *keys, cmp_u64_desc);
    uint64_t before = 0, mass = 0;
    for (int r = 0; r < n; r++) {
        int t = nb_sm_key_id(keys[r]);
        int keep = r == 0 || ((p->top_k <= 0 || p->top_k >= n || r < p->top_k) &&
                              (!(p->top_p < 1.0f) || before <= nb_sm_top_p_limit(p->top_p, total)) &&
                              e[t] >= p->min_p);
        if (!keep) break;
        kept[t] = 1;
        before += w[t];
        mass += w[t];
    }
    uint64_t target = nb_sm_target(nb_sm_uniform(p->seed, p->k), mass), c = 0;
    int tok = -1;
    for (int i = 0; i < n && tok < 0; i++)
        if (kept[i] && (c += w[i]) > target) tok = i;
    free(keys);
    free(w);
    free(e);
    free(kept);
    return tok;
}

static void test_kept_set_vs_full_sort(void)
{
    enum { N = 3000 };
    float *l = malloc(N * sizeof *l), *x = malloc(N * sizeof *x);
    uint64_t *scr = malloc(NB_CPU_SAMPLE_SCRATCH(N) * sizeof *scr);
    static const float temps[] = {0.2f, 0.7f, 1.0f, 3.0f};
    static const int topk[] = {-1, 1, 7, 300, 2999};
    static const float topp[] = {1.0f, 0.999f, 0.9f, 0.3f, 0.01f};
    static const float minp[] = {0, 1e-6f, 0.01f, 0.5f};
    uint64_t st = 5;
    int bad = 0, trials = 0;
    for (int t = 0; t < 400; t++) {
        int ties = t % 3 == 0;
        for (int i = 0; i < N; i++) {
            double u = (double)(nb_mix64(st++) >> 11) / 9007199254740992.0;
            float g = (float)((u - 0.5) * 12.0);
            l[i] = ties ? floorf(g) : g;
        }
        nb_sample_params p;
        memset(&p, 0, sizeof p);
        p.temperature = temps[nb_mix64(st++) % 4];
        p.top_k = topk[nb_mix64(st++) % 5];
        p.top_p = topp[nb_mix64(st++) % 5];
        p.min_p = minp[nb_mix64(st++) % 4];
        p.repetition_penalty = 1.0f;
        p.seed = nb_mix64(st++);
        p.k = (uint64_t)t;
        memcpy(x, l, N * sizeof *l);
        nb_sample_out o;
        nb_cpu_sample_row(x, N, &p, NULL, NULL, 0, scr, &o);
        int want = reference_draw(l, N, &p);
        trials++;
        if (o.token != want && bad++ < 5)
            fprintf(stderr, "  trial %d: op %d, full sort %d (T %g k %d p %g minp %g)\n", t, o.token, want,
                    p.temperature, p.top_k, p.top_p, p.min_p);
    }
    NB_CHECK_MSG(bad == 0, "%d of %d draws differ from the full-sort definition", bad, trials);
    free(l);
    free(x);
    free(scr);
}

/* The batched CPU op with a CSR history gives, row by row, what nb_sample_token gives. */
static void test_op_rows_match_sample_token(void)
{
    enum { R = 12, N = 500, LEN = 40 };
    nb_ops_ctx *ctx;
    NB_CHECK_OK(nb_ops_ctx_new_cpu(3, &ctx));
    nb_sampler s;
    NB_CHECK_OK(nb_sampler_init(&s, N));
    float *l = malloc((size_t)R * N * sizeof *l), *x = malloc((size_t)R * N * sizeof *x), row[N];
    int32_t seq[R][LEN], off[R + 1] = {0}, tok[R * LEN], cnt[R * LEN];
    nb_sample_params p[R];
    nb_sample_out o[R];
    nb_sampling_params sp[R];
    for (int r = 0; r < R; r++) {
        for (int i = 0; i < N; i++)
            l[r * N + i] = (float)((int)(nb_mix64((uint64_t)(r * N + i)) % 2000) - 1000) * 0.01f;
        for (int i = 0; i < LEN; i++) seq[r][i] = (int32_t)(nb_mix64((uint64_t)(r * 77 + i) + 9) % 60);
        sp[r] = nb_sampling_default_params();
        sp[r].temperature = r % 4 == 0 ? 0.0f : 0.9f;
        sp[r].top_p = r % 3 == 0 ? 0.8f : 1.0f;
        sp[r].top_k = r % 5 == 0 ? 20 : -1;
        sp[r].repetition_penalty = r % 2 ? 1.2f : 1.0f;
        sp[r].frequency_penalty = r % 3 == 1 ? 0.4f : 0.0f;
        sp[r].presence_penalty = r % 6 == 2 ? 0.7f : 0.0f;
        sp[r].logprobs = r % 2;
        sp[r].top_logprobs = r % 7;
        int plen = 10 + r;
        p[r] = nb_sample_params_for(&sp[r], 1000 + (uint64_t)r, (uint64_t)(LEN - plen));
        int n = nb_sampler_history(&s, &sp[r], seq[r], plen, LEN, tok + off[r], cnt + off[r]);
        off[r + 1] = off[r] + n;
    }
    memcpy(x, l, (size_t)R * N * sizeof *l);
    nb_tensor t = nb_tensor_2d(x, NB_DTYPE_F32, R, N);
    nb_sample_hist h = {off, tok, cnt, off[R], NULL};
    NB_CHECK_OK(nb_op_sample(ctx, &t, p, &h, o));
    for (int r = 0; r < R; r++) {
        memcpy(row, l + r * N, sizeof row);
        nb_sample one;
        nb_sample_token(&s, row, &sp[r], 1000 + (uint64_t)r, seq[r], 10 + r, LEN, &one);
        NB_CHECK_MSG(one.token == o[r].token, "row %d: op %d, nb_sample_token %d", r, o[r].token, one.token);
        NB_CHECK(!memcmp(row, x + r * N, sizeof row)); /* same penalized logits */
        NB_CHECK(one.n_top == o[r].n_top);
        if (sp[r].logprobs) NB_CHECK(one.logprob == o[r].logprob);
        for (int j = 0; j < one.n_top && j < o[r].n_top; j++)
            NB_CHECK(one.top[j].id == o[r].top_id[j] && one.top[j].logprob == o[r].top_logprob[j]);
    }
    /* a penalized row's drawn-token log-probability is that of its raw logit */
    for (int r = 0; r < R; r++)
        if (sp[r].logprobs && o[r].n_top == 0) {
            double z = 0, m = -1e30;
            for (int i = 0; i < N; i++) m = l[r * N + i] > m ? l[r * N + i] : m;
            for (int i = 0; i < N; i++) z += exp(l[r * N + i] - m);
            NB_CHECK_NEAR(o[r].logprob, l[r * N + o[r].token] - m - log(z), 1e-5);
        }
    /* skipped rows are left alone; a vocabulary too large is refused */
    p[0].skip = 1;
    o[0].token = -7;
    NB_CHECK_OK(nb_op_sample(ctx, &t, p, &h, o));
    NB_CHECK(o[0].token == -7);
    nb_tensor big = nb_tensor_2d(x, NB_DTYPE_F32, 1, NB_SAMPLE_MAX_VOCAB + 1);
    NB_CHECK_STATUS(nb_op_sample(ctx, &big, p, NULL, o), NB_ERR_INVALID_ARG);
    NB_CHECK(strstr(nb_last_error(), "sample"));
    free(l);
    free(x);
    nb_sampler_free(&s);
    nb_ops_ctx_free(ctx);
}

/* The shared exp: exact at 0, close to exp elsewhere, 0 far below. */
static void test_shared_exp(void)
{
    NB_CHECK(nb_sm_exp(0.0f) == 1.0f);
    double worst = 0;
    for (float a = -79.0f; a <= 0.0f; a += 0.001953125f) {
        double rel = fabs(nb_sm_exp(a) / exp((double)a) - 1.0);
        worst = rel > worst ? rel : worst;
    }
    NB_CHECK_MSG(worst < 4e-7, "max relative error %g", worst);
    NB_CHECK(nb_sm_exp(-81.0f) == 0.0f && nb_sm_exp(-INFINITY) == 0.0f && nb_sm_exp(NAN) == 0.0f);
}

static const nb_test tests[] = {
    {"filters_chi_square", test_filters_chi_square},
    {"penalties", test_penalties},
    {"seeds_and_greedy", test_seeds_and_greedy},
    {"logprobs", test_logprobs},
    {"validate", test_validate},
    {"kept_set_vs_full_sort", test_kept_set_vs_full_sort},
    {"op_rows_match_sample_token", test_op_rows_match_sample_token},
    {"shared_exp", test_shared_exp},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
