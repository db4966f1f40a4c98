/* The host-side plan of decode CUDA graphs (engine/cuda_graph.h), no GPU needed: the
 * captured sizes for several --cuda-graph-max-bs values, bucketing of every batch size,
 * and the padded index image against the eager path's index arrays
 * (nb_forward_fill_index) on seeded random decode batches.
 * Run: build-NAME/tests/test_graph_plan [name-filter]   (ctest label unit) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda_graph.h"
#include "nbtest.h"

static void test_sizes(void)
{
    nb_graph_sizes s;
    NB_CHECK_OK(nb_graph_sizes_for(0, &s));
    static const int want[] = {1,  2,  3,  4,  5,  6,   7,   8,   10,  12,  14,  16,  20,  24,
                               28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256,
                               320, 384, 448, 512, 576, 640, 704, 768, 832, 896, 960, 1024};
    NB_CHECK(s.n == (int)NB_ARRAY_LEN(want));
    for (int i = 0; i < s.n && i < (int)NB_ARRAY_LEN(want); i++) NB_CHECK_MSG(s.bs[i] == want[i], "bs[%d] = %d", i, s.bs[i]);
    NB_CHECK_OK(nb_graph_sizes_for(1, &s));
    NB_CHECK(s.n == 1 && s.bs[0] == 1);
    NB_CHECK_OK(nb_graph_sizes_for(4, &s));
    NB_CHECK(s.n == 4 && s.bs[0] == 1 && s.bs[1] == 2 && s.bs[2] == 3 && s.bs[3] == 4);
    NB_CHECK_OK(nb_graph_sizes_for(100, &s));
    NB_CHECK(s.n == 23 && s.bs[21] == 96 && s.bs[22] == 100);
    NB_CHECK_OK(nb_graph_sizes_for(320, &s));
    NB_CHECK(s.bs[s.n - 2] == 256 && s.bs[s.n - 1] == 320);
    for (int mb = 1; mb <= NB_CUDA_GRAPH_MAX_BS_LIMIT; mb++) {
        nb_status st = nb_graph_sizes_for(mb, &s);
        if (st != NB_OK) {
            NB_CHECK_MSG(0, "max_bs %d: %s", mb, nb_last_error());
            break;
        }
        int ok = s.n >= 1 && s.bs[0] == 1 && s.bs[s.n - 1] == mb;
        for (int i = 1; i < s.n; i++) ok &= s.bs[i] > s.bs[i - 1];
        if (!ok) {
            NB_CHECK_MSG(0, "max_bs %d: sizes not ascending from 1 to max_bs", mb);
            break;
        }
    }
    NB_CHECK_STATUS(nb_graph_sizes_for(-1, &s), NB_ERR_INVALID_ARG);
    NB_CHECK(strstr(nb_last_error(), "--cuda-graph-max-bs") != NULL);
    NB_CHECK_STATUS(nb_graph_sizes_for(NB_CUDA_GRAPH_MAX_BS_LIMIT + 1, &s), NB_ERR_INVALID_ARG);
}

static void test_bucket(void)
{
    const int maxes[] = {1, 4, 7, 100, 256, 1000};
    for (size_t k = 0; k < NB_ARRAY_LEN(maxes); k++) {
        nb_graph_sizes s;
        NB_CHECK_OK(nb_graph_sizes_for(maxes[k], &s));
        NB_CHECK(nb_graph_bucket(&s, 0) == -1);
        NB_CHECK(nb_graph_bucket(&s, -3) == -1);
        NB_CHECK(nb_graph_bucket(&s, maxes[k] + 1) == -1);
        for (int n = 1; n <= maxes[k]; n++) {
            int i = nb_graph_bucket(&s, n);
            /* the smallest captured size that holds n */
            if (!(i >= 0 && s.bs[i] >= n && (i == 0 || s.bs[i - 1] < n))) {
                NB_CHECK_MSG(0, "max %d, n %d: bucket %d", maxes[k], n, i);
                break;
            }
        }
    }
    nb_graph_sizes s;
    NB_CHECK_OK(nb_graph_sizes_for(0, &s));
    NB_CHECK(s.bs[nb_graph_bucket(&s, 3)] == 3);
    NB_CHECK(s.bs[nb_graph_bucket(&s, 9)] == 10);
    NB_CHECK(s.bs[nb_graph_bucket(&s, 17)] == 20);
    NB_CHECK(s.bs[nb_graph_bucket(&s, 200)] == 224);
    /* padding stays under a quarter of the batch (and 16, the gemv/cuBLASLt boundary, is a size) */
    NB_CHECK(s.bs[nb_graph_bucket(&s, 700)] == 704 && nb_graph_bucket(&s, 1025) == -1);
    for (int n = 9; n <= 1024; n++) NB_CHECK_MSG(4 * (s.bs[nb_graph_bucket(&s, n)] - n) < n, "n %d", n);
    NB_CHECK(s.bs[nb_graph_bucket(&s, 16)] == 16);
}

