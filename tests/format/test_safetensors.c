/* Unit tests for safetensors parsing, checkpoints (files, shards, memory) and the writer:
 * every malformation in format/safetensors.h's list gets its own case and must be an
 * NB_ERR_FORMAT naming the file and (where there is one) the tensor.
 * Run: build-fmt/tests/test_safetensors [NAME_SUBSTRING] */
#include "nbtest.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "format/numerics.h"
#include "format/safetensors.h"

#include <ftw.h>
static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}
/* rm -rf of a test's temporary folder */
static void rm_rf(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static char nb_tmp[256];

static const char *tmpdir(void)
{
    if (!nb_tmp[0]) {
        snprintf(nb_tmp, sizeof nb_tmp, "/tmp/nb_test_st_XXXXXX");
        NB_ASSERT(mkdtemp(nb_tmp));
    }
    return nb_tmp;
}

/* A file image: u64 header length, header text, then `dlen` data bytes (value i & 255). */
static uint8_t *mkfile(const char *hdr, size_t dlen, size_t *len)
{
    size_t hl = strlen(hdr);
    *len = 8 + hl + dlen;
    uint8_t *b = malloc(*len + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, hdr, hl);
    for (size_t i = 0; i < dlen; i++) b[8 + hl + i] = (uint8_t)i;
    return b;
}

/* Parse `hdr` + dlen bytes; expect `want`, and when failing, a message with every needle. */
static void expect(const char *hdr, size_t dlen, nb_status want, const char *needle1, const char *needle2)
{
    size_t len;
    uint8_t *b = mkfile(hdr, dlen, &len);
    nb_st_tensor *t = NULL;
    int n = -1;
    nb_status s = nb_st_parse("case.safetensors", b, len, &t, &n);
    NB_CHECK_MSG(s == want, "header %s: got %s (%s)", hdr, nb_strerror(s), nb_last_error());
    if (s != NB_OK) {
        NB_CHECK(t == NULL && n == 0);
        NB_CHECK_MSG(strstr(nb_last_error(), "case.safetensors") != NULL, "%s", nb_last_error());
        if (needle1) NB_CHECK_MSG(strstr(nb_last_error(), needle1) != NULL, "'%s' not in: %s", needle1, nb_last_error());
        if (needle2) NB_CHECK_MSG(strstr(nb_last_error(), needle2) != NULL, "'%s' not in: %s", needle2, nb_last_error());
    }
    nb_st_tensors_free(t, n);
    free(b);
}

static void test_parse_valid(void)
{
    size_t len;
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[4,16]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                    "\"z\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[16,16]}}   ";
    uint8_t *b = mkfile(h, 16, &len);
    nb_st_tensor *t;
    int n;
    NB_CHECK_OK(nb_st_parse("ok", b, len, &t, &n));
    NB_CHECK(n == 3);
    if (n == 3) {
        NB_CHECK(!strcmp(t[0].name, "b") && t[0].dtype == NB_DTYPE_BF16 && t[0].ndim == 2 && t[0].shape[1] == 3);
        NB_CHECK(t[0].nbytes == 12 && t[0].data == b + 8 + strlen(h) + 4);
        NB_CHECK(t[1].ndim == 0 && t[1].nbytes == 4 && nb_st_numel(&t[1]) == 1);
        NB_CHECK(t[2].nbytes == 0 && nb_st_numel(&t[2]) == 0);
    }
    nb_st_tensors_free(t, n);
    free(b);
    expect("{}", 0, NB_OK, NULL, NULL);
    expect("{\"__metadata__\":{}}", 0, NB_OK, NULL, NULL);
}

static void test_parse_malformed(void)
{
    size_t len;
    uint8_t *b = mkfile("{}", 0, &len);
    nb_st_tensor *t;
    int n;
    for (size_t l = 0; l < 8; l++) {
        NB_CHECK_STATUS(nb_st_parse("trunc.safetensors", b, l, &t, &n), NB_ERR_FORMAT);
        NB_CHECK(strstr(nb_last_error(), "truncated") != NULL);
    }
    /* header length past the end: drop the header's last byte */
    NB_CHECK_STATUS(nb_st_parse("short.safetensors", b, len - 1, &t, &n), NB_ERR_FORMAT);
    NB_CHECK_MSG(strstr(nb_last_error(), "past the end") != NULL, "%s", nb_last_error());
    b[7] = 0xff; /* header length ~2^63 */
    NB_CHECK_STATUS(nb_st_parse("huge.safetensors", b, len, &t, &n), NB_ERR_FORMAT);
    free(b);

    const char *T = "'w'";
    expect("{\"w\":", 0, NB_ERR_FORMAT, "invalid JSON", NULL);
    expect("[1,2]", 0, NB_ERR_FORMAT, "not a JSON object", NULL);
    expect("{} x", 0, NB_ERR_FORMAT, "trailing", NULL);
    expect("{\"__metadata__\":3}", 0, NB_ERR_FORMAT, "__metadata__", NULL);
    expect("{\"w\":3}", 0, NB_ERR_FORMAT, T, "not an object");
    expect("{\"w\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, NB_ERR_FORMAT, T, "unknown dtype 'Q4'");
    expect("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, NB_ERR_FORMAT, T, "dtype");
    expect("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, NB_ERR_FORMAT, T, "shape");
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, NB_ERR_FORMAT, T, "data_offsets");
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1, NB_ERR_FORMAT, T, "data_offsets");
    /* shape x dtype != bytes */
    expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, NB_ERR_FORMAT, T, "needs 8");
    /* negative, fractional, huge and overflowing shapes */
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, NB_ERR_FORMAT, T, "shape[0]");
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,0]}}", 0, NB_ERR_FORMAT, T, "shape[0]");
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[1e300],\"data_offsets\":[0,0]}}", 0, NB_ERR_FORMAT, T, "shape[0]");
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[\"3\"],\"data_offsets\":[0,0]}}", 0, NB_ERR_FORMAT, T, "shape[0]");
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
           NB_ERR_FORMAT, T, "overflows");
    expect("{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0, NB_ERR_FORMAT, T,
           NULL);
    expect("{\"w\":{\"dtype\":\"F64\",\"shape\":[1125899906842624,8192],\"data_offsets\":[0,0]}}", 0, NB_ERR_FORMAT, T,
           "overflows");
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, NB_ERR_FORMAT, T,
           "dimensions");
    /* offsets */
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 3, NB_ERR_FORMAT, T, "out of range");
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,99999999999999999999]}}", 3, NB_ERR_FORMAT, T,
           NULL);
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,1]}}", 3, NB_ERR_FORMAT, T, "before begin");
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 3, NB_ERR_FORMAT, T, NULL);
    expect("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"w\":{\"dtype\":\"U8\",\"shape\":[2],"
           "\"data_offsets\":[2,4]}}",
           4, NB_ERR_FORMAT, T, "overlap");
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", 4, NB_ERR_FORMAT, T, "gap");
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 4, NB_ERR_FORMAT, "cover 2 of the 4",
           NULL);
    /* duplicate names */
    expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},\"w\":{\"dtype\":\"U8\",\"shape\":[2],"
           "\"data_offsets\":[2,4]}}",
           4, NB_ERR_FORMAT, T, "duplicate");
}

