/* Checkpoints (format/safetensors.h): a model folder's shards memory-mapped read-only, or
 * an in-memory set of tensors (synthetic models), with lookup by name through an
 * open-addressing hash table over the names the shards own (no tensor data is copied).
 * Exercise: build-fmt/tests/test_safetensors. */
#include "format/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/log.h"

typedef struct nb_shard {
    char *path;
    void *map;
    size_t len;
    nb_st_tensor *tensors; /* from nb_st_parse */
    int n;
} nb_shard;

struct nb_checkpoint {
    char *dir;          /* NULL for a memory checkpoint made without one */
    int memory;         /* 1: items are individually malloc'd with malloc'd data */
    nb_shard *shards;
    int n_shards;
    nb_st_tensor **items; /* every tensor, in shard order */
    int n, cap;
    int *table;         /* open addressing: index into items, -1 empty */
    size_t table_cap;   /* power of two, >= 2n */
};

static uint64_t nb_ck_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Slot of `name`: where it is, or the empty slot where it would go. */
static size_t nb_ck_slot(const nb_checkpoint *ck, const char *name)
{
    size_t mask = ck->table_cap - 1, i = (size_t)nb_ck_hash(name) & mask;
    while (ck->table[i] >= 0 && strcmp(ck->items[ck->table[i]]->name, name)) i = (i + 1) & mask;
    return i;
}

static nb_status nb_ck_rehash(nb_checkpoint *ck, size_t want)
{
    size_t cap = 16;
    while (cap < 2 * want) cap *= 2;
    if (cap <= ck->table_cap) return NB_OK;
    int *t = malloc(cap * sizeof *t);
    if (!t) return nb_error(NB_ERR_OUT_OF_MEMORY, "checkpoint: name table of %zu slots", cap);
    memset(t, 0xff, cap * sizeof *t);
    free(ck->table);
    ck->table = t;
    ck->table_cap = cap;
    for (int k = 0; k < ck->n; k++) ck->table[nb_ck_slot(ck, ck->items[k]->name)] = k;
    return NB_OK;
}

/* Append a tensor (owned elsewhere) to items and the table; a name already present is an
 * error naming both places. */
static nb_status nb_ck_insert(nb_checkpoint *ck, nb_st_tensor *t, const char *where)
{
    if (ck->n == ck->cap) {
        int nc = ck->cap ? ck->cap * 2 : 64;
        nb_st_tensor **ni = realloc(ck->items, (size_t)nc * sizeof *ni);
        if (!ni) return nb_error(NB_ERR_OUT_OF_MEMORY, "checkpoint: %d tensors", nc);
        ck->items = ni;
        ck->cap = nc;
    }
    NB_TRY(nb_ck_rehash(ck, (size_t)ck->n + 1));
    size_t slot = nb_ck_slot(ck, t->name);
    if (ck->table[slot] >= 0) {
        const nb_st_tensor *o = ck->items[ck->table[slot]];
        const char *other = ck->memory || o->file_index >= ck->n_shards ? "memory" : ck->shards[o->file_index].path;
        return nb_error(NB_ERR_FORMAT, "%s: tensor '%s': duplicate name (also in %s)", where, t->name, other);
    }
    ck->items[ck->n] = t;
    ck->table[slot] = ck->n++;
    return NB_OK;
}

void nb_checkpoint_close(nb_checkpoint *ck)
{
    if (!ck) return;
    if (ck->memory) {
        for (int i = 0; i < ck->n; i++) {
            free((void *)ck->items[i]->data);
            free((char *)ck->items[i]->name);
            free(ck->items[i]);
        }
    }
    for (int i = 0; i < ck->n_shards; i++) {
        nb_st_tensors_free(ck->shards[i].tensors, ck->shards[i].n);
        if (ck->shards[i].map) munmap(ck->shards[i].map, ck->shards[i].len);
        free(ck->shards[i].path);
    }
    free(ck->shards);
    free(ck->items);
    free(ck->table);
    free(ck->dir);
    free(ck);
}

