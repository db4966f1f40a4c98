/* The MLA decode kernels (mla.h NB_CUDA_MLA_DEC, src/ops/cuda/mla_decode.cu; NB_CUDA_MLA_WG,
 * mla_wg.cu) against the CPU op, and their timing against the 32-head tensor-core kernel
 * (NB_CUDA_MLA_MMA) on the same inputs. `test_cuda_mla_decode wg`: the wg kernel's cases only
 * (its 4-byte-row cases run dec inside the op); every run also checks the one-BF16-term path
 * (mla.h NIBBLE_CUDA_MLA_TERMS=1) on GLM-5's shapes.
 *   test_cuda_mla_decode                  correctness: 64, 80, 16 and 4 heads (the fixtures'
 *       tiny shapes), causal and sparse (with an empty selection), decode batches
 *       (KV splits merged) and 141-token batches (no splits), F32 and BF16 hi/lo outputs,
 *       16-byte and 4-byte pool rows; then GLM-5's shapes at 300 tokens against the float32
 *       kernel on the GPU (a batch too large for the CPU op to be quick).
 *   test_cuda_mla_decode time CTX B1,B2,..  GLM-5's attention shapes, BF16 kv_b registered, one
 *       decode token per sequence at context CTX: the op captured once as a CUDA graph and
 *       replayed (device time of a decode step's MLA op), for the mma, dec (bulk copies) and
 *       wg kernels, with two and one BF16 activation terms, and the two absorption GEMMs
 *       alone; then each step of the op alone (nb_cuda_mla_force_gemm_steps) for dec and wg;
 *       wg's outputs checked against mma's first. NB_TEST_MLA_ROWS16=1 also times the wg op on
 *       a BF16 pool of the same values (--kv-cache-dtype bf16) beside the F32 pool, A B A B
 *       (its outputs checked against mma on the F32 pool first); NB_TEST_MLA_ROWS16=only: that
 *       line alone, none of the other timings.
 *   test_cuda_mla_decode pick CTX B1,B2,..  the op on a BF16 pool (made whatever
 *       NB_TEST_MLA_ROWS16 says) with the f32, mma and wg kernels forced, A B C A B C, beside the
 *       automatic choice (with the engine's long-context hint for CTX, forward.h).
 *       NB_TEST_MLA_HEADS=128: `time` and `pick` on DeepSeek-V3's attention shapes (128 heads,
 *       nope 128, v 128) instead of GLM-5's.
 *   The correctness run also repeats the kernels' cases on BF16 pools (dec forced falls back
 *   to mma there, wg on unaligned rows too), against the CPU op on the same values in F32.
 * GPU only (exit 77 without one). */
#include <cuda_runtime.h>
#include <string.h>

#include "base/clock.h"
#include "cuda_test_util.h"
#include "engine/forward.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/device.h"
#include "ops/cuda/mla.h"

#define F32 NB_DTYPE_F32

/* A random selection of up to stride positions <= pos per token (the CPU op's contract);
 * token 0 selects nothing (an empty context) when there are more than 2 tokens. */
static void dec_sel(const tu_index *ix, int stride, int32_t *sp, int32_t *sc)
{
    for (int i = 0; i < ix->T; i++) {
        int n = ix->pos[i] + 1, m = n < stride ? n : stride, c = 0;
        for (int p = 0; p < n && c < m; p++)
            if ((int)(tu_u32() % (uint32_t)(n - p)) < m - c) sp[i * stride + c++] = p;
        for (int k = c; k < stride; k++) sp[i * stride + k] = -1; /* never read */
        sc[i] = c;
    }
    if (ix->T > 2) sc[0] = 0;
}

static const char *kname(int k)
{
    return k == NB_CUDA_MLA_WG ? "wg" : k == NB_CUDA_MLA_DEC ? "dec" : k == NB_CUDA_MLA_MMA ? "mma" : "f32";
}

static int g_pool16; /* dec_case: the GPU reads a BF16 pool (the CPU the same values in F32) */

/* One op call on both backends with kernel kern (dec or wg) forced. batch 0: three single-token
 * sequences at positions 0, 37, 300 (splits); 1: 141 tokens of three sequences (no splits on
 * 132 SMs for 64 heads); 2: two single-token sequences at 37 and 300 (the small path's
 * absorption kernels, mla.h: F32 q_lat and outputs). fmt: BF16 (hi/lo output) or F32 (F32
 * output) kv_b. */
