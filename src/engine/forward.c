/* The forward pass (engine/forward.h): every family's recipe written once over ops.h.
 *   h = embed(ids)
 *   per layer: a = rmsnorm(h); h += attention(a); a = rmsnorm(h); h += mlp_or_moe(a)
 *   logits = lm_head(rmsnorm(h)) for the rows asked for
 * Attention is MLA (+ DSA selection) or GQA over the slot-addressed KV pool; the batch's
 * tokens of all sequences go through every op together, each token carrying its position
 * and its sequence's slot array. NB_DUMP='blk.1.*' writes named intermediates (fwd_dump.h).
 * The recipe is backend-neutral: activations, index arrays and the KV pool live in the
 * memory of the model's ops context (host for CPU, device for CUDA: model/upload.h builds a
 * device twin), index arrays are built on the host and uploaded once per step, and only the
 * logits come back (nb_ops_download).
 * Exercised by nibble score / generate, tests/golden,
 * tests/model/test_forward_props.c and tests/cuda_ops/test_cuda_forward.c. */
#include "engine/forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "engine/fwd_dump.h"

/* Steps of up to this many tokens run a MoE layer's shared expert on a second queue beside
 * its routed experts (mlp_layer). Their linears then stay off cuBLASLt, whose workspace the
 * two queues would share (ops/cuda/linear.h: GEMV and skinny-GEMM kernels up to 16 tokens). */
#define NB_FWD_BRANCH_MAX_TOKENS 16

/* Per-step buffers, carved from one allocation. */
typedef struct fwd_bufs {
    void *block;
    size_t used, cap;
} fwd_bufs;

static float *take(fwd_bufs *b, int64_t n)
{
    size_t bytes = ((size_t)n * sizeof(float) + 63) / 64 * 64;
    NB_ASSERT(b->used + bytes <= b->cap);
    float *p = (float *)((char *)b->block + b->used);
    b->used += bytes;
    return p;
}

typedef struct fwd {
    nb_model *m;
    nb_device dev;
    nb_kv_pool *pool;
    int T;
    int32_t *ids, *pos, *slot_base, *slot_table, *rows; /* rows[t]: pool row of token t */
    int32_t *lrows; /* token index of each logits row */
    nb_attn_index idx;
    /* DSA selection of the latest layer that computed one (shared layers reuse it). */
    int32_t *sel_pos, *sel_count;
    int have_sel;
    int dsa_live; /* nb_fwd_index.dsa_live */
    float *h, *a, *o, *q, *qa, *kva, *att, *k, *v, *qi, *ki, *wi, *rlog, *rw;
    float *acat; /* [T, a_cat rows]: the concatenated projections' output (nb_layer.a_cat) */
    float *o2;   /* [T, H]: the shared expert's output while it runs beside the routed experts */
    int32_t *rid;
} fwd;

/* The device of the step being run (views below are made on it); per thread, as ops contexts are. */
static _Thread_local nb_device fwd_dev;
static nb_tensor t2(float *p, int64_t r, int64_t c)
{
    nb_tensor t = nb_tensor_2d(p, NB_DTYPE_F32, r, c);
    t.device = fwd_dev;
    return t;
}
static nb_tensor t3(float *p, int64_t a, int64_t b, int64_t c)
{
    nb_tensor t = nb_tensor_3d(p, NB_DTYPE_F32, a, b, c);
    t.device = fwd_dev;
    return t;
}

/* A view of `width` elements of dtype dt at byte `at` in each row of a layer's pool:
 * [n_slots, width] (row stride: the row's bytes in elements; nb_kv_layout_for keeps it whole). */
static nb_tensor pool_view(const fwd *f, int l, int64_t at, int64_t width, nb_dtype dt)
{
    nb_tensor t = t2((float *)(void *)(f->pool->layer[l] + at), f->pool->n_slots, width);
    t.dtype = dt;
    t.stride[0] = f->pool->layout.layer[l].row_bytes / (int64_t)nb_dtype_size(dt);
    return t;
}

/* Copy per-token rows src [T, width] (row stride lds) into the pool's float32 part at `at`. */
static nb_status pool_write(fwd *f, int l, int64_t at, const float *src, int64_t lds, int64_t width)
{
    nb_tensor st = t2((float *)src, f->T, width), dst = pool_view(f, l, at, width, NB_DTYPE_F32);
    st.stride[0] = lds;
    return nb_op_set_rows(f->m->ops, &st, f->rows, &dst);
}

/* The weight as this step runs it: without the top-k precision hint when it only feeds a
 * DSA selection that cannot bite this step (ops.h NB_WEIGHT_FEEDS_DSA). */
static const nb_weight *step_weight(const fwd *f, const nb_weight *w, nb_weight *tmp)
{
    if (f->dsa_live || !(w->flags & NB_WEIGHT_FEEDS_DSA)) return w;
    *tmp = *w;
    tmp->flags &= ~(NB_WEIGHT_FEEDS_TOPK | NB_WEIGHT_FEEDS_DSA);
    return tmp;
}

