/* BF16 checkpoint -> ModelOpt NVFP4 checkpoint, streamed (format/quantize.h).
 * Exercise: build-fmt/tests/test_tools quantize; build-fmt/nibble quantize IN OUT */
#include "format/quantize.h"

#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/log.h"
#include "base/progress.h"
#include "format/numerics.h"
#include "format/nvfp4.h"
#include "format/quant_config.h"
#include "format/tensor_role.h"

#define NB_Q_CHUNK_FLOATS ((int64_t)1 << 20) /* 4 MB of float32 rows at a time */

nb_quantize_params nb_quantize_default_params(void)
{
    nb_quantize_params p = {0};
    p.share_gate_up = 1;
    p.shard_bytes = (uint64_t)4 << 30;
    p.progress = 1;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    p.threads = n > 0 ? (int)NB_MIN(n, 16) : 1;
    return p;
}

nb_status nb_st_rows_to_f32(const nb_st_tensor *t, int64_t row0, int64_t rows, float *out)
{
    if (t->ndim != 2 || row0 < 0 || rows < 0 || row0 + rows > t->shape[0])
        return nb_error(NB_ERR_INVALID_ARG, "tensor '%s': rows [%lld, %lld) of a %d-D tensor", t->name,
                        (long long)row0, (long long)(row0 + rows), t->ndim);
    const int64_t k = t->shape[1], n = rows * k, off = row0 * k;
    switch (t->dtype) {
    case NB_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            nb_bf16 h;
            memcpy(&h, (const uint8_t *)t->data + 2 * (off + i), 2);
            out[i] = nb_bf16_to_f32(h);
        }
        return NB_OK;
    case NB_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const uint8_t *)t->data + 2 * (off + i), 2);
            out[i] = nb_f16_to_f32(h);
        }
        return NB_OK;
    case NB_DTYPE_F32:
        memcpy(out, (const uint8_t *)t->data + 4 * off, (size_t)n * 4);
        return NB_OK;
    default:
        return nb_error(NB_ERR_UNSUPPORTED, "tensor '%s': dtype %s cannot be quantized (BF16, F16, F32 only)", t->name,
                        nb_dtype_name(t->dtype));
    }
}

/* max |x| over a whole 2-D tensor, in row chunks. */
static nb_status nb_q_amax(const nb_st_tensor *t, float *buf, int64_t chunk_rows, float *amax)
{
    float m = 0;
    for (int64_t r = 0; r < t->shape[0]; r += chunk_rows) {
        int64_t rows = NB_MIN(chunk_rows, t->shape[0] - r);
        NB_TRY(nb_st_rows_to_f32(t, r, rows, buf));
        for (int64_t i = 0; i < rows * t->shape[1]; i++) {
            if (!isfinite(buf[i]))
                return nb_error(NB_ERR_FORMAT, "tensor '%s': element %lld is not finite", t->name,
                                (long long)(r * t->shape[1] + i));
        }
        float c = nb_absmax_f32(buf, (size_t)(rows * t->shape[1]));
        if (c > m) m = c;
    }
    *amax = m;
    return NB_OK;
}

typedef struct nb_q_job {
    const nb_st_tensor *src; /* the checkpoint's tensor, or &view */
    nb_st_tensor view;      /* one expert's 2-D slice of a fused [E, n, k] tensor */
    char vname[600];        /* the view's per-expert name (ModelOpt layout) */
    int is_view;
    char module[512];   /* name without ".weight" */
    int quant;
    int partner;        /* gate <-> up of one MLP, both quantized; -1 otherwise */
    float ws2;          /* set when the job (or its partner) is reached */
    int shard;
} nb_q_job;

static const char *nb_q_job_name(const nb_q_job *j) { return j->is_view ? j->vname : j->src->name; }

static int nb_q_job_cmp(const void *a, const void *b)
{
    return strcmp(nb_q_job_name(a), nb_q_job_name(b));
}