static uint64_t rng = 88172645463325252ull;
static int rnd(int n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

/* One random decode batch of n sequences with fresh slot arrays. */
typedef struct rb {
    nb_seq_step seq[64];
    int32_t tok[64];
    int32_t *slots[64];
    nb_batch b;
} rb;

static void rb_make(rb *r, int n)
{
    for (int s = 0; s < n; s++) {
        int start = rnd(200);
        r->slots[s] = malloc((size_t)(start + 1) * sizeof(int32_t));
        for (int p = 0; p <= start; p++) r->slots[s][p] = rnd(100000);
        r->tok[s] = rnd(150000);
        r->seq[s] = (nb_seq_step){&r->tok[s], 1, start, r->slots[s], rnd(2)};
    }
    r->b = (nb_batch){n, r->seq};
}

static void rb_free(rb *r)
{
    for (int s = 0; s < r->b.n_seqs; s++) free(r->slots[s]);
}

static void test_image_matches_eager(void)
{
    const int max_bs = 64, dummy = 123456;
    nb_graph_sizes sz;
    NB_CHECK_OK(nb_graph_sizes_for(max_bs, &sz));
    const nb_graph_image_layout L = nb_graph_image_layout_for(max_bs);
    for (int it = 0; it < 300; it++) {
        rb r;
        int n = 1 + rnd(max_bs);
        rb_make(&r, n);
        const int bs = sz.bs[nb_graph_bucket(&sz, n)];
        const int64_t entries = nb_graph_slot_entries(&r.b);
        const int64_t cap = entries + rnd(3);
        int32_t *img = malloc((size_t)(L.slot_table + cap) * sizeof(int32_t));
        int64_t copy = 0;
        NB_CHECK(nb_graph_batch_is_decode(&r.b));
        nb_status st = nb_graph_fill_image(&r.b, bs, max_bs, dummy, img, cap, &copy);
        NB_CHECK_OK(st);
        /* the eager path's arrays for the same batch */
        int32_t ids[64], pos[64], sb[64], rows[64], lr[64];
        int32_t *stab = malloc((size_t)entries * sizeof(int32_t));
        nb_forward_fill_index(&r.b, ids, pos, sb, stab, rows, lr);
        int bad = st != NB_OK;
        bad |= copy != L.slot_table + entries;
        bad |= memcmp(img + L.ids, ids, (size_t)n * 4) || memcmp(img + L.pos, pos, (size_t)n * 4) ||
               memcmp(img + L.slot_base, sb, (size_t)n * 4) || memcmp(img + L.rows, rows, (size_t)n * 4) ||
               memcmp(img + L.lrows, lr, (size_t)n * 4) || memcmp(img + L.slot_table, stab, (size_t)(entries - 1) * 4);
        for (int i = n; i < bs; i++) {
            /* a dummy row: token 0 at position 0, its one attended slot and its write the dummy */
            int32_t base = img[L.slot_base + i];
            bad |= img[L.ids + i] != 0 || img[L.pos + i] != 0 || img[L.rows + i] != dummy || img[L.lrows + i] != i;
            bad |= base != entries - 1 || img[L.slot_table + base] != dummy;
        }
        NB_CHECK_MSG(!bad, "iteration %d: %d sequences padded to %d", it, n, bs);
        free(stab);
        free(img);
        rb_free(&r);
        if (bad) break;
    }
}

static void test_image_errors(void)
{
    rb r;
    rb_make(&r, 5);
    int32_t *img = malloc((size_t)(5 * 8 + 2000) * sizeof(int32_t));
    int64_t copy;
    NB_CHECK_STATUS(nb_graph_fill_image(&r.b, 4, 8, 0, img, 2000, &copy), NB_ERR_INVALID_ARG); /* 5 > bs */
    NB_CHECK_STATUS(nb_graph_fill_image(&r.b, 16, 8, 0, img, 2000, &copy), NB_ERR_INVALID_ARG); /* bs > max */
    NB_CHECK_STATUS(nb_graph_fill_image(&r.b, 8, 8, 0, img, nb_graph_slot_entries(&r.b) - 1, &copy),
                    NB_ERR_INVALID_ARG);
    NB_CHECK_OK(nb_graph_fill_image(&r.b, 8, 8, 0, img, nb_graph_slot_entries(&r.b), &copy));
    r.seq[2].n_tokens = 2; /* a prefill chunk: not a decode step */
    NB_CHECK(!nb_graph_batch_is_decode(&r.b));
    NB_CHECK_STATUS(nb_graph_fill_image(&r.b, 8, 8, 0, img, 2000, &copy), NB_ERR_INVALID_ARG);
    r.seq[2].n_tokens = 1;
    nb_batch empty = {0, NULL};
    NB_CHECK(!nb_graph_batch_is_decode(&empty));
    free(img);
    rb_free(&r);
}

static const nb_test tests[] = {
    {"sizes", test_sizes},
    {"bucket", test_bucket},
    {"image_matches_eager", test_image_matches_eager},
    {"image_errors", test_image_errors},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