static nb_status linear(fwd *f, const float *x, int64_t ldx, int64_t k, const nb_weight *w, float *y)
{
    nb_tensor xt = t2((float *)x, f->T, k);
    xt.stride[0] = ldx;
    nb_tensor yt = t2(y, f->T, w->n);
    nb_weight tmp;
    return nb_op_linear(f->m->ops, &xt, step_weight(f, w, &tmp), &yt);
}

static nb_status mlp(fwd *f, const nb_tensor *a, const nb_weight *gate, const nb_weight *up, const nb_weight *down,
                     int accumulate, nb_tensor *o)
{
    nb_weight g, u, d;
    return nb_op_mlp(f->m->ops, a, step_weight(f, gate, &g), step_weight(f, up, &u), step_weight(f, down, &d),
                     accumulate, o);
}

/* NIBBLE_KV_PREP=1: an MLA layer's key side (norms, key ropes, pool writes) in one launch
 * before the queries (mla_layer); off by default: measured slower end to end on the H200
 * (bench/RESULTS.md, fourth session). Read once. */
static int kv_prep_fused(void)
{
    static int on = -1; /* a benign race between threads reads the same value */
    if (on < 0) {
        const char *e = getenv("NIBBLE_KV_PREP");
        on = e && !strcmp(e, "1");
    }
    return on;
}