static void dec_case(nb_mla_dims d, int batch, int sparse, nb_wfmt fmt, int aligned, int kern)
{
    const int rows = 1000, rw = d.kv_lora_rank + d.qk_rope + (aligned ? 8 : 7), qk = d.qk_nope + d.qk_rope;
    int n_new[3][3] = {{1, 1, 1}, {100, 40, 1}, {1, 1}}, n_past[3][3] = {{0, 37, 300}, {0, 60, 700}, {37, 300}};
    tu_index ix;
    tu_index_make(&ix, batch == 2 ? 2 : 3, n_new[batch], n_past[batch], rows);
    const int T = ix.T;
    tu_weight kvb;
    tu_weight_make(&kvb, fmt, (int64_t)d.n_heads * (d.qk_nope + d.v_dim), d.kv_lora_rank, 0.05f, 0);
    const size_t qn = (size_t)T * d.n_heads * qk, on = (size_t)T * d.n_heads * d.v_dim;
    float *pool = malloc((size_t)rows * rw * 4), *q = malloc(qn * 4), *o = malloc(on * 4), *ob = malloc(on * 4);
    tu_fill(pool, (size_t)rows * rw, 1.0f);
    tu_fill(q, qn, 1.0f);
    /* g_pool16: BF16 rows on the GPU (aligned: 16-byte rows; else an odd BF16 row width), the
     * CPU op on the same values in F32: the kernels' arithmetic is the only difference */
    uint16_t *pool16 = g_pool16 ? malloc((size_t)rows * rw * 2) : NULL;
    for (size_t i = 0; pool16 && i < (size_t)rows * rw; i++)
        pool16[i] = nb_f32_to_bf16(pool[i]), pool[i] = nb_bf16_to_f32(pool16[i]);
    void *dpool = pool16 ? tu_up(pool16, (size_t)rows * rw * 2) : tu_up(pool, (size_t)rows * rw * 4);
    nb_tensor hq = nb_tensor_3d(q, F32, T, d.n_heads, qk), ho = nb_tensor_3d(o, F32, T, d.n_heads, d.v_dim);
    nb_tensor hl = nb_tensor_2d(pool, F32, rows, d.kv_lora_rank);
    nb_tensor hp = nb_tensor_2d(pool + d.kv_lora_rank, F32, rows, d.qk_rope);
    hl.stride[0] = hp.stride[0] = rw;
    nb_tensor dq = tu_twin(&hq), dl = hl, dp = hp, dout = ho;
    dl.data = dpool;
    dp.data = (char *)dpool + (size_t)d.kv_lora_rank * (pool16 ? 2 : 4);
    if (pool16) dl.dtype = dp.dtype = NB_DTYPE_BF16;
    dl.device = dp.device = NB_DEVICE_CUDA;
    dout.data = tu_poisoned(on * 4);
    dout.device = NB_DEVICE_CUDA;
    const int stride = 48;
    int32_t *sp = malloc((size_t)T * stride * 4), *sc = malloc((size_t)T * 4);
    nb_attn_select hs = {sp, sc, stride}, ds = {0};
    if (sparse) {
        dec_sel(&ix, stride, sp, sc);
        ds = (nb_attn_select){tu_up(sp, (size_t)T * stride * 4), tu_up(sc, (size_t)T * 4), stride};
    }
    NB_CHECK_OK(nb_cuda_mla_register(tu_gpu, &kvb.d, &d));
    nb_cuda_mla_force_kernel(kern);
    const int k = nb_cuda_mla_kernel_pool(tu_gpu, &d, T, pool16 != NULL);
    /* wg takes rank 512 / rope 64 only (else dec); 4-byte rows then run dec inside the op; a
     * BF16 pool runs mma where dec would run, and on unaligned rows where wg would */
    const int wg_shape = d.kv_lora_rank == 512 && d.qk_rope == 64;
    const int kf = kern == NB_CUDA_MLA_WG && !wg_shape ? NB_CUDA_MLA_DEC : kern;
    NB_CHECK(k == (pool16 && kf == NB_CUDA_MLA_DEC ? NB_CUDA_MLA_MMA : kf));
    NB_CHECK_OK(nb_op_mla_attention(tu_cpu, NB_MLA_ABSORBED, &d, &hq, &hl, &hp, &kvb.h, &ix.h, sparse ? &hs : NULL,
                                    0.07f, &ho));
    /* both ways of copying the rows (4-byte rows always take cp.async) */
    for (int bulk = 1; bulk >= (kern == NB_CUDA_MLA_WG || pool16 ? 1 : 0); bulk--) {
        nb_cuda_mla_dec_force_copy(bulk);
        NB_CHECK_OK(nb_ops_memset(tu_gpu, dout.data, 0xff, on * 4));
        NB_CHECK_OK(nb_op_mla_attention(tu_gpu, NB_MLA_ABSORBED, &d, &dq, &dl, &dp, &kvb.d, &ix.d, sparse ? &ds : NULL,
                                        0.07f, &dout));
        tu_down(&dout, ob);
        char name[160];
        snprintf(name, sizeof name, "mla %s%s %s kv_b %s, %d heads, rank %d, rope %d, T=%d, %s%s rows", kname(k),
                 k == NB_CUDA_MLA_WG   ? (aligned ? "" : pool16 ? " (mma: unaligned)" : " (dec: unaligned)")
                 : pool16              ? (kern == NB_CUDA_MLA_DEC ? " (dec forced)" : "")
                 : bulk                ? " bulk"
                                       : " cp.async",
                 sparse ? "sparse" : "causal", tu_fmt_name(fmt), d.n_heads, d.kv_lora_rank, d.qk_rope, T,
                 aligned ? "16-byte" : pool16 ? "odd-width" : "4-byte", pool16 ? " BF16" : "");
        tu_compare(name, o, ob, on, NB_TOL_BF16);
        if (sparse && T > 2) { /* token 0 attends nothing: its output rows are exactly zero */
            int nz = 0;
            for (size_t i = 0; i < (size_t)d.n_heads * d.v_dim; i++) nz += ob[i] != 0.0f;
            NB_CHECK(nz == 0);
        }
    }
    nb_cuda_mla_dec_force_copy(-1);
    nb_cuda_mla_force_kernel(-1);
    nb_cuda_mla_release(tu_gpu);
    free(pool16);
    free(pool), free(q), free(o), free(ob), free(sp), free(sc);
    tu_weight_free(&kvb);
    tu_free_all();
}

/* The kernels on BF16 pools (g_pool16): dec_case's shapes for f32, mma, dec (runs mma) and wg
 * forced, aligned and odd rows; wg also with one BF16 term, its BF16 q (outputs direct and
 * staged), the F32 q_lat, a block per item and the L2 prefetch (its BF16 instances). */
