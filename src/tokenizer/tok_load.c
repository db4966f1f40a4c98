/* Loading a tokenizer: tokenizer.json (model, added tokens, normalizer, pre-tokenizer,
 * post-processor, decoder) and the model folder's tokenizer_config.json,
 * chat_template.jinja, additional_chat_templates/NAME.jinja and generation_config.json.
 * Every malformed field is an NB_ERR_FORMAT naming the file and the JSON path; a
 * component nibble does not implement is NB_ERR_UNSUPPORTED naming its type.
 * Exercised by tests/tokenizer/test_tokenizer.c (load_*, malformed_*) and test_vs_hf.py. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/log.h"
#include "tokenizer/tok_internal.h"

/* Ids index dense tables: refuse absurd ones (real vocabularies stay under a million). */
#define NB_TOK_MAX_ID (1 << 24)

typedef struct nb_ctx {
    const char *what; /* file name for errors */
} nb_ctx;

static char *nb_strdup0(const char *s)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p) memcpy(p, s, n + 1);
    return p;
}

static const cJSON *nb_get(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static nb_status nb_get_str(const nb_ctx *c, const char *path, const cJSON *o, const char *k, int required,
                            const char **out)
{
    const cJSON *v = nb_get(o, k);
    *out = NULL;
    if (!v) {
        if (required) return nb_error(NB_ERR_FORMAT, "%s: %s.%s is missing", c->what, path, k);
        return NB_OK;
    }
    if (!cJSON_IsString(v)) return nb_error(NB_ERR_FORMAT, "%s: %s.%s must be a string", c->what, path, k);
    *out = v->valuestring;
    return NB_OK;
}

static nb_status nb_get_bool(const nb_ctx *c, const char *path, const cJSON *o, const char *k, int dflt, int *out)
{
    const cJSON *v = nb_get(o, k);
    *out = dflt;
    if (!v) return NB_OK;
    if (!cJSON_IsBool(v)) return nb_error(NB_ERR_FORMAT, "%s: %s.%s must be a boolean", c->what, path, k);
    *out = cJSON_IsTrue(v);
    return NB_OK;
}

static nb_status nb_get_int(const nb_ctx *c, const char *path, const cJSON *o, const char *k, int dflt, int *out)
{
    const cJSON *v = nb_get(o, k);
    *out = dflt;
    if (!v) return NB_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 2147483647.0 ||
        v->valuedouble != (double)(int)v->valuedouble)
        return nb_error(NB_ERR_FORMAT, "%s: %s.%s must be a non-negative integer", c->what, path, k);
    *out = (int)v->valuedouble;
    return NB_OK;
}

/* A single character field (Metaspace replacement, Strip content). */
static nb_status nb_get_char(const nb_ctx *c, const char *path, const cJSON *o, const char *k, uint32_t dflt,
                             uint32_t *out)
{
    const char *s;
    NB_TRY(nb_get_str(c, path, o, k, 0, &s));
    *out = dflt;
    if (!s) return NB_OK;
    size_t n = strlen(s);
    uint32_t cp;
    if (n == 0 || !nb_utf8_valid(s, n) || (size_t)nb_utf8_next(s, n, &cp) != n)
        return nb_error(NB_ERR_FORMAT, "%s: %s.%s must be one character", c->what, path, k);
    *out = cp;
    return NB_OK;
}

/* {"String": "..."} or {"Regex": "..."} */
static nb_status nb_get_pattern(const nb_ctx *c, const char *path, const cJSON *o, nb_regex *re)
{
    const cJSON *p = nb_get(o, "pattern");
    if (!cJSON_IsObject(p)) return nb_error(NB_ERR_FORMAT, "%s: %s.pattern must be an object", c->what, path);
    const char *s;
    char where[160];
    snprintf(where, sizeof where, "%s: %s.pattern", c->what, path);
    NB_TRY(nb_get_str(c, path, p, "String", 0, &s));
    if (s) return nb_regex_compile(re, s, 1, where);
    NB_TRY(nb_get_str(c, path, p, "Regex", 0, &s));
    if (s) return nb_regex_compile(re, s, 0, where);
    return nb_error(NB_ERR_FORMAT, "%s: %s.pattern needs \"String\" or \"Regex\"", c->what, path);
}

