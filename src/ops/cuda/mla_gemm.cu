// MLA's resident weights and batched GEMMs (ops/cuda/mla.h).
// kv_b is prepared once per layer into the form the GEMMs read: BF16 when that is exact
// (BF16 checkpoints in place; NVFP4 as E2M1 x E4M3 products, which fit BF16's 8 significant
// bits, with the per-tensor global scale moved into the GEMM's alpha), F32 otherwise (F32 in
// place, FP8-block dequantized). The GEMMs are cuBLASLt strided-batched over heads, their own
// handle and workspace (the shared gemm_lt wrapper has no batch). BF16 GEMMs take the
// activations as two BF16 terms stacked along N (hi = bf16(x), lo = bf16(x - hi)), so the
// weight is read once and the result keeps ~16 mantissa bits of the activations.
// Exercised by tests/cuda_ops/test_cuda_vs_cpu.c (mla*).
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/mla.h"

#define MLA_REG_MAX 512
#define MLA_ALGO_CACHE 32
#define MLA_WORKSPACE ((size_t)8 << 20)

typedef struct mla_algo {
    int valid;
    int64_t key[16];
    cublasLtMatmulAlgo_t algo;
} mla_algo;

struct nb_cuda_mla {
    nb_cuda_mla_w w[MLA_REG_MAX];
    int n;
    cublasLtHandle_t lt;
    void *ws;
    mla_algo cache[MLA_ALGO_CACHE];
    int next;
};

// The context's MLA state, created on first use (outside any graph capture: the first call
// allocates).
static nb_status mla_state(nb_ops_ctx *ctx, nb_cuda_mla **out)
{
    nb_cuda_state *s = nb_cuda_st(ctx);
    if (!s->mla) {
        nb_cuda_mla *m = (nb_cuda_mla *)calloc(1, sizeof *m);
        if (!m) return nb_error(NB_ERR_OUT_OF_MEMORY, "mla: context state");
        if (cublasLtCreate(&m->lt) != CUBLAS_STATUS_SUCCESS) {
            free(m);
            return nb_error(NB_ERR_CUDA, "mla: cublasLtCreate failed");
        }
        if (cudaMalloc(&m->ws, MLA_WORKSPACE) != cudaSuccess) {
            cudaGetLastError();
            cublasLtDestroy(m->lt);
            free(m);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "mla: %zu bytes of cuBLASLt workspace", MLA_WORKSPACE);
        }
        s->mla = m;
    }
    *out = s->mla;
    return NB_OK;
}

extern "C" void nb_cuda_mla_release(nb_ops_ctx *ctx)
{
    nb_cuda_state *s = nb_cuda_st(ctx);
    if (!s || !s->mla) return;
    nb_cuda_mla *m = s->mla;
    cudaStreamSynchronize(s->stream);
    for (int i = 0; i < m->n; i++)
        if (m->w[i].owned) cudaFree(m->w[i].w);
    cudaFree(m->ws);
    cublasLtDestroy(m->lt);
    free(m);
    s->mla = NULL;
}

static int dense_rows(const nb_weight *w, int64_t elem)
{
    return w->row_stride == 0 || w->row_stride == w->k * elem;
}

// NVFP4 -> BF16 without the global scale: e2m1 (2 significant bits) x e4m3 (4) is exact.
__global__ void k_nvfp4_to_bf16(nb_weight w, uint16_t *out)
{
    const int64_t total = w.n * w.k;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / w.k, j = e - r * w.k;
        const uint8_t *row = (const uint8_t *)w.data + r * nb_d_row_bytes(w);
        const uint8_t *sc = (const uint8_t *)w.scale + r * nb_d_scale_row_bytes(w);
        uint8_t b = row[j / 2];
        out[e] = nb_d_to_bf16(nb_d_e2m1((j & 1) ? (b >> 4) : (b & 15)) * nb_d_e4m3(sc[j / 16]));
    }
}

