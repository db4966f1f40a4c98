/* safetensors checkpoints: single files and shards (model.safetensors.index.json),
 * memory-mapped, tensors looked up by name without copying.
 *
 * A file is: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
 * then the data; offsets are relative to the byte after the header.
 * Every malformed file is an NB_ERR_FORMAT naming the file and the tensor: truncated file,
 * header past the end, offsets out of range or overlapping, shape x dtype != bytes,
 * unknown dtype, invalid JSON, duplicate names. Tests: tests/format/, fuzz/.
 */
#ifndef NB_FORMAT_SAFETENSORS_H
#define NB_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "format/dtype.h"
#include "nibble.h"

#define NB_MAX_DIMS 8

typedef struct nb_st_tensor {
    const char *name;       /* owned by the file */
    nb_dtype dtype;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    const void *data;       /* into the mapping; valid while the checkpoint is open */
    size_t nbytes;
    int file_index;         /* which shard */
} nb_st_tensor;

typedef struct nb_checkpoint nb_checkpoint;

/* Parse one safetensors header from memory: `buf` holds the whole file (len bytes).
 * Used by the mmap loader and by the fuzz harness. On success *out is a malloc'd array
 * of *n tensors whose names are malloc'd too (free with nb_st_tensors_free); their
 * data pointers point into buf. `what` names the file in errors. */
nb_status nb_st_parse(const char *what, const uint8_t *buf, size_t len, nb_st_tensor **out, int *n);
void nb_st_tensors_free(nb_st_tensor *t, int n);

/* Open a model folder (model.safetensors.index.json, else every *.safetensors in it)
 * or one .safetensors file; maps every shard read-only. */
nb_status nb_checkpoint_open(const char *path, nb_checkpoint **out);
void nb_checkpoint_close(nb_checkpoint *ck);

/* Lookup by exact name; NULL when absent (no error set). */
const nb_st_tensor *nb_checkpoint_find(const nb_checkpoint *ck, const char *name);
/* Like find, but a missing tensor is NB_ERR_NOT_FOUND naming it. */
nb_status nb_checkpoint_get(const nb_checkpoint *ck, const char *name, const nb_st_tensor **out);

int nb_checkpoint_count(const nb_checkpoint *ck);
const nb_st_tensor *nb_checkpoint_at(const nb_checkpoint *ck, int i);
/* The folder the checkpoint was opened from (config.json etc. live there). */
const char *nb_checkpoint_dir(const nb_checkpoint *ck);
/* Shards in load order (file_index indexes them); 0 for a memory checkpoint. */
int nb_checkpoint_shard_count(const nb_checkpoint *ck);
const char *nb_checkpoint_shard_path(const nb_checkpoint *ck, int i);

/* Hint that `t`'s bytes will not be read again soon: its whole mapped pages are dropped
 * (re-read from the file if touched again), so one streaming pass over a model larger than
 * RAM keeps a small resident set. No-op for memory checkpoints. */
void nb_checkpoint_drop_pages(const nb_checkpoint *ck, const nb_st_tensor *t);

/* In-memory checkpoint (synthetic / random-weight models), treated exactly like a file by
 * readers. `dir_or_null` is what nb_checkpoint_dir returns (NULL allowed). Close with
 * nb_checkpoint_close. */
nb_status nb_checkpoint_new_memory(nb_checkpoint **out, const char *dir_or_null);
/* Add a tensor. `data` holds shape x dtype bytes; its ownership passes to ck (freed with
 * free() at close) in every case, also when an error (duplicate name, bad shape) is
 * returned. Pointers from find/at stay valid as tensors are added. */
nb_status nb_checkpoint_add(nb_checkpoint *ck, const char *name, nb_dtype dt, int ndim, const int64_t *shape,
                            void *data);

/* Elements in a tensor (product of its shape; 1 for a scalar). */
static inline int64_t nb_st_numel(const nb_st_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* Writing: stream tensors into a file whose header is known up front.
 *   nb_st_writer *w; nb_st_writer_open(&w, path, names, dtypes, shapes, ndims, n, metadata_json);
 *   for each tensor in order: nb_st_writer_write(w, data, nbytes);  nb_st_writer_close(w);
 * The header is written first, then each tensor's bytes in the declared order. */
typedef struct nb_st_writer nb_st_writer;
nb_status nb_st_writer_open(nb_st_writer **out, const char *path, int n, const char *const *names,
                            const nb_dtype *dtypes, const int64_t (*shapes)[NB_MAX_DIMS], const int *ndims,
                            const char *metadata_json);
nb_status nb_st_writer_write(nb_st_writer *w, const void *data, size_t nbytes);
/* Fails (and leaves no file) when fewer bytes than declared were written. Data may be
 * given in chunks of any size; the file is written to PATH.tmp and renamed on success. */
nb_status nb_st_writer_close(nb_st_writer *w);
/* Drop a writer after an error: closes and removes the partial file. */
void nb_st_writer_abort(nb_st_writer *w);

#endif