static nb_status nb_get_type(const nb_ctx *c, const char *path, const cJSON *o, const char **type)
{
    if (!cJSON_IsObject(o)) return nb_error(NB_ERR_FORMAT, "%s: %s must be an object or null", c->what, path);
    return nb_get_str(c, path, o, "type", 1, type);
}

static nb_status nb_get_array(const nb_ctx *c, const char *path, const cJSON *o, const char *k, const cJSON **out,
                              size_t *n)
{
    const cJSON *a = nb_get(o, k);
    if (!cJSON_IsArray(a)) return nb_error(NB_ERR_FORMAT, "%s: %s.%s must be a list", c->what, path, k);
    *out = a;
    *n = (size_t)cJSON_GetArraySize(a);
    return NB_OK;
}

static nb_status nb_get_prepend_scheme(const nb_ctx *c, const char *path, const cJSON *o, nb_prepend_scheme *out)
{
    const char *s;
    int aps;
    NB_TRY(nb_get_str(c, path, o, "prepend_scheme", 0, &s));
    NB_TRY(nb_get_bool(c, path, o, "add_prefix_space", 1, &aps));
    if (!s) { /* files older than prepend_scheme */
        *out = aps ? NB_PREPEND_ALWAYS : NB_PREPEND_NEVER;
        return NB_OK;
    }
    if (!strcmp(s, "always")) *out = NB_PREPEND_ALWAYS;
    else if (!strcmp(s, "first")) *out = NB_PREPEND_FIRST;
    else if (!strcmp(s, "never")) *out = NB_PREPEND_NEVER;
    else return nb_error(NB_ERR_FORMAT, "%s: %s.prepend_scheme '%s' is not always/first/never", c->what, path, s);
    return NB_OK;
}

/* ---- normalizer ------------------------------------------------------------------------ */

static nb_status nb_parse_normalizer(const nb_ctx *c, const char *path, const cJSON *o, nb_normalizer *nm)
{
    const char *type;
    memset(nm, 0, sizeof *nm);
    NB_TRY(nb_get_type(c, path, o, &type));
    if (!strcmp(type, "NFC")) nm->kind = NB_NORM_NFC;
    else if (!strcmp(type, "NFKC")) nm->kind = NB_NORM_NFKC;
    else if (!strcmp(type, "NFD")) nm->kind = NB_NORM_NFD;
    else if (!strcmp(type, "NFKD")) nm->kind = NB_NORM_NFKD;
    else if (!strcmp(type, "Lowercase")) nm->kind = NB_NORM_LOWERCASE;
    else if (!strcmp(type, "Strip")) {
        nm->kind = NB_NORM_STRIP;
        NB_TRY(nb_get_bool(c, path, o, "strip_left", 1, &nm->left));
        NB_TRY(nb_get_bool(c, path, o, "strip_right", 1, &nm->right));
    } else if (!strcmp(type, "Prepend")) {
        const char *p;
        nm->kind = NB_NORM_PREPEND;
        NB_TRY(nb_get_str(c, path, o, "prepend", 1, &p));
        if (!(nm->content = nb_strdup0(p))) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    } else if (!strcmp(type, "Replace")) {
        const char *p;
        nm->kind = NB_NORM_REPLACE;
        NB_TRY(nb_get_str(c, path, o, "content", 1, &p));
        if (!(nm->content = nb_strdup0(p))) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        NB_TRY(nb_get_pattern(c, path, o, &nm->re));
    } else if (!strcmp(type, "Sequence")) {
        const cJSON *a = NULL;
        size_t n = 0;
        nm->kind = NB_NORM_SEQUENCE;
        NB_TRY(nb_get_array(c, path, o, "normalizers", &a, &n));
        nm->sub = calloc(n ? n : 1, sizeof *nm->sub);
        if (!nm->sub) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        for (size_t i = 0; i < n; i++) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", path, i);
            nm->n_sub = i + 1;
            NB_TRY(nb_parse_normalizer(c, sub, cJSON_GetArrayItem(a, (int)i), &nm->sub[i]));
        }
    } else {
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %s: normalizer type '%s' is not supported", c->what, path, type);
    }
    return NB_OK;
}

/* ---- pre-tokenizer --------------------------------------------------------------------- */

