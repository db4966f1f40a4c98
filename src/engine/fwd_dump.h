/* NB_DUMP: write named intermediates of the forward pass as .npy files, so CPU, CUDA and the HF
 * fixtures can be diffed down to the first layer that diverges.
 *   NB_DUMP='blk.1.*' NB_DUMP_DIR=/tmp/d nibble score ...   ->  /tmp/d/s0.blk.1.attn_out.npy ...
 * Names: embed, blk.N.attn_in (normed input), blk.N.attn_out, blk.N.mlp_in, blk.N.mlp_out,
 * final_norm; files are prefixed with the step number (s0 = the first nb_forward call of the
 * process). The pattern is an fnmatch glob; off (and free) when NB_DUMP is unset. */
#ifndef NB_ENGINE_FWD_DUMP_H
#define NB_ENGINE_FWD_DUMP_H

#include <stdint.h>

/* 1 when NB_DUMP is set (read once). */
int nb_dump_enabled(void);
/* Start a new step (increments the step number used in file names). */
void nb_dump_step(void);
/* Write rows x cols float32 as <dir>/s<step>.<name>.npy when name matches NB_DUMP; a write
 * failure is logged, never fatal. */
void nb_dump_f32(const char *name, const float *data, int64_t rows, int64_t cols);

#endif