static void dec_cases16(int only_wg)
{
    const nb_mla_dims glm5 = {64, 192, 64, 256, 512}, h16 = {16, 64, 64, 128, 512}, tiny = {4, 32, 16, 24, 32},
                      h80w = {80, 32, 64, 64, 512};
    g_pool16 = 1;
    fprintf(stderr, "  BF16 pools:\n");
    const int kerns[4] = {NB_CUDA_MLA_WG, NB_CUDA_MLA_F32, NB_CUDA_MLA_MMA, NB_CUDA_MLA_DEC};
    for (int ki = 0; ki < (only_wg ? 1 : 4); ki++) {
        const int kk = kerns[ki];
        nb_cuda_mla_force_terms(2);
        for (int sparse = 0; sparse < 2; sparse++) {
            dec_case(glm5, 0, sparse, NB_WFMT_BF16, 1, kk);
            dec_case(glm5, 1, sparse, NB_WFMT_BF16, 1, kk);
            dec_case(h80w, 0, sparse, NB_WFMT_BF16, 1, kk);
            dec_case(h16, 1, sparse, NB_WFMT_F32, 1, kk);
            dec_case(tiny, 0, sparse, NB_WFMT_BF16, 0, kk);
            dec_case(glm5, 2, sparse, NB_WFMT_BF16, 1, kk); /* 2 tokens: the small path */
        }
        dec_case(glm5, 1, 0, NB_WFMT_F32, 0, kk); /* odd rows: wg runs mma */
        dec_case(glm5, 0, 1, NB_WFMT_BF16, 0, kk);
        nb_cuda_mla_force_terms(0);
    }
    /* the wg kernel's BF16-row instances (mla_wg.cu RB 0): q F32 / BF16, outputs staged */
    nb_cuda_mla_force_terms(1);
    dec_case(glm5, 0, 1, NB_WFMT_BF16, 1, NB_CUDA_MLA_WG);
    dec_case(glm5, 1, 0, NB_WFMT_BF16, 1, NB_CUDA_MLA_WG);
    for (int st = 0; st < 2; st++) {
        nb_cuda_mla_wg_force_stage(st);
        dec_case(glm5, 0, 1, NB_WFMT_BF16, 1, NB_CUDA_MLA_WG);
        dec_case(glm5, 1, 0, NB_WFMT_BF16, 1, NB_CUDA_MLA_WG);
        dec_case(h80w, 1, 1, NB_WFMT_BF16, 1, NB_CUDA_MLA_WG);
    }
    nb_cuda_mla_wg_force_stage(-1);
    nb_cuda_mla_force_qlat16(0);
    dec_case(glm5, 0, 1, NB_WFMT_BF16, 1, NB_CUDA_MLA_WG);
    dec_case(glm5, 1, 0, NB_WFMT_BF16, 1, NB_CUDA_MLA_WG);
    nb_cuda_mla_force_qlat16(-1);
    nb_cuda_mla_force_terms(0);
    nb_cuda_mla_wg_force_persist(0);
    dec_case(glm5, 0, 1, NB_WFMT_BF16, 1, NB_CUDA_MLA_WG);
    dec_case(glm5, 1, 0, NB_WFMT_BF16, 1, NB_CUDA_MLA_WG);
    nb_cuda_mla_wg_force_persist(-1);
    nb_cuda_mla_wg_force_prefetch(!NB_CUDA_MLA_WG_PF_DEFAULT);
    dec_case(glm5, 0, 1, NB_WFMT_BF16, 1, NB_CUDA_MLA_WG);
    dec_case(glm5, 1, 0, NB_WFMT_BF16, 1, NB_CUDA_MLA_WG);
    nb_cuda_mla_wg_force_prefetch(-1);
    g_pool16 = 0;
}

/* ---- GLM-5 decode batches: a pool of B x ctx rows in scattered pages of 64 ---------------- */

typedef struct dec_batch {
    nb_mla_dims d;
    int B, ctx;
    tu_weight kvb;
    nb_attn_index di;
    nb_tensor dq, dl, dp, dout;
    nb_tensor dl16, dp16; /* NB_TEST_MLA_ROWS16: the same rows in a BF16 pool (data NULL: none) */
    int use16;            /* batch_run reads the BF16 pool */
} dec_batch;

