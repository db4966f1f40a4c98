/* Host-side logic of decode-step CUDA graphs (engine/cuda_graph.h): captured sizes,
 * bucketing and the padded index image. Pure C, no CUDA. Exercised by
 * tests/cuda_ops/test_graph_plan.c (unit) and, on a GPU, by cuda_runner.c through
 * tests/cuda_ops/test_cuda_graph.c. */
#include "engine/cuda_graph.h"

#include <string.h>

#include "base/error.h"

/* Steps of 1 up to 8, then 2, 4, 8, 16, 32 and 64 as the size doubles: a batch is padded by
 * less than a quarter of its size. Coarser grids cost real time: a padded row costs what a
 * real one does in the per-token kernels (MLA's absorbed projections, the DSA sort), and
 * padding 10 requests to 16 made a GLM-5-shaped decode step 30% slower than eager
 * (bench/RESULTS.md). Capture is lazy, so sizes never used cost nothing. */
static int next_size(int b)
{
    if (b < 8) return b + 1;
    if (b < 16) return b + 2;
    if (b < 32) return b + 4;
    if (b < 64) return b + 8;
    if (b < 128) return b + 16;
    if (b < 256) return b + 32;
    return b + 64;
}

nb_status nb_graph_sizes_for(int max_bs, nb_graph_sizes *out)
{
    memset(out, 0, sizeof *out);
    if (max_bs == 0) max_bs = NB_CUDA_GRAPH_DEFAULT_MAX_BS;
    if (max_bs < 0 || max_bs > NB_CUDA_GRAPH_MAX_BS_LIMIT)
        return nb_error(NB_ERR_INVALID_ARG, "--cuda-graph-max-bs %d: expected 1..%d", max_bs, NB_CUDA_GRAPH_MAX_BS_LIMIT);
    for (int b = 1; b <= max_bs; b = next_size(b)) {
        NB_ASSERT(out->n < NB_CUDA_GRAPH_MAX_SIZES - 1);
        out->bs[out->n++] = b;
    }
    if (out->bs[out->n - 1] != max_bs) out->bs[out->n++] = max_bs;
    return NB_OK;
}

int nb_graph_bucket(const nb_graph_sizes *s, int n)
{
    if (n <= 0) return -1;
    for (int i = 0; i < s->n; i++)
        if (s->bs[i] >= n) return i;
    return -1;
}

int nb_graph_batch_is_decode(const nb_batch *b)
{
    if (b->n_seqs <= 0) return 0;
    for (int s = 0; s < b->n_seqs; s++)
        if (b->seqs[s].n_tokens != 1) return 0;
    return 1;
}

nb_graph_image_layout nb_graph_image_layout_for(int max_bs)
{
    nb_graph_image_layout l;
    l.ids = 0;
    l.pos = max_bs;
    l.slot_base = 2 * (int64_t)max_bs;
    l.rows = 3 * (int64_t)max_bs;
    l.lrows = 4 * (int64_t)max_bs;
    l.slot_table = 5 * (int64_t)max_bs;
    return l;
}

int64_t nb_graph_slot_entries(const nb_batch *b)
{
    int64_t n = 1;
    for (int s = 0; s < b->n_seqs; s++) n += (int64_t)b->seqs[s].start_pos + 1;
    return n;
}

nb_status nb_graph_fill_image(const nb_batch *b, int bs, int max_bs, int32_t dummy_slot, int32_t *img,
                              int64_t slot_cap, int64_t *copy_elems)
{
    if (!nb_graph_batch_is_decode(b))
        return nb_error(NB_ERR_INVALID_ARG, "cuda graph: the batch is not decode-only (one token per sequence)");
    if (b->n_seqs > bs || bs > max_bs)
        return nb_error(NB_ERR_INVALID_ARG, "cuda graph: %d sequences padded to %d rows (max %d)", b->n_seqs, bs, max_bs);
    const int64_t need = nb_graph_slot_entries(b);
    if (need > slot_cap)
        return nb_error(NB_ERR_INVALID_ARG, "cuda graph: %lld slot-table entries, room for %lld", (long long)need,
                        (long long)slot_cap);
    const nb_graph_image_layout L = nb_graph_image_layout_for(max_bs);
    int32_t *ids = img + L.ids, *pos = img + L.pos, *sbase = img + L.slot_base, *rows = img + L.rows;
    int32_t *lrows = img + L.lrows, *stab = img + L.slot_table;
    int64_t base = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const nb_seq_step *q = &b->seqs[s];
        const int64_t end = (int64_t)q->start_pos + 1;
        memcpy(stab + base, q->slots, (size_t)end * sizeof(int32_t));
        ids[s] = q->tokens[0];
        pos[s] = q->start_pos;
        sbase[s] = (int32_t)base;
        rows[s] = q->slots[q->start_pos];
        lrows[s] = s;
        base += end;
    }
    /* dummy rows: one shared slot-table entry, so their one attended position is dummy_slot */
    stab[base] = dummy_slot;
    for (int s = b->n_seqs; s < bs; s++) {
        ids[s] = 0;
        pos[s] = 0;
        sbase[s] = (int32_t)base;
        rows[s] = dummy_slot;
        lrows[s] = s;
    }
    *copy_elems = L.slot_table + base + 1;
    return NB_OK;
}
