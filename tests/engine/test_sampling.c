/* Sampling (src/engine/sampling.c): chi-square of many seeded draws against the filtered
 * distribution computed here independently from the documented definition; seeds
 * reproduce; greedy ties; penalties; log-probabilities.
 * Run: build-eng/tests/test_sampling [name-substring] */
#include "engine/sampling.h"
#include "nbtest.h"

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

static const nb_test tests[] = {
    {"filters_chi_square", test_filters_chi_square},
    {"penalties", test_penalties},
    {"seeds_and_greedy", test_seeds_and_greedy},
    {"logprobs", test_logprobs},
    {"validate", test_validate},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