static nb_status mla_layer(fwd *f, int l)
{
    nb_model *m = f->m;
    const nb_model_config *c = &m->cfg;
    const nb_layer *L = &m->layers[l];
    nb_ops_ctx *ops = m->ops;
    const int T = f->T, nh = c->num_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim;
    const int r = c->kv_lora_rank, qk = nope + rope, H = c->hidden_size;
    const nb_kv_layer_layout *lay = &f->pool->layout.layer[l];

    /* Projections of the normalized hidden state (one concatenated linear where the device
     * twin has one, model/upload.c; else up to four), their norms in one launch, the queries,
     * every rope in one launch and both pool writes in one launch: the composition of the
     * separate ops (ops.h "fused launches"), with fewer launches per layer. */
    const int ih = c->index_n_heads, id = c->index_head_dim, ql = c->q_lora_rank;
    float *qa_p = f->qa, *kva_p = f->kva, *ki_p = f->ki, *wi_p = f->wi;
    int64_t qa_ld = ql, kva_ld = r + rope, ki_ld = id, wi_ld = ih;
    if (L->a_cat.n > 0) {
        const int64_t N = L->a_cat.n;
        if (ql <= 0 || N != ql + r + rope + (L->has_indexer ? id + ih : 0))
            return nb_error(NB_ERR_INTERNAL, "forward: layer %d: concatenated projections of %lld rows", l, (long long)N);
        NB_TRY(linear(f, f->a, H, H, &L->a_cat, f->acat));
        qa_p = f->acat;
        kva_p = qa_p + ql;
        ki_p = kva_p + r + rope;
        wi_p = ki_p + id;
        qa_ld = kva_ld = ki_ld = wi_ld = N;
    } else {
        if (ql > 0) NB_TRY(linear(f, f->a, H, H, &L->q_a_proj, f->qa));
        NB_TRY(linear(f, f->a, H, H, &L->kv_a_proj, f->kva));
        if (L->has_indexer) {
            NB_TRY(linear(f, f->a, H, H, &L->idx_wk, f->ki));
            NB_TRY(linear(f, f->a, H, H, &L->idx_weights_proj, f->wi));
        }
    }
    nb_tensor qa = t2(qa_p, T, ql), lat = t2(kva_p, T, r), ki = t2(ki_p, T, id), wis = t2(wi_p, T, ih);
    qa.stride[0] = qa_ld;
    lat.stride[0] = kva_ld;
    ki.stride[0] = ki_ld;
    wis.stride[0] = wi_ld;
    nb_norm_part np[NB_FUSED_MAX];
    int nn = 0;
    if (ql > 0) np[nn++] = (nb_norm_part){NB_NORM_RMS, &qa, &qa, L->q_a_norm, NULL, m->latent_norm_eps, 1.0f};
    np[nn++] = (nb_norm_part){NB_NORM_RMS, &lat, &lat, L->kv_a_norm, NULL, m->latent_norm_eps, 1.0f};
    if (L->has_indexer) {
        np[nn++] = (nb_norm_part){NB_NORM_LAYER, &ki, &ki, L->idx_k_norm_w, L->idx_k_norm_b, 1e-6f, 1.0f};
        np[nn++] = (nb_norm_part){NB_NORM_SCALE, &wis, &wis, NULL, NULL, 0.0f, 1.0f / sqrtf((float)ih)};
    }

    /* By default: the norms above in one launch, the queries, every rope (queries and keys) in
     * one launch, both pool writes in one launch. NIBBLE_KV_PREP=1: the key side does not wait
     * for the queries, so the norms, the ropes of k_pe and of the indexer key and the pool
     * writes go in one launch (ops.h nb_op_norm_rope_set_n) before the queries, whose ropes
     * follow them: one launch fewer, but the launch before q_b_proj is the longer one and the
     * query rope a launch of its own, which measured 0.02-0.03 ms per step slower at batch 1
     * and 2 (bench/RESULTS.md). The same values either way. */
    const int fused = kv_prep_fused();
    nb_tensor kpe = t3(kva_p + r, T, 1, rope);
    kpe.stride[0] = kva_ld;
    nb_tensor ki_rot = t3(ki_p, T, 1, rope);
    ki_rot.stride[0] = ki_ld;
    nb_tensor kvs = t2(kva_p, T, r + rope), kvd = pool_view(f, l, lay->latent_at, r + rope, lay->lat_dtype);
    nb_tensor kis = t2(ki_p, T, id), kid = L->has_indexer ? pool_view(f, l, lay->index_at, id, NB_DTYPE_F32) : kis;
    kvs.stride[0] = kva_ld;
    kis.stride[0] = ki_ld;
    const nb_tensor *ws_src[] = {&kvs, &kis};
    nb_tensor *ws_dst[] = {&kvd, &kid};
    const int nk = L->has_indexer ? 2 : 1;
    if (fused) {
        nb_tensor *krx[] = {&kpe, &ki_rot};
        const nb_rope *krt[] = {&m->rope, &m->index_rope};
        const nb_norm_rope_set prep = {nn, np, nk, krx, f->pos, krt, nk, ws_src, f->rows, ws_dst};
        NB_TRY(nb_op_norm_rope_set_n(ops, &prep));
    } else {
        NB_TRY(nb_op_norm_n(ops, nn, np));
    }

    /* queries (q_pe rotated below) */
    if (ql > 0)
        NB_TRY(linear(f, qa_p, qa_ld, ql, &L->q_b_proj, f->q));
    else
        NB_TRY(linear(f, f->a, H, H, &L->q_proj, f->q));
    /* the indexer's queries only where its selection can bite (nb_forward_dsa_live) */
    const int idx_q = L->has_indexer && f->dsa_live;
    if (idx_q) NB_TRY(linear(f, qa_p, qa_ld, ql, &L->idx_wq_b, f->qi));

    nb_tensor q_pe = t3(f->q + nope, T, nh, qk);
    q_pe.stride[0] = (int64_t)nh * qk;
    q_pe.stride[1] = qk;
    q_pe.shape[2] = rope;
    nb_tensor qi_rot = t3(f->qi, T, ih, id);
    qi_rot.shape[2] = rope;
    if (fused) {
        nb_tensor *rx[] = {&q_pe, &qi_rot};
        const nb_rope *rt[] = {&m->rope, &m->index_rope};
        NB_TRY(nb_op_rope_n(ops, 1 + idx_q, rx, f->pos, rt));
    } else {
        nb_tensor *rx[] = {&q_pe, &kpe, &ki_rot, &qi_rot};
        const nb_rope *rt[] = {&m->rope, &m->rope, &m->index_rope, &m->index_rope};
        NB_TRY(nb_op_rope_n(ops, L->has_indexer ? 3 + idx_q : 2, rx, f->pos, rt));
        NB_TRY(nb_op_set_rows_n(ops, nk, ws_src, f->rows, ws_dst));
    }

    /* DSA selection */
    const nb_attn_select *selp = NULL;
    nb_attn_select sel;
    if (idx_q) {
        nb_tensor qit = t3(f->qi, T, ih, id), wit = t2(wi_p, T, ih);
        wit.stride[0] = wi_ld;
        nb_tensor keys = pool_view(f, l, lay->index_at, id, NB_DTYPE_F32);
        NB_TRY(nb_op_dsa_select(ops, &qit, &wit, 1.0f / sqrtf((float)id), &keys, &f->idx, c->index_topk, f->sel_pos,
                                f->sel_count));
        f->have_sel = 1;
    }
    if (c->arch == NB_ARCH_GLM_MOE_DSA && f->dsa_live) {
        if (!f->have_sel) return nb_error(NB_ERR_INTERNAL, "forward: layer %d shares a DSA selection none computed", l);
        sel = (nb_attn_select){f->sel_pos, f->sel_count, c->index_topk};
        selp = &sel;
    }

    nb_tensor qt = t3(f->q, T, nh, qk), out = t3(f->att, T, nh, c->v_head_dim);
    nb_tensor latp = pool_view(f, l, lay->latent_at, r, lay->lat_dtype),
              kpep = pool_view(f, l, lay->kpe_at, rope, lay->lat_dtype);
    nb_mla_dims d = {nh, nope, rope, c->v_head_dim, r};
    NB_TRY(nb_op_mla_attention(ops, m->params.mla_mode, &d, &qt, &latp, &kpep, &L->kv_b_proj, &f->idx, selp,
                               m->attn_scale, &out));
    return linear(f, f->att, (int64_t)nh * c->v_head_dim, (int64_t)nh * c->v_head_dim, &L->o_proj, f->o);
}