static int nb_q_ends(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Fused expert tensors as transformers 5 holds them in memory (save_original_format=False):
 * mlp.experts.gate_up_proj [E, 2I, H] (rows 0..I-1 gate, I..2I-1 up) and
 * mlp.experts.down_proj [E, H, I]. They are written per expert, as ModelOpt does.
 * Returns how many per-expert 2-D views `t` becomes (0: not a fused tensor). */
static int64_t nb_q_fused_views(const nb_st_tensor *t)
{
    if (t->ndim != 3 || (t->dtype != NB_DTYPE_BF16 && t->dtype != NB_DTYPE_F16 && t->dtype != NB_DTYPE_F32)) return 0;
    if (nb_q_ends(t->name, ".mlp.experts.gate_up_proj") && t->shape[1] % 2 == 0) return 2 * t->shape[0];
    if (nb_q_ends(t->name, ".mlp.experts.down_proj")) return t->shape[0];
    return 0;
}

/* The v-th view of a fused tensor into job j. */
static void nb_q_fused_view(nb_q_job *j, const nb_st_tensor *t, int64_t v)
{
    const int gate_up = nb_q_ends(t->name, ".gate_up_proj");
    const int64_t e = gate_up ? v / 2 : v, rows = gate_up ? t->shape[1] / 2 : t->shape[1];
    const int64_t row0 = gate_up ? (v % 2) * rows : 0, k = t->shape[2];
    const size_t es = nb_dtype_size(t->dtype);
    const size_t pl = strlen(t->name) - strlen(gate_up ? "gate_up_proj" : "down_proj");
    snprintf(j->vname, sizeof j->vname, "%.*s%lld.%s.weight", (int)pl, t->name, (long long)e,
             gate_up ? (v % 2 ? "up_proj" : "gate_proj") : "down_proj");
    j->is_view = 1;
    j->view = *t;
    j->view.ndim = 2;
    j->view.shape[0] = rows;
    j->view.shape[1] = k;
    j->view.shape[2] = 0;
    j->view.data = (const uint8_t *)t->data + (size_t)((e * t->shape[1] + row0) * k) * es;
    j->view.nbytes = (size_t)(rows * k) * es;
}

/* Whether a tensor is a candidate, by role and the user's choices. */
static int nb_q_wanted(const nb_st_tensor *t, const nb_tensor_info *ti, const nb_quantize_params *p,
                       const nb_quant_config *user)
{
    if (!ti->is_weight || t->ndim != 2) return 0;
    if (t->dtype != NB_DTYPE_BF16 && t->dtype != NB_DTYPE_F16 && t->dtype != NB_DTYPE_F32) return 0;
    int role_ok = ti->role == NB_ROLE_EXPERT ||
                  (p->all_linear && (ti->role == NB_ROLE_ATTN_HEADS || ti->role == NB_ROLE_ATTN_LATENT ||
                                     ti->role == NB_ROLE_SHARED_EXPERT || ti->role == NB_ROLE_DENSE_MLP));
    if (!role_ok) return 0;
    if (nb_quant_excluded(user, t->name)) return 0;
    return 1;
}

/* exclude_modules: unquantized linear modules, generalized over layer/expert numbers where
 * the generalized glob matches no quantized module. */
static nb_status nb_q_exclude_list(const nb_q_job *jobs, int n, cJSON *arr)
{
    /* generalized globs already judged (few distinct ones: one per module kind), so the
     * check against every quantized module runs once per glob, not once per module */
    enum { NB_Q_MAX_GLOBS = 256 };
    char seen[NB_Q_MAX_GLOBS][600];
    uint8_t clashes[NB_Q_MAX_GLOBS];
    int n_seen = 0;
    for (int i = 0; i < n; i++) {
        const nb_q_job *j = &jobs[i];
        nb_tensor_info ti = nb_tensor_info_of(nb_q_job_name(j));
        if (j->quant || !ti.is_weight || !nb_tensor_role_is_linear(ti.role)) continue;
        /* generalize: digits after "layers." and "experts." become '*' */
        char g[600];
        size_t o = 0;
        for (const char *s = j->module; *s && o + 2 < sizeof g;) {
            g[o++] = *s;
            if (*s == '.' && ((s - j->module >= 6 && !strncmp(s - 6, "layers", 6)) ||
                              (s - j->module >= 7 && !strncmp(s - 7, "experts", 7))) &&
                s[1] >= '0' && s[1] <= '9') {
                g[o++] = '*';
                s++;
                while (*s >= '0' && *s <= '9') s++;
                continue;
            }
            s++;
        }
        g[o] = 0;
        int clash = -1;
        for (int k = 0; k < n_seen && clash < 0; k++)
            if (!strcmp(seen[k], g)) clash = clashes[k];
        if (clash < 0) {
            clash = 0;
            for (int k = 0; k < n && !clash; k++) clash = jobs[k].quant && fnmatch(g, jobs[k].module, 0) == 0;
            if (n_seen < NB_Q_MAX_GLOBS) {
                memcpy(seen[n_seen], g, o + 1);
                clashes[n_seen++] = (uint8_t)clash;
            }
        }
        const char *add = clash ? j->module : g;
        int dup = 0;
        for (const cJSON *e = arr->child; e && !dup; e = e->next) dup = !strcmp(e->valuestring, add);
        if (!dup && !cJSON_AddItemToArray(arr, cJSON_CreateString(add)))
            return nb_error(NB_ERR_OUT_OF_MEMORY, "exclude_modules");
    }
    return NB_OK;
}

typedef struct nb_q_ctx {
    const nb_quantize_params *p;
    const nb_checkpoint *ck;
    nb_q_job *jobs;
    int n;
    float *fbuf;
    uint8_t *pbuf, *sbuf; /* one chunk of packed rows; one tensor's scales */
    size_t sbuf_cap;
    nb_progress prog;
} nb_q_ctx;

/* One thread's share of a chunk: rows [r0, r0 + rows) of t, at row offset `at` in the
 * chunk buffers. */
typedef struct nb_q_part {
    const nb_st_tensor *t;
    int64_t r0, rows, at;
    float ws2;
    float *fbuf;
    uint8_t *pbuf, *sbuf;
    nb_status s;
} nb_q_part;

static void *nb_q_part_run(void *arg)
{
    nb_q_part *p = arg;
    const int64_t k = p->t->shape[1];
    p->s = nb_st_rows_to_f32(p->t, p->r0, p->rows, p->fbuf + p->at * k);
    if (!p->s)
        nb_nvfp4_quantize_rows_ref(p->fbuf + p->at * k, p->rows, k, p->ws2, p->pbuf + p->at * (k / 2),
                                   p->sbuf + p->r0 * (k / 16));
    return NULL;
}

/* Quantize rows [r0, r0 + rows) of t into c->pbuf (packed, from its start) and c->sbuf
 * (scales, at their place in the whole tensor), split over c->p->threads threads. Rows
 * are independent, so the bytes do not depend on the thread count. */
static nb_status nb_q_rows_parallel(nb_q_ctx *c, const nb_st_tensor *t, int64_t r0, int64_t rows, float ws2)
{
    enum { NB_Q_MAX_THREADS = 64 };
    int nt = c->p->threads > 0 ? NB_MIN(c->p->threads, NB_Q_MAX_THREADS) : 1;
    if (rows < nt * 4) nt = 1;
    nb_q_part parts[NB_Q_MAX_THREADS];
    pthread_t th[NB_Q_MAX_THREADS];
    int started[NB_Q_MAX_THREADS] = {0};
    for (int i = 0; i < nt; i++) {
        int64_t a = rows * i / nt, b = rows * (i + 1) / nt;
        parts[i] = (nb_q_part){t, r0 + a, b - a, a, ws2, c->fbuf, c->pbuf, c->sbuf, NB_OK};
        if (i > 0) started[i] = pthread_create(&th[i], NULL, nb_q_part_run, &parts[i]) == 0;
        if (i > 0 && !started[i]) nb_q_part_run(&parts[i]); /* no thread: do it here */
    }
    nb_q_part_run(&parts[0]);
    nb_status s = NB_OK;
    for (int i = 0; i < nt; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        if (!s && parts[i].s) s = parts[i].s;
    }
    return s;
}

/* Write one job's output tensors (weight, weight_scale, weight_scale_2, or the copy). */
static nb_status nb_q_write_job(nb_q_ctx *c, int idx, nb_st_writer *w)
{
    nb_q_job *j = &c->jobs[idx];
    const nb_st_tensor *t = j->src;
    if (!j->quant) {
        NB_TRY(nb_st_writer_write(w, t->data, t->nbytes));
        nb_progress_add(&c->prog, t->nbytes);
        nb_checkpoint_drop_pages(c->ck, t);
        return NB_OK;
    }
    const int64_t n = t->shape[0], k = t->shape[1];
    const int64_t chunk = NB_MAX(1, NB_Q_CHUNK_FLOATS / k);
    if (!(j->ws2 > 0)) {
        float a;
        NB_TRY(nb_q_amax(t, c->fbuf, chunk, &a));
        if (j->partner >= 0 && c->p->share_gate_up) {
            float b;
            NB_TRY(nb_q_amax(c->jobs[j->partner].src, c->fbuf, NB_MAX(1, NB_Q_CHUNK_FLOATS / c->jobs[j->partner].src->shape[1]), &b));
            a = NB_MAX(a, b);
        }
        j->ws2 = nb_nvfp4_global_scale(a > 0 ? a : 1.0f);
        if (j->partner >= 0 && c->p->share_gate_up) c->jobs[j->partner].ws2 = j->ws2;
    }
    size_t sbytes = (size_t)(n * (k / 16));
    if (sbytes > c->sbuf_cap) {
        uint8_t *ns = realloc(c->sbuf, sbytes);
        if (!ns) return nb_error(NB_ERR_OUT_OF_MEMORY, "tensor '%s': %zu scale bytes", t->name, sbytes);
        c->sbuf = ns;
        c->sbuf_cap = sbytes;
    }
    for (int64_t r = 0; r < n; r += chunk) {
        int64_t rows = NB_MIN(chunk, n - r);
        NB_TRY(nb_q_rows_parallel(c, t, r, rows, j->ws2));
        NB_TRY(nb_st_writer_write(w, c->pbuf, (size_t)(rows * k / 2)));
        nb_progress_add(&c->prog, (uint64_t)(rows * k) * nb_dtype_size(t->dtype));
    }
    NB_TRY(nb_st_writer_write(w, c->sbuf, sbytes));
    nb_checkpoint_drop_pages(c->ck, t);
    return nb_st_writer_write(w, &j->ws2, 4);
}

/* Output tensors of a job: 1 (copy) or 3 (weight, weight_scale, weight_scale_2). */
static int nb_q_outputs(const nb_q_job *j, char names[3][600], nb_dtype dt[3], int64_t shapes[3][NB_MAX_DIMS], int nd[3],
                        uint64_t *bytes)
{
    const nb_st_tensor *t = j->src;
    memset(shapes, 0, 3 * sizeof shapes[0]);
    if (!j->quant) {
        snprintf(names[0], 600, "%s", t->name);
        dt[0] = t->dtype;
        nd[0] = t->ndim;
        for (int d = 0; d < t->ndim; d++) shapes[0][d] = t->shape[d];
        *bytes = t->nbytes;
        return 1;
    }
    const int64_t n = t->shape[0], k = t->shape[1];
    snprintf(names[0], 600, "%s.weight", j->module);
    snprintf(names[1], 600, "%s.weight_scale", j->module);
    snprintf(names[2], 600, "%s.weight_scale_2", j->module);
    dt[0] = NB_DTYPE_U8;
    dt[1] = NB_DTYPE_F8_E4M3;
    dt[2] = NB_DTYPE_F32;
    nd[0] = nd[1] = 2;
    nd[2] = 0;
    shapes[0][0] = shapes[1][0] = n;
    shapes[0][1] = k / 2;
    shapes[1][1] = k / 16;
    *bytes = (uint64_t)(n * k / 2 + n * k / 16 + 4);
    return 3;
}

/* One shard: its header lists the outputs of the jobs assigned to it, then they stream. */
static nb_status nb_q_write_shard(nb_q_ctx *c, int sh, int n_shards, const char *out_dir, cJSON *wmap)
{
    char file[64], path[4096];
    snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", sh + 1, n_shards);
    nb_path_join(path, sizeof path, out_dir, file);
    int m = 0;
    for (int i = 0; i < c->n; i++) m += c->jobs[i].shard == sh ? (c->jobs[i].quant ? 3 : 1) : 0;
    nb_status s = NB_OK;
    char **names = calloc((size_t)m + 1, sizeof *names);
    nb_dtype *dt = malloc(((size_t)m + 1) * sizeof *dt);
    int64_t(*shapes)[NB_MAX_DIMS] = malloc(((size_t)m + 1) * sizeof *shapes);
    int *nd = malloc(((size_t)m + 1) * sizeof *nd);
    if (!names || !dt || !shapes || !nd) {
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: shard plan", path);
        goto done;
    }
    int o = 0;
    for (int i = 0; i < c->n && !s; i++) {
        if (c->jobs[i].shard != sh) continue;
        char nm[3][600];
        nb_dtype d3[3];
        int64_t s3[3][NB_MAX_DIMS];
        int n3[3];
        uint64_t b;
        int k = nb_q_outputs(&c->jobs[i], nm, d3, s3, n3, &b);
        for (int q = 0; q < k; q++, o++) {
            dt[o] = d3[q];
            nd[o] = n3[q];
            memcpy(shapes[o], s3[q], sizeof s3[q]);
            if (!(names[o] = strdup(nm[q])) || !cJSON_AddItemToObject(wmap, nm[q], cJSON_CreateString(file)))
                s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: shard plan", path);
        }
    }
    nb_st_writer *w = NULL;
    if (!s) s = nb_st_writer_open(&w, path, m, (const char *const *)names, dt, (const int64_t(*)[NB_MAX_DIMS])shapes, nd,
                                  "{\"format\":\"pt\"}");
    for (int i = 0; i < c->n && !s; i++)
        if (c->jobs[i].shard == sh) s = nb_q_write_job(c, i, w);
    if (w) {
        if (s) nb_st_writer_abort(w);
        else s = nb_st_writer_close(w);
    }
done:
    for (int i = 0; names && i < m; i++) free(names[i]);
    free(names);
    free(dt);
    free(shapes);
    free(nd);
    return s;
}

static nb_status nb_q_write_json(const char *dir, const char *file, cJSON *obj)
{
    char path[4096];
    nb_path_join(path, sizeof path, dir, file);
    char *text = cJSON_Print(obj);
    if (!text) return nb_error(NB_ERR_OUT_OF_MEMORY, "%s", path);
    nb_status s = nb_write_file(path, text, strlen(text));
    cJSON_free(text);
    return s;
}

static nb_status nb_q_copy_aux(const char *in_dir, const char *out_dir)
{
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                                        "generation_config.json", "special_tokens_map.json", "tokenizer.model",
                                        "vocab.json", "merges.txt"};
    for (size_t i = 0; i < NB_ARRAY_LEN(files); i++) {
        char src[4096], dst[4096], *buf;
        size_t len;
        nb_path_join(src, sizeof src, in_dir, files[i]);
        if (!nb_path_exists(src)) continue;
        NB_TRY(nb_read_file(src, &buf, &len, 0));
        nb_status s = nb_write_file(nb_path_join(dst, sizeof dst, out_dir, files[i]), buf, len);
        free(buf);
        NB_TRY(s);
    }
    return NB_OK;
}

