/* CPU side of the backend plumbing the CUDA backend added to ops.h: the row ops the
 * backend-neutral forward pass uses (set_rows / get_rows / scale, with their errors), backend
 * memory on a CPU context, and nb_ops_ctx_new_cuda failing cleanly where there is no GPU or
 * no CUDA build. Label unit: runs everywhere (also under ASan+UBSan). */
#include "nbtest.h"
#include "ops/ops.h"

static nb_ops_ctx *cpu;

static void test_set_get_rows(void)
{
    float src[3 * 4], pool[6 * 5], back[3 * 4];
    for (int i = 0; i < 12; i++) src[i] = (float)(i + 1);
    for (int i = 0; i < 30; i++) pool[i] = -1.0f;
    nb_tensor s = nb_tensor_2d(src, NB_DTYPE_F32, 3, 4), d = nb_tensor_2d(pool + 1, NB_DTYPE_F32, 6, 4);
    d.stride[0] = 5; /* a view of 4 floats at offset 1 in rows of 5 */
    int32_t rows[3] = {5, 0, 2};
    NB_CHECK_OK(nb_op_set_rows(cpu, &s, rows, &d));
    for (int t = 0; t < 3; t++)
        for (int j = 0; j < 4; j++) NB_CHECK(pool[rows[t] * 5 + 1 + j] == src[t * 4 + j]);
    NB_CHECK(pool[0] == -1.0f && pool[5] == -1.0f && pool[1 * 5 + 1] == -1.0f); /* untouched */
    nb_tensor b = nb_tensor_2d(back, NB_DTYPE_F32, 3, 4);
    NB_CHECK_OK(nb_op_get_rows(cpu, &d, rows, &b));
    for (int i = 0; i < 12; i++) NB_CHECK(back[i] == src[i]);
    int32_t bad[3] = {0, 6, 1};
    NB_CHECK_STATUS(nb_op_set_rows(cpu, &s, bad, &d), NB_ERR_INVALID_ARG);
    NB_CHECK_STATUS(nb_op_get_rows(cpu, &d, bad, &b), NB_ERR_INVALID_ARG);
    nb_tensor narrow = nb_tensor_2d(back, NB_DTYPE_F32, 3, 3);
    NB_CHECK_STATUS(nb_op_get_rows(cpu, &d, rows, &narrow), NB_ERR_INVALID_ARG);
}

static void test_scale(void)
{
    float x[2 * 3] = {1, 2, 3, 4, 5, 6};
    nb_tensor t = nb_tensor_2d(x, NB_DTYPE_F32, 2, 2);
    t.stride[0] = 3; /* the third column of each row is outside the view */
    NB_CHECK_OK(nb_op_scale(cpu, &t, 0.5f));
    NB_CHECK(x[0] == 0.5f && x[1] == 1.0f && x[2] == 3.0f && x[3] == 2.0f && x[4] == 2.5f && x[5] == 6.0f);
}

static void test_memory(void)
{
    char *p = nb_ops_alloc(cpu, 100);
    NB_CHECK(p != NULL);
    const char msg[] = "backend bytes";
    NB_CHECK_OK(nb_ops_upload(cpu, p, msg, sizeof msg));
    char back[sizeof msg];
    NB_CHECK_OK(nb_ops_download(cpu, back, p, sizeof msg));
    NB_CHECK(!memcmp(back, msg, sizeof msg));
    NB_CHECK_OK(nb_ops_memset(cpu, p, 7, 10));
    NB_CHECK(p[0] == 7 && p[9] == 7 && p[10] == msg[10]);
    NB_CHECK_OK(nb_ops_sync(cpu));
    nb_ops_free(cpu, p);
}

static void test_cuda_ctx_without_gpu(void)
{
    nb_ops_ctx *g = NULL;
    nb_status st = nb_ops_ctx_new_cuda(0, &g);
    if (st == NB_OK) { /* a GPU is here: the context must say so */
        NB_CHECK(nb_ops_ctx_device(g) == NB_DEVICE_CUDA);
        nb_ops_ctx_free(g);
        return;
    }
    NB_CHECK(g == NULL);
    NB_CHECK_MSG(st == NB_ERR_CUDA || st == NB_ERR_UNSUPPORTED, "status %s", nb_strerror(st));
    NB_CHECK(strlen(nb_last_error()) > 0);
    NB_CHECK_STATUS(nb_ops_ctx_new_cuda(-1, &g), NIBBLE_HAVE_CUDA ? (st == NB_ERR_CUDA ? NB_ERR_CUDA : NB_ERR_INVALID_ARG)
                                                                   : NB_ERR_UNSUPPORTED);
}

static const nb_test tests[] = {
    {"set_get_rows", test_set_get_rows},
    {"scale", test_scale},
    {"memory", test_memory},
    {"cuda_ctx_without_gpu", test_cuda_ctx_without_gpu},
};

int main(int argc, char **argv)
{
    if (nb_ops_ctx_new_cpu(1, &cpu) != NB_OK) return 1;
    int rc = nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
    nb_ops_ctx_free(cpu);
    return rc;
}
