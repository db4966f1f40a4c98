/* MLA's small path (src/ops/cuda/mla_small.cu; modes in mla.h) at 1-16 decode tokens on
 * GLM-5's attention shapes (64 heads, nope 192, rope 64, v 256, rank 512, BF16 kv_b
 * registered as the model does): every launch mode (plain, NB_CUDA_MLA_PDL_START, _CHAIN,
 * _EARLY) and the batched-GEMM path against the CPU op, inside a CUDA graph whose steps are
 * those of a decode layer: a kernel writes q (get_rows from a pristine copy) and another the
 * tokens' own pool rows (set_rows, as the forward pass does) right before the op, and both are
 * NaN-poisoned before every replay, so an early-launched step that read either before its wait
 * would show NaNs. With --bench it then times, per call replayed from a graph: the op alone,
 * the op after those two writes (minus the writes alone), and the small path's steps one by
 * one (nb_cuda_mla_force_stages: input, attention, output with the folded merge), and the
 * float32 attention kernel at 4, 8 and 16 heads per block on both paths
 * (nb_cuda_mla_force_f32_group). NB_MLA_PDL_MODES=0 leaves out the PDL modes.
 * Run on the GPU machine: test_cuda_mla_small [--bench] [ctx [batches]] (default 192
 * "1,2,4,10,16"); exits 77 without a GPU. */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "cuda_test_util.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/device.h"
#include "ops/cuda/graph.h"
#include "ops/cuda/mla.h"

#define F32 NB_DTYPE_F32
#define REPS 20

static int bench;
static int pdl_modes = 1; /* NB_MLA_PDL_MODES=0: the small path's plain launches only */

typedef struct mcase {
    int B, ctx;
    nb_mla_dims d;
    tu_weight kvb;
    nb_tensor dq, dq2, dq0, dl, dp, dout, fresh, pool_rows, nan_rows; /* dq2: dq as [B, H * qk] */
    nb_attn_index di;
    int32_t *d_rows, *d_iota;
    float *o_cpu, *o_gpu;
    size_t on;
    int prelude; /* enqueue the q and pool-row writes before the op */
} mcase;

static void enqueue(mcase *c)
{
    if (c->prelude) {
        NB_CHECK_OK(nb_op_get_rows(tu_gpu, &c->dq0, c->d_iota, &c->dq2));
        NB_CHECK_OK(nb_op_set_rows(tu_gpu, &c->fresh, c->d_rows, &c->pool_rows));
    }
    if (c->prelude != 2)
        NB_CHECK_OK(nb_op_mla_attention(tu_gpu, NB_MLA_ABSORBED, &c->d, &c->dq, &c->dl, &c->dp, &c->kvb.d, &c->di,
                                        NULL, 0.0625f, &c->dout));
}

/* q and the tokens' pool rows NaN before a replay (stream order) */
static void poison(mcase *c)
{
    NB_CHECK_OK(nb_ops_memset(tu_gpu, c->dq.data, 0xff, (size_t)c->B * c->dq.stride[0] * 4));
    NB_CHECK_OK(nb_op_set_rows(tu_gpu, &c->nan_rows, c->d_rows, &c->pool_rows));
}

/* us per REPS-th of a replay of a graph of REPS enqueues; check: poison before each replay */
static double graph_us(mcase *c, int check)
{
    enqueue(c); /* eager once: scratch, attributes */
    NB_CHECK_OK(nb_ops_sync(tu_gpu));
    nb_cuda_graph *g = NULL;
    NB_CHECK_OK(nb_cuda_graph_begin(tu_gpu));
    for (int i = 0; i < (check ? 1 : REPS); i++) enqueue(c);
    NB_CHECK_OK(nb_cuda_graph_end(tu_gpu, 1, &g));
    if (!g) return -1;
    double best = 1e30;
    for (int rep = 0; rep < (check ? 3 : 5); rep++) {
        if (check) poison(c);
        NB_CHECK_OK(nb_cuda_graph_launch(tu_gpu, g));
        NB_CHECK_OK(nb_ops_sync(tu_gpu));
        if (check) continue;
        int64_t t0 = nb_now_ns();
        for (int r = 0; r < 10; r++) NB_CHECK_OK(nb_cuda_graph_launch(tu_gpu, g));
        NB_CHECK_OK(nb_ops_sync(tu_gpu));
        double us = (double)(nb_now_ns() - t0) / 1e3 / (10.0 * REPS);
        if (us < best) best = us;
    }
    nb_cuda_graph_free(g);
    return best;
}