static nb_status gqa_layer(fwd *f, int l)
{
    nb_model *m = f->m;
    const nb_model_config *c = &m->cfg;
    const nb_layer *L = &m->layers[l];
    nb_ops_ctx *ops = m->ops;
    const int T = f->T, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim, H = c->hidden_size;
    const nb_kv_layer_layout *lay = &f->pool->layout.layer[l];
    NB_TRY(linear(f, f->a, H, H, &L->q_proj, f->q));
    NB_TRY(linear(f, f->a, H, H, &L->k_proj, f->k));
    NB_TRY(linear(f, f->a, H, H, &L->v_proj, f->v));
    if (L->q_norm) {
        nb_tensor qn = t2(f->q, (int64_t)T * nh, hd), kn = t2(f->k, (int64_t)T * nkv, hd);
        NB_TRY(nb_op_rmsnorm(ops, &qn, L->q_norm, (float)c->rms_norm_eps, &qn));
        NB_TRY(nb_op_rmsnorm(ops, &kn, L->k_norm, (float)c->rms_norm_eps, &kn));
    }
    nb_tensor qt = t3(f->q, T, nh, hd), kt = t3(f->k, T, nkv, hd);
    NB_TRY(nb_op_rope(ops, &qt, f->pos, &m->rope));
    NB_TRY(nb_op_rope(ops, &kt, f->pos, &m->rope));
    NB_TRY(pool_write(f, l, lay->k_at, f->k, (int64_t)nkv * hd, (int64_t)nkv * hd));
    NB_TRY(pool_write(f, l, lay->v_at, f->v, (int64_t)nkv * hd, (int64_t)nkv * hd));
    nb_tensor kp = pool_view(f, l, lay->k_at, (int64_t)nkv * hd, NB_DTYPE_F32),
              vp = pool_view(f, l, lay->v_at, (int64_t)nkv * hd, NB_DTYPE_F32);
    nb_tensor kp3 = t3(kp.data, kp.shape[0], nkv, hd), vp3 = t3(vp.data, vp.shape[0], nkv, hd);
    kp3.stride[0] = vp3.stride[0] = kp.stride[0];
    nb_tensor out = t3(f->att, T, nh, hd);
    NB_TRY(nb_op_attention(ops, &qt, &kp3, &vp3, &f->idx, NULL, m->attn_scale, &out));
    return linear(f, f->att, (int64_t)nh * hd, (int64_t)nh * hd, &L->o_proj, f->o);
}

static nb_status mlp_layer(fwd *f, int l)
{
    nb_model *m = f->m;
    const nb_model_config *c = &m->cfg;
    const nb_layer *L = &m->layers[l];
    nb_ops_ctx *ops = m->ops;
    const int T = f->T, H = c->hidden_size;
    nb_tensor a = t2(f->a, T, H), o = t2(f->o, T, H);
    if (!L->is_moe) return mlp(f, &a, &L->gate_proj, &L->up_proj, &L->down_proj, 0, &o);
    const int E = c->n_routed_experts, K = c->num_experts_per_tok;
    nb_router_params rp = m->router;
    rp.correction_bias = L->router_bias;
    nb_tensor lg = t2(f->rlog, T, E), w = t2(f->rw, T, K);
    nb_tensor ids = nb_tensor_2d(f->rid, NB_DTYPE_I32, T, K);
    ids.device = f->dev;
    nb_moe_weights mw = {E, H, c->moe_intermediate_size, L->exp_gate, L->exp_up, L->exp_down};
    if (L->has_shared && T <= NB_FWD_BRANCH_MAX_TOKENS && nb_ops_can_branch(ops)) {
        /* The shared expert beside the router and the routed experts (a second queue, ops.h
         * nb_ops_branch): both stream their weights, and each fills bandwidth the other
         * leaves idle at its start and tail. Its output is added after the join. */
        nb_tensor o2 = t2(f->o2, T, H);
        NB_TRY(nb_ops_branch(ops));
        nb_status st = mlp(f, &a, &L->sh_gate, &L->sh_up, &L->sh_down, 0, &o2);
        nb_status sm = nb_ops_branch_main(ops);
        if (st == NB_OK && sm == NB_OK) st = nb_op_moe_gate_route(ops, &a, &L->router, &lg, &rp, &ids, &w);
        if (st == NB_OK) st = nb_op_moe_experts(ops, &a, &ids, &w, &mw, 0, &o);
        nb_status sj = nb_ops_join(ops); /* whatever failed, the queues are one again */
        NB_TRY(st != NB_OK ? st : sm != NB_OK ? sm : sj);
        return nb_op_add(ops, &o2, &o);
    }
    /* the router's linear and choice as one op (ops.h: a backend may run them as one launch) */
    NB_TRY(nb_op_moe_gate_route(ops, &a, &L->router, &lg, &rp, &ids, &w));
    NB_TRY(nb_op_moe_experts(ops, &a, &ids, &w, &mw, 0, &o));
    if (L->has_shared) NB_TRY(mlp(f, &a, &L->sh_gate, &L->sh_up, &L->sh_down, 1, &o));
    return NB_OK;
}

