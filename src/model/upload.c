/* nb_model_upload (model/upload.h): the device twin of a bound model. Two walks over every
 * weight and vector of the model: the first marks the checkpoint tensors it references (to
 * size the progress bar and the copy), the second copies each marked tensor once and points
 * the twin's views at the copy; vectors outside the checkpoint (float32 norm copies, biases)
 * are copied one by one. On CUDA, an MLA layer's attention-input projections are then
 * concatenated into one weight (cat_projections, nb_layer.a_cat), each BF16 MLP's gate and
 * up rows made adjacent so the mlp op reads them as one linear (cat_gate_up; NIBBLE_CAT_PROJ=0
 * skips both), and MLA's kv_b is registered per layer with the CUDA ops (nb_cuda_mla_register: kept in
 * the form the batched GEMMs read). */
#include "model/upload.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/progress.h"
#include "model/synthetic.h"
#include "ops/cpu/cpu_ops.h" /* the context's stream, for the device fills */
#if NIBBLE_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

typedef struct up_tensor {
    const uint8_t *h;
    size_t bytes;
    uint8_t *d;
    int used;
} up_tensor;

typedef struct up_state {
    nb_ops_ctx *ctx;
    up_tensor *t; /* sorted by host address */
    int n;
    void **extra; /* separately uploaded vectors and expert arrays (device or host) */
    int n_extra, cap_extra;
    nb_weight *host_arrays[3 * NB_MAX_LAYERS]; /* the twin's per-expert nb_weight arrays (host) */
    int n_arrays;
    int pass; /* 0: mark, 1: translate */
    const struct nb_synth_deferred *plan; /* deferred synthetic tensors: generated on the device */
    uint64_t total, done, generated;
    nb_progress prog;
    nb_status st;
} up_state;

static int by_addr(const void *a, const void *b)
{
    const up_tensor *x = a, *y = b;
    return x->h < y->h ? -1 : x->h > y->h;
}

static up_tensor *find(up_state *s, const void *p)
{
    int lo = 0, hi = s->n - 1;
    const uint8_t *q = p;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (q < s->t[mid].h) hi = mid - 1;
        else if (q >= s->t[mid].h + s->t[mid].bytes) lo = mid + 1;
        else return &s->t[mid];
    }
    return NULL;
}

static int keep(up_state *s, void *p)
{
    if (s->n_extra == s->cap_extra) {
        int cap = s->cap_extra ? 2 * s->cap_extra : 256;
        void **e = realloc(s->extra, (size_t)cap * sizeof *e);
        if (!e) return 0;
        s->extra = e;
        s->cap_extra = cap;
    }
    s->extra[s->n_extra++] = p;
    return 1;
}

/* The device address of host bytes [p, p + bytes): inside an uploaded checkpoint tensor, or
 * a fresh copy. NULL stays NULL. */
static const void *xlate(up_state *s, const void *p, size_t bytes)
{
    if (!p || s->st != NB_OK) return p;
    up_tensor *t = find(s, p);
    if (s->pass == 0) {
        if (t && !t->used) {
            t->used = 1;
            s->total += t->bytes;
        }
        return p;
    }
    if (t) {
        if (!t->d) {
            t->d = nb_ops_alloc(s->ctx, t->bytes);
            if (!t->d) {
                s->st = NB_ERR_OUT_OF_MEMORY;
                return NULL;
            }
            int gen = 0; /* a deferred synthetic tensor: generated in place, its host bytes unread */
            if (s->plan && (s->st = nb_synthetic_deferred_fill(s->plan, t->h, t->d, t->bytes, s->ctx->stream, &gen)))
                return NULL;
            if (!gen && (s->st = nb_ops_upload(s->ctx, t->d, t->h, t->bytes)) != NB_OK) return NULL;
            if (gen) s->generated += t->bytes;
            s->done += t->bytes;
            nb_progress_update(&s->prog, s->done);
        }
        return t->d + ((const uint8_t *)p - t->h);
    }
    void *d = nb_ops_alloc(s->ctx, bytes);
    if (!d || !keep(s, d)) {
        s->st = nb_error(NB_ERR_OUT_OF_MEMORY, "upload: %zu bytes", bytes);
        return NULL;
    }
    if ((s->st = nb_ops_upload(s->ctx, d, p, bytes)) != NB_OK) return NULL;
    return d;
}