// Fill `e` for kv_b: in place when the stored form is already what the GEMMs read, else into
// `buf` (bytes `cap`; NULL: allocate and own it). Enqueued on the stream.
static nb_status prepare(nb_ops_ctx *ctx, const nb_weight *kv_b, void *buf, size_t cap, nb_cuda_mla_w *e)
{
    const size_t n = (size_t)kv_b->n * (size_t)kv_b->k;
    e->key = kv_b->data;
    e->owned = 0;
    e->alpha = 1.0f;
    if (kv_b->fmt == NB_WFMT_BF16 && dense_rows(kv_b, 2)) {
        e->bf16 = 1;
        e->w = (void *)kv_b->data;
        return NB_OK;
    }
    if (kv_b->fmt == NB_WFMT_F32 && dense_rows(kv_b, 4)) {
        e->bf16 = 0;
        e->w = (void *)kv_b->data;
        return NB_OK;
    }
    e->bf16 = kv_b->fmt == NB_WFMT_NVFP4 || kv_b->fmt == NB_WFMT_BF16;
    size_t bytes = n * (e->bf16 ? 2 : 4);
    if (!buf) {
        if (cudaMalloc(&buf, bytes) != cudaSuccess) {
            cudaGetLastError();
            return nb_error(NB_ERR_OUT_OF_MEMORY, "mla: %zu bytes for kv_b [%lld, %lld]", bytes, (long long)kv_b->n,
                            (long long)kv_b->k);
        }
        e->owned = 1;
    } else if (cap < bytes) {
        return nb_error(NB_ERR_INTERNAL, "mla: kv_b staging of %zu bytes, %zu needed", cap, bytes);
    }
    e->w = buf;
    if (kv_b->fmt == NB_WFMT_NVFP4) {
        e->alpha = kv_b->global_scale;
        int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
        k_nvfp4_to_bf16<<<blocks, 256, 0, nb_cuda_stream(ctx)>>>(*kv_b, (uint16_t *)buf);
        NB_CUDA_LAUNCHED("mla kv_b prepare");
        return NB_OK;
    }
    if (e->bf16) return nb_cuda_dequant(ctx, kv_b, (uint16_t *)buf, NULL); /* strided BF16: a copy */
    return nb_cuda_dequant(ctx, kv_b, NULL, (float *)buf);
}

extern "C" nb_status nb_cuda_mla_register(nb_ops_ctx *ctx, const nb_weight *kv_b, const nb_mla_dims *d)
{
    NB_TRY(nb_cuda_check_weight("mla register kv_b", kv_b));
    if (kv_b->n != (int64_t)d->n_heads * (d->qk_nope + d->v_dim) || kv_b->k != d->kv_lora_rank)
        return nb_error(NB_ERR_INVALID_ARG, "mla register: kv_b is [%lld, %lld], the dims need [%d, %d]",
                        (long long)kv_b->n, (long long)kv_b->k, d->n_heads * (d->qk_nope + d->v_dim), d->kv_lora_rank);
    nb_cuda_mla *m;
    NB_TRY(mla_state(ctx, &m));
    for (int i = 0; i < m->n; i++)
        if (m->w[i].key == kv_b->data) return NB_OK;
    if (m->n == MLA_REG_MAX)
        return nb_error(NB_ERR_UNSUPPORTED, "mla register: more than %d kv_b weights", MLA_REG_MAX);
    nb_cuda_mla_w e;
    NB_TRY(prepare(ctx, kv_b, NULL, 0, &e));
    m->w[m->n++] = e;
    return nb_cuda_sync(ctx);
}

nb_status nb_cuda_mla_weights(nb_ops_ctx *ctx, const nb_weight *kv_b, int slot, nb_cuda_mla_w *out)
{
    nb_cuda_mla *m;
    NB_TRY(mla_state(ctx, &m));
    for (int i = 0; i < m->n; i++)
        if (m->w[i].key == kv_b->data) {
            *out = m->w[i];
            return NB_OK;
        }
    const int in_place =
        (kv_b->fmt == NB_WFMT_BF16 && dense_rows(kv_b, 2)) || (kv_b->fmt == NB_WFMT_F32 && dense_rows(kv_b, 4));
    size_t cap = in_place ? 0 : (size_t)kv_b->n * (size_t)kv_b->k * 4;
    void *buf = in_place ? NULL : nb_cuda_scratch(ctx, slot, cap);
    if (!in_place && !buf) return NB_ERR_OUT_OF_MEMORY;
    return prepare(ctx, kv_b, buf, cap, out);
}

// Largest power of two (<= 256) dividing every byte offset the matrix is read at.
static uint32_t align_of(const void *p, int64_t ld, int64_t stride, int64_t es)
{
    uint64_t v = (uint64_t)(uintptr_t)p | (uint64_t)(ld * es) | (uint64_t)(stride * es) | 256u;
    return (uint32_t)(v & (~v + 1));
}