nb_status nb_forward_check(const nb_model *m, const nb_kv_pool *pool, const nb_batch *b, int *T, int64_t *n_slots)
{
    const nb_model_config *c = &m->cfg;
    if (b->n_seqs <= 0) return nb_error(NB_ERR_INVALID_ARG, "forward: empty batch");
    if (pool->layout.n_layers != c->num_layers)
        return nb_error(NB_ERR_INVALID_ARG, "forward: KV pool has %d layers, the model %d", pool->layout.n_layers,
                        c->num_layers);
    if (pool->device != nb_ops_ctx_device(m->ops))
        return nb_error(NB_ERR_INVALID_ARG, "forward: the KV pool must be on the model's device (%s)",
                        nb_ops_ctx_device(m->ops) == NB_DEVICE_CUDA ? "cuda" : "cpu");
    nb_kv_layout want;
    NB_TRY(nb_kv_layout_for(c, pool->layout.layer[0].lat_dtype, &want));
    for (int l = 0; l < c->num_layers; l++)
        if (memcmp(&want.layer[l], &pool->layout.layer[l], sizeof want.layer[l]) != 0)
            return nb_error(NB_ERR_INVALID_ARG, "forward: KV pool layer %d has rows of %lld bytes laid out for another "
                            "model (this one needs %lld)", l, (long long)pool->layout.layer[l].row_bytes,
                            (long long)want.layer[l].row_bytes);
    int64_t tot = 0, slots = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const nb_seq_step *q = &b->seqs[s];
        if (q->n_tokens <= 0 || q->start_pos < 0)
            return nb_error(NB_ERR_INVALID_ARG, "forward: sequence %d: n_tokens %d, start_pos %d", s, q->n_tokens,
                            q->start_pos);
        int64_t end = (int64_t)q->start_pos + q->n_tokens;
        if (c->max_position_embeddings > 0 && end > c->max_position_embeddings)
            return nb_error(NB_ERR_INVALID_ARG, "forward: sequence %d reaches position %lld, beyond max_position_embeddings %d",
                            s, (long long)end - 1, c->max_position_embeddings);
        for (int t = 0; t < q->n_tokens; t++)
            if (q->tokens[t] < 0 || q->tokens[t] >= c->vocab_size)
                return nb_error(NB_ERR_INVALID_ARG, "forward: sequence %d: token %d is id %d, outside the vocabulary of %d",
                                s, t, q->tokens[t], c->vocab_size);
        for (int64_t p = 0; p < end; p++)
            if (q->slots[p] < 0 || q->slots[p] >= pool->n_slots)
                return nb_error(NB_ERR_INVALID_ARG, "forward: sequence %d: slots[%lld] = %d outside the pool of %lld", s,
                                (long long)p, q->slots[p], (long long)pool->n_slots);
        tot += q->n_tokens;
        slots += end;
    }
    if (tot > (1 << 24)) return nb_error(NB_ERR_INVALID_ARG, "forward: %lld tokens in one step", (long long)tot);
    *T = (int)tot;
    *n_slots = slots;
    return NB_OK;
}

/* NB_DUMP of T rows of `cols` floats (copied to the host first when they live on a device). */
static nb_status dump_rows(fwd *f, const char *name, const float *buf, int64_t cols, float **host)
{
    if (f->dev == NB_DEVICE_CPU) {
        nb_dump_f32(name, buf, f->T, cols);
        return NB_OK;
    }
    if (!*host && !(*host = malloc((size_t)f->T * (size_t)cols * sizeof(float))))
        return nb_error(NB_ERR_OUT_OF_MEMORY, "forward: dump buffer");
    NB_TRY(nb_ops_download(f->m->ops, *host, buf, (size_t)f->T * (size_t)cols * sizeof(float)));
    nb_dump_f32(name, *host, f->T, cols);
    return NB_OK;
}

/* Element counts of the activation buffers of a step of T tokens and R logit rows, in the order
 * fwd_setup takes them. */
