/* CUDA graphs for decode steps (engine/cuda_runner.c) against the eager CUDA path on
 * synthetic:glm5-tiny: two runners on the same weights, one with graphs (max batch 10: sizes
 * 1..8, 10), one with --disable-cuda-graph, fed the same steps; every step's logits must be
 * bitwise identical (each op computes a token's row from that token's inputs alone, in the
 * same order whatever the batch, so padding and replay change no bit). Covers: batch 1
 * (graph 1), batch 9 (padded to 10), batch 12 (above the max: eager fallback), batches 2 and
 * 4, a graph made stale by a prefill that grows the scratch (recaptured), logits kept on the
 * device (forward with NULL, read through nb_cuda_runner_logits on the runner's stream).
 * Sequence 0's prompt (70 tokens) is longer than glm5-tiny's index_topk (64), so the steps
 * that hold it run a live DSA selection (the split form at batch 1) inside captured graphs.
 * long_ctx_class: a dense MLA model (a small DeepSeek-V3 with its kv_lora_rank 512 and rope 64,
 * the wgmma kernel's shapes) whose steps cross the long-context threshold (forced to 24
 * positions): a size holds one graph per attention class, the MLA kernel follows the class
 * (forward.h nb_forward_long_ctx; f32 at 1-2 tokens over short contexts, wg over long ones
 * on a BF16 pool), and every step stays bitwise equal to the eager runner's.
 * Label gpu; exits 77 without a GPU.
 * Run: build-NAME/tests/test_cuda_graph */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "engine/cuda_runner.h"
#include "engine/forward.h"
#include "nbtest.h"
#include "ops/cuda/device.h"
#include "ops/cuda/mla.h"

#define CTX 128      /* slots per sequence */
#define MAX_SEQS 12
#define MAX_BS 10
#define MODEL "synthetic:glm5-tiny"
#define SEQ0_PROMPT 70 /* > glm5-tiny's index_topk of 64 */

static int prompt_len(int s) { return s ? 6 + 3 * s : SEQ0_PROMPT; }

typedef struct seq {
    int32_t tok[CTX];
    int32_t slots[CTX];
    int len;      /* tokens whose KV rows are written */
    int32_t next; /* token to feed at the next decode step */
} seq;

static seq S[MAX_SEQS];
static nb_runner *G, *E; /* graphs, eager */
static float *lg, *le;
static int V;
static int64_t steps_checked;

static uint64_t rs = 12345;
static int rnd(int n)
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((rs >> 33) % (uint64_t)n);
}

static void seq_init(int s, int prompt_len)
{
    seq *q = &S[s];
    /* a scattered slot order, as pages give */
    for (int p = 0; p < CTX; p++) q->slots[p] = s * CTX + ((p * 37 + 11) % CTX);
    for (int p = 0; p < prompt_len; p++) q->tok[p] = 1 + rnd(250);
    q->len = 0;
}