/* Write a file with the writer; tensors t0 (BF16 [3,5]), t1 (F32 [7]), t2 (U8 [0]). */
static nb_status write_sample(const char *path, const char *prefix, float base)
{
    char n0[64], n1[64], n2[64];
    snprintf(n0, sizeof n0, "%s.t0", prefix);
    snprintf(n1, sizeof n1, "%s.t1", prefix);
    snprintf(n2, sizeof n2, "%s.t2", prefix);
    const char *names[3] = {n0, n1, n2};
    nb_dtype dt[3] = {NB_DTYPE_BF16, NB_DTYPE_F32, NB_DTYPE_U8};
    int64_t shapes[3][NB_MAX_DIMS] = {{3, 5}, {7}, {0}};
    int nd[3] = {2, 1, 1};
    nb_st_writer *w;
    NB_TRY(nb_st_writer_open(&w, path, 3, names, dt, (const int64_t(*)[NB_MAX_DIMS])shapes, nd, "{\"format\":\"pt\"}"));
    nb_bf16 a[15];
    float f[7];
    for (int i = 0; i < 15; i++) a[i] = nb_f32_to_bf16(base + (float)i);
    for (int i = 0; i < 7; i++) f[i] = base * 2 + (float)i;
    nb_status s;
    /* chunked writes are allowed */
    if ((s = nb_st_writer_write(w, a, 10)) || (s = nb_st_writer_write(w, (uint8_t *)a + 10, 20)) ||
        (s = nb_st_writer_write(w, f, sizeof f))) {
        nb_st_writer_abort(w);
        return s;
    }
    return nb_st_writer_close(w);
}