#define FWD_N_BUFS 18
static void fwd_sizes(const nb_model_config *c, int64_t T, int64_t R, int64_t sizes[FWD_N_BUFS])
{
    const int64_t H = c->hidden_size, nh = c->num_heads;
    const int64_t qw = nh * NB_MAX(c->head_dim, c->qk_nope_head_dim + c->qk_rope_head_dim);
    const int64_t attw = nh * NB_MAX(c->head_dim, c->v_head_dim);
    const int64_t kvw = (int64_t)c->num_kv_heads * c->head_dim;
    const int64_t ka = c->kv_lora_rank + c->qk_rope_head_dim;
    const int64_t qiw = (int64_t)c->index_n_heads * c->index_head_dim;
    const int64_t E = c->n_routed_experts, K = NB_MAX(c->num_experts_per_tok, 1), topk = NB_MAX(c->index_topk, 1);
    const int64_t catw = c->q_lora_rank + ka + c->index_head_dim + c->index_n_heads;
    const int64_t s[FWD_N_BUFS] = {3 * H * T, qw * T, c->q_lora_rank * T + 1, ka * T + 1, attw * T, kvw * T + 1,
                                   kvw * T + 1, qiw * T + 1, c->index_head_dim * T + 1, c->index_n_heads * T + 1,
                                   E * T + 1, K * T, K * T, topk * T, T, H * R, catw * T + 1, H * T};
    memcpy(sizes, s, sizeof s);
}

/* Bytes of those buffers, each rounded up to 64 bytes (take()'s alignment). */
static size_t fwd_cap(const int64_t sizes[FWD_N_BUFS])
{
    size_t cap = 0;
    for (int i = 0; i < FWD_N_BUFS; i++) cap += ((size_t)sizes[i] * 4 + 63) / 64 * 64;
    return cap;
}

size_t nb_fwd_act_bytes(const nb_model_config *cfg, int64_t T, int64_t R)
{
    int64_t sizes[FWD_N_BUFS];
    fwd_sizes(cfg, T, R, sizes);
    return fwd_cap(sizes);
}

/* Carve the activations of a step of T tokens and R logit rows out of scratch slot
 * NB_FWD_ACT_SLOT: the layout depends on (config, T, R) alone. */
static nb_status fwd_setup(nb_model *m, nb_kv_pool *pool, int T, int R, const nb_fwd_index *ix, fwd *f,
                           float **final_rows)
{
    const nb_model_config *c = &m->cfg;
    const int64_t H = c->hidden_size;
    /* element counts of every buffer, in take() order below */
    int64_t sizes[FWD_N_BUFS];
    fwd_sizes(c, T, R, sizes);
    nb_ops_ctx *ops = m->ops;
    fwd_bufs bufs = {0};
    bufs.cap = fwd_cap(sizes);
    /* host or device memory, kept between steps */
    bufs.block = nb_ops_scratch(ops, NB_FWD_ACT_SLOT, bufs.cap);
    if (!bufs.block) return nb_error_wrap(NB_ERR_OUT_OF_MEMORY, "forward: activations for %d tokens", T);
    fwd_dev = nb_ops_ctx_device(ops);
    *f = (fwd){.m = m, .dev = fwd_dev, .pool = pool, .T = T};
    f->ids = (int32_t *)ix->ids;
    f->pos = (int32_t *)ix->pos;
    f->slot_base = (int32_t *)ix->slot_base;
    f->slot_table = (int32_t *)ix->slot_table;
    f->rows = (int32_t *)ix->rows;
    f->lrows = (int32_t *)ix->lrows;
    f->dsa_live = ix->dsa_live;
    int n = 0;
    f->h = take(&bufs, sizes[n++]);
    f->a = f->h + H * T;
    f->o = f->a + H * T;
    f->q = take(&bufs, sizes[n++]);
    f->qa = take(&bufs, sizes[n++]);
    f->kva = take(&bufs, sizes[n++]);
    f->att = take(&bufs, sizes[n++]);
    f->k = take(&bufs, sizes[n++]);
    f->v = take(&bufs, sizes[n++]);
    f->qi = take(&bufs, sizes[n++]);
    f->ki = take(&bufs, sizes[n++]);
    f->wi = take(&bufs, sizes[n++]);
    f->rlog = take(&bufs, sizes[n++]);
    f->rw = take(&bufs, sizes[n++]);
    f->rid = (int32_t *)take(&bufs, sizes[n++]);
    f->sel_pos = (int32_t *)take(&bufs, sizes[n++]);
    f->sel_count = (int32_t *)take(&bufs, sizes[n++]);
    *final_rows = take(&bufs, sizes[n++]);
    f->acat = take(&bufs, sizes[n++]);
    f->o2 = take(&bufs, sizes[n++]);
    NB_ASSERT(n == FWD_N_BUFS);
    f->idx = (nb_attn_index){T, f->pos, f->slot_base, f->slot_table, ix->long_ctx, ix->max_ctx};
    return NB_OK;
}