/* Map one shard and parse its header. */
static nb_status nb_ck_add_shard(nb_checkpoint *ck, const char *path)
{
    nb_shard *ns = realloc(ck->shards, ((size_t)ck->n_shards + 1) * sizeof *ns);
    if (!ns) return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: shard list", path);
    ck->shards = ns;
    nb_shard *sh = &ck->shards[ck->n_shards];
    memset(sh, 0, sizeof *sh);
    sh->path = strdup(path);
    if (!sh->path) return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: path", path);
    ck->n_shards++;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nb_error(NB_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return nb_error(NB_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size < 8) {
        close(fd);
        return nb_error(NB_ERR_FORMAT, "%s: truncated file (%lld bytes, no header length)", path, (long long)st.st_size);
    }
    sh->len = (size_t)st.st_size;
    void *m = mmap(NULL, sh->len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return nb_error(NB_ERR_IO, "%s: mmap of %zu bytes failed: %s", path, sh->len, strerror(errno));
    sh->map = m;
    NB_TRY(nb_st_parse(path, m, sh->len, &sh->tensors, &sh->n));
    for (int i = 0; i < sh->n; i++) {
        sh->tensors[i].file_index = ck->n_shards - 1;
        NB_TRY(nb_ck_insert(ck, &sh->tensors[i], path));
    }
    return NB_OK;
}

static int nb_ck_strcmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int nb_ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Shard names from model.safetensors.index.json's weight_map, deduplicated and sorted;
 * after loading, every name in the map must be in the shard it names. */
static nb_status nb_ck_open_index(nb_checkpoint *ck, const char *index_path)
{
    cJSON *root;
    NB_TRY(nb_json_load_file(index_path, &root));
    nb_status s = NB_OK;
    char **files = NULL;
    int nf = 0;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        s = nb_error(NB_ERR_FORMAT, "%s: missing 'weight_map' object", index_path);
        goto done;
    }
    int cap = cJSON_GetArraySize(wm);
    files = calloc((size_t)cap + 1, sizeof *files);
    if (!files) {
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s", index_path);
        goto done;
    }
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !e->valuestring[0]) {
            s = nb_error(NB_ERR_FORMAT, "%s: weight_map['%s'] must be a file name in the folder", index_path,
                         e->string ? e->string : "?");
            goto done;
        }
        files[nf++] = e->valuestring;
    }
    qsort(files, (size_t)nf, sizeof *files, nb_ck_strcmp);
    char path[4096];
    for (int i = 0; i < nf; i++) {
        if (i > 0 && !strcmp(files[i], files[i - 1])) continue;
        nb_path_join(path, sizeof path, ck->dir, files[i]);
        s = nb_ck_add_shard(ck, path);
        if (s) goto done;
    }
    for (const cJSON *e = wm->child; e; e = e->next) {
        const nb_st_tensor *t = nb_checkpoint_find(ck, e->string);
        const char *got = t ? strrchr(ck->shards[t->file_index].path, '/') : NULL;
        if (!t || strcmp(got ? got + 1 : ck->shards[t->file_index].path, e->valuestring)) {
            s = nb_error(NB_ERR_FORMAT, "%s: tensor '%s': listed in %s but %s", index_path, e->string, e->valuestring,
                         t ? "found in another shard" : "not in it");
            goto done;
        }
    }
done:
    free(files);
    cJSON_Delete(root);
    return s;
}

static nb_status nb_ck_open_glob(nb_checkpoint *ck)
{
    DIR *d = opendir(ck->dir);
    if (!d) return nb_error(NB_ERR_IO, "%s: cannot open folder: %s", ck->dir, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0;
    nb_status s = NB_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !nb_ends_with(e->d_name, ".safetensors")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, (size_t)cap * sizeof *nn);
            if (!nn) {
                s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: listing", ck->dir);
                goto done;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) {
            s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: listing", ck->dir);
            goto done;
        }
        n++;
    }
    if (n == 0) {
        s = nb_error(NB_ERR_NOT_FOUND, "%s: no *.safetensors files and no model.safetensors.index.json", ck->dir);
        goto done;
    }
    qsort(names, (size_t)n, sizeof *names, nb_ck_strcmp);
    char path[4096];
    for (int i = 0; i < n && !s; i++) s = nb_ck_add_shard(ck, nb_path_join(path, sizeof path, ck->dir, names[i]));
done:
    closedir(d);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return s;
}

nb_status nb_checkpoint_open(const char *path, nb_checkpoint **out)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return nb_error(NB_ERR_IO, "%s: %s", path, strerror(errno));
    nb_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck) return nb_error(NB_ERR_OUT_OF_MEMORY, "checkpoint");
    nb_status s;
    if (S_ISDIR(st.st_mode)) {
        ck->dir = strdup(path);
        if (!ck->dir) {
            nb_checkpoint_close(ck);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "checkpoint");
        }
        /* Without a trailing slash, so joins and messages read well. */
        size_t l = strlen(ck->dir);
        while (l > 1 && ck->dir[l - 1] == '/') ck->dir[--l] = 0;
        char idx[4096];
        nb_path_join(idx, sizeof idx, ck->dir, "model.safetensors.index.json");
        s = nb_path_exists(idx) ? nb_ck_open_index(ck, idx) : nb_ck_open_glob(ck);
    } else {
        const char *slash = strrchr(path, '/');
        ck->dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
        s = ck->dir ? nb_ck_add_shard(ck, path) : nb_error(NB_ERR_OUT_OF_MEMORY, "checkpoint");
    }
    if (s) {
        nb_checkpoint_close(ck);
        return s;
    }
    NB_LOG_DEBUG("format", "%s: %d tensors in %d shard(s)", path, ck->n, ck->n_shards);
    *out = ck;
    return NB_OK;
}