/* The GPT-2 pattern of ByteLevel's use_regex. */
static const char nb_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static nb_status nb_parse_pretok(const nb_ctx *c, const char *path, const cJSON *o, nb_pretok *pt)
{
    const char *type;
    memset(pt, 0, sizeof *pt);
    NB_TRY(nb_get_type(c, path, o, &type));
    if (!strcmp(type, "ByteLevel")) {
        pt->kind = NB_PRE_BYTELEVEL;
        NB_TRY(nb_get_bool(c, path, o, "add_prefix_space", 1, &pt->add_prefix_space));
        NB_TRY(nb_get_bool(c, path, o, "use_regex", 1, &pt->use_regex));
        if (pt->use_regex) NB_TRY(nb_regex_compile(&pt->re, nb_gpt2_pattern, 0, "ByteLevel"));
    } else if (!strcmp(type, "Split")) {
        const char *b;
        pt->kind = NB_PRE_SPLIT;
        NB_TRY(nb_get_pattern(c, path, o, &pt->re));
        NB_TRY(nb_get_bool(c, path, o, "invert", 0, &pt->invert));
        NB_TRY(nb_get_str(c, path, o, "behavior", 1, &b));
        if (!strcmp(b, "Removed")) pt->behavior = NB_SPLIT_REMOVED;
        else if (!strcmp(b, "Isolated")) pt->behavior = NB_SPLIT_ISOLATED;
        else if (!strcmp(b, "MergedWithPrevious")) pt->behavior = NB_SPLIT_MERGED_PREV;
        else if (!strcmp(b, "MergedWithNext")) pt->behavior = NB_SPLIT_MERGED_NEXT;
        else if (!strcmp(b, "Contiguous")) pt->behavior = NB_SPLIT_CONTIGUOUS;
        else return nb_error(NB_ERR_FORMAT, "%s: %s.behavior '%s' is not a split behavior", c->what, path, b);
    } else if (!strcmp(type, "Digits")) {
        pt->kind = NB_PRE_DIGITS;
        NB_TRY(nb_get_bool(c, path, o, "individual_digits", 0, &pt->individual_digits));
    } else if (!strcmp(type, "Metaspace")) {
        pt->kind = NB_PRE_METASPACE;
        NB_TRY(nb_get_char(c, path, o, "replacement", 0x2581, &pt->replacement));
        NB_TRY(nb_get_prepend_scheme(c, path, o, &pt->prepend));
        NB_TRY(nb_get_bool(c, path, o, "split", 1, &pt->split));
    } else if (!strcmp(type, "WhitespaceSplit")) {
        pt->kind = NB_PRE_WHITESPACE_SPLIT;
    } else if (!strcmp(type, "Sequence")) {
        const cJSON *a = NULL;
        size_t n = 0;
        pt->kind = NB_PRE_SEQUENCE;
        NB_TRY(nb_get_array(c, path, o, "pretokenizers", &a, &n));
        pt->sub = calloc(n ? n : 1, sizeof *pt->sub);
        if (!pt->sub) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        for (size_t i = 0; i < n; i++) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", path, i);
            pt->n_sub = i + 1;
            NB_TRY(nb_parse_pretok(c, sub, cJSON_GetArrayItem(a, (int)i), &pt->sub[i]));
        }
    } else {
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %s: pre-tokenizer type '%s' is not supported", c->what, path, type);
    }
    return NB_OK;
}

/* ---- decoder --------------------------------------------------------------------------- */

