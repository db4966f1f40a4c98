/* Weight binding by HF tensor names (model/bind.h): linear layers in any stored format, norm
 * vectors copied to float32, and the attention / MLP / MoE pieces the families share.
 * Exercised by tests/model/test_model_bind.c (missing and mis-shaped tensors) and every
 * golden test. */
#include "model/bind.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "format/numerics.h"

void *nb_model_own(nb_model *m, void *p)
{
    if (!p) return NULL;
    if (m->n_owned == m->cap_owned) {
        size_t cap = m->cap_owned ? m->cap_owned * 2 : 64;
        void **n = realloc(m->owned, cap * sizeof(void *));
        if (!n) {
            free(p);
            return NULL;
        }
        m->owned = n;
        m->cap_owned = cap;
    }
    ((void **)m->owned)[m->n_owned++] = p;
    return p;
}

int nb_bind_has(const nb_model *m, const char *name) { return nb_checkpoint_find(m->ck, name) != NULL; }

static const char *shape_str(const nb_st_tensor *t, char *buf, size_t n)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < t->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

static nb_status get(const nb_model *m, const char *name, const nb_st_tensor **t)
{
    *t = nb_checkpoint_find(m->ck, name);
    if (!*t) return nb_error(NB_ERR_NOT_FOUND, "model: tensor '%s' is missing from the checkpoint", name);
    return NB_OK;
}

static nb_status expect_2d(const nb_st_tensor *t, int64_t a, int64_t b)
{
    if (t->ndim != 2 || t->shape[0] != a || t->shape[1] != b) {
        char s[96];
        return nb_error(NB_ERR_FORMAT, "model: tensor '%s' has shape %s, expected [%lld, %lld]", t->name,
                        shape_str(t, s, sizeof s), (long long)a, (long long)b);
    }
    return NB_OK;
}

nb_status nb_bind_vec(nb_model *m, const char *name, int64_t n, float **out)
{
    const nb_st_tensor *t;
    NB_TRY(get(m, name, &t));
    int64_t numel = nb_st_numel(t);
    if (numel != n || t->ndim > 1) {
        char s[96];
        return nb_error(NB_ERR_FORMAT, "model: tensor '%s' has shape %s, expected [%lld]", name,
                        shape_str(t, s, sizeof s), (long long)n);
    }
    float *v = nb_model_own(m, malloc((size_t)n * sizeof(float)));
    if (!v) return nb_error(NB_ERR_OUT_OF_MEMORY, "model: copy of '%s'", name);
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case NB_DTYPE_F32: memcpy(&v[i], (const float *)t->data + i, 4); break;
        case NB_DTYPE_BF16: {
            nb_bf16 h;
            memcpy(&h, (const nb_bf16 *)t->data + i, 2);
            v[i] = nb_bf16_to_f32(h);
            break;
        }
        case NB_DTYPE_F16: {
            uint16_t h;
            memcpy(&h, (const uint16_t *)t->data + i, 2);
            v[i] = nb_f16_to_f32(h);
            break;
        }
        default:
            return nb_error(NB_ERR_UNSUPPORTED, "model: tensor '%s' has dtype %s; expected F32, BF16 or F16", name,
                            nb_dtype_name(t->dtype));
        }
    }
    *out = v;
    return NB_OK;
}

/* A weight's role for nb_weight.name: the HF prefix without "model.", "layers.", "self_attn."
 * and numeric parts ("model.layers.3.mlp.experts.7.up_proj" -> "mlp.experts.up_proj"), kept
 * in a static table so the pointer outlives every model (NULL when the table is full). */
static const char *role_name(const char *prefix)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char table[96][48];
    static int n_table;
    char r[48] = "";
    size_t len = 0;
    for (const char *p = prefix; *p;) {
        size_t n = strcspn(p, ".");
        int numeric = n > 0 && strspn(p, "0123456789") >= n;
        int skip = numeric || (n == 5 && !strncmp(p, "model", 5)) || (n == 6 && !strncmp(p, "layers", 6)) ||
                   (n == 9 && !strncmp(p, "self_attn", 9));
        if (!skip && len + n + 1 < sizeof r) {
            if (len) r[len++] = '.';
            memcpy(r + len, p, n);
            len += n;
            r[len] = 0;
        }
        p += n + (p[n] == '.');
    }
    const char *out = NULL;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_table && !out; i++)
        if (!strcmp(table[i], r)) out = table[i];
    if (!out && n_table < (int)NB_ARRAY_LEN(table)) {
        memcpy(table[n_table], r, sizeof r);
        out = table[n_table++];
    }
    pthread_mutex_unlock(&mu);
    return out;
}

