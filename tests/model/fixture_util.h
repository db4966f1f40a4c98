/* Helpers for the model tests: load a golden fixture, copy its checkpoint into an in-memory
 * one (optionally transforming tensors), run a sequence through nb_forward, compare logits. */
#ifndef NB_TESTS_MODEL_FIXTURE_UTIL_H
#define NB_TESTS_MODEL_FIXTURE_UTIL_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "engine/forward.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "nbtest.h"

/* The "long" sequence of a fixture's reference.json (ids), up to cap. */
static inline int fx_long_ids(const char *family, int32_t *ids, int cap)
{
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/%s/reference.json", family);
    cJSON *j = NULL;
    if (nb_json_load_file(path, &j) != NB_OK) return 0;
    int n = 0;
    const cJSON *seqs = cJSON_GetObjectItem(j, "sequences");
    for (const cJSON *s = seqs ? seqs->child : NULL; s; s = s->next) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(s, "name"));
        if (!name || strcmp(name, "long")) continue;
        for (const cJSON *e = cJSON_GetObjectItem(s, "ids")->child; e && n < cap; e = e->next) ids[n++] = (int32_t)e->valuedouble;
    }
    cJSON_Delete(j);
    return n;
}

static inline double fx_rel_err(const float *a, const float *b, int n)
{
    double d = 0, r = 0;
    for (int i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d) / (sqrt(r) + 1e-30);
}

/* Logits [n, vocab] of ids in one prefill step over a fresh contiguous pool whose MLA latent
 * rows are `lat` (F32 or BF16). NULL on error. */
static inline float *fx_score_dt(nb_model *m, const int32_t *ids, int n, nb_dtype lat)
{
    nb_kv_pool pool;
    if (nb_kv_pool_init(&pool, &m->cfg, lat, n) != NB_OK) return NULL;
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)n);
    float *lg = malloc(sizeof(float) * (size_t)n * (size_t)m->cfg.vocab_size);
    for (int i = 0; i < n; i++) slots[i] = i;
    nb_seq_step st = {ids, n, 0, slots, 1};
    nb_batch b = {1, &st};
    nb_status s = nb_forward(m, &pool, &b, lg);
    NB_CHECK_OK(s);
    free(slots);
    nb_kv_pool_free(&pool);
    if (s != NB_OK) {
        free(lg);
        return NULL;
    }
    return lg;
}

static inline float *fx_score(nb_model *m, const int32_t *ids, int n) { return fx_score_dt(m, ids, n, NB_DTYPE_F32); }

/* Copy every tensor of src into a new in-memory checkpoint; xform (may be NULL) may add
 * replacement tensors itself and return 1 to skip the original. */
typedef int (*fx_xform)(nb_checkpoint *dst, const nb_st_tensor *t, void *user);
static inline nb_status fx_copy_checkpoint(const nb_checkpoint *src, fx_xform xform, void *user, nb_checkpoint **out)
{
    NB_TRY(nb_checkpoint_new_memory(out, nb_checkpoint_dir(src)));
    for (int i = 0; i < nb_checkpoint_count(src); i++) {
        const nb_st_tensor *t = nb_checkpoint_at(src, i);
        if (xform && xform(*out, t, user)) continue;
        void *d = malloc(t->nbytes ? t->nbytes : 1);
        memcpy(d, t->data, t->nbytes);
        NB_TRY(nb_checkpoint_add(*out, t->name, t->dtype, t->ndim, t->shape, d));
    }
    return NB_OK;
}

#endif