nb_status nb_quantize_checkpoint(const char *in_dir, const char *out_dir, const nb_quantize_params *p)
{
    nb_quantize_params dp = nb_quantize_default_params();
    if (!p) p = &dp;
    char path[4096];
    cJSON *cfg = NULL, *qc = NULL, *hq = NULL, *wmap = NULL, *index = NULL;
    nb_checkpoint *ck = NULL;
    nb_q_ctx c = {0};
    c.p = p;
    nb_quant_config user = {0};
    user.exclude = (char **)p->exclude;
    user.n_exclude = p->n_exclude;
    nb_status s = nb_json_load_file(nb_path_join(path, sizeof path, in_dir, "config.json"), &cfg);
    if (s) goto done;
    if (cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config") ||
        nb_path_exists(nb_path_join(path, sizeof path, in_dir, "hf_quant_config.json"))) {
        s = nb_error(NB_ERR_UNSUPPORTED, "%s: already quantized (quantization_config or hf_quant_config.json present)", in_dir);
        goto done;
    }
    if ((s = nb_checkpoint_open(in_dir, &ck))) goto done;
    c.ck = ck;
    if ((s = nb_mkdirs(out_dir))) goto done;
    char rin[4096], rout[4096];
    if (!realpath(in_dir, rin) || !realpath(out_dir, rout) || !strcmp(rin, rout)) {
        s = nb_error(NB_ERR_INVALID_ARG, "quantize: the output folder %s must be another folder than the input %s", out_dir,
                     in_dir);
        goto done;
    }

    /* plan: every tensor (fused expert tensors as per-expert views), in name order */
    const int n_in = nb_checkpoint_count(ck);
    int64_t n_jobs = 0;
    for (int i = 0; i < n_in; i++) {
        int64_t v = nb_q_fused_views(nb_checkpoint_at(ck, i));
        n_jobs += v ? v : 1;
    }
    if (n_jobs > (1 << 30)) {
        s = nb_error(NB_ERR_UNSUPPORTED, "%s: %lld tensors after splitting fused experts", in_dir, (long long)n_jobs);
        goto done;
    }
    c.n = (int)n_jobs;
    c.jobs = calloc((size_t)c.n + 1, sizeof *c.jobs);
    c.fbuf = malloc(sizeof(float) * (size_t)NB_Q_CHUNK_FLOATS * 2);
    c.pbuf = malloc((size_t)NB_Q_CHUNK_FLOATS);
    if (!c.jobs || !c.fbuf || !c.pbuf) {
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "quantize: buffers");
        goto done;
    }
    uint64_t total_in = 0;
    for (int i = 0, o = 0; i < n_in; i++) {
        const nb_st_tensor *t = nb_checkpoint_at(ck, i);
        int64_t nv = nb_q_fused_views(t);
        total_in += t->nbytes;
        if (!nv) {
            c.jobs[o].src = t;
            c.jobs[o++].partner = -1;
            continue;
        }
        NB_LOG_INFO("format", "%s: fused [%lld, %lld, %lld] experts written per expert", t->name, (long long)t->shape[0],
                    (long long)t->shape[1], (long long)t->shape[2]);
        for (int64_t v = 0; v < nv; v++) {
            nb_q_fused_view(&c.jobs[o], t, v);
            c.jobs[o++].partner = -1;
        }
    }
    qsort(c.jobs, (size_t)c.n, sizeof *c.jobs, nb_q_job_cmp);
    for (int i = 0; i < c.n; i++) { /* views moved with the sort: point them at themselves */
        if (!c.jobs[i].is_view) continue;
        c.jobs[i].view.name = c.jobs[i].vname;
        c.jobs[i].src = &c.jobs[i].view;
    }
    int n_quant = 0;
    for (int i = 0; i < c.n; i++) {
        nb_q_job *j = &c.jobs[i];
        const nb_st_tensor *t = j->src;
        nb_tensor_info ti = nb_tensor_info_of(t->name);
        size_t l = strlen(t->name);
        snprintf(j->module, sizeof j->module, "%.*s", (int)(ti.is_weight ? l - 7 : l), t->name);
        if (ti.role == NB_ROLE_EXPERT && t->ndim == 3)
            NB_LOG_WARN("format", "%s: 3-D expert tensor of an unknown layout left unquantized", t->name);
        if (!nb_q_wanted(t, &ti, p, &user)) continue;
        if (t->shape[1] % NB_NVFP4_GROUP || t->shape[1] > NB_Q_CHUNK_FLOATS) {
            NB_LOG_WARN("format", "%s: K = %lld is not a multiple of 16 (or too large): left unquantized", t->name,
                        (long long)t->shape[1]);
            continue;
        }
        j->quant = 1;
        n_quant++;
    }
    /* gate/up partners: same prefix, "gate_proj" vs "up_proj" */
    for (int i = 0; i < c.n; i++) {
        nb_q_job *j = &c.jobs[i];
        size_t l = strlen(j->module);
        if (!j->quant || l < 9 || strcmp(j->module + l - 9, "gate_proj")) continue;
        char up[520];
        snprintf(up, sizeof up, "%.*sup_proj", (int)(l - 9), j->module);
        for (int k = i + 1; k < c.n; k++) {
            if (c.jobs[k].quant && !strcmp(c.jobs[k].module, up)) {
                j->partner = k;
                c.jobs[k].partner = i;
                break;
            }
        }
    }
    /* shards: fill each up to shard_bytes, a job's outputs never split */
    int n_shards = 1;
    uint64_t in_shard = 0, total_out = 0;
    for (int i = 0; i < c.n; i++) {
        char names[3][600];
        nb_dtype dt[3];
        int64_t shapes[3][NB_MAX_DIMS];
        int nd[3];
        uint64_t b;
        nb_q_outputs(&c.jobs[i], names, dt, shapes, nd, &b);
        if (in_shard > 0 && in_shard + b > p->shard_bytes) {
            n_shards++;
            in_shard = 0;
        }
        c.jobs[i].shard = n_shards - 1;
        in_shard += b;
        total_out += b;
    }
    NB_LOG_INFO("format", "quantize %s -> %s: %d of %d weights to NVFP4, %d shard(s)", in_dir, out_dir, n_quant, c.n,
                n_shards);
    if (p->progress) nb_progress_begin(&c.prog, "quantize", total_in, "B");
    index = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)total_out);
    wmap = cJSON_AddObjectToObject(index, "weight_map");
    for (int sh = 0; sh < n_shards && !s; sh++) s = nb_q_write_shard(&c, sh, n_shards, out_dir, wmap);
    if (p->progress) nb_progress_end(&c.prog);
    if (s) goto done;
    if ((s = nb_q_write_json(out_dir, "model.safetensors.index.json", index))) goto done;

    /* quantization configs */
    cJSON *excl = cJSON_CreateArray();
    if ((s = nb_q_exclude_list(c.jobs, c.n, excl))) {
        cJSON_Delete(excl);
        goto done;
    }
    hq = cJSON_CreateObject();
    cJSON *prod = cJSON_AddObjectToObject(hq, "producer");
    cJSON_AddStringToObject(prod, "name", "nibble");
    cJSON_AddStringToObject(prod, "version", nb_version());
    cJSON *qb = cJSON_AddObjectToObject(hq, "quantization");
    cJSON_AddStringToObject(qb, "quant_algo", "NVFP4");
    cJSON_AddNullToObject(qb, "kv_cache_quant_algo");
    cJSON_AddNumberToObject(qb, "group_size", 16);
    cJSON_AddItemToObject(qb, "exclude_modules", excl);
    if ((s = nb_q_write_json(out_dir, "hf_quant_config.json", hq))) goto done;
    qc = cJSON_CreateObject();
    cJSON_AddStringToObject(qc, "quant_method", "modelopt");
    cJSON_AddStringToObject(qc, "quant_algo", "NVFP4");
    cJSON_AddNumberToObject(qc, "group_size", 16);
    cJSON_AddNullToObject(qc, "kv_cache_quant_algo");
    cJSON_AddItemToObject(qc, "exclude_modules", cJSON_Duplicate(excl, 1));
    cJSON_AddItemToObject(qc, "producer", cJSON_Duplicate(prod, 1));
    cJSON_AddItemToObject(cfg, "quantization_config", qc);
    qc = NULL; /* owned by cfg now */
    if ((s = nb_q_write_json(out_dir, "config.json", cfg))) goto done;
    s = nb_q_copy_aux(in_dir, out_dir);
done:
    cJSON_Delete(cfg);
    cJSON_Delete(qc);
    cJSON_Delete(hq);
    cJSON_Delete(index);
    nb_checkpoint_close(ck);
    free(c.jobs);
    free(c.fbuf);
    free(c.pbuf);
    free(c.sbuf);
    return s;
}