static int64_t scale_bytes(const nb_weight *w)
{
    if (w->fmt == NB_WFMT_NVFP4) {
        int64_t rs = w->scale_row_stride ? w->scale_row_stride : w->k / 16;
        return (w->n - 1) * rs + w->k / 16;
    }
    if (w->fmt == NB_WFMT_FP8_BLOCK) {
        int64_t rb = (w->n + w->block_n - 1) / w->block_n, cb = (w->k + w->block_k - 1) / w->block_k;
        int64_t rs = w->scale_row_stride ? w->scale_row_stride : cb * 4;
        return (rb - 1) * rs + cb * 4;
    }
    return 0;
}

static void weight(up_state *s, nb_weight *w)
{
    if (!w->data) return;
    int64_t rs = w->row_stride ? w->row_stride : nb_weight_row_bytes(w->fmt, w->k);
    w->data = xlate(s, w->data, (size_t)((w->n - 1) * rs + nb_weight_row_bytes(w->fmt, w->k)));
    w->scale = xlate(s, w->scale, (size_t)scale_bytes(w));
    w->bias = xlate(s, w->bias, (size_t)w->n * sizeof(float));
    if (s->pass == 1) {
        w->device = nb_ops_ctx_device(s->ctx);
        w->flags |= NB_WEIGHT_RESIDENT; /* freed with the twin, after its last op */
    }
}

static void vec(up_state *s, float **p, int64_t n)
{
    if (*p) *p = (float *)xlate(s, *p, (size_t)n * sizeof(float));
}

/* The twin's expert arrays are fresh host arrays of nb_weight (pass 1). */
static void experts(up_state *s, nb_weight **arr, int E)
{
    if (!*arr) return;
    nb_weight *a = *arr;
    if (s->pass == 1) {
        a = s->n_arrays < (int)NB_ARRAY_LEN(s->host_arrays) ? malloc((size_t)E * sizeof *a) : NULL;
        if (!a) {
            s->st = nb_error(NB_ERR_OUT_OF_MEMORY, "upload: expert table");
            return;
        }
        memcpy(a, *arr, (size_t)E * sizeof *a);
        s->host_arrays[s->n_arrays++] = a;
        *arr = a;
    }
    for (int e = 0; e < E; e++) weight(s, &a[e]);
}

static void walk(up_state *s, nb_model *m)
{
    const nb_model_config *c = &m->cfg;
    const int64_t H = c->hidden_size;
    weight(s, &m->embed);
    weight(s, &m->lm_head);
    vec(s, &m->final_norm, H);
    for (int l = 0; l < c->num_layers; l++) {
        nb_layer *L = &m->layers[l];
        vec(s, &L->input_norm, H);
        vec(s, &L->post_attn_norm, H);
        nb_weight *ws[] = {&L->q_proj, &L->k_proj, &L->v_proj, &L->o_proj, &L->q_a_proj, &L->q_b_proj, &L->kv_a_proj,
                           &L->kv_b_proj, &L->idx_wq_b, &L->idx_wk, &L->idx_weights_proj, &L->gate_proj, &L->up_proj,
                           &L->down_proj, &L->router, &L->sh_gate, &L->sh_up, &L->sh_down};
        for (size_t i = 0; i < NB_ARRAY_LEN(ws); i++) weight(s, ws[i]);
        vec(s, &L->q_norm, c->head_dim);
        vec(s, &L->k_norm, c->head_dim);
        vec(s, &L->q_a_norm, c->q_lora_rank);
        vec(s, &L->kv_a_norm, c->kv_lora_rank);
        vec(s, &L->idx_k_norm_w, c->index_head_dim);
        vec(s, &L->idx_k_norm_b, c->index_head_dim);
        vec(s, &L->router_bias, c->n_routed_experts);
        if (L->is_moe) {
            experts(s, &L->exp_gate, c->n_routed_experts);
            experts(s, &L->exp_up, c->n_routed_experts);
            experts(s, &L->exp_down, c->n_routed_experts);
        }
        if (s->st != NB_OK) return;
    }
}

typedef struct up_owned {
    up_state s;
} up_owned;

void nb_model_upload_free(nb_model *dev)
{
    if (!dev) return;
    up_owned *o = dev->owned;
    if (o) {
        for (int i = 0; i < o->s.n; i++) nb_ops_free(dev->ops, o->s.t[i].d);
        for (int i = 0; i < o->s.n_extra; i++) nb_ops_free(dev->ops, o->s.extra[i]);
        for (int i = 0; i < o->s.n_arrays; i++) free(o->s.host_arrays[i]);
        free(o->s.t);
        free(o->s.extra);
        free(o);
    }
    nb_ops_ctx_free(dev->ops);
    free(dev);
}

