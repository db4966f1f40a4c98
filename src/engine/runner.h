/* The backend seen by the engine: one forward pass over a batch that mixes prefill
 * chunks and decode tokens, writing KV rows at caller-chosen slots. The engine owns the
 * paging (slot = page * page_size + offset); the runner owns the KV memory (one row per
 * slot per layer) and the weights. Implementations: model_runner.c (the CPU reference
 * forward over a loaded model) and test doubles (tests/engine/fake_runner.c).
 * Contract of forward(): that of nb_forward (engine/forward.h) with all_logits = 0: for
 *   every sequence, tokens at positions start_pos.. write their KV rows at
 *   slots[start_pos..]; earlier rows are read through slots[0..start_pos); the logits of
 *   each sequence's last token go to row i of `logits` ([n_seqs][vocab]). A sequence's
 *   result must not depend on the other sequences in the batch. A runner that has `sample`
 *   also accepts logits == NULL: the logits stay on its backend for the sample call.
 * Contract of sample() (optional; NULL: the engine samples on the host from forward's
 *   logits): right after forward(r, b, NULL), sample row i of that batch's logits with
 *   params[i] and row i of hist (host arrays; hist->off has n_rows + 1 entries, tokens of a
 *   row distinct) into out[i] (host memory), exactly as nb_op_sample (ops.h) does, so the
 *   tokens equal the host path's. Rows with params[i].skip are left alone. */
#ifndef NB_ENGINE_RUNNER_H
#define NB_ENGINE_RUNNER_H

#include <stdint.h>

#include "engine/forward.h"
#include "nibble.h"

typedef struct nb_runner nb_runner;
struct nb_runner {
    /* Run the batch; NB_OK or the backend's error (the engine then aborts the batch). */
    nb_status (*forward)(nb_runner *r, const nb_batch *b, float *logits);
    /* Optional: sample on the backend after forward(r, b, NULL) (contract above). */
    nb_status (*sample)(nb_runner *r, int n_rows, const nb_sample_params *params, const nb_sample_hist *hist,
                        nb_sample_out *out);
    /* Make room for KV rows 0..n_slots-1 (called once, before the first forward). */
    nb_status (*reserve_kv)(nb_runner *r, int64_t n_slots);
    void (*destroy)(nb_runner *r);
    int vocab_size;            /* logits row width */
    int context_length;        /* the model's max_position_embeddings */
    int64_t kv_bytes_per_token;
    double weight_bytes;       /* resident weights, for the memory budget */
    int64_t act_bytes_per_token; /* activations per token of a step, set aside for the largest step
                                    before the KV pool is sized (0: none) */
    int eos_ids[8];
    int n_eos;
    int bos_id;
    char model_type[32];
};

#endif