nb_status nb_bind_linear(nb_model *m, const char *prefix, int64_t n, int64_t k, nb_weight *w)
{
    char name[512];
    const nb_st_tensor *t, *s;
    memset(w, 0, sizeof *w);
    w->name = role_name(prefix);
    w->n = n;
    w->k = k;
    w->global_scale = 1.0f;
    w->device = NB_DEVICE_CPU;
    snprintf(name, sizeof name, "%s.weight", prefix);
    NB_TRY(get(m, name, &t));
    w->data = t->data;
    switch (t->dtype) {
    case NB_DTYPE_F32:
    case NB_DTYPE_BF16:
        w->fmt = t->dtype == NB_DTYPE_F32 ? NB_WFMT_F32 : NB_WFMT_BF16;
        NB_TRY(expect_2d(t, n, k));
        break;
    case NB_DTYPE_U8: /* ModelOpt NVFP4 */
        w->fmt = NB_WFMT_NVFP4;
        w->block_k = 16;
        if (k % 16) return nb_error(NB_ERR_FORMAT, "model: '%s' is NVFP4 but in-features %lld is not a multiple of 16", name, (long long)k);
        NB_TRY(expect_2d(t, n, k / 2));
        snprintf(name, sizeof name, "%s.weight_scale", prefix);
        NB_TRY(get(m, name, &s));
        if (s->dtype != NB_DTYPE_F8_E4M3)
            return nb_error(NB_ERR_FORMAT, "model: '%s' has dtype %s, expected F8_E4M3", name, nb_dtype_name(s->dtype));
        NB_TRY(expect_2d(s, n, k / 16));
        w->scale = s->data;
        snprintf(name, sizeof name, "%s.weight_scale_2", prefix);
        NB_TRY(get(m, name, &s));
        if (s->dtype != NB_DTYPE_F32 || nb_st_numel(s) != 1)
            return nb_error(NB_ERR_FORMAT, "model: '%s' must be one F32 value", name);
        memcpy(&w->global_scale, s->data, 4);
        break;
    case NB_DTYPE_F8_E4M3: { /* FP8 block */
        w->fmt = NB_WFMT_FP8_BLOCK;
        w->block_n = m->cfg.quant.block_n > 0 ? m->cfg.quant.block_n : 128;
        w->block_k = m->cfg.quant.block_k > 0 ? m->cfg.quant.block_k : 128;
        NB_TRY(expect_2d(t, n, k));
        snprintf(name, sizeof name, "%s.weight_scale_inv", prefix);
        NB_TRY(get(m, name, &s));
        if (s->dtype != NB_DTYPE_F32)
            return nb_error(NB_ERR_FORMAT, "model: '%s' has dtype %s, expected F32", name, nb_dtype_name(s->dtype));
        NB_TRY(expect_2d(s, (n + w->block_n - 1) / w->block_n, (k + w->block_k - 1) / w->block_k));
        w->scale = s->data;
        break;
    }
    default:
        return nb_error(NB_ERR_UNSUPPORTED, "model: '%s' has dtype %s (supported: F32, BF16, NVFP4 U8, FP8 E4M3)", name,
                        nb_dtype_name(t->dtype));
    }
    snprintf(name, sizeof name, "%s.bias", prefix);
    if (nb_bind_has(m, name)) {
        float *b;
        NB_TRY(nb_bind_vec(m, name, n, &b));
        w->bias = b;
    }
    return nb_weight_check(w, prefix);
}