static nb_status nb_parse_decoder(const nb_ctx *c, const char *path, const cJSON *o, nb_decoder *d)
{
    const char *type;
    memset(d, 0, sizeof *d);
    NB_TRY(nb_get_type(c, path, o, &type));
    if (!strcmp(type, "ByteLevel")) d->kind = NB_DEC_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback")) d->kind = NB_DEC_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse")) d->kind = NB_DEC_FUSE;
    else if (!strcmp(type, "Metaspace")) {
        d->kind = NB_DEC_METASPACE;
        NB_TRY(nb_get_char(c, path, o, "replacement", 0x2581, &d->replacement));
        NB_TRY(nb_get_prepend_scheme(c, path, o, &d->prepend));
    } else if (!strcmp(type, "Strip")) {
        d->kind = NB_DEC_STRIP;
        NB_TRY(nb_get_char(c, path, o, "content", ' ', &d->strip_content));
        NB_TRY(nb_get_int(c, path, o, "start", 0, &d->strip_start));
        NB_TRY(nb_get_int(c, path, o, "stop", 0, &d->strip_stop));
    } else if (!strcmp(type, "Replace")) {
        const char *p;
        d->kind = NB_DEC_REPLACE;
        NB_TRY(nb_get_str(c, path, o, "content", 1, &p));
        if (!(d->content = nb_strdup0(p))) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        NB_TRY(nb_get_pattern(c, path, o, &d->re));
    } else if (!strcmp(type, "Sequence")) {
        const cJSON *a = NULL;
        size_t n = 0;
        d->kind = NB_DEC_SEQUENCE;
        NB_TRY(nb_get_array(c, path, o, "decoders", &a, &n));
        d->sub = calloc(n ? n : 1, sizeof *d->sub);
        if (!d->sub) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        for (size_t i = 0; i < n; i++) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.decoders[%zu]", path, i);
            d->n_sub = i + 1;
            NB_TRY(nb_parse_decoder(c, sub, cJSON_GetArrayItem(a, (int)i), &d->sub[i]));
        }
    } else {
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %s: decoder type '%s' is not supported", c->what, path, type);
    }
    return NB_OK;
}

/* ---- post-processor -------------------------------------------------------------------- */

static nb_status nb_ids_append(int32_t **v, size_t *n, int32_t id)
{
    int32_t *p = realloc(*v, (*n + 1) * sizeof *p);
    if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    p[(*n)++] = id;
    *v = p;
    return NB_OK;
}

/* Prepend `pre` to *v (a wrapping processor goes outside the earlier ones). */
static nb_status nb_ids_prepend(int32_t **v, size_t *n, const int32_t *pre, size_t k)
{
    if (!k) return NB_OK;
    int32_t *p = malloc((*n + k) * sizeof *p);
    if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    memcpy(p, pre, k * sizeof *p);
    if (*n) memcpy(p + k, *v, *n * sizeof *p);
    free(*v);
    *v = p;
    *n += k;
    return NB_OK;
}

/* [token, id] of Bert/RobertaProcessing */
static nb_status nb_pair_id(const nb_ctx *c, const char *path, const cJSON *o, const char *k, int32_t *id)
{
    const cJSON *a = nb_get(o, k);
    const cJSON *v = cJSON_IsArray(a) && cJSON_GetArraySize(a) == 2 ? cJSON_GetArrayItem(a, 1) : NULL;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= NB_TOK_MAX_ID)
        return nb_error(NB_ERR_FORMAT, "%s: %s.%s must be [token, id]", c->what, path, k);
    *id = (int32_t)v->valuedouble;
    return NB_OK;
}

static nb_status nb_parse_post(const nb_ctx *c, const char *path, const cJSON *o, nb_postproc *pp)
{
    const char *type;
    NB_TRY(nb_get_type(c, path, o, &type));
    if (!strcmp(type, "ByteLevel")) return NB_OK; /* offsets only */
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        int32_t cls, sep;
        NB_TRY(nb_pair_id(c, path, o, "cls", &cls));
        NB_TRY(nb_pair_id(c, path, o, "sep", &sep));
        NB_TRY(nb_ids_prepend(&pp->before, &pp->n_before, &cls, 1));
        return nb_ids_append(&pp->after, &pp->n_after, sep);
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *a = NULL;
        size_t n = 0;
        NB_TRY(nb_get_array(c, path, o, "processors", &a, &n));
        for (size_t i = 0; i < n; i++) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.processors[%zu]", path, i);
            NB_TRY(nb_parse_post(c, sub, cJSON_GetArrayItem(a, (int)i), pp));
        }
        return NB_OK;
    }
    if (strcmp(type, "TemplateProcessing"))
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %s: post-processor type '%s' is not supported", c->what, path,
                        type);
    const cJSON *single = NULL, *specials = nb_get(o, "special_tokens");
    size_t n = 0;
    NB_TRY(nb_get_array(c, path, o, "single", &single, &n));
    int32_t *before = NULL, *after = NULL;
    size_t nb = 0, na = 0;
    int seen_a = 0;
    nb_status st = NB_OK;
    for (size_t i = 0; i < n && st == NB_OK; i++) {
        const cJSON *it = cJSON_GetArrayItem(single, (int)i);
        const cJSON *sp = nb_get(it, "SpecialToken"), *sq = nb_get(it, "Sequence");
        if (sq) {
            seen_a = 1;
            continue;
        }
        const char *name = NULL;
        if (sp) nb_get_str(c, path, sp, "id", 0, &name);
        if (!name) {
            st = nb_error(NB_ERR_FORMAT, "%s: %s.single[%zu] must be a SpecialToken or a Sequence", c->what, path, i);
            break;
        }
        const cJSON *def = nb_get(specials, name), *ids = nb_get(def, "ids");
        if (!cJSON_IsArray(ids)) {
            st = nb_error(NB_ERR_FORMAT, "%s: %s.special_tokens['%s'].ids is missing", c->what, path, name);
            break;
        }
        const cJSON *v;
        cJSON_ArrayForEach(v, ids)
        {
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= NB_TOK_MAX_ID) {
                st = nb_error(NB_ERR_FORMAT, "%s: %s.special_tokens['%s'].ids must be ids", c->what, path, name);
                break;
            }
            st = seen_a ? nb_ids_append(&after, &na, (int32_t)v->valuedouble)
                        : nb_ids_append(&before, &nb, (int32_t)v->valuedouble);
            if (st != NB_OK) break;
        }
    }
    if (st == NB_OK) st = nb_ids_prepend(&pp->before, &pp->n_before, before, nb);
    for (size_t i = 0; st == NB_OK && i < na; i++) st = nb_ids_append(&pp->after, &pp->n_after, after[i]);
    free(before);
    free(after);
    return st;
}