/* Every layer, then the logits of the R rows lrows names into `logits` (model memory). */
static nb_status fwd_run(fwd *f, int R, float *final_rows, float *logits, int dump)
{
    nb_model *m = f->m;
    const nb_model_config *c = &m->cfg;
    nb_ops_ctx *ops = m->ops;
    const int T = f->T;
    const int64_t H = c->hidden_size;
    nb_tensor h = t2(f->h, T, H), a = t2(f->a, T, H), o = t2(f->o, T, H);
    nb_status st = NB_OK;
    char dn[64];
    float *dump_host = NULL;
#define DUMP(buf, cols, ...)                                                                   \
    do {                                                                                       \
        if (dump && st == NB_OK) {                                                             \
            snprintf(dn, sizeof dn, __VA_ARGS__);                                              \
            st = dump_rows(f, dn, buf, cols, &dump_host);                                      \
        }                                                                                      \
    } while (0)
    if (dump) nb_dump_step();
    st = nb_op_embedding(ops, &m->embed, f->ids, T, &h);
    DUMP(f->h, H, "embed");
    if (st == NB_OK) st = nb_op_rmsnorm(ops, &h, m->layers[0].input_norm, (float)c->rms_norm_eps, &a);
    for (int l = 0; l < c->num_layers && st == NB_OK; l++) {
        DUMP(f->a, H, "blk.%d.attn_in", l);
        st = c->attn == NB_ATTN_MLA ? mla_layer(f, l) : gqa_layer(f, l);
        DUMP(f->o, H, "blk.%d.attn_out", l);
        if (st == NB_OK) st = nb_op_add_rmsnorm(ops, &o, &h, m->layers[l].post_attn_norm, (float)c->rms_norm_eps, &a);
        DUMP(f->a, H, "blk.%d.mlp_in", l);
        if (st == NB_OK) st = mlp_layer(f, l);
        DUMP(f->o, H, "blk.%d.mlp_out", l);
        const float *next = l + 1 < c->num_layers ? m->layers[l + 1].input_norm : m->final_norm;
        if (st == NB_OK) st = nb_op_add_rmsnorm(ops, &o, &h, next, (float)c->rms_norm_eps, &a);
        if (st != NB_OK) st = nb_error_wrap(st, "layer %d", l);
    }
    DUMP(f->a, H, "final_norm");
#undef DUMP
    free(dump_host);
    if (st == NB_OK) {
        nb_tensor x = t2(final_rows, R, H);
        st = nb_op_get_rows(ops, &a, f->lrows, &x);
        nb_tensor y = t2(logits, R, c->vocab_size);
        if (st == NB_OK) st = nb_op_linear(ops, &x, &m->lm_head, &y);
    }
    return st;
}

nb_status nb_forward_enqueue(nb_model *m, nb_kv_pool *pool, int T, int R, const nb_fwd_index *ix, float *logits)
{
    if (T <= 0 || R <= 0 || R > T || !ix || !logits)
        return nb_error(NB_ERR_INVALID_ARG, "forward: enqueue of %d tokens, %d logit rows", T, R);
    fwd f;
    float *final_rows;
    NB_TRY(fwd_setup(m, pool, T, R, ix, &f, &final_rows));
    return fwd_run(&f, R, final_rows, logits, 0);
}

int nb_forward_dsa_live(const nb_model *m, const nb_batch *b)
{
    const nb_model_config *c = &m->cfg;
    if (c->arch != NB_ARCH_GLM_MOE_DSA || c->index_topk <= 0) return 0;
    for (int s = 0; s < b->n_seqs; s++)
        if ((int64_t)b->seqs[s].start_pos + b->seqs[s].n_tokens > c->index_topk) return 1;
    return 0;
}

static int g_long_ctx; /* nb_forward_force_long_ctx; 0: NIBBLE_MLA_LONG_CTX or the default */

void nb_forward_force_long_ctx(int positions) { g_long_ctx = positions > 0 ? positions : 0; }

int nb_forward_long_ctx_default(int n_heads, int64_t n_tokens)
{
    /* from 3 tokens the kernel is wgmma whatever the hint: 512 there keeps graph classes as before */
    return n_tokens == 2 || (n_tokens == 1 && n_heads >= 128) ? NB_FWD_LONG_CTX_WIDE : NB_FWD_LONG_CTX;
}

/* The forced threshold, else NIBBLE_MLA_LONG_CTX's, else 0 (the default by shape). */
static int64_t long_ctx_threshold(void)
{
    if (g_long_ctx) return g_long_ctx;
    static int env = -1; /* read once: a step's class must not change under a captured graph */
    if (env < 0) {
        const char *e = getenv("NIBBLE_MLA_LONG_CTX");
        const long v = e ? strtol(e, NULL, 10) : 0;
        env = v >= 1 && v <= INT32_MAX ? (int)v : 0;
    }
    return env;
}

