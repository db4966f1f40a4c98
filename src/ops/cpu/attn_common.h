/* Helpers shared by the CPU attention ops (attention.c, mla.c, dsa.c). */
#ifndef NB_OPS_CPU_ATTN_COMMON_H
#define NB_OPS_CPU_ATTN_COMMON_H

#include "ops/ops.h"

/* Check every position a token attends to (its selection, or 0..pos) maps to a pool row in
 * [0, pool_rows); *max_len = the most positions any token attends to (>= 1). */
nb_status nb_cpu_attn_check_index(const char *op, const nb_attn_index *idx, const nb_attn_select *sel,
                                  int64_t pool_rows, int *max_len);

/* s[0..n) = softmax(s) in float32 (max subtracted, sum in double). */
void nb_cpu_softmax_inplace(float *s, int n);

#endif