/* ---- model ----------------------------------------------------------------------------- */

static nb_status nb_parse_model(const nb_ctx *c, const cJSON *o, nb_bpe *m)
{
    const char *type, *s;
    if (!cJSON_IsObject(o)) return nb_error(NB_ERR_FORMAT, "%s: model is missing or not an object", c->what);
    NB_TRY(nb_get_str(c, "model", o, "type", 0, &type));
    if (type && strcmp(type, "BPE"))
        return nb_error(NB_ERR_UNSUPPORTED, "%s: model.type '%s' is not supported (only BPE)", c->what, type);
    NB_TRY(nb_get_bool(c, "model", o, "fuse_unk", 0, &m->fuse_unk));
    NB_TRY(nb_get_bool(c, "model", o, "byte_fallback", 0, &m->byte_fallback));
    NB_TRY(nb_get_bool(c, "model", o, "ignore_merges", 0, &m->ignore_merges));
    NB_TRY(nb_get_str(c, "model", o, "unk_token", 0, &s));
    if (s && !(m->unk_token = nb_strdup0(s))) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    NB_TRY(nb_get_str(c, "model", o, "continuing_subword_prefix", 0, &s));
    if (s && *s && !(m->cont_prefix = nb_strdup0(s))) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    NB_TRY(nb_get_str(c, "model", o, "end_of_word_suffix", 0, &s));
    if (s && *s && !(m->end_suffix = nb_strdup0(s))) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    if ((m->cont_prefix && strlen(m->cont_prefix) > 16) || (m->end_suffix && strlen(m->end_suffix) > 16))
        return nb_error(NB_ERR_UNSUPPORTED, "%s: model: subword prefix/suffix longer than 16 bytes", c->what);

    const cJSON *vocab = nb_get(o, "vocab"), *v;
    if (!cJSON_IsObject(vocab)) return nb_error(NB_ERR_FORMAT, "%s: model.vocab must be an object", c->what);
    int32_t max_id = -1;
    cJSON_ArrayForEach(v, vocab)
    {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= NB_TOK_MAX_ID ||
            v->valuedouble != (double)(int32_t)v->valuedouble)
            return nb_error(NB_ERR_FORMAT, "%s: model.vocab['%s'] must be an integer id in [0, 2^24)", c->what,
                            v->string ? v->string : "?");
        int32_t id = (int32_t)v->valuedouble;
        NB_TRY(nb_strmap_put(&m->vocab, v->string, strlen(v->string), id));
        if (id > max_id) max_id = id;
    }
    m->n_ids = max_id + 1;
    m->id_to_token = calloc((size_t)m->n_ids + 1, sizeof *m->id_to_token);
    if (!m->id_to_token) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (vocab)");
    for (size_t i = 0; i < m->vocab.n; i++) {
        int32_t id = m->vocab.vals[i];
        if (m->id_to_token[id]) continue; /* two strings with one id: keep the first */
        if (!(m->id_to_token[id] = nb_strdup0(m->vocab.keys[i])))
            return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (vocab)");
    }

    const cJSON *merges = nb_get(o, "merges");
    if (!merges) return NB_OK;
    if (!cJSON_IsArray(merges)) return nb_error(NB_ERR_FORMAT, "%s: model.merges must be a list", c->what);
    size_t plen = m->cont_prefix ? strlen(m->cont_prefix) : 0;
    nb_tbuf t = {0};
    int32_t rank = 0;
    nb_status st = NB_OK;
    cJSON_ArrayForEach(v, merges)
    {
        const char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        if (cJSON_IsString(v)) { /* "a b": exactly one space */
            const char *sp = strchr(v->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                a = v->valuestring;
                al = (size_t)(sp - a);
                b = sp + 1;
                bl = strlen(b);
            }
        } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsString(cJSON_GetArrayItem(v, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(v, 1))) {
            a = cJSON_GetArrayItem(v, 0)->valuestring;
            b = cJSON_GetArrayItem(v, 1)->valuestring;
            al = strlen(a);
            bl = strlen(b);
        }
        if (!a) {
            st = nb_error(NB_ERR_FORMAT, "%s: model.merges[%d] must be \"a b\" or [\"a\", \"b\"]", c->what, rank);
            break;
        }
        int32_t ia = nb_strmap_get(&m->vocab, a, al), ib = nb_strmap_get(&m->vocab, b, bl);
        t.n = 0;
        if ((st = nb_tbuf_put(&t, a, al)) != NB_OK) break;
        if ((st = nb_tbuf_put(&t, b + (bl >= plen ? plen : bl), bl >= plen ? bl - plen : 0)) != NB_OK) break;
        int32_t inew = nb_strmap_get(&m->vocab, t.p, t.n);
        if (ia < 0 || ib < 0 || inew < 0) {
            st = nb_error(NB_ERR_FORMAT, "%s: model.merges[%d]: '%.*s' + '%.*s' uses a token not in the vocabulary",
                          c->what, rank, (int)al, a, (int)bl, b);
            break;
        }
        if ((st = nb_bpe_add_merge(m, ia, ib, rank, inew)) != NB_OK) break;
        rank++;
    }
    nb_tbuf_free(&t);
    return st;
}