#if NIBBLE_HAVE_CUDA
/* Free the device copy of the checkpoint tensor that is exactly [d, d + bytes) (the part's
 * rows now live in the concatenation), when there is one. */
static void drop_tensor(up_state *s, const void *d, size_t bytes)
{
    for (int i = 0; i < s->n; i++)
        if (s->t[i].d == d && s->t[i].bytes == bytes) {
            nb_ops_free(s->ctx, s->t[i].d);
            s->t[i].d = NULL;
            return;
        }
}

/* Weights parts[0..n) concatenated by rows into one allocation when they agree (format BF16,
 * F32 or NVFP4 with one global scale, the same k, dense rows, no bias); each part then
 * points at its rows of the concatenation and its own copy is freed. Row r of a part is the
 * same bytes in both, so y = x @ cat^T split by columns is the separate linears (exactly on
 * the CPU; within the linear kernels' tolerance on CUDA). *cat (when not NULL) becomes the
 * whole; *done says whether it happened (incompatible parts are left alone). */
static nb_status cat_rows(up_state *s, nb_weight *const *parts, int n, const char *what, nb_weight *cat, int *done)
{
    *done = 0;
    const nb_weight *w0 = parts[0];
    if (w0->fmt != NB_WFMT_BF16 && w0->fmt != NB_WFMT_F32 && w0->fmt != NB_WFMT_NVFP4) return NB_OK;
    const int64_t rb = nb_weight_row_bytes(w0->fmt, w0->k), sb = w0->fmt == NB_WFMT_NVFP4 ? w0->k / 16 : 0;
    int64_t N = 0;
    unsigned flags = 0;
    for (int i = 0; i < n; i++) {
        const nb_weight *w = parts[i];
        if (!w->data || w->fmt != w0->fmt || w->k != w0->k || w->bias || (w->row_stride && w->row_stride != rb) ||
            (sb && ((w->scale_row_stride && w->scale_row_stride != sb) || w->global_scale != w0->global_scale)))
            return NB_OK;
        N += w->n;
        flags |= w->flags;
    }
    uint8_t *data = nb_ops_alloc(s->ctx, (size_t)(N * rb)), *scale = sb ? nb_ops_alloc(s->ctx, (size_t)(N * sb)) : NULL;
    if (!data || (sb && !scale) || !keep(s, data) || (scale && !keep(s, scale)))
        return nb_error(NB_ERR_OUT_OF_MEMORY, "upload: concatenated %s of %lld rows", what, (long long)N);
    int64_t r0 = 0;
    for (int i = 0; i < n; i++) {
        nb_weight *w = parts[i];
        NB_TRY(nb_cuda_copy_d2d(s->ctx, data + r0 * rb, w->data, (size_t)(w->n * rb)));
        if (sb) NB_TRY(nb_cuda_copy_d2d(s->ctx, scale + r0 * sb, w->scale, (size_t)(w->n * sb)));
        r0 += w->n;
    }
    NB_TRY(nb_ops_sync(s->ctx)); /* the copies read the parts' own tensors, freed next */
    r0 = 0;
    for (int i = 0; i < n; i++) {
        nb_weight *w = parts[i];
        drop_tensor(s, w->data, (size_t)(w->n * rb));
        if (sb) drop_tensor(s, w->scale, (size_t)(w->n * sb));
        w->data = data + r0 * rb;
        w->scale = sb ? scale + r0 * sb : NULL;
        w->row_stride = 0;
        w->scale_row_stride = 0;
        r0 += w->n;
    }
    if (cat) {
        *cat = *w0;
        cat->n = N;
        cat->data = data;
        cat->scale = scale;
        cat->flags = flags;
    }
    *done = 1;
    return NB_OK;
}

/* Layer L's projections of the attention input, [q_a_proj; kv_a_proj; idx_wk;
 * idx_weights_proj] (those present), concatenated into L->a_cat (cat_rows).
 * NIBBLE_CAT_PROJ=0 keeps the separate weights (A/B runs). */
