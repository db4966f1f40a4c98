/* libFuzzer harness for the safetensors header parser (nb_st_parse): any byte string must
 * either parse into tensors that lie inside the buffer and match their shape x dtype, or
 * return NB_ERR_FORMAT; never crash, leak or read out of bounds (ASan + UBSan).
 * Run: make test-fuzz (bounded), or build-fuzz/tests/fuzz_st_parse tests/fuzz/corpus/st_parse
 * Seeds: tests/fuzz/corpus/st_parse (made by tests/fuzz/make_corpus.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nb_st_tensor *t = NULL;
    int n = 0;
    nb_status s = nb_st_parse("fuzz", data, size, &t, &n);
    if (s != NB_OK) {
        if (s != NB_ERR_FORMAT && s != NB_ERR_OUT_OF_MEMORY) abort();
        if (t || n) abort();
        return 0;
    }
    uint64_t sum = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t *p = t[i].data;
        if (p < data || p + t[i].nbytes > data + size) abort();
        uint64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) numel *= (uint64_t)t[i].shape[d];
        if (numel * nb_dtype_size(t[i].dtype) != t[i].nbytes) abort();
        /* touch the bytes so ASan sees any out-of-range pointer */
        for (size_t b = 0; b < t[i].nbytes; b += 64) sum += p[b];
        if (t[i].nbytes) sum += p[t[i].nbytes - 1];
        sum += strlen(t[i].name);
    }
    nb_st_tensors_free(t, n);
    return (int)(sum & 0); /* libFuzzer wants 0 */
}
