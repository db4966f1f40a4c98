/* Fake model for engine tests (see fake_runner.h). */
#include "fake_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "engine/sampling.h"

static uint64_t nb_fake_chain(uint64_t h, int32_t tok, int pos)
{
    return nb_mix64(h ^ nb_mix64((uint64_t)(uint32_t)tok * 0x100000001B3ULL + (uint64_t)pos));
}

static void nb_fake_row(const nb_fake_runner *f, uint64_t h, float *logits)
{
    int V = f->base.vocab_size;
    for (int v = 0; v < V; v++) {
        uint64_t r = nb_mix64(h + (uint64_t)v * 0x9E3779B97F4A7C15ULL);
        logits[v] = (float)((double)(r >> 40) / (double)(1 << 24) * 6.0 - 3.0);
    }
    logits[V - 1] += (float)f->eos_bias;
}

void nb_fake_logits(const nb_fake_runner *f, const int32_t *tokens, int n, float *logits)
{
    uint64_t h = 0;
    for (int p = 0; p < n; p++) h = nb_fake_chain(h, tokens[p], p);
    nb_fake_row(f, h, logits);
}

static nb_status nb_fake_forward(nb_runner *r, const nb_batch *b, float *logits)
{
    nb_fake_runner *f = (nb_fake_runner *)r;
    f->steps++;
    if (f->fail_at_step > 0 && f->steps == f->fail_at_step) return nb_error(NB_ERR_INTERNAL, "fake: injected failure");
    int64_t tokens = 0;
    /* no two sequences may write the same slot in one step */
    for (int i = 0; i < b->n_seqs; i++)
        for (int j = i + 1; j < b->n_seqs; j++)
            for (int a = 0; a < b->seqs[i].n_tokens; a++)
                for (int c = 0; c < b->seqs[j].n_tokens; c++)
                    if (b->seqs[i].slots[b->seqs[i].start_pos + a] == b->seqs[j].slots[b->seqs[j].start_pos + c])
                        return nb_error(NB_ERR_INTERNAL, "fake: sequences %d and %d share slot %d", i, j,
                                        b->seqs[i].slots[b->seqs[i].start_pos + a]);
    for (int i = 0; i < b->n_seqs; i++) {
        const nb_seq_step *s = &b->seqs[i];
        uint64_t h = 0;
        if (s->start_pos > 0) {
            /* read back the earlier rows through the slots and check them */
            for (int p = 0; p < s->start_pos; p++) {
                int32_t sl = s->slots[p];
                if (sl < 0 || sl >= f->n_slots || f->row_pos[sl] != p)
                    return nb_error(NB_ERR_INTERNAL, "fake: seq %d position %d: slot %d holds position %d", i, p, sl,
                                    sl >= 0 && sl < f->n_slots ? f->row_pos[sl] : -2);
            }
            h = f->row_hash[s->slots[s->start_pos - 1]];
        }
        for (int t = 0; t < s->n_tokens; t++) {
            int p = s->start_pos + t;
            int32_t sl = s->slots[p];
            if (sl < 0 || sl >= f->n_slots) return nb_error(NB_ERR_INTERNAL, "fake: slot %d out of range", sl);
            h = nb_fake_chain(h, s->tokens[t], p);
            f->row_hash[sl] = h;
            f->row_pos[sl] = p;
        }
        tokens += s->n_tokens;
        nb_fake_row(f, h, logits + (size_t)i * r->vocab_size);
    }
    f->tokens += tokens;
    f->virt_s += f->step_base_s + f->per_token_s * (double)tokens;
    if (f->sleep_us) usleep((useconds_t)f->sleep_us);
    return NB_OK;
}

static nb_status nb_fake_reserve(nb_runner *r, int64_t n_slots)
{
    nb_fake_runner *f = (nb_fake_runner *)r;
    f->row_hash = calloc((size_t)n_slots, sizeof *f->row_hash);
    f->row_pos = malloc((size_t)n_slots * sizeof *f->row_pos);
    if (!f->row_hash || !f->row_pos) return nb_error(NB_ERR_OUT_OF_MEMORY, "fake kv");
    for (int64_t i = 0; i < n_slots; i++) f->row_pos[i] = -1;
    f->n_slots = n_slots;
    return NB_OK;
}

static void nb_fake_destroy(nb_runner *r)
{
    nb_fake_runner *f = (nb_fake_runner *)r;
    free(f->row_hash);
    free(f->row_pos);
    free(f);
}

nb_runner *nb_fake_runner_new(int vocab, int context, int eos_bias)
{
    nb_fake_runner *f = calloc(1, sizeof *f);
    f->base.forward = nb_fake_forward;
    f->base.reserve_kv = nb_fake_reserve;
    f->base.destroy = nb_fake_destroy;
    f->base.vocab_size = vocab;
    f->base.context_length = context;
    f->base.kv_bytes_per_token = 1024;
    f->base.weight_bytes = 0;
    f->base.eos_ids[0] = vocab - 1;
    f->base.n_eos = 1;
    f->base.bos_id = -1;
    snprintf(f->base.model_type, sizeof f->base.model_type, "fake");
    f->step_base_s = 1e-3;
    f->per_token_s = 1e-5;
    f->eos_bias = eos_bias;
    return &f->base;
}

nb_status nb_fake_engine(nb_engine_params p, int vocab, int context, int eos_bias, nb_engine **out,
                         nb_fake_runner **runner)
{
    nb_engine_parts parts;
    memset(&parts, 0, sizeof parts);
    parts.runner = nb_fake_runner_new(vocab, context, eos_bias);
    if (runner) *runner = (nb_fake_runner *)parts.runner;
    snprintf(parts.model_name, sizeof parts.model_name, "fake");
    parts.mem_budget_bytes = 1 << 30;
    if (!p.model) p.model = "fake";
    return nb_engine_create_from_parts(&p, &parts, out);
}