static nb_status cat_projections(up_state *s, nb_layer *L)
{
    nb_weight *parts[4];
    int n = 0, done = 0;
    if (L->q_a_proj.data) parts[n++] = &L->q_a_proj;
    if (L->kv_a_proj.data) parts[n++] = &L->kv_a_proj;
    if (L->has_indexer && L->idx_wk.data && L->idx_weights_proj.data) {
        parts[n++] = &L->idx_wk;
        parts[n++] = &L->idx_weights_proj;
    }
    if (n < 2 || !L->q_a_proj.data) return NB_OK;
    nb_weight cat;
    NB_TRY(cat_rows(s, parts, n, "attention projections", &cat, &done));
    if (!done) return NB_OK;
    L->a_cat = cat;
    L->a_cat.name = n == 4 ? "q_a+kv_a+idx_wk+idx_wproj" : "q_a+kv_a";
    return NB_OK;
}

/* A SwiGLU MLP's gate and up rows made adjacent in one allocation (cat_rows): the CUDA mlp op
 * then runs them as one [2I, H] linear (ops/cuda/linear.cu nb_cuda_mlp). 1 when done. */
static nb_status cat_gate_up(up_state *s, nb_weight *gate, nb_weight *up, int *done)
{
    *done = 0;
    if (!gate->data || !up->data || gate->fmt != NB_WFMT_BF16) return NB_OK;
    nb_weight *parts[2] = {gate, up};
    return cat_rows(s, parts, 2, "gate and up projections", NULL, done);
}
#endif

static nb_status upload(const nb_model *host, const struct nb_synth_deferred *plan, nb_ops_ctx *ctx, nb_model **out)
{
    *out = NULL;
    nb_model *m = malloc(sizeof *m);
    up_owned *o = calloc(1, sizeof *o);
    if (!m || !o) {
        free(m);
        free(o);
        nb_ops_ctx_free(ctx);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "upload: model");
    }
    memcpy(m, host, sizeof *m);
    m->owns_ck = 0;
    m->ops = ctx;
    m->owned = o;
    m->n_owned = m->cap_owned = 0;
    m->params.device = nb_ops_ctx_device(ctx);
    up_state *s = &o->s;
    s->ctx = ctx;
    s->plan = plan;
    s->n = nb_checkpoint_count(host->ck);
    s->t = calloc((size_t)(s->n > 0 ? s->n : 1), sizeof *s->t);
    if (!s->t) {
        nb_model_upload_free(m);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "upload: tensor table");
    }
    for (int i = 0; i < s->n; i++) {
        const nb_st_tensor *t = nb_checkpoint_at(host->ck, i);
        s->t[i] = (up_tensor){t->data, t->nbytes, NULL, 0};
    }
    qsort(s->t, (size_t)s->n, sizeof *s->t, by_addr);
    int64_t t0 = nb_now_ns();
    s->pass = 0;
    walk(s, m);
    s->pass = 1;
    nb_progress_begin(&s->prog, "weights to GPU", s->total, "B");
    walk(s, m);
    nb_progress_end(&s->prog);
    if (s->st == NB_OK) s->st = nb_ops_sync(ctx);
    if (s->st != NB_OK) {
        nb_status st = s->st;
        nb_model_upload_free(m);
        return nb_error_wrap(st, "uploading weights");
    }
    double secs = (double)(nb_now_ns() - t0) / 1e9;
    char b[32];
    if (plan) {
        char g[32], c2[32];
        NB_LOG_INFO("cuda", "weights: %s on the device in %.2f s (%s generated there, %s copied)",
                    nb_format_bytes((double)s->done, b, sizeof b), secs,
                    nb_format_bytes((double)s->generated, g, sizeof g),
                    nb_format_bytes((double)(s->done - s->generated), c2, sizeof c2));
    } else {
        NB_LOG_INFO("cuda", "weights: %s to the device in %.2f s (%.2f GB/s)",
                    nb_format_bytes((double)s->done, b, sizeof b), secs, secs > 0 ? (double)s->done / secs / 1e9 : 0.0);
    }