/* ---- added tokens ---------------------------------------------------------------------- */

static nb_status nb_parse_added(const nb_ctx *c, nb_tokenizer *t, const cJSON *a)
{
    if (!a) return NB_OK;
    if (!cJSON_IsArray(a)) return nb_error(NB_ERR_FORMAT, "%s: added_tokens must be a list", c->what);
    size_t n = (size_t)cJSON_GetArraySize(a);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    for (size_t i = 0; i < n; i++) {
        const cJSON *o = cJSON_GetArrayItem(a, (int)i);
        char path[64];
        snprintf(path, sizeof path, "added_tokens[%zu]", i);
        if (!cJSON_IsObject(o)) return nb_error(NB_ERR_FORMAT, "%s: %s must be an object", c->what, path);
        const char *content = NULL;
        int id = 0, special = 0, lstrip = 0, rstrip = 0, single = 0, normalized = 0;
        NB_TRY(nb_get_str(c, path, o, "content", 1, &content));
        if (!nb_get(o, "id")) return nb_error(NB_ERR_FORMAT, "%s: %s.id is missing", c->what, path);
        NB_TRY(nb_get_int(c, path, o, "id", 0, &id));
        if (id >= NB_TOK_MAX_ID) return nb_error(NB_ERR_FORMAT, "%s: %s.id %d is too large", c->what, path, id);
        NB_TRY(nb_get_bool(c, path, o, "special", 0, &special));
        NB_TRY(nb_get_bool(c, path, o, "lstrip", 0, &lstrip));
        NB_TRY(nb_get_bool(c, path, o, "rstrip", 0, &rstrip));
        NB_TRY(nb_get_bool(c, path, o, "single_word", 0, &single));
        NB_TRY(nb_get_bool(c, path, o, "normalized", !special, &normalized));
        if (!*content) continue; /* HF ignores empty added tokens */
        nb_added *ad = &t->added[t->n_added++];
        ad->content = nb_strdup0(content);
        if (!ad->content) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        ad->len = strlen(content);
        ad->id = id;
        ad->special = (uint8_t)special;
        ad->lstrip = (uint8_t)lstrip;
        ad->rstrip = (uint8_t)rstrip;
        ad->single_word = (uint8_t)single;
        ad->normalized = (uint8_t)normalized;
    }
    return NB_OK;
}

