/* Host-side checks of the MoE kernels' data path (no GPU needed):
 *   repack:  nb_moe_packed_get inverts nb_moe_repack_nvfp4 on every element, bad shapes refused
 *   cpu_op:  the CPU reference op nb_op_moe_experts agrees with this folder's float64
 *            reference (moe_testlib.h), so the GPU tests' two references agree
 * Fresh random data every run (the seed is printed). Run: build/tests/test_moe_host */
#include "nbtest.h"
#include "moe_testlib.h"
#include "ops/cuda/moe.h"

/* float32 CPU op vs float64: only accumulation order and the ModelOpt scale product (e4m3 *
 * global scale rounded to float32) differ. */
#define NB_TOL_CPU_OP_VS_F64 1e-5

static void seed(void)
{
    rng = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ULL + (uint64_t)clock();
    fprintf(stderr, "  seed %llu\n", (unsigned long long)rng);
}

static void test_repack(void)
{
    seed();
    const int shapes[][2] = {{16, 256}, {48, 512}, {32, 768}};
    for (size_t si = 0; si < NB_ARRAY_LEN(shapes); si++) {
        mat m;
        mat_rand(&m, shapes[si][0], shapes[si][1]);
        uint8_t *w = malloc(nb_moe_packed_weight_bytes(m.n, m.k)), *s = malloc(nb_moe_packed_scale_bytes(m.n, m.k));
        NB_CHECK_OK(nb_moe_repack_nvfp4("t", m.codes, m.scales, m.n, m.k, w, s));
        int bad = 0;
        for (int r = 0; r < m.n; r++)
            for (int c = 0; c < m.k; c++) {
                uint8_t code, sc;
                nb_moe_packed_get(w, s, m.n, m.k, r, c, &code, &sc);
                uint8_t want = (m.codes[(size_t)r * m.k / 2 + c / 2] >> ((c & 1) * 4)) & 15;
                if (code != want || sc != m.scales[(size_t)r * m.k / 16 + c / 16]) bad++;
            }
        NB_CHECK_MSG(bad == 0, "[%d, %d]: %d elements do not round-trip", m.n, m.k, bad);
        free(w);
        free(s);
        mat_free(&m);
    }
    NB_CHECK_STATUS(nb_moe_repack_nvfp4("bad", NULL, NULL, 20, 256, NULL, NULL), NB_ERR_INVALID_ARG);
    NB_CHECK_STATUS(nb_moe_repack_nvfp4("bad", NULL, NULL, 16, 320, NULL, NULL), NB_ERR_INVALID_ARG);
}

static void test_cpu_op(void)
{
    seed();
    host_experts x;
    host_experts_make(&x, 6, 256, 256);
    const int T = 9, K = 3, H = x.H;
    float *xf = malloc(sizeof(float) * T * H), *rw = malloc(sizeof(float) * T * K), *out = malloc(sizeof(float) * T * H);
    int32_t *ids = malloc(sizeof(int32_t) * T * K);
    double *ref = calloc((size_t)T * H, sizeof(double));
    for (int i = 0; i < T * H; i++) xf[i] = nb_bf16_to_f32(nb_f32_to_bf16(2.0f * frand()));
    for (int t = 0; t < T; t++)
        for (int j = 0; j < K; j++) {
            ids[t * K + j] = (t + 2 * j) % x.E; /* distinct per token */
            rw[t * K + j] = 0.2f + 0.3f * j;
            ref_expert(&x, ids[t * K + j], xf + (size_t)t * H, rw[t * K + j], ref + (size_t)t * H);
        }
    NB_CHECK_OK(cpu_op_moe(&x, T, K, xf, ids, rw, out));
    double rel = rel_l2(out, ref, (size_t)T * H);
    fprintf(stderr, "  CPU op vs float64 reference: rel err %.3g\n", rel);
    NB_CHECK_MSG(rel <= NB_TOL_CPU_OP_VS_F64, "rel err %.3g", rel);
    free(xf), free(rw), free(out), free(ids), free(ref);
    host_experts_free(&x);
}

static const nb_test tests[] = {{"repack", test_repack}, {"cpu_op", test_cpu_op}};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