static int argmax(const float *x)
{
    int b = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Run one step on both runners and compare every logits row bit for bit. `keep`: the graph
 * runner keeps its logits on the device (forward with NULL). */
static int step(const int *ids, int n, const int *n_tok, int keep, const char *what)
{
    nb_seq_step st[MAX_SEQS];
    for (int i = 0; i < n; i++) {
        seq *q = &S[ids[i]];
        st[i] = (nb_seq_step){q->tok + q->len, n_tok[i], q->len, q->slots, 0};
    }
    nb_batch b = {n, st};
    int bad = 0;
    nb_status s1 = G->forward(G, &b, keep ? NULL : lg);
    NB_CHECK_MSG(s1 == NB_OK, "%s: graph runner: %s", what, nb_last_error());
    if (s1 == NB_OK && keep) {
        int rows = 0;
        const float *d = nb_cuda_runner_logits(G, &rows);
        NB_CHECK(d != NULL && rows == n);
        /* on the runner's stream: the step may still be running */
        if (d && rows == n) NB_CHECK_OK(nb_ops_download(nb_cuda_runner_ops(G), lg, d, (size_t)n * V * sizeof(float)));
    }
    nb_status s2 = E->forward(E, &b, le);
    NB_CHECK_MSG(s2 == NB_OK, "%s: eager runner: %s", what, nb_last_error());
    if (s1 != NB_OK || s2 != NB_OK) return 1;
    for (int i = 0; i < n; i++) {
        const float *a = lg + (size_t)i * V, *c = le + (size_t)i * V;
        if (memcmp(a, c, (size_t)V * sizeof(float))) {
            int j = 0;
            while (a[j] == c[j] || (a[j] != a[j] && c[j] != c[j])) j++;
            NB_CHECK_MSG(0, "%s: row %d (sequence %d) differs first at logit %d: %.9g vs %.9g", what, i, ids[i], j,
                         a[j], c[j]);
            bad = 1;
        }
        int f = 1;
        for (int j = 0; j < V; j++) f &= a[j] == a[j] && a[j] > -1e30f && a[j] < 1e30f;
        NB_CHECK_MSG(f, "%s: row %d has non-finite logits", what, i);
    }
    for (int i = 0; i < n; i++) {
        seq *q = &S[ids[i]];
        q->len += n_tok[i];
        q->next = argmax(lg + (size_t)i * V);
    }
    steps_checked++;
    return bad;
}

static int prefill(const int *ids, int n, const int *lens, const char *what)
{
    return step(ids, n, lens, 0, what);
}

static int decode(const int *ids, int n, int keep, const char *what)
{
    int ones[MAX_SEQS];
    for (int i = 0; i < n; i++) {
        ones[i] = 1;
        S[ids[i]].tok[S[ids[i]].len] = S[ids[i]].next;
    }
    return step(ids, n, ones, keep, what);
}

static void stats(nb_cuda_graph_stats *g) { nb_cuda_runner_graph_stats(G, g); }

static void test_graph_vs_eager(void)
{
    nb_cuda_runner_opts og = {0, MAX_BS, 0, NB_KV_CACHE_AUTO}, oe = {0, MAX_BS, 1, NB_KV_CACHE_AUTO};
    double kv;
    if (!nb_cuda_test_require_gpu()) {
        nb_test_skip("no GPU");
        return;
    }
    NB_CHECK_OK(nb_cuda_runner_create(MODEL, &og, 0.9, &G, &kv));
    NB_CHECK_OK(nb_cuda_runner_create(MODEL, &oe, 0.9, &E, &kv));
    if (!G || !E) return;
    NB_CHECK_OK(G->reserve_kv(G, MAX_SEQS * CTX));
    NB_CHECK_OK(E->reserve_kv(E, MAX_SEQS * CTX));
    V = G->vocab_size;
    lg = malloc((size_t)MAX_SEQS * CTX * V * sizeof(float));
    le = malloc((size_t)MAX_SEQS * CTX * V * sizeof(float));
    for (int s = 0; s < MAX_SEQS; s++) seq_init(s, prompt_len(s));
    nb_cuda_graph_stats g0, g1;
    stats(&g0);
    NB_CHECK(g0.enabled && g0.max_bs == MAX_BS && g0.n_sizes == 9 && g0.captured == 0);

    /* batch 1: first decode step runs eagerly and captures, the rest replay */
    int a[MAX_SEQS], l[MAX_SEQS];
    for (int s = 0; s < MAX_SEQS; s++) a[s] = s, l[s] = prompt_len(s);
    int bad = prefill(a, 1, l, "prefill seq 0");
    for (int k = 0; k < 5 && !bad; k++) bad |= decode(a, 1, k & 1, "decode batch 1");
    stats(&g1);
    NB_CHECK_MSG(g1.captures == 1 && g1.replays == 4 && g1.capture_failures == 0,
                 "batch 1: %lld captures, %lld replays, %lld failures", (long long)g1.captures, (long long)g1.replays,
                 (long long)g1.capture_failures);

    /* a prefill of 156 tokens grows the scratch: the batch-1 graph is stale, recaptured */
    bad |= prefill(a + 1, 8, l + 1, "prefill seqs 1..8");
    for (int k = 0; k < 3 && !bad; k++) bad |= decode(a, 1, 0, "decode batch 1 after growth");
    stats(&g1);
    NB_CHECK_MSG(g1.captures == 2 && g1.replays == 6, "after growth: %lld captures, %lld replays",
                 (long long)g1.captures, (long long)g1.replays);

    /* batch 9, padded to 10 */
    for (int k = 0; k < 6 && !bad; k++) bad |= decode(a, 9, k & 1, "decode batch 9 (graph 10)");
    stats(&g1);
    NB_CHECK_MSG(g1.captures == 3 && g1.replays == 11 && g1.padded_rows == 5,
                 "batch 9: %lld captures, %lld replays, %lld padding rows", (long long)g1.captures,
                 (long long)g1.replays, (long long)g1.padded_rows);

    /* batch 12 > max 10: eager, no graph work */
    bad |= prefill(a + 9, 3, l + 9, "prefill seqs 9, 10, 11");
    nb_cuda_graph_stats g2;
    stats(&g2);
    for (int k = 0; k < 3 && !bad; k++) bad |= decode(a, 12, k & 1, "decode batch 12 (eager)");
    stats(&g1);
    NB_CHECK(g1.replays == g2.replays && g1.captures == g2.captures && g1.eager_steps == g2.eager_steps + 3);

    /* batches 2 and 4 (new graphs), then batch 9 again without sequence 0: no live DSA
     * selection there, so a graph of its own (a size holds one graph with the selection live
     * and one without: cuda_runner.c), captured, then replayed */
    stats(&g2);
    for (int k = 0; k < 2 && !bad; k++) bad |= decode(a + 10, 2, 0, "decode batch 2");
    for (int k = 0; k < 2 && !bad; k++) bad |= decode(a + 1, 4, 0, "decode batch 4");
    for (int k = 0; k < 2 && !bad; k++) bad |= decode(a + 2, 9, 1, "decode batch 9 again");
    stats(&g1);
    const int64_t rep = g1.replays - g2.replays, cap = g1.captures - g2.captures;
    NB_CHECK_MSG(g1.capture_failures == 0 && g1.captured == 5 && rep == 3 && cap == 3,
                 "end: %d graphs held, %lld captures and %lld replays in the last 6 steps, %lld failures", g1.captured,
                 (long long)cap, (long long)rep, (long long)g1.capture_failures);
    g2 = g1;
    fprintf(stderr, "  %lld steps bitwise equal; graphs: %lld replays, %lld captures (%.1f ms), %lld eager steps, "
                    "%lld padding rows\n",
            (long long)steps_checked, (long long)g2.replays, (long long)g2.captures, g2.capture_ms,
            (long long)g2.eager_steps, (long long)g2.padded_rows);
    G->destroy(G);
    E->destroy(E);
    free(lg);
    free(le);
}

/* A dense MLA model with the wgmma kernel's latent shapes, small enough to build in seconds. */
#define DENSE_MLA                                                                                                   \
    "synthetic:deepseek-v3:num_hidden_layers=2,first_k_dense_replace=1,hidden_size=512,intermediate_size=1024,"   \
    "moe_intermediate_size=256,n_routed_experts=8,num_experts_per_tok=2,n_group=1,topk_group=1,"                  \
    "num_attention_heads=16,num_key_value_heads=16,q_lora_rank=256,vocab_size=512"
#define LONG_AT 24 /* the forced threshold: a step is long once a token attends to 24 positions */

/* The kernel the eager runner's last MLA call ran against what the class asks for. */
static void check_kernel(int want, const char *what)
{
    const int got = nb_cuda_mla_last_kernel();
    NB_CHECK_MSG(got == want, "%s: MLA kernel %d, want %d", what, got, want);
}

static void test_long_ctx_class(void)
{
    nb_cuda_runner_opts og = {0, 4, 0, NB_KV_CACHE_BF16}, oe = {0, 4, 1, NB_KV_CACHE_BF16};
    double kv;
    if (!nb_cuda_test_require_gpu()) {
        nb_test_skip("no GPU");
        return;
    }
    nb_forward_force_long_ctx(LONG_AT);
    NB_CHECK_OK(nb_cuda_runner_create(DENSE_MLA, &og, 0.9, &G, &kv));
    NB_CHECK_OK(nb_cuda_runner_create(DENSE_MLA, &oe, 0.9, &E, &kv));
    if (!G || !E) {
        nb_forward_force_long_ctx(0);
        return;
    }
    NB_CHECK_OK(G->reserve_kv(G, 2 * CTX));
    NB_CHECK_OK(E->reserve_kv(E, 2 * CTX));
    V = G->vocab_size;
    lg = malloc((size_t)2 * CTX * V * sizeof(float));
    le = malloc((size_t)2 * CTX * V * sizeof(float));
    /* what the automatic choice gives this shape at 1-2 tokens on this device and a BF16 pool
     * (the CUDA default for MLA): f32 short, wg long on an sm_90 GPU */
    const nb_mla_dims d = {16, 128, 64, 128, 512};
    nb_ops_ctx *ops = nb_cuda_runner_ops(E);
    const int k_short = nb_cuda_mla_kernel_for(ops, &d, 1, 1, 0), k_long = nb_cuda_mla_kernel_for(ops, &d, 1, 1, 1);
    fprintf(stderr, "  MLA kernel %d over short contexts, %d over long ones at 1 token (0 f32, 3 wg)\n", k_short,
            k_long);
    int dev = 0, cc = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev);
    NB_CHECK_MSG(cc != 9 || (k_short == NB_CUDA_MLA_F32 && k_long == NB_CUDA_MLA_WG),
                 "an sm_90 GPU: the automatic choice is f32 short and wg long at 1 token, not %d and %d", k_short,
                 k_long);
    int a[2] = {0, 1}, l[2] = {LONG_AT - 4, 6};
    seq_init(0, l[0]);
    seq_init(1, l[1]);
    nb_cuda_graph_stats g0, g1;
    stats(&g0);
    int bad = prefill(a, 2, l, "prefill two sequences");
    /* sequence 0 alone: positions 20..27, long from the step where it attends to 24 */
    for (int k = 0; k < 8 && !bad; k++) {
        bad |= decode(a, 1, 0, "decode batch 1 across the threshold");
        check_kernel(S[0].len >= LONG_AT ? k_long : k_short, "batch 1");
    }
    stats(&g1);
    NB_CHECK_MSG(g1.captures - g0.captures == 2 && g1.replays - g0.replays == 6 && g1.captured == 2,
                 "batch 1: %lld captures, %lld replays, %d graphs held (want 2, 6, 2: one per class)",
                 (long long)(g1.captures - g0.captures), (long long)(g1.replays - g0.replays), g1.captured);
    /* sequence 1 alone (short), then both (one long: the batch is long) */
    for (int k = 0; k < 2 && !bad; k++) {
        bad |= decode(a + 1, 1, 0, "decode batch 1, short again");
        check_kernel(k_short, "batch 1, short");
    }
    for (int k = 0; k < 3 && !bad; k++) {
        bad |= decode(a, 2, k & 1, "decode batch 2, one long");
        check_kernel(nb_cuda_mla_kernel_for(ops, &d, 2, 1, 1), "batch 2");
    }
    stats(&g0);
    NB_CHECK_MSG(g0.captures - g1.captures == 1 && g0.replays - g1.replays == 4 && g0.captured == 3,
                 "then: %lld captures, %lld replays, %d graphs held (want 1, 4, 3)",
                 (long long)(g0.captures - g1.captures), (long long)(g0.replays - g1.replays), g0.captured);
    NB_CHECK(g0.capture_failures == 0);
    nb_forward_force_long_ctx(0);
    G->destroy(G);
    E->destroy(E);
    free(lg);
    free(le);
}

static void test_bad_max_bs(void)
{
    nb_cuda_runner_opts o = {0, 5000, 0, NB_KV_CACHE_AUTO};
    nb_runner *r = NULL;
    double kv;
    /* checked before anything loads, GPU or not */
    NB_CHECK_STATUS(nb_cuda_runner_create(MODEL, &o, 0.9, &r, &kv), NB_ERR_INVALID_ARG);
    NB_CHECK(r == NULL);
}

static const nb_test tests[] = {
    {"graph_vs_eager", test_graph_vs_eager},
    {"long_ctx_class", test_long_ctx_class},
    {"bad_max_bs", test_bad_max_bs},
};

int main(int argc, char **argv)
{
    if (!nb_cuda_test_require_gpu()) return 77;
    return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
}