nb_status nb_tok_parse_json(nb_tokenizer *t, const char *json, size_t len, const char *what)
{
    cJSON *root;
    nb_ctx c = {what};
    NB_TRY(nb_json_parse(what, json, len, &root));
    nb_status st = NB_OK;
    if (!cJSON_IsObject(root)) {
        st = nb_error(NB_ERR_FORMAT, "%s: the top level must be an object", what);
        goto done;
    }
    if ((st = nb_parse_model(&c, nb_get(root, "model"), &t->bpe)) != NB_OK) goto done;
    if ((st = nb_parse_added(&c, t, nb_get(root, "added_tokens"))) != NB_OK) goto done;
    const cJSON *o;
    if ((o = nb_get(root, "normalizer"))) {
        if (!(t->normalizer = calloc(1, sizeof *t->normalizer))) goto oom;
        if ((st = nb_parse_normalizer(&c, "normalizer", o, t->normalizer)) != NB_OK) goto done;
    }
    if ((o = nb_get(root, "pre_tokenizer"))) {
        if (!(t->pretok = calloc(1, sizeof *t->pretok))) goto oom;
        if ((st = nb_parse_pretok(&c, "pre_tokenizer", o, t->pretok)) != NB_OK) goto done;
    }
    if ((o = nb_get(root, "decoder"))) {
        if (!(t->decoder = calloc(1, sizeof *t->decoder))) goto oom;
        if ((st = nb_parse_decoder(&c, "decoder", o, t->decoder)) != NB_OK) goto done;
    }
    if ((o = nb_get(root, "post_processor")) && (st = nb_parse_post(&c, "post_processor", o, &t->post)) != NB_OK)
        goto done;
    if (nb_get(root, "truncation") || nb_get(root, "padding"))
        NB_LOG_WARN("tok", "%s: truncation/padding settings are ignored (nibble encodes whole texts)", what);
    goto done;
oom:
    st = nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
done:
    cJSON_Delete(root);
    return st;
}

/* ---- the model folder's other files ---------------------------------------------------- */

/* bos_token etc.: a string, an AddedToken object {"content": ...}, or null. */
static nb_status nb_special_field(const char *file, const cJSON *cfg, const char *k, char **out)
{
    const cJSON *v = nb_get(cfg, k);
    if (!v) return NB_OK;
    if (cJSON_IsObject(v)) v = nb_get(v, "content");
    if (!cJSON_IsString(v)) return nb_error(NB_ERR_FORMAT, "%s: '%s' must be a string or {\"content\": ...}", file, k);
    free(*out);
    if (!(*out = nb_strdup0(v->valuestring))) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    return NB_OK;
}