int nb_forward_long_ctx(const nb_model *m, const nb_batch *b)
{
    const nb_model_config *c = &m->cfg;
    if (c->attn != NB_ATTN_MLA) return 0;
    int64_t n = 0, longest = 0; /* the step's tokens, and the most positions a token attends to */
    for (int s = 0; s < b->n_seqs; s++) {
        n += b->seqs[s].n_tokens;
        longest = NB_MAX(longest, (int64_t)b->seqs[s].start_pos + b->seqs[s].n_tokens);
    }
    const int64_t th = long_ctx_threshold();
    return longest >= (th ? th : nb_forward_long_ctx_default(c->num_heads, n));
}

void nb_forward_fill_index(const nb_batch *b, int32_t *ids, int32_t *pos, int32_t *sbase, int32_t *stab, int32_t *rows,
                           int32_t *lrows)
{
    int t = 0, base = 0, r = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const nb_seq_step *q = &b->seqs[s];
        int end = q->start_pos + q->n_tokens;
        memcpy(stab + base, q->slots, (size_t)end * sizeof(int32_t));
        for (int i = 0; i < q->n_tokens; i++, t++) {
            ids[t] = q->tokens[i];
            pos[t] = q->start_pos + i;
            sbase[t] = base;
            rows[t] = q->slots[q->start_pos + i];
            if (q->all_logits || i == q->n_tokens - 1) lrows[r++] = t;
        }
        base += end;
    }
}

/* The eager step: index arrays built on the host and moved with one upload (on the CPU the
 * host image is used in place), logits to `host_logits` (host memory) or, when it is NULL,
 * left in scratch slot NB_FWD_LOGITS_SLOT (*keep). */
static nb_status forward_eager(nb_model *m, nb_kv_pool *pool, const nb_batch *b, float *host_logits, float **keep)
{
    int T = 0;
    int64_t n_slots = 0;
    NB_TRY(nb_forward_check(m, pool, b, &T, &n_slots));
    const int R = nb_batch_logit_rows(b);
    nb_ops_ctx *ops = m->ops;
    const int on_host = nb_ops_ctx_device(ops) == NB_DEVICE_CPU;
    const size_t idx_elems = 4 * (size_t)T + (size_t)n_slots + (size_t)R;
    int32_t *hidx = malloc(idx_elems * sizeof(int32_t));
    if (!hidx) return nb_error(NB_ERR_OUT_OF_MEMORY, "forward: index arrays for %d tokens", T);
    int32_t *ids = hidx, *pos = ids + T, *sbase = pos + T, *rows = sbase + T, *lrows = rows + T, *stab = lrows + R;
    nb_forward_fill_index(b, ids, pos, sbase, stab, rows, lrows);
    int32_t *didx = hidx;
    nb_status st = NB_OK;
    if (!on_host) {
        didx = nb_ops_scratch(ops, NB_FWD_INDEX_SLOT, idx_elems * sizeof(int32_t));
        st = didx ? nb_ops_upload(ops, didx, hidx, idx_elems * sizeof(int32_t))
                  : nb_error_wrap(NB_ERR_OUT_OF_MEMORY, "forward: index arrays for %d tokens", T);
    }
    float *logits = on_host ? host_logits : NULL;
    if (st == NB_OK && !logits) {
        logits = nb_ops_scratch(ops, NB_FWD_LOGITS_SLOT, (size_t)R * (size_t)m->cfg.vocab_size * sizeof(float));
        if (!logits) st = nb_error_wrap(NB_ERR_OUT_OF_MEMORY, "forward: logits of %d rows", R);
    }
    if (st == NB_OK) {
        const int64_t d = didx - hidx;
        int max_ctx = 0;
        for (int s = 0; s < b->n_seqs; s++) max_ctx = NB_MAX(max_ctx, b->seqs[s].start_pos + b->seqs[s].n_tokens);
        nb_fwd_index ix = {ids + d, pos + d, sbase + d, stab + d, rows + d, lrows + d, nb_forward_dsa_live(m, b),
                           nb_forward_long_ctx(m, b), max_ctx};
        fwd f;
        float *final_rows;
        st = fwd_setup(m, pool, T, R, &ix, &f, &final_rows);
        if (st == NB_OK) st = fwd_run(&f, R, final_rows, logits, nb_dump_enabled());
    }
    free(hidx);
    if (st != NB_OK) return st;
    if (host_logits && logits != host_logits)
        return nb_ops_download(ops, host_logits, logits, (size_t)R * (size_t)m->cfg.vocab_size * sizeof(float));
    if (keep) *keep = logits;
    return NB_OK;
}

nb_status nb_forward(nb_model *m, nb_kv_pool *pool, const nb_batch *b, float *logits)
{
    if (!logits) return nb_error(NB_ERR_INVALID_ARG, "forward: logits is NULL (nb_forward_keep keeps them)");
    return forward_eager(m, pool, b, logits, NULL);
}

nb_status nb_forward_keep(nb_model *m, nb_kv_pool *pool, const nb_batch *b, float **logits)
{
    *logits = NULL;
    return forward_eager(m, pool, b, NULL, logits);
}
