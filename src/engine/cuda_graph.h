/* The host-side logic of CUDA graphs for decode steps (no CUDA here, so it is unit-tested
 * everywhere: tests/cuda_ops/test_graph_plan.c): which batch sizes get a graph, which graph
 * a decode batch replays, and the padded index image a replay reads.
 *
 * A graph is captured for each size of nb_graph_sizes_for(max_bs). A decode-only batch of
 * n sequences (every sequence one token) replays the graph of the smallest size bs >= n;
 * rows n..bs-1 are dummy rows: token 0 at position 0 whose only slot is the runner's
 * scratch KV slot, so they write that slot alone, attend only to it and their logits are
 * ignored. Every op of the forward pass computes a token's row from that token's inputs
 * only, so real rows do not depend on the padding. Larger or mixed batches run eagerly.
 *
 * The index image (one host buffer copied to the device before each replay) has a fixed
 * layout for a given max_bs, so one device copy serves every captured size:
 *   ids [max_bs] | pos [max_bs] | slot_base [max_bs] | rows [max_bs] | lrows [max_bs] |
 *   slot_table [slot_cap]
 * (int32 each; the arrays of nb_forward_enqueue, engine/forward.h). Only the prefix up to
 * the last used slot-table entry needs copying. */
#ifndef NB_ENGINE_CUDA_GRAPH_H
#define NB_ENGINE_CUDA_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "engine/forward.h"

/* --cuda-graph-max-bs when not given. 1024 so that the decode batch of a 1000-request load
 * (~700 sequences) replays a graph too; capture is lazy (first use of a size), and the fixed
 * cost is the graph logits buffer, 1024 x vocab floats (0.63 GB for GLM-5's 154880). */
#define NB_CUDA_GRAPH_DEFAULT_MAX_BS 1024
#define NB_CUDA_GRAPH_MAX_BS_LIMIT 4096
#define NB_CUDA_GRAPH_MAX_SIZES 96

typedef struct nb_graph_sizes {
    int n;
    int bs[NB_CUDA_GRAPH_MAX_SIZES]; /* ascending */
} nb_graph_sizes;

/* The captured sizes up to max_bs: every size to 8, then every 2 to 16, every 4 to 32, 8 to
 * 64, 16 to 128, 32 to 256, 64 beyond, and max_bs itself when it is not on that grid (28
 * sizes up to 256; they include 1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 160, 192, 224, 256). max_bs 0 means
 * NB_CUDA_GRAPH_DEFAULT_MAX_BS. NB_ERR_INVALID_ARG (naming --cuda-graph-max-bs) outside
 * [0, NB_CUDA_GRAPH_MAX_BS_LIMIT]. */
nb_status nb_graph_sizes_for(int max_bs, nb_graph_sizes *out);

/* Index into s->bs of the graph a batch of n sequences replays, or -1 when n > max size
 * (or n <= 0). */
int nb_graph_bucket(const nb_graph_sizes *s, int n);

/* 1 when every sequence of b computes exactly one token (a decode-only step). */
int nb_graph_batch_is_decode(const nb_batch *b);

/* Offsets (in int32 elements) of the image's arrays for this max_bs. */
typedef struct nb_graph_image_layout {
    int64_t ids, pos, slot_base, rows, lrows, slot_table;
} nb_graph_image_layout;
nb_graph_image_layout nb_graph_image_layout_for(int max_bs);

/* Slot-table entries a decode batch needs: the sum of its sequences' start_pos + 1, plus
 * one for the dummy rows' slot. */
int64_t nb_graph_slot_entries(const nb_batch *b);

/* Write the image of decode batch b padded to bs rows (b->n_seqs <= bs <= max_bs) into img
 * (laid out for max_bs, with room for slot_cap slot-table entries). Real rows are exactly
 * what nb_forward_fill_index writes for b; dummy rows use dummy_slot. *copy_elems: the
 * prefix of img to copy. NB_ERR_INVALID_ARG when b is not decode-only, does not fit bs, or
 * its slot table exceeds slot_cap. */
nb_status nb_graph_fill_image(const nb_batch *b, int bs, int max_bs, int32_t dummy_slot, int32_t *img,
                              int64_t slot_cap, int64_t *copy_elems);

#endif