static void batch_make(dec_batch *b, int B, int ctx)
{
    /* GLM-5's attention shapes, or DeepSeek-V3's with NB_TEST_MLA_HEADS=128 (timings only) */
    const char *he = getenv("NB_TEST_MLA_HEADS");
    const nb_mla_dims d = he && !strcmp(he, "128") ? (nb_mla_dims){128, 128, 64, 128, 512}
                                                   : (nb_mla_dims){64, 192, 64, 256, 512};
    const int qk = d.qk_nope + d.qk_rope, rw = d.kv_lora_rank + d.qk_rope;
    const int64_t rows = (int64_t)B * ctx;
    b->d = d, b->B = B, b->ctx = ctx;
    tu_seed(2000 + B);
    tu_weight_make(&b->kvb, NB_WFMT_BF16, (int64_t)d.n_heads * (d.qk_nope + d.v_dim), d.kv_lora_rank, 0.05f, 0);
    /* random values for the first 4 Mi floats, then copies (distinct rows for the timing's
     * sake are what matters, and filling GBs with the test RNG would take seconds) */
    const size_t pn = (size_t)rows * rw, seed_n = pn < ((size_t)4 << 20) ? pn : ((size_t)4 << 20);
    float *pool = malloc(pn * 4), *q = malloc((size_t)B * d.n_heads * qk * 4);
    tu_fill(pool, seed_n, 1.0f);
    for (size_t at = seed_n; at < pn; at += seed_n) memcpy(pool + at, pool, (pn - at < seed_n ? pn - at : seed_n) * 4);
    tu_fill(q, (size_t)B * d.n_heads * qk, 1.0f);
    int32_t *pos = malloc((size_t)B * 4), *base = malloc((size_t)B * 4), *table = malloc((size_t)rows * 4);
    for (int i = 0; i < B; i++) pos[i] = ctx - 1, base[i] = i * ctx;
    const int64_t pages = rows / 64;
    int64_t *perm = malloc((size_t)pages * sizeof *perm);
    for (int64_t i = 0; i < pages; i++) perm[i] = i;
    for (int64_t i = pages - 1; i > 0; i--) {
        int64_t j = (int64_t)(tu_u32() % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    /* timing only: NB_TEST_MLA_POOL_GB=N spreads the pages over an N GB pool of 704-float rows
     * (the engine's per-layer row with the DSA index keys), as the engine's KV pool does */
    const char *pg = getenv("NB_TEST_MLA_POOL_GB");
    const double gb = pg ? atof(pg) : 0.0;
    const int64_t rw2 = 704, big_pages = (int64_t)(gb * (1 << 30) / (64.0 * rw2 * 4));
    float *dpool;
    int64_t ld = rw;
    /* NB_TEST_MLA_ROWS16: a BF16 pool of the same rows (rounded to nearest even) in the same
     * pages: rows of rw BF16, or in the spread pool 832 (the engine's BF16 row: 576 BF16 and
     * 128 F32 index keys, 1664 bytes) */
    uint16_t *pool16 = NULL, *dpool16 = NULL;
    const int64_t rw16 = 832;
    if (getenv("NB_TEST_MLA_ROWS16")) {
        pool16 = malloc(pn * 2);
        NB_ASSERT(pool16);
        for (size_t i = 0; i < pn; i++) pool16[i] = nb_f32_to_bf16(pool[i]);
    }
    if (big_pages > pages) {
        unsigned char *used = calloc((size_t)big_pages, 1);
        dpool = nb_ops_alloc(tu_gpu, (size_t)big_pages * 64 * rw2 * 4);
        NB_ASSERT(dpool && used);
        tu_dev[tu_ndev++] = dpool;
        if (pool16) {
            dpool16 = nb_ops_alloc(tu_gpu, (size_t)big_pages * 64 * rw16 * 2);
            NB_ASSERT(dpool16);
            tu_dev[tu_ndev++] = dpool16;
        }
        for (int64_t i = 0; i < pages; i++) {
            int64_t pgi;
            do pgi = (int64_t)(((uint64_t)tu_u32() << 32 | tu_u32()) % (uint64_t)big_pages);
            while (used[pgi]);
            used[pgi] = 1;
            perm[i] = pgi;
            for (int r = 0; r < 64; r++) {
                NB_ASSERT(nb_ops_upload(tu_gpu, dpool + (pgi * 64 + r) * rw2, pool + (i * 64 + r) * rw, (size_t)rw * 4) ==
                          NB_OK);
                if (pool16)
                    NB_ASSERT(nb_ops_upload(tu_gpu, dpool16 + (pgi * 64 + r) * rw16, pool16 + (i * 64 + r) * rw,
                                            (size_t)rw * 2) == NB_OK);
            }
        }
        free(used);
        ld = rw2;
        fprintf(stderr, "    (pool: %lld pages of 64 rows spread over %.1f GB, rows of %lld floats)\n", (long long)pages,
                gb, (long long)rw2);
    }
    for (int64_t r = 0; r < rows; r++) table[r] = (int32_t)(perm[r / 64] * 64 + r % 64);
    /* the engine's hint for this context (forward.h nb_forward_long_ctx): the automatic choice is the model's */
    b->di = (nb_attn_index){B, tu_up(pos, (size_t)B * 4), tu_up(base, (size_t)B * 4), tu_up(table, (size_t)rows * 4),
                            ctx >= nb_forward_long_ctx_default(d.n_heads, B), 0};
    if (ld == rw) dpool = tu_up(pool, pn * 4);
    if (pool16 && ld == rw) dpool16 = tu_up(pool16, pn * 2);
    memset(&b->dl16, 0, sizeof b->dl16), memset(&b->dp16, 0, sizeof b->dp16);
    b->use16 = 0;
    if (pool16) {
        const int64_t ld16 = ld == rw ? rw : rw16;
        b->dl16 = nb_tensor_2d(dpool16, NB_DTYPE_BF16, ld == rw ? rows : big_pages * 64, d.kv_lora_rank);
        b->dp16 = nb_tensor_2d(dpool16 + d.kv_lora_rank, NB_DTYPE_BF16, b->dl16.shape[0], d.qk_rope);
        b->dl16.stride[0] = b->dp16.stride[0] = ld16;
        b->dl16.device = b->dp16.device = NB_DEVICE_CUDA;
        fprintf(stderr, "    (BF16 pool beside the F32 one: rows of %lld BF16)\n", (long long)ld16);
        free(pool16);
    }
    nb_tensor hq = nb_tensor_3d(q, F32, B, d.n_heads, qk);
    b->dq = tu_twin(&hq);
    b->dl = nb_tensor_2d(dpool, F32, rows, d.kv_lora_rank);
    b->dp = nb_tensor_2d(dpool + d.kv_lora_rank, F32, rows, d.qk_rope);
    b->dl.stride[0] = b->dp.stride[0] = ld;
    if (ld != rw) b->dl.shape[0] = b->dp.shape[0] = big_pages * 64; /* every row of the spread pool */
    b->dl.device = b->dp.device = NB_DEVICE_CUDA;
    const size_t on = (size_t)B * d.n_heads * d.v_dim;
    b->dout = nb_tensor_3d(tu_poisoned(on * 4), F32, B, d.n_heads, d.v_dim);
    b->dout.device = NB_DEVICE_CUDA;
    NB_CHECK_OK(nb_cuda_mla_register(tu_gpu, &b->kvb.d, &d));
    free(pool), free(q), free(pos), free(base), free(table), free(perm);
}

static void batch_free(dec_batch *b)
{
    nb_cuda_mla_release(tu_gpu);
    tu_weight_free(&b->kvb);
    tu_free_all();
}

static nb_status batch_run(dec_batch *b)
{
    return nb_op_mla_attention(tu_gpu, NB_MLA_ABSORBED, &b->d, &b->dq, b->use16 ? &b->dl16 : &b->dl,
                               b->use16 ? &b->dp16 : &b->dp, &b->kvb.d, &b->di, NULL, 0.0625f, &b->dout);
}

/* The op's output with kernel k forced. */
static void batch_out(dec_batch *b, int k, float *host)
{
    nb_cuda_mla_force_kernel(k);
    NB_CHECK_OK(batch_run(b));
    tu_down(&b->dout, host);
    nb_cuda_mla_force_kernel(-1);
}

/* Kernel k (dec: both row copies) against kernel `ref` on one batch (k 0: nothing). */
static void batch_compare(dec_batch *b, int ref, int k)
{
    if (!k) return;
    const size_t on = (size_t)b->B * b->d.n_heads * b->d.v_dim;
    float *x = malloc(on * 4), *y = malloc(on * 4);
    batch_out(b, ref, x);
    for (int bulk = 1; bulk >= (k == NB_CUDA_MLA_DEC ? 0 : 1); bulk--) {
        nb_cuda_mla_dec_force_copy(bulk);
        NB_CHECK_OK(nb_ops_memset(tu_gpu, b->dout.data, 0xff, on * 4));
        batch_out(b, k, y);
        char name[128];
        snprintf(name, sizeof name, "mla %s%s vs %s on the GPU, GLM-5 shapes, B=%d ctx %d", kname(k),
                 k != NB_CUDA_MLA_DEC ? "" : bulk ? " bulk" : " cp.async", kname(ref), b->B, b->ctx);
        tu_compare(name, x, y, on, NB_TOL_BF16);
    }
    nb_cuda_mla_dec_force_copy(-1);
    free(x), free(y);
}

/* ms per replay of the op (gemms_only: its two absorption GEMMs alone) captured as a graph */
static double graph_ms(dec_batch *b, int k, int gemms_only, int iters)
{
    cudaStream_t st = (cudaStream_t)tu_gpu->stream;
    const int r = b->d.kv_lora_rank, nope = b->d.qk_nope, vd = b->d.v_dim, H = b->d.n_heads, T2 = 2 * b->B;
    const int64_t hs = nope + vd;
    void *qb = NULL, *obuf = NULL;
    float *ql = NULL, *o2 = NULL;
    if (gemms_only) {
        qb = tu_poisoned((size_t)H * T2 * nope * 2);
        obuf = tu_poisoned((size_t)H * T2 * r * 2);
        ql = tu_poisoned((size_t)H * T2 * r * 4);
        o2 = tu_poisoned((size_t)H * T2 * vd * 4);
        NB_CHECK_OK(nb_ops_memset(tu_gpu, qb, 0, (size_t)H * T2 * nope * 2));
        NB_CHECK_OK(nb_ops_memset(tu_gpu, obuf, 0, (size_t)H * T2 * r * 2));
    }
    nb_cuda_mla_force_kernel(k);
    if (!gemms_only) NB_CHECK_OK(batch_run(b)); /* grows scratch outside the capture */
    NB_CHECK_OK(nb_ops_sync(tu_gpu));
    double ms = -1;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        nb_status s;
        if (gemms_only) {
            s = nb_cuda_mla_gemm(tu_gpu, 1, 0, r, T2, nope, b->kvb.d.data, r, hs * r, qb, nope, (int64_t)T2 * nope, ql, r,
                                 (int64_t)T2 * r, H, 1.0f);
            if (s == NB_OK)
                s = nb_cuda_mla_gemm(tu_gpu, 1, 1, vd, T2, r, (const uint16_t *)b->kvb.d.data + (int64_t)nope * r, r,
                                     hs * r, obuf, r, (int64_t)T2 * r, o2, vd, (int64_t)T2 * vd, H, 1.0f);
        } else {
            s = batch_run(b);
        }
        cudaError_t ce = cudaStreamEndCapture(st, &graph);
        if (s == NB_OK && ce == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
            for (int i = 0; i < 2; i++) cudaGraphLaunch(exec, st);
            cudaStreamSynchronize(st);
            int64_t t0 = nb_now_ns();
            for (int i = 0; i < iters; i++) cudaGraphLaunch(exec, st);
            if (cudaStreamSynchronize(st) == cudaSuccess) ms = (double)(nb_now_ns() - t0) / 1e6 / iters;
        }
        cudaGetLastError();
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    nb_cuda_mla_force_kernel(-1);
    NB_CHECK(ms > 0);
    return ms;
}

/* The op's steps (nb_cuda_mla_force_gemm_steps) timed alone with kernel k: q split + first
 * GEMM, attention, split merge, second GEMM + hi/lo sum. */
static void time_steps(dec_batch *b, int k, int iters)
{
    static const char *names[4] = {"split+gemm1", "attention", "merge", "gemm2+sum"};
    double ms[4];
    for (int i = 0; i < 4; i++) {
        nb_cuda_mla_force_gemm_steps(1 << i);
        ms[i] = graph_ms(b, k, 0, iters);
    }
    nb_cuda_mla_force_gemm_steps(0);
    fprintf(stderr, "    mla steps B=%-5d ctx %-5d %-3s:", b->B, b->ctx, kname(k));
    for (int i = 0; i < 4; i++) fprintf(stderr, "  %s %.3f ms", names[i], ms[i]);
    fprintf(stderr, "  (sum %.3f)\n", ms[0] + ms[1] + ms[2] + ms[3]);
}

/* A switch's two settings on the op with kernel k (graph replay), alternating A B A B (t[0], t[2]:
 * force(a); t[1], t[3]: force(!a)), then the switch back to the environment's value. */
static void time_ab(dec_batch *b, int k, void (*force)(int), int a, int iters, double t[4])
{
    for (int i = 0; i < 4; i++) {
        force(i & 1 ? !a : a);
        t[i] = graph_ms(b, k, 0, iters);
    }
    force(-1);
}

/* A wg switch off (named off) and on (named on) on the BF16 pool (b->use16 set), A B A B, printed. */
static void time_ab_wg16(dec_batch *b, void (*force)(int), const char *off, const char *on, int iters)
{
    double t[4];
    time_ab(b, NB_CUDA_MLA_WG, force, 0, iters, t);
    fprintf(stderr, "    mla time B=%-5d ctx %-5d wg op on BF16 rows (graph): %s %.3f / %.3f, %s %.3f / %.3f ms (%.2fx)\n",
            b->B, b->ctx, off, t[0], t[2], on, t[1], t[3], (t[0] + t[2]) / (t[1] + t[3]));
}

/* The wg op (graph replay, default terms) on the F32 pool and the BF16 one, A B A B; its
 * BF16-pool outputs checked against mma on the F32 pool first (NB_TEST_MLA_ROWS16). */
static void time_rows16(dec_batch *b, int iters)
{
    if (!b->dl16.data) return;
    const size_t on = (size_t)b->B * b->d.n_heads * b->d.v_dim;
    float *x = malloc(on * 4), *y = malloc(on * 4);
    batch_out(b, NB_CUDA_MLA_MMA, x);
    b->use16 = 1;
    NB_CHECK_OK(nb_ops_memset(tu_gpu, b->dout.data, 0xff, on * 4));
    batch_out(b, NB_CUDA_MLA_WG, y);
    b->use16 = 0;
    char name[128];
    snprintf(name, sizeof name, "mla wg on BF16 rows vs mma on F32 rows, GLM-5 shapes, B=%d ctx %d", b->B, b->ctx);
    tu_compare(name, x, y, on, NB_TOL_BF16);
    for (int sh = 0; sh < 2; sh++) { /* the consumers splitting S or not, forced (mla.h) */
        nb_cuda_mla_wg_force_share(sh);
        b->use16 = 1;
        NB_CHECK_OK(nb_ops_memset(tu_gpu, b->dout.data, 0xff, on * 4));
        batch_out(b, NB_CUDA_MLA_WG, y);
        b->use16 = 0;
        snprintf(name, sizeof name, "mla wg %s S on BF16 rows vs mma on F32 rows, GLM-5 shapes, B=%d ctx %d",
                 sh ? "sharing" : "not sharing", b->B, b->ctx);
        tu_compare(name, x, y, on, NB_TOL_BF16);
    }
    nb_cuda_mla_wg_force_share(-1);
    free(x), free(y);
    double t[4];
    for (int i = 0; i < 4; i++) {
        b->use16 = i & 1;
        t[i] = graph_ms(b, NB_CUDA_MLA_WG, 0, iters);
    }
    b->use16 = 0;
    fprintf(stderr, "    mla time B=%-5d ctx %-5d wg op (graph): F32 rows %.3f / %.3f, BF16 rows %.3f / %.3f ms (%.2fx)\n",
            b->B, b->ctx, t[0], t[2], t[1], t[3], (t[0] + t[2]) / (t[1] + t[3]));
    b->use16 = 1; /* the op's steps alone on the BF16 pool (the default cache) */
    fprintf(stderr, "    (BF16 rows; consumers not sharing S, then sharing)\n");
    nb_cuda_mla_wg_force_share(0);
    time_steps(b, NB_CUDA_MLA_WG, iters);
    nb_cuda_mla_wg_force_share(-1);
    time_ab_wg16(b, nb_cuda_mla_wg_force_share, "S whole per consumer", "split", iters);
    nb_cuda_mla_wg_force_share(1);
    time_steps(b, NB_CUDA_MLA_WG, iters);
    nb_cuda_mla_wg_force_share(-1);
    /* the staged outputs (mla.h nb_cuda_mla_wg_force_stage; their own instance, without the
     * shared S) were held back for F32 rows, where they need 2 producer rows in flight; BF16
     * rows hold none in registers */
    time_ab_wg16(b, nb_cuda_mla_wg_force_stage, "outputs direct", "staged", iters);
    b->use16 = 0;
}

/* Old against new on one batch, the same binary: the op (graph replay) with mma, dec (bulk
 * copies) and wg (4 and 2 producer rows in flight), each with two BF16 activation terms and
 * with one (mla.h NIBBLE_CUDA_MLA_TERMS), the two-term GEMMs alone, then the op's steps alone
 * for dec (two terms: the default before the wg kernel) and wg (one term: the default now). */
static void time_batch(int B, int ctx)
{
    dec_batch b;
    batch_make(&b, B, ctx);
    const int iters = (int64_t)B * ctx >= 256000 ? 20 : 50;
    time_rows16(&b, iters);
    const char *r16 = getenv("NB_TEST_MLA_ROWS16");
    if (r16 && !strcmp(r16, "only")) {
        batch_free(&b);
        return;
    }
    nb_cuda_mla_force_terms(2);
    batch_compare(&b, NB_CUDA_MLA_MMA, NB_CUDA_MLA_WG);
    nb_cuda_mla_force_terms(1);
    batch_compare(&b, NB_CUDA_MLA_MMA, NB_CUDA_MLA_WG); /* one term against mma with one term */
    double t[2][5]; /* [terms - 1][mma, dec, wg rows 4, wg rows 2, wg rows 4 one block per item] */
    nb_cuda_mla_dec_force_copy(1);
    for (int k = 0; k < 2; k++) {
        nb_cuda_mla_force_terms(k + 1);
        t[k][0] = graph_ms(&b, NB_CUDA_MLA_MMA, 0, iters);
        t[k][1] = graph_ms(&b, NB_CUDA_MLA_DEC, 0, iters);
        nb_cuda_mla_wg_force_rows(4);
        t[k][2] = graph_ms(&b, NB_CUDA_MLA_WG, 0, iters);
        nb_cuda_mla_wg_force_rows(2);
        t[k][3] = graph_ms(&b, NB_CUDA_MLA_WG, 0, iters);
        nb_cuda_mla_wg_force_rows(4);
        nb_cuda_mla_wg_force_persist(0);
        t[k][4] = graph_ms(&b, NB_CUDA_MLA_WG, 0, iters);
        nb_cuda_mla_wg_force_persist(-1);
        nb_cuda_mla_wg_force_rows(0);
    }
    nb_cuda_mla_dec_force_copy(-1);
    /* the wg kernel's q_lat in F32 and in BF16 (mla.h nb_cuda_mla_force_qlat16), one term */
    double tq[2];
    nb_cuda_mla_force_terms(1);
    for (int k = 0; k < 2; k++) {
        nb_cuda_mla_force_qlat16(k);
        tq[k] = graph_ms(&b, NB_CUDA_MLA_WG, 0, iters);
    }
    nb_cuda_mla_force_qlat16(-1);
    double tst[4], tpf[4], tdp[4];
    time_ab(&b, NB_CUDA_MLA_WG, nb_cuda_mla_wg_force_stage, 0, iters, tst);   /* BF16 q, outputs direct / staged */
    time_ab(&b, NB_CUDA_MLA_WG, nb_cuda_mla_wg_force_prefetch, 1, iters, tpf); /* rows into L2 or not */
    nb_cuda_mla_dec_force_copy(1);
    time_ab(&b, NB_CUDA_MLA_DEC, nb_cuda_mla_dec_force_prefetch, 1, iters, tdp); /* the same, dec (bulk copies) */
    nb_cuda_mla_dec_force_copy(-1);
    nb_cuda_mla_force_terms(0);
    const double gemm = graph_ms(&b, NB_CUDA_MLA_DEC, 1, iters);
    const int autok = nb_cuda_mla_kernel(tu_gpu, &b.d, B);
    const double bytes = (double)B * ctx * (b.d.kv_lora_rank + b.d.qk_rope) * 4;
    for (int k = 0; k < 2; k++)
        fprintf(stderr,
                "    mla time B=%-5d ctx %-5d %s term%s op (graph): mma %7.3f  dec %7.3f  wg %7.3f (persistent, rows 4)  "
                "%7.3f (rows 2)  %7.3f (block per item) ms;  dec/wg %.2fx\n",
                B, ctx, k ? "two" : "one", k ? "s" : " ", t[k][0], t[k][1], t[k][2], t[k][3], t[k][4],
                t[k][1] / t[k][2]);
    fprintf(stderr,
            "    mla time B=%-5d ctx %-5d old default (dec, two terms) %.3f ms -> wg one term %.3f ms (%.2fx);  "
            "two-term GEMMs alone %.3f ms;  rows %.0f MB;  auto=%s\n",
            B, ctx, t[1][1], t[0][2], t[1][1] / t[0][2], gemm, bytes / 1e6, kname(autok));
    fprintf(stderr, "    mla time B=%-5d ctx %-5d wg one term op (graph): q_lat F32 %7.3f ms, BF16 %7.3f ms (%.2fx)\n", B,
            ctx, tq[0], tq[1], tq[0] / tq[1]);
    fprintf(stderr, "    mla time B=%-5d ctx %-5d wg BF16 q op (graph): outputs direct %.3f / %.3f, staged %.3f / %.3f ms\n", B,
            ctx, tst[0], tst[2], tst[1], tst[3]);
    fprintf(stderr, "    mla time B=%-5d ctx %-5d wg op (graph): rows prefetched into L2 %.3f / %.3f, not %.3f / %.3f ms\n", B,
            ctx, tpf[0], tpf[2], tpf[1], tpf[3]);
    fprintf(stderr, "    mla time B=%-5d ctx %-5d dec op (graph): rows prefetched into L2 %.3f / %.3f, not %.3f / %.3f ms\n", B,
            ctx, tdp[0], tdp[2], tdp[1], tdp[3]);
    nb_cuda_mla_force_terms(2);
    time_steps(&b, NB_CUDA_MLA_DEC, iters);
    time_steps(&b, NB_CUDA_MLA_WG, iters);
    nb_cuda_mla_force_terms(1);
    for (int k = 0; k < 2; k++) {
        nb_cuda_mla_force_qlat16(k);
        fprintf(stderr, "    (one BF16 term, q_lat %s)\n", k ? "BF16" : "F32");
        time_steps(&b, NB_CUDA_MLA_WG, iters);
    }
    nb_cuda_mla_force_qlat16(-1);
    nb_cuda_mla_force_terms(0);
    batch_free(&b);
}

/* `pick CTX B1,..`: the op on a BF16 pool (the default cache) with each kernel forced (f32, mma,
 * wg; graph replay, A B C A B C) beside the automatic choice: where the automatic switch from
 * the float32 kernel to the tensor-core ones belongs at this context. */
static void time_pick(int B, int ctx)
{
    dec_batch b;
    batch_make(&b, B, ctx);
    if (!b.dl16.data) {
        fprintf(stderr, "    mla pick B=%d ctx %d: no BF16 pool was made (NB_TEST_MLA_ROWS16)\n", B, ctx);
        NB_CHECK(b.dl16.data != NULL);
        batch_free(&b);
        return;
    }
    const int iters = (int64_t)B * ctx >= 256000 ? 20 : 50;
    static const int ks[3] = {NB_CUDA_MLA_F32, NB_CUDA_MLA_MMA, NB_CUDA_MLA_WG};
    double t[2][3];
    b.use16 = 1;
    for (int rep = 0; rep < 2; rep++)
        for (int k = 0; k < 3; k++) t[rep][k] = graph_ms(&b, ks[k], 0, iters);
    b.use16 = 0;
    fprintf(stderr, "    mla pick B=%-5d ctx %-5d BF16 rows, op (graph): f32 %.3f / %.3f  mma %.3f / %.3f  wg %.3f / %.3f ms;  auto=%s\n",
            B, ctx, t[0][0], t[1][0], t[0][1], t[1][1], t[0][2], t[1][2], kname(nb_cuda_mla_kernel_for(tu_gpu, &b.d, B, 1, b.di.long_ctx)));
    batch_free(&b);
}

int main(int argc, char **argv)
{
    if (!nb_cuda_test_require_gpu()) return 77;
    if (!tu_open()) return 1;
    if (argc > 1 && (!strcmp(argv[1], "time") || !strcmp(argv[1], "pick"))) {
        const int pick = !strcmp(argv[1], "pick");
        if (pick) setenv("NB_TEST_MLA_ROWS16", "1", 0); /* batch_make builds the BF16 pool pick times */
        const int ctx = argc > 2 ? atoi(argv[2]) : 256;
        const char *list = argc > 3 ? argv[3] : "64,256,1000";
        if (ctx < 64 || ctx % 64) {
            fprintf(stderr, "context must be a multiple of 64\n");
            return 2;
        }
        for (const char *p = list; *p;) {
            const int B = atoi(p);
            if (B > 0 && pick) time_pick(B, ctx);
            else if (B > 0) time_batch(B, ctx);
            p = strchr(p, ',');
            if (!p) break;
            p++;
        }
    } else {
        const nb_mla_dims glm5 = {64, 192, 64, 256, 512}, h80 = {80, 32, 32, 64, 256}, h16 = {16, 64, 64, 128, 512},
                          tiny = {4, 32, 16, 24, 32}, h80w = {80, 32, 64, 64, 512};
        tu_seed(91);
        const int kerns[2] = {NB_CUDA_MLA_DEC, NB_CUDA_MLA_WG};
        /* "wg": the wgmma kernel's cases only */
        const int only_wg = argc > 1 && !strcmp(argv[1], "wg");
        for (int ki = only_wg; ki < 2; ki++) {
            const int kk = kerns[ki];
            nb_cuda_mla_force_terms(2); /* the hi/lo path (one term below) */
            for (int sparse = 0; sparse < 2; sparse++) {
                dec_case(glm5, 0, sparse, NB_WFMT_BF16, 1, kk);
                dec_case(glm5, 1, sparse, NB_WFMT_BF16, 1, kk);
                dec_case(glm5, 2, sparse, NB_WFMT_BF16, 1, kk); /* 2 tokens: the small path */
                dec_case(h16, 0, sparse, NB_WFMT_BF16, 1, kk);
                dec_case(h16, 1, sparse, NB_WFMT_F32, 1, kk);
                if (kk == NB_CUDA_MLA_WG) { /* two head groups, the second partial */
                    dec_case(h80w, 0, sparse, NB_WFMT_BF16, 1, kk);
                    dec_case(h80w, 1, sparse, NB_WFMT_F32, 1, kk);
                    continue;
                }
                dec_case(h80, 0, sparse, NB_WFMT_F32, 0, kk);
                dec_case(h80, 1, sparse, NB_WFMT_BF16, 1, kk);
                dec_case(tiny, 0, sparse, NB_WFMT_BF16, 0, kk);
                dec_case(tiny, 1, sparse, NB_WFMT_F32, 1, kk);
            }
            dec_case(glm5, 1, 0, NB_WFMT_F32, 0, kk);
            dec_case(glm5, 0, 1, NB_WFMT_NVFP4, 1, kk);
            /* one BF16 activation term around the attention (mla.h NIBBLE_CUDA_MLA_TERMS) */
            nb_cuda_mla_force_terms(1);
            fprintf(stderr, "  one BF16 term:\n");
            for (int sparse = 0; sparse < 2; sparse++) {
                dec_case(glm5, 0, sparse, NB_WFMT_BF16, 1, kk);
                dec_case(glm5, 1, sparse, NB_WFMT_BF16, 1, kk);
            }
            if (kk == NB_CUDA_MLA_WG) { /* BF16 q with a partial second head group (zero-filled rows) */
                dec_case(h80w, 0, 1, NB_WFMT_BF16, 1, kk);
                dec_case(h80w, 1, 0, NB_WFMT_BF16, 1, kk);
                for (int st = 0; st < 2; st++) { /* staged outputs, both ways (mla.h nb_cuda_mla_wg_force_stage) */
                    nb_cuda_mla_wg_force_stage(st);
                    fprintf(stderr, "  one BF16 term, BF16 q, outputs %s:\n", st ? "staged" : "direct");
                    dec_case(glm5, 0, 1, NB_WFMT_BF16, 1, kk);
                    dec_case(glm5, 1, 0, NB_WFMT_BF16, 1, kk);
                    dec_case(h80w, 1, 1, NB_WFMT_BF16, 1, kk);
                }
                nb_cuda_mla_wg_force_stage(-1);
                /* the consumers splitting S or not, forced both ways (mla.h
                 * nb_cuda_mla_wg_force_share: BF16 rows only; automatic: split where S == 1) */
                for (int sh = 0; sh < 2; sh++) {
                    nb_cuda_mla_wg_force_share(sh);
                    fprintf(stderr, "  one BF16 term, BF16 q, consumers %s S:\n", sh ? "sharing" : "each computing");
                    dec_case(glm5, 0, 1, NB_WFMT_BF16, 1, kk);
                    dec_case(glm5, 0, 0, NB_WFMT_BF16, 1, kk);
                    dec_case(glm5, 1, 0, NB_WFMT_BF16, 1, kk);
                    dec_case(h80w, 0, 1, NB_WFMT_BF16, 1, kk);
                    dec_case(h80w, 1, 0, NB_WFMT_BF16, 1, kk);
                }
                nb_cuda_mla_wg_force_share(-1);
            }
            if (kk == NB_CUDA_MLA_WG) { /* one term with the F32 q_lat the BF16 one replaced */
                nb_cuda_mla_force_qlat16(0);
                fprintf(stderr, "  one BF16 term, F32 q_lat (NIBBLE_CUDA_MLA_QLAT16=0):\n");
                dec_case(glm5, 0, 1, NB_WFMT_BF16, 1, kk);
                dec_case(glm5, 1, 0, NB_WFMT_BF16, 1, kk);
                nb_cuda_mla_force_qlat16(-1);
            }
            nb_cuda_mla_force_terms(0);
            if (kk == NB_CUDA_MLA_WG) { /* the other forms: 2 producer rows in flight, a block per item */
                nb_cuda_mla_wg_force_rows(2);
                fprintf(stderr, "  wg, 2 producer rows in flight:\n");
                dec_case(glm5, 0, 1, NB_WFMT_BF16, 1, kk);
                dec_case(glm5, 1, 0, NB_WFMT_BF16, 1, kk);
                dec_case(h80w, 1, 1, NB_WFMT_BF16, 1, kk);
                nb_cuda_mla_wg_force_rows(0);
                nb_cuda_mla_wg_force_persist(0);
                fprintf(stderr, "  wg, one block per item:\n");
                dec_case(glm5, 0, 1, NB_WFMT_BF16, 1, kk);
                dec_case(glm5, 1, 0, NB_WFMT_BF16, 1, kk);
                dec_case(h80w, 1, 1, NB_WFMT_BF16, 1, kk);
                nb_cuda_mla_wg_force_persist(-1);
                nb_cuda_mla_wg_force_prefetch(!NB_CUDA_MLA_WG_PF_DEFAULT);
                fprintf(stderr, "  wg, rows %sprefetched into L2:\n", NB_CUDA_MLA_WG_PF_DEFAULT ? "not " : "");
                dec_case(glm5, 0, 1, NB_WFMT_BF16, 1, kk);
                dec_case(glm5, 1, 0, NB_WFMT_BF16, 1, kk);
                nb_cuda_mla_wg_force_prefetch(-1);
            }
            if (kk == NB_CUDA_MLA_DEC) {
                nb_cuda_mla_dec_force_prefetch(!NB_CUDA_MLA_DEC_PF_DEFAULT);
                fprintf(stderr, "  dec, rows %sprefetched into L2:\n", NB_CUDA_MLA_DEC_PF_DEFAULT ? "not " : "");
                dec_case(glm5, 0, 1, NB_WFMT_BF16, 1, kk);
                dec_case(h16, 1, 0, NB_WFMT_F32, 1, kk);
                nb_cuda_mla_dec_force_prefetch(-1);
            }
        }
        dec_cases16(only_wg);
        /* GLM-5 shapes on the GPU against the float32 kernel (default terms: one for wg, two
         * for f32): 300 tokens (no splits), 1 token
         * (splits) and 1000 tokens at context 256, and 7 tokens at context 1984 (splits of
         * several 64-row chunks) */
        const int bs[4][2] = {{300, 256}, {1, 256}, {1000, 256}, {7, 1984}};
        for (int i = 0; i < 4; i++) {
            dec_batch b;
            batch_make(&b, bs[i][0], bs[i][1]);
            batch_compare(&b, NB_CUDA_MLA_F32, i == 0 && !only_wg ? NB_CUDA_MLA_DEC : 0);
            batch_compare(&b, NB_CUDA_MLA_F32, NB_CUDA_MLA_WG);
            if (i == 2) { /* 1000 tokens: the other wg forms too */
                nb_cuda_mla_wg_force_persist(0);
                batch_compare(&b, NB_CUDA_MLA_F32, NB_CUDA_MLA_WG);
                nb_cuda_mla_wg_force_persist(-1);
                nb_cuda_mla_wg_force_rows(2);
                batch_compare(&b, NB_CUDA_MLA_F32, NB_CUDA_MLA_WG);
                nb_cuda_mla_wg_force_rows(0);
                nb_cuda_mla_force_qlat16(0);
                batch_compare(&b, NB_CUDA_MLA_F32, NB_CUDA_MLA_WG);
                nb_cuda_mla_force_qlat16(-1);
                for (int st = 0; st < 2; st++) {
                    nb_cuda_mla_wg_force_stage(st);
                    batch_compare(&b, NB_CUDA_MLA_F32, NB_CUDA_MLA_WG);
                }
                nb_cuda_mla_wg_force_stage(-1);
                nb_cuda_mla_wg_force_prefetch(!NB_CUDA_MLA_WG_PF_DEFAULT);
                batch_compare(&b, NB_CUDA_MLA_F32, NB_CUDA_MLA_WG);
                nb_cuda_mla_wg_force_prefetch(-1);
            }
            batch_free(&b);
        }
    }
    tu_close();
    fprintf(stderr, "%s\n", nb_test_failures_ ? "FAILED" : "ok");
    return nb_test_failures_ ? 1 : 0;
}