nb_status nb_bind_mla(nb_model *m, int l)
{
    const nb_model_config *c = &m->cfg;
    nb_layer *L = &m->layers[l];
    char p[256];
    const int64_t H = c->hidden_size, nh = c->num_heads, qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    if (c->q_lora_rank > 0) {
        snprintf(p, sizeof p, "model.layers.%d.self_attn.q_a_proj", l);
        NB_TRY(nb_bind_linear(m, p, c->q_lora_rank, H, &L->q_a_proj));
        snprintf(p, sizeof p, "model.layers.%d.self_attn.q_a_layernorm.weight", l);
        NB_TRY(nb_bind_vec(m, p, c->q_lora_rank, &L->q_a_norm));
        snprintf(p, sizeof p, "model.layers.%d.self_attn.q_b_proj", l);
        NB_TRY(nb_bind_linear(m, p, nh * qk, c->q_lora_rank, &L->q_b_proj));
    } else {
        snprintf(p, sizeof p, "model.layers.%d.self_attn.q_proj", l);
        NB_TRY(nb_bind_linear(m, p, nh * qk, H, &L->q_proj));
    }
    snprintf(p, sizeof p, "model.layers.%d.self_attn.kv_a_proj_with_mqa", l);
    NB_TRY(nb_bind_linear(m, p, c->kv_lora_rank + c->qk_rope_head_dim, H, &L->kv_a_proj));
    snprintf(p, sizeof p, "model.layers.%d.self_attn.kv_a_layernorm.weight", l);
    NB_TRY(nb_bind_vec(m, p, c->kv_lora_rank, &L->kv_a_norm));
    snprintf(p, sizeof p, "model.layers.%d.self_attn.kv_b_proj", l);
    NB_TRY(nb_bind_linear(m, p, nh * (c->qk_nope_head_dim + c->v_head_dim), c->kv_lora_rank, &L->kv_b_proj));
    snprintf(p, sizeof p, "model.layers.%d.self_attn.o_proj", l);
    NB_TRY(nb_bind_linear(m, p, H, nh * c->v_head_dim, &L->o_proj));
    return NB_OK;
}

nb_status nb_bind_dsa_indexer(nb_model *m, int l)
{
    const nb_model_config *c = &m->cfg;
    nb_layer *L = &m->layers[l];
    char p[256];
    if (c->q_lora_rank <= 0)
        return nb_error(NB_ERR_FORMAT, "model: layer %d: the DSA indexer needs q_lora_rank > 0", l);
    snprintf(p, sizeof p, "model.layers.%d.self_attn.indexer.wq_b", l);
    NB_TRY(nb_bind_linear(m, p, (int64_t)c->index_n_heads * c->index_head_dim, c->q_lora_rank, &L->idx_wq_b));
    snprintf(p, sizeof p, "model.layers.%d.self_attn.indexer.wk", l);
    NB_TRY(nb_bind_linear(m, p, c->index_head_dim, c->hidden_size, &L->idx_wk));
    snprintf(p, sizeof p, "model.layers.%d.self_attn.indexer.k_norm.weight", l);
    NB_TRY(nb_bind_vec(m, p, c->index_head_dim, &L->idx_k_norm_w));
    snprintf(p, sizeof p, "model.layers.%d.self_attn.indexer.k_norm.bias", l);
    NB_TRY(nb_bind_vec(m, p, c->index_head_dim, &L->idx_k_norm_b));
    snprintf(p, sizeof p, "model.layers.%d.self_attn.indexer.weights_proj", l);
    NB_TRY(nb_bind_linear(m, p, c->index_n_heads, c->hidden_size, &L->idx_weights_proj));
    /* The indexer's scores pick the top-k, and everything upstream moves them: its own
     * projections, q_a_proj (its q input) and every linear layer of the earlier layers (the
     * residual stream its k and weights read). BF16 activations in any of these flipped the
     * selection on the glm_moe_dsa fixture (docs/cuda-backend.md). */
    const unsigned dsa = NB_WEIGHT_FEEDS_TOPK | NB_WEIGHT_FEEDS_DSA; /* ops.h: only while the selection bites */
    L->idx_wq_b.flags |= dsa;
    L->idx_wk.flags |= dsa;
    L->idx_weights_proj.flags |= dsa;
    L->q_a_proj.flags |= dsa;
    for (int j = 0; j < l; j++) {
        nb_layer *E = &m->layers[j];
        nb_weight *ws[] = {&E->q_proj,  &E->k_proj,    &E->v_proj,  &E->o_proj,  &E->q_a_proj, &E->q_b_proj,
                           &E->kv_a_proj, &E->gate_proj, &E->up_proj, &E->down_proj, &E->sh_gate,
                           &E->sh_up,   &E->sh_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) ws[i]->flags |= dsa;
        E->router.flags |= NB_WEIGHT_FEEDS_TOPK; /* it picks experts in every step */
    }
    L->has_indexer = 1;
    return NB_OK;
}

