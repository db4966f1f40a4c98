/* Weight footprint of a model: parameters and bytes by dtype and by tensor role, from the
 * checkpoint headers (exact) or from config.json alone (an estimate), and the weight
 * memory each GPU needs under tensor parallelism (--tp N) or expert parallelism (--ep N).
 *
 * Sharding assumptions (printed by `nibble inspect`):
 *   TP N: attention per-head projections (q/q_b/k/v/kv_b/o) are split by heads; GQA k/v
 *         by min(N, kv heads) (replicated beyond that); routed experts, shared experts and
 *         dense MLPs split along their intermediate dimension; embeddings, lm_head, norms,
 *         routers, MLA latent projections (q_a, kv_a) and the DSA indexer are replicated.
 *   EP N: whole routed experts are placed, ceil(E / N) on the fullest GPU; everything else
 *         is replicated (attention data-parallel).
 *   MTP layers are counted apart and not in the per-GPU figures (nibble does not load them).
 * Tests: tests/format/test_tools.c. */
#ifndef NB_FORMAT_FOOTPRINT_H
#define NB_FORMAT_FOOTPRINT_H

#include <stdint.h>

#include "format/dtype.h"
#include "format/model_config.h"
#include "format/safetensors.h"
#include "format/tensor_role.h"

typedef struct nb_footprint {
    int exact;                          /* 1: from checkpoint headers; 0: estimated from config */
    int64_t params[NB_ROLE_COUNT];      /* logical weights (an NVFP4 byte holds 2); scales excluded */
    int64_t bytes[NB_ROLE_COUNT];       /* everything stored, scales included */
    int64_t dtype_tensors[NB_DTYPE_COUNT], dtype_elems[NB_DTYPE_COUNT], dtype_bytes[NB_DTYPE_COUNT];
    int64_t mtp_params, mtp_bytes;      /* layers >= num_layers */
    int64_t n_tensors;
    double kv_fraction;                 /* share of ATTN_HEADS bytes in GQA k/v projections */
    int n_kv_heads;                     /* GQA; 0 for MLA */
    int n_experts;
} nb_footprint;

/* From the checkpoint's headers (ck may be a memory checkpoint). */
void nb_footprint_from_checkpoint(const nb_model_config *cfg, const nb_checkpoint *ck, nb_footprint *fp);
/* From config.json alone: element counts by role, bytes by the config's dtype
 * ("torch_dtype"/"dtype": bf16 unless it says float32/float16) and its quantization
 * (NVFP4: 0.5 byte + 1/16 scale byte per weight of the linear roles the exclude globs do
 * not exclude; FP8 block: 1 byte + 4/(bn*bk)). */
void nb_footprint_from_config(const nb_model_config *cfg, int elem_bytes, nb_footprint *fp);

int64_t nb_footprint_total_params(const nb_footprint *fp);
int64_t nb_footprint_total_bytes(const nb_footprint *fp);
/* Weight bytes on the fullest GPU under TP n (ep = 0) or EP n (tp = 0). */
int64_t nb_footprint_per_gpu(const nb_footprint *fp, int tp, int ep);

#endif