static void check_sample(const nb_checkpoint *ck, const char *prefix, float base, int shard)
{
    char n[64];
    const nb_st_tensor *t;
    snprintf(n, sizeof n, "%s.t0", prefix);
    NB_CHECK_OK(nb_checkpoint_get(ck, n, &t));
    if (!t) return;
    NB_CHECK(t->dtype == NB_DTYPE_BF16 && t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 5 && t->nbytes == 30);
    NB_CHECK(((uintptr_t)t->data & 7) == 0); /* header padding keeps data aligned */
    NB_CHECK(t->file_index == shard);
    for (int i = 0; i < 15; i++) NB_CHECK(nb_bf16_to_f32(((const nb_bf16 *)t->data)[i]) == base + (float)i);
    snprintf(n, sizeof n, "%s.t1", prefix);
    t = nb_checkpoint_find(ck, n);
    NB_CHECK(t && t->nbytes == 28);
    float f[7];
    if (t) memcpy(f, t->data, 28);
    for (int i = 0; t && i < 7; i++) NB_CHECK(f[i] == base * 2 + (float)i);
    snprintf(n, sizeof n, "%s.t2", prefix);
    t = nb_checkpoint_find(ck, n);
    NB_CHECK(t && t->nbytes == 0 && t->shape[0] == 0);
}

static void test_writer_roundtrip(void)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/single", tmpdir());
    NB_CHECK_OK(nb_mkdirs(dir));
    nb_path_join(path, sizeof path, dir, "model.safetensors");
    NB_CHECK_OK(write_sample(path, "m", 1.0f));
    nb_checkpoint *ck;
    /* the file itself */
    NB_CHECK_OK(nb_checkpoint_open(path, &ck));
    if (ck) {
        NB_CHECK(nb_checkpoint_count(ck) == 3);
        NB_CHECK(!strcmp(nb_checkpoint_dir(ck), dir));
        check_sample(ck, "m", 1.0f, 0);
        NB_CHECK(nb_checkpoint_find(ck, "nope") == NULL);
        const nb_st_tensor *t;
        NB_CHECK_STATUS(nb_checkpoint_get(ck, "nope", &t), NB_ERR_NOT_FOUND);
        NB_CHECK(strstr(nb_last_error(), "'nope'") != NULL);
        nb_checkpoint_close(ck);
    }
    /* the folder, without an index */
    NB_CHECK_OK(nb_checkpoint_open(dir, &ck));
    if (ck) {
        check_sample(ck, "m", 1.0f, 0);
        nb_checkpoint_close(ck);
    }
    /* the writer refuses wrong byte counts and leaves no file */
    const char *nm[1] = {"x"};
    nb_dtype dt[1] = {NB_DTYPE_F32};
    int64_t sh[1][NB_MAX_DIMS] = {{4}};
    int nd[1] = {1};
    nb_st_writer *w;
    nb_path_join(path, sizeof path, dir, "bad.safetensors");
    NB_CHECK_OK(nb_st_writer_open(&w, path, 1, nm, dt, (const int64_t(*)[NB_MAX_DIMS])sh, nd, NULL));
    float four[5] = {0};
    NB_CHECK_STATUS(nb_st_writer_write(w, four, 20), NB_ERR_INVALID_ARG);
    NB_CHECK_OK(nb_st_writer_write(w, four, 8));
    NB_CHECK_STATUS(nb_st_writer_close(w), NB_ERR_INVALID_ARG);
    NB_CHECK(!nb_path_exists(path));
    const char *dup[2] = {"x", "x"};
    nb_dtype dt2[2] = {NB_DTYPE_F32, NB_DTYPE_F32};
    int64_t sh2[2][NB_MAX_DIMS] = {{4}, {4}};
    int nd2[2] = {1, 1};
    NB_CHECK_STATUS(nb_st_writer_open(&w, path, 2, dup, dt2, (const int64_t(*)[NB_MAX_DIMS])sh2, nd2, NULL),
                    NB_ERR_INVALID_ARG);
}