nb_status nb_bind_gqa(nb_model *m, int l)
{
    const nb_model_config *c = &m->cfg;
    nb_layer *L = &m->layers[l];
    char p[256];
    const int64_t H = c->hidden_size, hd = c->head_dim;
    snprintf(p, sizeof p, "model.layers.%d.self_attn.q_proj", l);
    NB_TRY(nb_bind_linear(m, p, c->num_heads * hd, H, &L->q_proj));
    snprintf(p, sizeof p, "model.layers.%d.self_attn.k_proj", l);
    NB_TRY(nb_bind_linear(m, p, c->num_kv_heads * hd, H, &L->k_proj));
    snprintf(p, sizeof p, "model.layers.%d.self_attn.v_proj", l);
    NB_TRY(nb_bind_linear(m, p, c->num_kv_heads * hd, H, &L->v_proj));
    snprintf(p, sizeof p, "model.layers.%d.self_attn.o_proj", l);
    NB_TRY(nb_bind_linear(m, p, H, c->num_heads * hd, &L->o_proj));
    if (c->attention_bias && (!L->q_proj.bias || !L->k_proj.bias || !L->v_proj.bias))
        return nb_error(NB_ERR_NOT_FOUND, "model: layer %d: attention_bias is set but q/k/v_proj.bias is missing", l);
    if (c->qk_norm) {
        snprintf(p, sizeof p, "model.layers.%d.self_attn.q_norm.weight", l);
        NB_TRY(nb_bind_vec(m, p, hd, &L->q_norm));
        snprintf(p, sizeof p, "model.layers.%d.self_attn.k_norm.weight", l);
        NB_TRY(nb_bind_vec(m, p, hd, &L->k_norm));
    }
    return NB_OK;
}

nb_status nb_bind_dense_mlp(nb_model *m, int l, const char *sub, int64_t inter, nb_weight *g, nb_weight *u,
                            nb_weight *d)
{
    char p[256];
    const int64_t H = m->cfg.hidden_size;
    snprintf(p, sizeof p, "model.layers.%d.%s.gate_proj", l, sub);
    NB_TRY(nb_bind_linear(m, p, inter, H, g));
    snprintf(p, sizeof p, "model.layers.%d.%s.up_proj", l, sub);
    NB_TRY(nb_bind_linear(m, p, inter, H, u));
    snprintf(p, sizeof p, "model.layers.%d.%s.down_proj", l, sub);
    NB_TRY(nb_bind_linear(m, p, H, inter, d));
    return NB_OK;
}

/* transformers 5 fused layout: experts.gate_up_proj [E, 2I, H] (gate rows first, then up)
 * and experts.down_proj [E, H, I]; each expert's matrices become slices. */
static nb_status bind_fused_experts(nb_model *m, int l, nb_layer *L)
{
    const nb_model_config *c = &m->cfg;
    const int64_t E = c->n_routed_experts, H = c->hidden_size, I = c->moe_intermediate_size;
    char p[256];
    const nb_st_tensor *gu, *dn;
    snprintf(p, sizeof p, "model.layers.%d.mlp.experts.gate_up_proj", l);
    NB_TRY(get(m, p, &gu));
    snprintf(p, sizeof p, "model.layers.%d.mlp.experts.down_proj", l);
    NB_TRY(get(m, p, &dn));
    const nb_st_tensor *ts[2] = {gu, dn};
    const int64_t want[2][3] = {{E, 2 * I, H}, {E, H, I}};
    for (int i = 0; i < 2; i++) {
        const nb_st_tensor *t = ts[i];
        if (t->dtype != NB_DTYPE_BF16 && t->dtype != NB_DTYPE_F32)
            return nb_error(NB_ERR_UNSUPPORTED, "model: fused expert tensor '%s' has dtype %s (BF16/F32 only; "
                            "quantized experts are stored per expert)", t->name, nb_dtype_name(t->dtype));
        if (t->ndim != 3 || t->shape[0] != want[i][0] || t->shape[1] != want[i][1] || t->shape[2] != want[i][2]) {
            char s[96];
            return nb_error(NB_ERR_FORMAT, "model: tensor '%s' has shape %s, expected [%lld, %lld, %lld]", t->name,
                            shape_str(t, s, sizeof s), (long long)want[i][0], (long long)want[i][1],
                            (long long)want[i][2]);
        }
    }
    const nb_wfmt f1 = gu->dtype == NB_DTYPE_F32 ? NB_WFMT_F32 : NB_WFMT_BF16;
    const nb_wfmt f2 = dn->dtype == NB_DTYPE_F32 ? NB_WFMT_F32 : NB_WFMT_BF16;
    const size_t e1 = nb_dtype_size(gu->dtype), e2 = nb_dtype_size(dn->dtype);
    for (int64_t e = 0; e < E; e++) {
        const uint8_t *g0 = (const uint8_t *)gu->data + (size_t)(e * 2 * I * H) * e1;
        L->exp_gate[e] = (nb_weight){.fmt = f1, .n = I, .k = H, .data = g0, .global_scale = 1, .device = NB_DEVICE_CPU};
        L->exp_up[e] = (nb_weight){.fmt = f1, .n = I, .k = H, .data = g0 + (size_t)(I * H) * e1, .global_scale = 1,
                                   .device = NB_DEVICE_CPU};
        L->exp_down[e] = (nb_weight){.fmt = f2, .n = H, .k = I, .data = (const uint8_t *)dn->data + (size_t)(e * H * I) * e2,
                                     .global_scale = 1, .device = NB_DEVICE_CPU};
    }
    return NB_OK;
}

