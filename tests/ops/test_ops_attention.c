/* CPU attention ops: GQA over a slot-addressed pool on hand-computed cases, the DSA top-k
 * selection, and the property that absorbed MLA equals naive MLA (dense, sparse, several
 * sequences, a permuted slot table, NVFP4 kv_b). Run: build-x/tests/test_ops_attention. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/numerics.h"
#include "nbtest.h"
#include "ops/ops.h"

/* Worst |a-b| / max|b| over n values: MLA forms differ only in summation order. */
#define NB_TOL_MLA_FORMS 1e-5

static nb_ops_ctx *ctx(void)
{
    static nb_ops_ctx *c;
    if (!c) nb_ops_ctx_new_cpu(2, &c);
    return c;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void test_gqa_hand(void)
{
    /* 2 query heads sharing 1 kv head, head_dim 1; keys 1, 2 and values 10, 20 stored at pool
     * rows 3 and 0 (slot_table maps positions to rows). */
    float q[2] = {1, -1}, pool_k[4] = {2, 0, 0, 1}, pool_v[4] = {20, 0, 0, 10}, out[2];
    int32_t pos[1] = {1}, base[1] = {0}, table[2] = {3, 0};
    nb_attn_index idx = {1, pos, base, table, 0, 0};
    nb_tensor qt = nb_tensor_3d(q, NB_DTYPE_F32, 1, 2, 1), kt = nb_tensor_3d(pool_k, NB_DTYPE_F32, 4, 1, 1),
              vt = nb_tensor_3d(pool_v, NB_DTYPE_F32, 4, 1, 1), ot = nb_tensor_3d(out, NB_DTYPE_F32, 1, 2, 1);
    NB_CHECK_OK(nb_op_attention(ctx(), &qt, &kt, &vt, &idx, NULL, 1.0f, &ot));
    double p1 = exp(2.0) / (exp(1.0) + exp(2.0));
    NB_CHECK_NEAR(out[0], 10 * (1 - p1) + 20 * p1, 1e-5);
    double p1m = exp(-2.0) / (exp(-1.0) + exp(-2.0));
    NB_CHECK_NEAR(out[1], 10 * (1 - p1m) + 20 * p1m, 1e-5);
    /* position 0 sees only itself */
    pos[0] = 0;
    NB_CHECK_OK(nb_op_attention(ctx(), &qt, &kt, &vt, &idx, NULL, 1.0f, &ot));
    NB_CHECK_NEAR(out[0], 10, 1e-6);
    /* a selection restricted to position 1 */
    pos[0] = 1;
    int32_t sp[1] = {1}, sc[1] = {1};
    nb_attn_select sel = {sp, sc, 1};
    NB_CHECK_OK(nb_op_attention(ctx(), &qt, &kt, &vt, &idx, &sel, 1.0f, &ot));
    NB_CHECK_NEAR(out[0], 20, 1e-6);
    /* a slot outside the pool is an error, not a read */
    table[1] = 4;
    NB_CHECK_STATUS(nb_op_attention(ctx(), &qt, &kt, &vt, &idx, NULL, 1.0f, &ot), NB_ERR_INVALID_ARG);
}

static void test_dsa_select_hand(void)
{
    /* 1 head (weight 1), head_dim 1, q = 1: scores relu(k * s): keys 1, -1, 3, 2 */
    float q[1] = {1}, w[1] = {1}, keys[4] = {1, -1, 3, 2};
    int32_t pos[1] = {3}, base[1] = {0}, table[4] = {0, 1, 2, 3}, sel[2], cnt[1];
    nb_attn_index idx = {1, pos, base, table, 0, 0};
    nb_tensor qt = nb_tensor_3d(q, NB_DTYPE_F32, 1, 1, 1), wt = nb_tensor_2d(w, NB_DTYPE_F32, 1, 1),
              kt = nb_tensor_2d(keys, NB_DTYPE_F32, 4, 1);
    NB_CHECK_OK(nb_op_dsa_select(ctx(), &qt, &wt, 0.5f, &kt, &idx, 2, sel, cnt));
    NB_CHECK(cnt[0] == 2 && sel[0] == 2 && sel[1] == 3);
    /* causal: at position 1 only 0 and 1 exist, both are taken (count <= topk) */
    pos[0] = 1;
    NB_CHECK_OK(nb_op_dsa_select(ctx(), &qt, &wt, 0.5f, &kt, &idx, 2, sel, cnt));
    NB_CHECK(cnt[0] == 2 && ((sel[0] == 0 && sel[1] == 1) || (sel[0] == 1 && sel[1] == 0)));
    /* a negative head weight turns a high score into a low one; two heads sum */
    float q2[2] = {1, -1}, w2[2] = {-1, 2};
    pos[0] = 3;
    nb_tensor q2t = nb_tensor_3d(q2, NB_DTYPE_F32, 1, 2, 1), w2t = nb_tensor_2d(w2, NB_DTYPE_F32, 1, 2);
    NB_CHECK_OK(nb_op_dsa_select(ctx(), &q2t, &w2t, 1.0f, &kt, &idx, 1, sel, cnt));
    /* scores: key 1: -1; key -1: 2 (head 2: relu(1) * 2); key 3: -3; key 2: -2 */
    NB_CHECK(cnt[0] == 1 && sel[0] == 1);
}

/* Random MLA case: nseq sequences of various lengths over a shuffled pool; compare forms. */
static void mla_case(int nseq, int with_sel, nb_wfmt kvfmt)
{
    const int nh = 3, nope = 8, rope = 4, vd = 6, r = 16, rows = 64;
    nb_mla_dims d = {nh, nope, rope, vd, r};
    float *lat = malloc(sizeof(float) * rows * r), *kpe = malloc(sizeof(float) * rows * rope);
    for (int i = 0; i < rows * r; i++) lat[i] = frand();
    for (int i = 0; i < rows * rope; i++) kpe[i] = frand();
    const int kvn = nh * (nope + vd);
    float *kvw = malloc(sizeof(float) * kvn * r);
    for (int i = 0; i < kvn * r; i++) kvw[i] = frand() * 0.5f;
    nb_weight kv = {.fmt = NB_WFMT_F32, .n = kvn, .k = r, .data = kvw, .global_scale = 1};
    uint8_t *packed = NULL, *scales = NULL;
    if (kvfmt == NB_WFMT_NVFP4) {
        packed = malloc((size_t)kvn * r / 2);
        scales = malloc((size_t)kvn * r / 16);
        for (int i = 0; i < kvn * r / 2; i++) packed[i] = (uint8_t)(rng_state >> (i % 40));
        for (int i = 0; i < kvn * r / 16; i++) scales[i] = (uint8_t)(0x30 + (i % 16));
        kv = (nb_weight){.fmt = NB_WFMT_NVFP4, .n = kvn, .k = r, .data = packed, .scale = scales, .global_scale = 0.5f,
                         .block_k = 16};
    }
    /* sequences: lengths 9, 5, 12 ...; every token of every sequence queries */
    int lens[3] = {9, 5, 12}, T = 0, tab_n = 0;
    int32_t pos[32], base[32], table[64];
    int perm[64];
    for (int i = 0; i < rows; i++) perm[i] = i;
    for (int i = rows - 1; i > 0; i--) {
        int j = (int)((frand() + 1) * 0.5f * (float)i);
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int s = 0; s < nseq; s++) {
        for (int p = 0; p < lens[s]; p++) {
            table[tab_n + p] = perm[tab_n + p];
            pos[T] = p;
            base[T] = tab_n;
            T++;
        }
        tab_n += lens[s];
    }
    nb_attn_index idx = {T, pos, base, table, 0, 0};
    int32_t sp[32 * 4], sc[32];
    nb_attn_select sel = {sp, sc, 4};
    for (int t = 0; t < T; t++) { /* up to 4 distinct positions <= pos, in a scrambled order */
        int n = 0;
        for (int p = pos[t]; p >= 0 && n < 4; p -= 2) sp[t * 4 + n++] = p;
        sc[t] = n;
    }
    float *q = malloc(sizeof(float) * T * nh * (nope + rope));
    for (int i = 0; i < T * nh * (nope + rope); i++) q[i] = frand();
    float *o1 = malloc(sizeof(float) * T * nh * vd), *o2 = malloc(sizeof(float) * T * nh * vd);
    nb_tensor qt = nb_tensor_3d(q, NB_DTYPE_F32, T, nh, nope + rope), lt = nb_tensor_2d(lat, NB_DTYPE_F32, rows, r),
              kt = nb_tensor_2d(kpe, NB_DTYPE_F32, rows, rope), a = nb_tensor_3d(o1, NB_DTYPE_F32, T, nh, vd),
              b = nb_tensor_3d(o2, NB_DTYPE_F32, T, nh, vd);
    const nb_attn_select *sp_ = with_sel ? &sel : NULL;
    NB_CHECK_OK(nb_op_mla_attention(ctx(), NB_MLA_ABSORBED, &d, &qt, &lt, &kt, &kv, &idx, sp_, 0.3f, &a));
    NB_CHECK_OK(nb_op_mla_attention(ctx(), NB_MLA_NAIVE, &d, &qt, &lt, &kt, &kv, &idx, sp_, 0.3f, &b));
    double md = 0, mx = 0;
    for (int i = 0; i < T * nh * vd; i++) {
        md = fmax(md, fabs((double)o1[i] - o2[i]));
        mx = fmax(mx, fabs((double)o2[i]));
    }
    NB_CHECK_MSG(md <= NB_TOL_MLA_FORMS * mx && mx > 0, "absorbed vs naive: max diff %g (scale %g), %d seqs, sel %d",
                 md, mx, nseq, with_sel);
    /* and the absorbed form against a float64 evaluation of the definition for one token/head */
    {
        int t = T - 1, h = nh - 1, n = with_sel ? sc[t] : pos[t] + 1;
        float deq[kvn * 16];
        NB_CHECK_OK(nb_weight_dequant_rows(&kv, 0, kvn, deq));
        double s[64], mxs = -1e300, sum = 0, o[8] = {0};
        for (int j = 0; j < n; j++) {
            int p = with_sel ? sp[t * 4 + j] : j, row = table[base[t] + p];
            double dot = 0;
            for (int c = 0; c < nope; c++) {
                double kn = 0;
                for (int e = 0; e < r; e++) kn += (double)deq[(h * (nope + vd) + c) * r + e] * lat[row * r + e];
                dot += q[(t * nh + h) * (nope + rope) + c] * kn;
            }
            for (int c = 0; c < rope; c++) dot += (double)q[(t * nh + h) * (nope + rope) + nope + c] * kpe[row * rope + c];
            s[j] = dot * 0.3;
            mxs = fmax(mxs, s[j]);
        }
        for (int j = 0; j < n; j++) sum += (s[j] = exp(s[j] - mxs));
        for (int j = 0; j < n; j++) {
            int p = with_sel ? sp[t * 4 + j] : j, row = table[base[t] + p];
            for (int c = 0; c < vd; c++) {
                double v = 0;
                for (int e = 0; e < r; e++) v += (double)deq[(h * (nope + vd) + nope + c) * r + e] * lat[row * r + e];
                o[c] += s[j] / sum * v;
            }
        }
        for (int c = 0; c < vd; c++) NB_CHECK_NEAR(o1[(t * nh + h) * vd + c], o[c], 1e-4 * (1 + fabs(o[c])));
    }
    /* A BF16 latent cache (--kv-cache-dtype bfloat16): rows [latent | k_pe | 4 pad] of BF16 give
     * exactly what float32 pools holding the same rounded values give, in both forms; a pool
     * of mixed dtypes is refused. */
    {
        const int ld = r + rope + 4;
        nb_bf16 *rows16 = calloc((size_t)rows * ld, sizeof *rows16);
        float *latr = malloc(sizeof(float) * rows * r), *kper = malloc(sizeof(float) * rows * rope);
        for (int i = 0; i < rows; i++) {
            for (int c = 0; c < r; c++) latr[i * r + c] = nb_bf16_to_f32(rows16[i * ld + c] = nb_f32_to_bf16(lat[i * r + c]));
            for (int c = 0; c < rope; c++)
                kper[i * rope + c] = nb_bf16_to_f32(rows16[i * ld + r + c] = nb_f32_to_bf16(kpe[i * rope + c]));
        }
        nb_tensor l16 = nb_tensor_2d(rows16, NB_DTYPE_BF16, rows, r), k16 = nb_tensor_2d(rows16 + r, NB_DTYPE_BF16, rows, rope);
        l16.stride[0] = k16.stride[0] = ld;
        nb_tensor lr = nb_tensor_2d(latr, NB_DTYPE_F32, rows, r), kr = nb_tensor_2d(kper, NB_DTYPE_F32, rows, rope);
        for (int mode = 0; mode < 2; mode++) {
            const nb_mla_mode mm = mode ? NB_MLA_NAIVE : NB_MLA_ABSORBED;
            memset(o1, 0xff, sizeof(float) * T * nh * vd);
            NB_CHECK_OK(nb_op_mla_attention(ctx(), mm, &d, &qt, &l16, &k16, &kv, &idx, sp_, 0.3f, &a));
            NB_CHECK_OK(nb_op_mla_attention(ctx(), mm, &d, &qt, &lr, &kr, &kv, &idx, sp_, 0.3f, &b));
            NB_CHECK_MSG(memcmp(o1, o2, sizeof(float) * T * nh * vd) == 0, "BF16 rows != float32 rounded rows (%s)",
                         mode ? "naive" : "absorbed");
        }
        NB_CHECK_STATUS(nb_op_mla_attention(ctx(), NB_MLA_ABSORBED, &d, &qt, &l16, &kr, &kv, &idx, sp_, 0.3f, &a),
                        NB_ERR_INVALID_ARG);
        NB_CHECK(strstr(nb_last_error(), "same dtype") != NULL);
        free(rows16), free(latr), free(kper);
    }
    free(lat), free(kpe), free(kvw), free(q), free(o1), free(o2), free(packed), free(scales);
}

static void test_mla_forms_dense(void) { mla_case(1, 0, NB_WFMT_F32); }
static void test_mla_forms_multi_seq(void) { mla_case(3, 0, NB_WFMT_F32); }
static void test_mla_forms_sparse(void) { mla_case(3, 1, NB_WFMT_F32); }
static void test_mla_forms_nvfp4(void) { mla_case(2, 1, NB_WFMT_NVFP4); }

static const nb_test tests[] = {
    {"gqa_hand", test_gqa_hand},
    {"dsa_select_hand", test_dsa_select_hand},
    {"mla_forms_dense", test_mla_forms_dense},
    {"mla_forms_multi_seq", test_mla_forms_multi_seq},
    {"mla_forms_sparse", test_mla_forms_sparse},
    {"mla_forms_nvfp4", test_mla_forms_nvfp4},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