static void test_sharded(void)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/sharded", tmpdir());
    NB_CHECK_OK(nb_mkdirs(dir));
    NB_CHECK_OK(write_sample(nb_path_join(path, sizeof path, dir, "model-00001-of-00002.safetensors"), "a", 1.0f));
    NB_CHECK_OK(write_sample(nb_path_join(path, sizeof path, dir, "model-00002-of-00002.safetensors"), "b", 5.0f));
    /* no index: both files, in name order */
    nb_checkpoint *ck;
    NB_CHECK_OK(nb_checkpoint_open(dir, &ck));
    if (ck) {
        NB_CHECK(nb_checkpoint_count(ck) == 6 && nb_checkpoint_shard_count(ck) == 2);
        check_sample(ck, "a", 1.0f, 0);
        check_sample(ck, "b", 5.0f, 1);
        nb_checkpoint_close(ck);
    }
    const char *idx = "{\"metadata\":{\"total_size\":116},\"weight_map\":{"
                      "\"a.t0\":\"model-00001-of-00002.safetensors\",\"a.t1\":\"model-00001-of-00002.safetensors\","
                      "\"a.t2\":\"model-00001-of-00002.safetensors\",\"b.t0\":\"model-00002-of-00002.safetensors\","
                      "\"b.t1\":\"model-00002-of-00002.safetensors\",\"b.t2\":\"model-00002-of-00002.safetensors\"}}";
    nb_path_join(path, sizeof path, dir, "model.safetensors.index.json");
    NB_CHECK_OK(nb_write_file(path, idx, strlen(idx)));
    NB_CHECK_OK(nb_checkpoint_open(dir, &ck));
    if (ck) {
        check_sample(ck, "a", 1.0f, 0);
        check_sample(ck, "b", 5.0f, 1);
        nb_checkpoint_close(ck);
    }
    /* an index that puts a tensor in the wrong shard */
    const char *wrong = "{\"weight_map\":{\"a.t0\":\"model-00002-of-00002.safetensors\"}}";
    NB_CHECK_OK(nb_write_file(path, wrong, strlen(wrong)));
    NB_CHECK_STATUS(nb_checkpoint_open(dir, &ck), NB_ERR_FORMAT);
    NB_CHECK_MSG(strstr(nb_last_error(), "'a.t0'") != NULL, "%s", nb_last_error());
    /* an index naming a missing shard */
    const char *missing = "{\"weight_map\":{\"a.t0\":\"model-00003-of-00002.safetensors\"}}";
    NB_CHECK_OK(nb_write_file(path, missing, strlen(missing)));
    NB_CHECK_STATUS(nb_checkpoint_open(dir, &ck), NB_ERR_IO);
    NB_CHECK(strstr(nb_last_error(), "model-00003-of-00002.safetensors") != NULL);
    remove(path);
    /* the same tensor name in two shards */
    NB_CHECK_OK(write_sample(nb_path_join(path, sizeof path, dir, "model-00002-of-00002.safetensors"), "a", 5.0f));
    NB_CHECK_STATUS(nb_checkpoint_open(dir, &ck), NB_ERR_FORMAT);
    NB_CHECK_MSG(strstr(nb_last_error(), "duplicate") && strstr(nb_last_error(), "'a.t0'"), "%s", nb_last_error());
}

