/* A fake model for engine tests: logits are a hash of the whole token prefix, read
 * through the KV slots the engine hands it, so any slot or paging mistake (a row read
 * before it was written, written for another position, overwritten by another sequence)
 * changes the output or fails the step with NB_ERR_INTERNAL. Step costs are simulated
 * (a virtual clock: base + per-token), optionally also slept for real. */
#ifndef NB_TESTS_FAKE_RUNNER_H
#define NB_TESTS_FAKE_RUNNER_H

#include "engine/engine.h"
#include "engine/runner.h"

typedef struct nb_fake_runner {
    nb_runner base;
    int64_t n_slots;
    uint64_t *row_hash;   /* per slot: hash of the prefix ending at this row */
    int32_t *row_pos;     /* per slot: position written, -1 when never */
    double virt_s;        /* simulated time */
    double step_base_s, per_token_s;
    int sleep_us;         /* real sleep per step (0: none) */
    int eos_bias;         /* added to the EOS logit (negative: rarely stops) */
    int64_t steps, tokens;
    int fail_at_step;     /* > 0: that step returns NB_ERR_INTERNAL */
} nb_fake_runner;

/* vocab >= 8; eos id = vocab - 1; context as given. */
nb_runner *nb_fake_runner_new(int vocab, int context, int eos_bias);

/* The logits the fake produces after the given prefix (for reference computations). */
void nb_fake_logits(const nb_fake_runner *f, const int32_t *tokens, int n, float *logits);

/* An engine over a fake runner with KV for max_total_tokens tokens. */
nb_status nb_fake_engine(nb_engine_params p, int vocab, int context, int eos_bias, nb_engine **out,
                         nb_fake_runner **runner);

#endif