static void make_case(mcase *c, int B, int ctx)
{
    memset(c, 0, sizeof *c);
    c->B = B, c->ctx = ctx;
    c->d = (nb_mla_dims){64, 192, 64, 256, 512};
    const nb_mla_dims *d = &c->d;
    const int qk = d->qk_nope + d->qk_rope, rw = d->kv_lora_rank + d->qk_rope;
    const int64_t rows = (int64_t)B * ctx + 1;
    tu_seed(7000 + B);
    tu_weight_make(&c->kvb, NB_WFMT_BF16, (int64_t)d->n_heads * (d->qk_nope + d->v_dim), d->kv_lora_rank, 0.05f, 0);
    float *pool = malloc((size_t)rows * rw * 4), *q = malloc((size_t)B * d->n_heads * qk * 4);
    tu_fill(pool, (size_t)rows * rw, 1.0f);
    tu_fill(q, (size_t)B * d->n_heads * qk, 1.0f);
    int32_t *pos = malloc((size_t)B * 4), *base = malloc((size_t)B * 4), *table = malloc((size_t)rows * 4);
    int32_t *fr = malloc((size_t)B * 4), *iota = malloc((size_t)B * 4);
    /* rows in pages of 64 scattered over the pool, as the paged KV pool places them */
    const int64_t pages = (rows - 1) / 64;
    for (int64_t r = 0; r < rows - 1; r++) table[r] = (int32_t)r;
    for (int64_t i = pages - 1; i > 0; i--) {
        int64_t j = (int64_t)(tu_u32() % (uint32_t)(i + 1));
        for (int k = 0; k < 64; k++) {
            int32_t t = table[i * 64 + k];
            table[i * 64 + k] = table[j * 64 + k];
            table[j * 64 + k] = t;
        }
    }
    for (int i = 0; i < B; i++) {
        pos[i] = ctx - 1;
        base[i] = i * ctx;
        fr[i] = table[base[i] + pos[i]]; /* the token's own row: written by the step */
        iota[i] = i;
    }
    nb_attn_index hi = {B, pos, base, table, 0, 0};
    c->di = (nb_attn_index){B, tu_up(pos, (size_t)B * 4), tu_up(base, (size_t)B * 4), tu_up(table, (size_t)rows * 4), 0, 0};
    c->d_rows = tu_up(fr, (size_t)B * 4);
    c->d_iota = tu_up(iota, (size_t)B * 4);
    /* the step's own rows, as set_rows will write them */
    float *fresh = malloc((size_t)B * rw * 4);
    for (int i = 0; i < B; i++) memcpy(fresh + (size_t)i * rw, pool + (size_t)fr[i] * rw, (size_t)rw * 4);
    nb_tensor hf = nb_tensor_2d(fresh, F32, B, rw);
    c->fresh = tu_twin(&hf);
    float *nan = malloc((size_t)B * rw * 4);
    memset(nan, 0xff, (size_t)B * rw * 4);
    nb_tensor hn = nb_tensor_2d(nan, F32, B, rw);
    c->nan_rows = tu_twin(&hn);
    float *dpool = tu_up(pool, (size_t)rows * rw * 4);
    c->pool_rows = nb_tensor_2d(dpool, F32, rows, rw);
    c->pool_rows.device = NB_DEVICE_CUDA;
    nb_tensor hq = nb_tensor_3d(q, F32, B, d->n_heads, qk);
    c->dq = tu_twin(&hq);
    nb_tensor hq2 = nb_tensor_2d(q, F32, B, (int64_t)d->n_heads * qk);
    c->dq0 = tu_twin(&hq2);
    c->dq2 = hq2;
    c->dq2.data = c->dq.data;
    c->dq2.device = NB_DEVICE_CUDA;
    nb_tensor hl = nb_tensor_2d(pool, F32, rows, d->kv_lora_rank);
    nb_tensor hp = nb_tensor_2d(pool + d->kv_lora_rank, F32, rows, d->qk_rope);
    hl.stride[0] = hp.stride[0] = rw;
    c->dl = hl, c->dp = hp;
    c->dl.data = dpool;
    c->dp.data = dpool + d->kv_lora_rank;
    c->dl.device = c->dp.device = NB_DEVICE_CUDA;
    c->on = (size_t)B * d->n_heads * d->v_dim;
    c->o_cpu = malloc(c->on * 4);
    c->o_gpu = malloc(c->on * 4);
    nb_tensor ho = nb_tensor_3d(c->o_cpu, F32, B, d->n_heads, d->v_dim);
    c->dout = ho;
    c->dout.data = tu_poisoned(c->on * 4);
    c->dout.device = NB_DEVICE_CUDA;
    NB_CHECK_OK(nb_op_mla_attention(tu_cpu, NB_MLA_ABSORBED, d, &hq, &hl, &hp, &c->kvb.h, &hi, NULL, 0.0625f, &ho));
    NB_CHECK_OK(nb_cuda_mla_register(tu_gpu, &c->kvb.d, d));
    free(pool), free(q), free(pos), free(base), free(table), free(fr), free(iota), free(fresh), free(nan);
}

