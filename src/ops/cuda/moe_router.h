/* The router gate GEMV fused with the top-k choice (ops/cuda/moe_router.cu): for a few tokens,
 * logits = x @ gate^T (+ bias) in float32 by every block of one launch, and the block that
 * finishes last routes every token (the same function as nb_moe_router, ops/cuda/moe.h).
 * An experiment, off by default (measured slower than two launches; NIBBLE_CUDA_GATE_ROUTE=
 * fused turns it on). Reached through nb_cuda_moe_gate_route (ops/cuda/experts.cu); tested by
 * tests/cuda_ops/test_cuda_small_ops.c against the CPU composition linear + moe_route. */
#ifndef NB_OPS_CUDA_MOE_ROUTER_H
#define NB_OPS_CUDA_MOE_ROUTER_H

#include <stdint.h>

#include "ops/cuda/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NB_GATE_ROUTE_MAX_TOKENS 16
#define NB_GATE_ROUTE_MAX_E 512
/* Completion counters: one per CUDA context that uses the fused launch (a slot is never
 * shared by two live contexts; a context without one takes the two-launch path). */
#define NB_GATE_ROUTE_SLOTS 64

typedef struct nb_moe_gate_router_desc {
    nb_moe_router_desc r;     /* r.logits: written here first ([tokens, experts], dense) */
    const float *x;           /* [tokens, hidden], row stride ldx (floats, % 4 == 0), 16-byte aligned */
    int64_t ldx;
    int hidden;               /* % 8 == 0 */
    const uint16_t *gate;     /* BF16 [experts, hidden], row stride gate_ld elements (% 8 == 0), 16-byte aligned */
    int64_t gate_ld;
    const float *gate_bias;   /* F32 [experts] or NULL (the linear's bias; not the correction bias) */
    int slot;                 /* 0..NB_GATE_ROUTE_SLOTS-1, the context's counter */
} nb_moe_gate_router_desc;

/* 1 when the fused launch takes these shapes (tokens 1..NB_GATE_ROUTE_MAX_TOKENS, experts
 * <= NB_GATE_ROUTE_MAX_E, alignment as above). */
int nb_moe_gate_router_fits(const nb_moe_gate_router_desc *d);
/* Enqueue the fused launch (NB_ERR_INVALID_ARG for router parameters nb_moe_router refuses,
 * NB_ERR_UNSUPPORTED when !nb_moe_gate_router_fits). */
nb_status nb_moe_gate_router(const nb_moe_gate_router_desc *d, void *stream);

#ifdef __cplusplus
}
#endif
#endif