#if NIBBLE_HAVE_CUDA
    const char *mode = getenv("NIBBLE_CUDA_MOE");
    if (nb_ops_ctx_device(ctx) == NB_DEVICE_CUDA && !(mode && !strcmp(mode, "generic"))) {
        const nb_model_config *c = &m->cfg;
        int reg = 0, moe = 0;
        /* The repack runs on the device from the copies just made (a fraction of a second for
         * GLM-5's 256 experts of a layer, where the single-threaded host repack takes minutes);
         * NIBBLE_MOE_REPACK=host keeps the host one for A/B runs, except for deferred synthetic
         * models, whose experts never exist on the host. */
        const char *rp = getenv("NIBBLE_MOE_REPACK");
        int host_repack = !plan && rp && !strcmp(rp, "host");
        for (int l = 0; l < c->num_layers; l++) {
            if (!m->layers[l].is_moe) continue;
            moe++;
            nb_moe_weights hw = {c->n_routed_experts, c->hidden_size, c->moe_intermediate_size, host->layers[l].exp_gate,
                                 host->layers[l].exp_up, host->layers[l].exp_down};
            nb_moe_weights dw = {c->n_routed_experts, c->hidden_size, c->moe_intermediate_size, m->layers[l].exp_gate,
                                 m->layers[l].exp_up, m->layers[l].exp_down};
            nb_status rs = nb_cuda_moe_register(ctx, &dw, host_repack ? &hw : NULL); /* NULL: on the device */
            if (rs == NB_OK) reg++;
            else if (rs != NB_ERR_UNSUPPORTED) {
                nb_model_upload_free(m);
                return nb_error_wrap(rs, "layer %d experts", l);
            }
        }
        if (moe) NB_LOG_INFO("cuda", "routed experts: %d of %d MoE layers on the repacked NVFP4 kernels (repacked on "
                             "the %s in %.2f s)%s", reg, moe, host_repack ? "host" : "device",
                             (double)(nb_now_ns() - t0) / 1e9 - secs,
                             reg < moe ? " (the others on the generic float32 kernels)" : "");
    }
    const char *cp = getenv("NIBBLE_CAT_PROJ");
    if (nb_ops_ctx_device(ctx) == NB_DEVICE_CUDA && m->cfg.attn == NB_ATTN_MLA && !(cp && !strcmp(cp, "0"))) {
        int cat = 0;
        for (int l = 0; l < m->cfg.num_layers; l++) {
            nb_status rs = cat_projections(s, &m->layers[l]);
            if (rs != NB_OK) {
                nb_model_upload_free(m);
                return nb_error_wrap(rs, "layer %d attention projections", l);
            }
            cat += m->layers[l].a_cat.n > 0;
        }
        NB_LOG_INFO("cuda", "attention input projections: one concatenated linear in %d of %d layers", cat,
                    m->cfg.num_layers);
    }
    if (nb_ops_ctx_device(ctx) == NB_DEVICE_CUDA && !(cp && !strcmp(cp, "0"))) {
        int pairs = 0, all = 0;
        for (int l = 0; l < m->cfg.num_layers; l++) {
            nb_layer *L = &m->layers[l];
            nb_weight *g[2] = {&L->gate_proj, &L->sh_gate}, *u[2] = {&L->up_proj, &L->sh_up};
            for (int i = 0; i < 2; i++) {
                if (!g[i]->data) continue;
                int done = 0;
                nb_status rs = cat_gate_up(s, g[i], u[i], &done);
                if (rs != NB_OK) {
                    nb_model_upload_free(m);
                    return nb_error_wrap(rs, "layer %d gate and up projections", l);
                }
                pairs += done;
                all++;
            }
        }
        if (all) NB_LOG_INFO("cuda", "MLP gate and up projections: adjacent (one linear) in %d of %d MLPs", pairs, all);
    }
    if (nb_ops_ctx_device(ctx) == NB_DEVICE_CUDA && m->cfg.attn == NB_ATTN_MLA) {
        /* kv_b once per layer in the form MLA's batched GEMMs read (ops/cuda/mla.h) */
        const nb_model_config *c = &m->cfg;
        const nb_mla_dims d = {c->num_heads, c->qk_nope_head_dim, c->qk_rope_head_dim, c->v_head_dim, c->kv_lora_rank};
        for (int l = 0; l < c->num_layers; l++) {
            nb_status rs = nb_cuda_mla_register(ctx, &m->layers[l].kv_b_proj, &d);
            if (rs != NB_OK) {
                nb_model_upload_free(m);
                return nb_error_wrap(rs, "layer %d kv_b_proj", l);
            }
        }
    }
#endif
    *out = m;
    return NB_OK;
}

nb_status nb_model_upload(const nb_model *host, nb_ops_ctx *ctx, nb_model **out) { return upload(host, NULL, ctx, out); }

nb_status nb_model_upload_deferred(const nb_model *host, const struct nb_synth_deferred *plan, nb_ops_ctx *ctx,
                                   nb_model **out)
{
    return upload(host, plan, ctx, out);
}