nb_status nb_checkpoint_new_memory(nb_checkpoint **out, const char *dir_or_null)
{
    *out = NULL;
    nb_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck) return nb_error(NB_ERR_OUT_OF_MEMORY, "memory checkpoint");
    ck->memory = 1;
    if (dir_or_null && !(ck->dir = strdup(dir_or_null))) {
        free(ck);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "memory checkpoint");
    }
    *out = ck;
    return NB_OK;
}

nb_status nb_checkpoint_add(nb_checkpoint *ck, const char *name, nb_dtype dt, int ndim, const int64_t *shape,
                            void *data)
{
    nb_status s = NB_OK;
    nb_st_tensor *t = NULL;
    if (!ck || !ck->memory) {
        s = nb_error(NB_ERR_INVALID_ARG, "nb_checkpoint_add: not a memory checkpoint");
        goto fail;
    }
    if (!name || !name[0]) {
        s = nb_error(NB_ERR_INVALID_ARG, "nb_checkpoint_add: empty tensor name");
        goto fail;
    }
    if ((unsigned)dt >= NB_DTYPE_COUNT || ndim < 0 || ndim > NB_MAX_DIMS || (ndim > 0 && !shape)) {
        s = nb_error(NB_ERR_INVALID_ARG, "memory checkpoint: tensor '%s': bad dtype %d or ndim %d", name, (int)dt, ndim);
        goto fail;
    }
    uint64_t numel = 1, nbytes;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(numel, (uint64_t)shape[i], &numel)) {
            s = nb_error(NB_ERR_INVALID_ARG, "memory checkpoint: tensor '%s': bad shape[%d] = %lld", name, i,
                         (long long)shape[i]);
            goto fail;
        }
    }
    if (__builtin_mul_overflow(numel, (uint64_t)nb_dtype_size(dt), &nbytes) || nbytes > SIZE_MAX) {
        s = nb_error(NB_ERR_INVALID_ARG, "memory checkpoint: tensor '%s': size overflows", name);
        goto fail;
    }
    if (!data && nbytes) {
        s = nb_error(NB_ERR_INVALID_ARG, "memory checkpoint: tensor '%s': no data", name);
        goto fail;
    }
    t = calloc(1, sizeof *t);
    if (!t || !(t->name = strdup(name))) {
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "memory checkpoint: tensor '%s'", name);
        goto fail;
    }
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->data = data;
    t->nbytes = (size_t)nbytes;
    t->file_index = 0;
    s = nb_ck_insert(ck, t, "memory checkpoint");
    if (s) goto fail;
    return NB_OK;
fail:
    if (t) free((char *)t->name);
    free(t);
    free(data);
    return s;
}

const nb_st_tensor *nb_checkpoint_find(const nb_checkpoint *ck, const char *name)
{
    if (!ck || !ck->table_cap || !name) return NULL;
    int k = ck->table[nb_ck_slot(ck, name)];
    return k >= 0 ? ck->items[k] : NULL;
}

nb_status nb_checkpoint_get(const nb_checkpoint *ck, const char *name, const nb_st_tensor **out)
{
    *out = nb_checkpoint_find(ck, name);
    if (*out) return NB_OK;
    return nb_error(NB_ERR_NOT_FOUND, "%s: tensor '%s' not found", ck && ck->dir ? ck->dir : "checkpoint",
                    name ? name : "(null)");
}

int nb_checkpoint_count(const nb_checkpoint *ck) { return ck ? ck->n : 0; }

const nb_st_tensor *nb_checkpoint_at(const nb_checkpoint *ck, int i)
{
    return ck && i >= 0 && i < ck->n ? ck->items[i] : NULL;
}

const char *nb_checkpoint_dir(const nb_checkpoint *ck) { return ck ? ck->dir : NULL; }

void nb_checkpoint_drop_pages(const nb_checkpoint *ck, const nb_st_tensor *t)
{
    if (!ck || ck->memory || !t || !t->nbytes) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t b = ((uintptr_t)t->data + page - 1) & ~(page - 1), e = ((uintptr_t)t->data + t->nbytes) & ~(page - 1);
    if (e > b) madvise((void *)b, e - b, MADV_DONTNEED);
}

int nb_checkpoint_shard_count(const nb_checkpoint *ck) { return ck ? ck->n_shards : 0; }

const char *nb_checkpoint_shard_path(const nb_checkpoint *ck, int i)
{
    return ck && i >= 0 && i < ck->n_shards ? ck->shards[i].path : NULL;
}