nb_status nb_bind_moe(nb_model *m, int l, int with_shared)
{
    const nb_model_config *c = &m->cfg;
    nb_layer *L = &m->layers[l];
    const int64_t E = c->n_routed_experts, H = c->hidden_size, I = c->moe_intermediate_size;
    char p[256];
    L->is_moe = 1;
    snprintf(p, sizeof p, "model.layers.%d.mlp.gate", l);
    NB_TRY(nb_bind_linear(m, p, E, H, &L->router));
    L->router.flags |= NB_WEIGHT_FEEDS_TOPK; /* its logits pick the experts */
    snprintf(p, sizeof p, "model.layers.%d.mlp.gate.e_score_correction_bias", l);
    if (c->has_score_correction_bias || nb_bind_has(m, p)) NB_TRY(nb_bind_vec(m, p, E, &L->router_bias));
    L->exp_gate = nb_model_own(m, calloc((size_t)E, sizeof(nb_weight)));
    L->exp_up = nb_model_own(m, calloc((size_t)E, sizeof(nb_weight)));
    L->exp_down = nb_model_own(m, calloc((size_t)E, sizeof(nb_weight)));
    if (!L->exp_gate || !L->exp_up || !L->exp_down) return nb_error(NB_ERR_OUT_OF_MEMORY, "model: expert tables");
    snprintf(p, sizeof p, "model.layers.%d.mlp.experts.gate_up_proj", l);
    if (nb_bind_has(m, p)) {
        NB_TRY(bind_fused_experts(m, l, L));
    } else {
        for (int64_t e = 0; e < E; e++) {
            snprintf(p, sizeof p, "model.layers.%d.mlp.experts.%lld.gate_proj", l, (long long)e);
            NB_TRY(nb_bind_linear(m, p, I, H, &L->exp_gate[e]));
            snprintf(p, sizeof p, "model.layers.%d.mlp.experts.%lld.up_proj", l, (long long)e);
            NB_TRY(nb_bind_linear(m, p, I, H, &L->exp_up[e]));
            snprintf(p, sizeof p, "model.layers.%d.mlp.experts.%lld.down_proj", l, (long long)e);
            NB_TRY(nb_bind_linear(m, p, H, I, &L->exp_down[e]));
        }
    }
    if (with_shared && c->n_shared_experts > 0) {
        int64_t si = c->shared_intermediate_size > 0 ? c->shared_intermediate_size
                                                     : (int64_t)c->moe_intermediate_size * c->n_shared_experts;
        NB_TRY(nb_bind_dense_mlp(m, l, "mlp.shared_experts", si, &L->sh_gate, &L->sh_up, &L->sh_down));
        L->has_shared = 1;
    }
    return NB_OK;
}

float nb_mla_softmax_scale(const nb_model_config *c)
{
    double s = 1.0 / sqrt((double)(c->qk_nope_head_dim + c->qk_rope_head_dim));
    if (c->rope.type != NB_ROPE_DEFAULT && c->rope.mscale_all_dim != 0 && c->rope.factor > 1) {
        double ms = 0.1 * c->rope.mscale_all_dim * log(c->rope.factor) + 1.0;
        s *= ms * ms;
    }
    return (float)s;
}