static nb_status nb_add_template(nb_tokenizer *t, const char *name, const char *src)
{
    for (size_t i = 0; i < t->n_templates; i++)
        if (!strcmp(t->templates[i].name, name)) {
            char *s = nb_strdup0(src);
            if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
            free(t->templates[i].source);
            t->templates[i].source = s;
            return NB_OK;
        }
    nb_chat_template *v = realloc(t->templates, (t->n_templates + 1) * sizeof *v);
    if (!v) return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    t->templates = v;
    v[t->n_templates].name = nb_strdup0(name);
    v[t->n_templates].source = nb_strdup0(src);
    if (!v[t->n_templates].name || !v[t->n_templates].source) {
        free(v[t->n_templates].name);
        free(v[t->n_templates].source);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    t->n_templates++;
    return NB_OK;
}

static nb_status nb_add_eos(nb_tokenizer *t, int32_t id)
{
    for (size_t i = 0; i < t->n_eos; i++)
        if (t->eos_ids[i] == id) return NB_OK;
    return nb_ids_append(&t->eos_ids, &t->n_eos, id);
}

static nb_status nb_load_tokenizer_config(nb_tokenizer *t, const char *path)
{
    cJSON *cfg;
    NB_TRY(nb_json_load_file(path, &cfg));
    nb_status st = NB_OK;
    if (!cJSON_IsObject(cfg)) {
        st = nb_error(NB_ERR_FORMAT, "%s: the top level must be an object", path);
        goto done;
    }
    if ((st = nb_special_field(path, cfg, "bos_token", &t->bos)) != NB_OK) goto done;
    if ((st = nb_special_field(path, cfg, "eos_token", &t->eos)) != NB_OK) goto done;
    if ((st = nb_special_field(path, cfg, "pad_token", &t->pad)) != NB_OK) goto done;
    if ((st = nb_json_bool(cfg, "add_bos_token", 0, &t->add_bos, path, NULL)) != NB_OK) goto done;
    const cJSON *ct = nb_get(cfg, "chat_template");
    if (cJSON_IsString(ct)) {
        st = nb_add_template(t, "default", ct->valuestring);
    } else if (cJSON_IsArray(ct)) {
        const cJSON *it;
        size_t i = 0;
        cJSON_ArrayForEach(it, ct)
        {
            const cJSON *name = nb_get(it, "name"), *src = nb_get(it, "template");
            if (!cJSON_IsString(name) || !cJSON_IsString(src)) {
                st = nb_error(NB_ERR_FORMAT, "%s: chat_template[%zu] must be {\"name\": ..., \"template\": ...}", path,
                              i);
                break;
            }
            if ((st = nb_add_template(t, name->valuestring, src->valuestring)) != NB_OK) break;
            i++;
        }
    } else if (ct) {
        st = nb_error(NB_ERR_FORMAT, "%s: chat_template must be a string or a list of named templates", path);
    }
done:
    cJSON_Delete(cfg);
    return st;
}

static nb_status nb_load_generation_config(nb_tokenizer *t, const char *path)
{
    cJSON *cfg;
    NB_TRY(nb_json_load_file(path, &cfg));
    nb_status st = NB_OK;
    const cJSON *e = nb_get(cfg, "eos_token_id"), *v;
    if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < NB_TOK_MAX_ID) {
        st = nb_add_eos(t, (int32_t)e->valuedouble);
    } else if (cJSON_IsArray(e)) {
        cJSON_ArrayForEach(v, e)
        {
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= NB_TOK_MAX_ID) {
                st = nb_error(NB_ERR_FORMAT, "%s: eos_token_id must hold token ids", path);
                break;
            }
            if ((st = nb_add_eos(t, (int32_t)v->valuedouble)) != NB_OK) break;
        }
    } else if (e) {
        st = nb_error(NB_ERR_FORMAT, "%s: eos_token_id must be a token id or a list of them", path);
    }
    cJSON_Delete(cfg);
    return st;
}

nb_status nb_tok_load_configs(nb_tokenizer *t, const char *dir)
{
    char path[4096];
    if (nb_path_exists(nb_path_join(path, sizeof path, dir, "tokenizer_config.json")))
        NB_TRY(nb_load_tokenizer_config(t, path));
    if (nb_path_exists(nb_path_join(path, sizeof path, dir, "chat_template.jinja"))) {
        char *src;
        size_t n;
        NB_TRY(nb_read_file(path, &src, &n, 0));
        nb_status st = nb_add_template(t, "default", src);
        free(src);
        NB_TRY(st);
    }
    /* newer transformers: additional_chat_templates/NAME.jinja holds named templates */
    DIR *dd = opendir(nb_path_join(path, sizeof path, dir, "additional_chat_templates"));
    if (dd) {
        struct dirent *e;
        nb_status st = NB_OK;
        while (st == NB_OK && (e = readdir(dd))) {
            size_t n = strlen(e->d_name);
            if (n <= 6 || strcmp(e->d_name + n - 6, ".jinja")) continue;
            char file[4096], name[256];
            char *src;
            size_t len;
            snprintf(name, sizeof name, "%.*s", (int)(n - 6), e->d_name);
            snprintf(file, sizeof file, "%s/additional_chat_templates/%s", dir, e->d_name);
            if ((st = nb_read_file(file, &src, &len, 0)) != NB_OK) break;
            st = nb_add_template(t, name, src);
            free(src);
        }
        closedir(dd);
        NB_TRY(st);
    }
    if (nb_path_exists(nb_path_join(path, sizeof path, dir, "generation_config.json")))
        NB_TRY(nb_load_generation_config(t, path));
    return NB_OK;
}