static void test_truncated_file(void)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/trunc", tmpdir());
    NB_CHECK_OK(nb_mkdirs(dir));
    nb_path_join(path, sizeof path, dir, "model.safetensors");
    NB_CHECK_OK(write_sample(path, "m", 1.0f));
    char *buf;
    size_t len;
    NB_CHECK_OK(nb_read_file(path, &buf, &len, 0));
    nb_checkpoint *ck;
    /* every truncation point must fail cleanly, naming the file */
    for (size_t l = 0; l < len; l += (l < 16 ? 1 : 7)) {
        NB_CHECK_OK(nb_write_file(path, buf, l));
        NB_CHECK_STATUS(nb_checkpoint_open(path, &ck), NB_ERR_FORMAT);
        NB_CHECK_MSG(strstr(nb_last_error(), "model.safetensors") != NULL, "%s", nb_last_error());
    }
    free(buf);
    NB_CHECK_STATUS(nb_checkpoint_open("/nonexistent/model.safetensors", &ck), NB_ERR_IO);
    snprintf(dir, sizeof dir, "%s/empty", tmpdir());
    NB_CHECK_OK(nb_mkdirs(dir));
    NB_CHECK_STATUS(nb_checkpoint_open(dir, &ck), NB_ERR_NOT_FOUND);
}

static void test_memory(void)
{
    nb_checkpoint *ck;
    NB_CHECK_OK(nb_checkpoint_new_memory(&ck, NULL));
    NB_CHECK(nb_checkpoint_dir(ck) == NULL);
    const nb_st_tensor *first = NULL;
    /* enough tensors to grow the table several times; early pointers must stay valid */
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "w.%d", i);
        int64_t shape[2] = {2, i + 1};
        float *d = malloc(sizeof(float) * 2 * (size_t)(i + 1));
        for (int k = 0; k < 2 * (i + 1); k++) d[k] = (float)(i * 1000 + k);
        NB_CHECK_OK(nb_checkpoint_add(ck, name, NB_DTYPE_F32, 2, shape, d));
        if (i == 0) first = nb_checkpoint_find(ck, "w.0");
    }
    NB_CHECK(nb_checkpoint_count(ck) == 300);
    NB_CHECK(first == nb_checkpoint_find(ck, "w.0") && first->shape[1] == 1);
    const nb_st_tensor *t = nb_checkpoint_find(ck, "w.123");
    NB_CHECK(t && t->nbytes == 2 * 124 * 4 && ((const float *)t->data)[5] == 123005.0f);
    NB_CHECK(nb_checkpoint_at(ck, 123) == t);
    /* errors still take ownership of data (ASan would report a leak otherwise) */
    int64_t s1[1] = {4};
    NB_CHECK_STATUS(nb_checkpoint_add(ck, "w.7", NB_DTYPE_U8, 1, s1, malloc(4)), NB_ERR_FORMAT);
    NB_CHECK(strstr(nb_last_error(), "duplicate") != NULL);
    int64_t neg[1] = {-4};
    NB_CHECK_STATUS(nb_checkpoint_add(ck, "neg", NB_DTYPE_U8, 1, neg, malloc(4)), NB_ERR_INVALID_ARG);
    NB_CHECK_STATUS(nb_checkpoint_add(ck, "nodata", NB_DTYPE_U8, 1, s1, NULL), NB_ERR_INVALID_ARG);
    NB_CHECK(nb_checkpoint_count(ck) == 300);
    nb_checkpoint_close(ck);
    NB_CHECK_OK(nb_checkpoint_new_memory(&ck, "/some/model"));
    NB_CHECK(!strcmp(nb_checkpoint_dir(ck), "/some/model"));
    NB_CHECK(nb_checkpoint_find(ck, "x") == NULL);
    nb_checkpoint_close(ck);
}

static const nb_test tests[] = {
    {"parse_valid", test_parse_valid},       {"parse_malformed", test_parse_malformed},
    {"writer_roundtrip", test_writer_roundtrip}, {"sharded", test_sharded},
    {"truncated_file", test_truncated_file}, {"memory", test_memory},
};

int main(int argc, char **argv)
{
    int rc = nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
    if (nb_tmp[0]) rm_rf(nb_tmp);
    return rc;
}