#define MLA_LT_TRY(call)                                                                       \
    do {                                                                                       \
        cublasStatus_t nb_ls_ = (call);                                                        \
        if (nb_ls_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            st = nb_error(NB_ERR_CUDA, "mla gemm: %s failed: cuBLAS status %d", #call, (int)nb_ls_); \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

static cublasStatus_t set_batch(cublasLtMatrixLayout_t l, int batch, int64_t stride)
{
    int32_t b = batch;
    cublasStatus_t s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    return cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
}

// c16: C is BF16 (rounded to nearest from the F32 sums), else F32.
static nb_status mla_gemm(nb_ops_ctx *ctx, int bf16, int c16, int trans_a, int m_, int n_, int k_, const void *A,
                          int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, void *C, int64_t ldc,
                          int64_t sc, int batch, float alpha)
{
    nb_cuda_mla *m;
    NB_TRY(mla_state(ctx, &m));
    nb_status st = NB_OK;
    const cudaDataType_t ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const int64_t es = bf16 ? 2 : 4;
    const float beta = 0.0f;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    const uint32_t aa = align_of(A, lda, sa, es), alb = align_of(B, ldb, sb, es),
                   ac = align_of(C, ldc, sc, c16 ? 2 : 4);
    const int64_t key[16] = {bf16, trans_a, m_, n_, k_, lda, sa, ldb, sb, ldc, sc, batch, aa, alb, ac, 1 + c16};
    mla_algo *hit = NULL;
    MLA_LT_TRY(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    MLA_LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    MLA_LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    MLA_LT_TRY(cublasLtMatrixLayoutCreate(&la, ab, trans_a ? k_ : m_, trans_a ? m_ : k_, lda));
    MLA_LT_TRY(cublasLtMatrixLayoutCreate(&lb, ab, k_, n_, ldb));
    MLA_LT_TRY(cublasLtMatrixLayoutCreate(&lc, c16 ? CUDA_R_16BF : CUDA_R_32F, m_, n_, ldc));
    MLA_LT_TRY(set_batch(la, batch, sa));
    MLA_LT_TRY(set_batch(lb, batch, sb));
    MLA_LT_TRY(set_batch(lc, batch, sc));
    for (int i = 0; i < MLA_ALGO_CACHE; i++)
        if (m->cache[i].valid && !memcmp(m->cache[i].key, key, sizeof key)) {
            hit = &m->cache[i];
            break;
        }
    if (!hit) {
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        size_t wsb = MLA_WORKSPACE;
        MLA_LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
        MLA_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                                        sizeof wsb));
        MLA_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa,
                                                        sizeof aa));
        MLA_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alb,
                                                        sizeof alb));
        MLA_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac,
                                                        sizeof ac));
        MLA_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac,
                                                        sizeof ac));
        MLA_LT_TRY(cublasLtMatmulAlgoGetHeuristic(m->lt, desc, la, lb, lc, lc, pref, 1, &res, &found));
        if (!found) {
            st = nb_error(NB_ERR_UNSUPPORTED, "mla gemm: cuBLASLt has no algorithm for %s m=%d n=%d k=%d batch %d%s",
                          bf16 ? "bf16" : "f32", m_, n_, k_, batch, c16 ? " (BF16 output)" : "");
            goto done;
        }
        hit = &m->cache[m->next];
        m->next = (m->next + 1) % MLA_ALGO_CACHE;
        hit->valid = 1;
        memcpy(hit->key, key, sizeof key);
        hit->algo = res.algo;
    }
    MLA_LT_TRY(cublasLtMatmul(m->lt, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &hit->algo, m->ws, MLA_WORKSPACE,
                              nb_cuda_stream(ctx)));
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return st;
}

nb_status nb_cuda_mla_gemm(nb_ops_ctx *ctx, int bf16, int trans_a, int m_, int n_, int k_, const void *A, int64_t lda,
                           int64_t sa, const void *B, int64_t ldb, int64_t sb, float *C, int64_t ldc, int64_t sc,
                           int batch, float alpha)
{
    return mla_gemm(ctx, bf16, 0, trans_a, m_, n_, k_, A, lda, sa, B, ldb, sb, C, ldc, sc, batch, alpha);
}

nb_status nb_cuda_mla_gemm_c16(nb_ops_ctx *ctx, int trans_a, int m_, int n_, int k_, const void *A, int64_t lda,
                               int64_t sa, const void *B, int64_t ldb, int64_t sb, uint16_t *C, int64_t ldc,
                               int64_t sc, int batch, float alpha)
{
    return mla_gemm(ctx, 1, 1, trans_a, m_, n_, k_, A, lda, sa, B, ldb, sb, C, ldc, sc, batch, alpha);
}
