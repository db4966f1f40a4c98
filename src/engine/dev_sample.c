/* Sampling where the logits are (see dev_sample.h). */
#include "engine/dev_sample.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define NB_ALIGN256(x) (((x) + 255) / 256 * 256)

nb_status nb_dev_sample(nb_dev_sampler *s, nb_ops_ctx *ops, float *logits, int avail_rows, int vocab, int n,
                        const nb_sample_params *params, const nb_sample_hist *hist, nb_sample_out *out)
{
    if (!logits || n > avail_rows)
        return nb_error(NB_ERR_INTERNAL, "sample: %d rows asked, the last forward left %d on the device", n,
                        logits ? avail_rows : 0);
    if (n <= 0) return NB_OK;
    int64_t ne = hist && hist->off ? hist->n_entries : 0;
    size_t pb = (size_t)n * sizeof *params, ob = (size_t)n * sizeof *out;
    size_t offb = ((size_t)n + 1) * sizeof(int32_t), eb = (size_t)ne * sizeof(int32_t);
    /* one host staging block, one upload: params | off | token | count; results after it */
    size_t up = NB_ALIGN256(pb) + NB_ALIGN256(offb) + 2 * NB_ALIGN256(eb);
    /* after the results: the op's scratch for raw values of penalized tokens (keeps the op off
     * the context's scratch slots, which captured CUDA graphs read) */
    size_t need = up + NB_ALIGN256(ob) + NB_ALIGN256(eb);
    if (need > s->cap) {
        nb_ops_free(ops, s->buf);
        s->cap = 0;
        size_t cap = need + need / 2;
        s->buf = nb_ops_alloc(ops, cap);
        if (!s->buf) return nb_error_wrap(NB_ERR_OUT_OF_MEMORY, "sample: %zu bytes for %d rows", cap, n);
        s->cap = cap;
    }
    char *stage = malloc(up);
    if (!stage) return nb_error(NB_ERR_OUT_OF_MEMORY, "sample: staging of %zu bytes", up);
    size_t o_off = NB_ALIGN256(pb), o_tok = o_off + NB_ALIGN256(offb), o_cnt = o_tok + NB_ALIGN256(eb);
    memcpy(stage, params, pb);
    if (ne > 0) {
        memcpy(stage + o_off, hist->off, offb);
        memcpy(stage + o_tok, hist->token, eb);
        memcpy(stage + o_cnt, hist->count, eb);
    }
    char *d = s->buf;
    nb_status st = nb_ops_upload(ops, d, stage, up);
    free(stage);
    if (st != NB_OK) return st;
    nb_tensor t = nb_tensor_2d(logits, NB_DTYPE_F32, n, vocab);
    t.device = nb_ops_ctx_device(ops);
    nb_sample_hist hd = {(const int32_t *)(d + o_off), (const int32_t *)(d + o_tok), (const int32_t *)(d + o_cnt),
                         ne, (float *)(d + up + NB_ALIGN256(ob))};
    nb_sample_out *dout = (nb_sample_out *)(d + up);
    NB_TRY(nb_op_sample(ops, &t, (const nb_sample_params *)d, ne > 0 ? &hd : NULL, dout));
    return nb_ops_download(ops, out, dout, ob);
}

void nb_dev_sampler_free(nb_dev_sampler *s, nb_ops_ctx *ops)
{
    if (s->buf) nb_ops_free(ops, s->buf);
    s->buf = NULL;
    s->cap = 0;
}