static void free_case(mcase *c)
{
    nb_cuda_mla_release(tu_gpu);
    tu_weight_free(&c->kvb);
    free(c->o_cpu), free(c->o_gpu);
    tu_free_all();
}

static const char *mode_name(int small, int pdl)
{
    if (!small) return "gemm path";
    static const char *n[] = {"small plain", "small pdl-start", "small chain", "small early"};
    return n[pdl];
}

/* small 0: the GEMM path; else the small path in launch mode pdl; group: the float32
 * attention kernel's heads per block (0: automatic) */
static void run_mode(mcase *c, int small, int pdl, int group)
{
    nb_cuda_mla_force_small(small ? NB_CUDA_MLA_SMALL_MAX : 0, -1, pdl);
    nb_cuda_mla_force_f32_group(group);
    char name[96];
    snprintf(name, sizeof name, "mla %s%s B=%d ctx %d", mode_name(small, pdl),
             group == 4 ? " g4" : group == 8 ? " g8" : group == 16 ? " g16" : "", c->B, c->ctx);
    c->prelude = 1;
    NB_CHECK_OK(nb_ops_memset(tu_gpu, c->dout.data, 0xff, c->on * 4));
    graph_us(c, 1);
    tu_down(&c->dout, c->o_gpu);
    tu_compare(name, c->o_cpu, c->o_gpu, c->on, small ? NB_TOL_F32 : NB_TOL_LT_BF16W);
    if (bench) {
        c->prelude = 0;
        const double alone = graph_us(c, 0);
        c->prelude = 1;
        const double with = graph_us(c, 0);
        c->prelude = 2;
        const double pre = graph_us(c, 0);
        printf("BENCH %-34s op alone %6.2f us, after q/row writes %6.2f - %5.2f = %6.2f us\n", name, alone, with, pre,
               with - pre);
        if (small && pdl == NB_CUDA_MLA_PDL_OFF) {
            static const int masks[] = {1, 2, 8, 3, 10};
            static const char *what[] = {"input", "attention", "output(+merge)", "input+attention", "attention+output"};
            c->prelude = 0;
            for (int i = group ? 1 : 0; i < (group ? 2 : 5); i++) {
                nb_cuda_mla_force_stages(masks[i]);
                printf("BENCH %-34s   step %-18s %6.2f us\n", name, what[i], graph_us(c, 0));
            }
            nb_cuda_mla_force_stages(0);
        }
        fflush(stdout);
    }
    nb_cuda_mla_force_small(-1, -1, -1);
    nb_cuda_mla_force_f32_group(0);
}

int main(int argc, char **argv)
{
    if (!nb_cuda_test_require_gpu()) return 77;
    const char *pm = getenv("NB_MLA_PDL_MODES");
    if (pm && !strcmp(pm, "0")) pdl_modes = 0;
    int ai = 1;
    if (ai < argc && !strcmp(argv[ai], "--bench")) bench = 1, ai++;
    const int ctx = ai < argc ? atoi(argv[ai]) : 192;
    const char *bl = ai + 1 < argc ? argv[ai + 1] : "1,2,4,10,16";
    if (ctx < 64 || ctx % 64) {
        fprintf(stderr, "context must be a multiple of 64\n");
        return 2;
    }
    if (!tu_open()) return 1;
    for (const char *p = bl; *p;) {
        const int B = atoi(p);
        if (B < 1 || B > NB_CUDA_MLA_SMALL_MAX) {
            fprintf(stderr, "batches: 1..%d\n", NB_CUDA_MLA_SMALL_MAX);
            return 2;
        }
        mcase c;
        make_case(&c, B, ctx);
        run_mode(&c, 0, 0, 0);
        for (int g = 4; g <= 16; g *= 2) run_mode(&c, 0, 0, g); /* the GEMM path, heads per block */
        for (int g = 4; g <= 16; g *= 2) run_mode(&c, 1, NB_CUDA_MLA_PDL_OFF, g);
        if (pdl_modes)
            for (int pdl = NB_CUDA_MLA_PDL_OFF; pdl <= NB_CUDA_MLA_PDL_EARLY; pdl++) run_mode(&c, 1, pdl, 0);
        else
            run_mode(&c, 1, NB_CUDA_MLA_PDL_OFF, 0);
        free_case(&c);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    (void)tu_index_make, (void)tu_fmt_name;
    tu_close();
    fprintf(stderr, "%s\n", nb_test_failures_ ? "FAILED" : "ok");
    return nb_test_failures_ ? 1 : 0;
}
