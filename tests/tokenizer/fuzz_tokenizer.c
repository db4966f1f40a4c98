/* libFuzzer harness for the tokenizer: any byte string must either load as a tokenizer.json
 * or fail with NB_ERR_FORMAT / NB_ERR_UNSUPPORTED / NB_ERR_OUT_OF_MEMORY; a tokenizer that
 * loads must encode and decode any text without crashing, and its streaming detokenizer
 * must reproduce decode exactly. The same bytes are also encoded as text by a fixed
 * feature-rich tokenizer (regex split, byte level, added tokens with lstrip/rstrip).
 * Run: make test-fuzz (bounded), or build-fuzz/tests/fuzz_tokenizer tests/tokenizer/corpus
 * Seeds: tests/tokenizer/corpus (small tokenizer.json files). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fixed_json[] =
    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"\\u0120\":2,\"\\u0120a\":3,\"ab\":4,\"\\u010a\":5},"
    "\"merges\":[\"\\u0120 a\",\"a b\"]},"
    "\"added_tokens\":[{\"id\":6,\"content\":\"<s>\",\"special\":true,\"lstrip\":true},"
    "{\"id\":7,\"content\":\"<r>\",\"special\":false,\"rstrip\":true,\"single_word\":true}],"
    "\"normalizer\":{\"type\":\"NFKC\"},"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
    "\"\\\\p{N}{1,3}| ?\\\\p{L}+|\\\\s+(?!\\\\S)|\\\\s+| ?[^\\\\s\\\\p{L}\\\\p{N}]+\"},\"behavior\":\"Isolated\"},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
    "\"decoder\":{\"type\":\"ByteLevel\"}}";

/* Encode, decode both ways, and stream. strict: the streamed text must equal decode (true
 * for byte-level tokenizers; a fuzzed decoder chain may rewrite earlier text, which a
 * stream cannot take back, so there only the absence of crashes is checked). */
static void exercise(const nb_tokenizer *t, const char *text, size_t len, int strict)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (nb_tokenizer_encode(t, text, len, 1, &ids, &n) != NB_OK) return; /* e.g. unk missing */
    for (int skip = 0; skip < 2; skip++) {
        char *out = NULL;
        size_t out_len = 0;
        if (nb_tokenizer_decode(t, ids, n, skip, &out, &out_len) != NB_OK) abort();
        nb_detok *d;
        if (nb_detok_new(t, skip, &d) != NB_OK) abort();
        size_t got = 0;
        int same = 1;
        for (size_t i = 0; i <= n; i++) {
            const char *delta;
            size_t dl;
            nb_status s = i < n ? nb_detok_push(d, ids[i], &delta, &dl) : nb_detok_flush(d, &delta, &dl);
            if (s != NB_OK) abort();
            if (got + dl > out_len || memcmp(out + got, delta, dl)) same = 0;
            got += dl;
        }
        if (strict && (!same || got != out_len)) abort();
        nb_detok_free(d);
        free(out);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static nb_tokenizer *fixed;
    if (!fixed && nb_tokenizer_load_json(fixed_json, strlen(fixed_json), "fixed", &fixed) != NB_OK) abort();

    nb_tokenizer *t = NULL;
    nb_status s = nb_tokenizer_load_json((const char *)data, size, "fuzz", &t);
    if (s != NB_OK) {
        if (s != NB_ERR_FORMAT && s != NB_ERR_UNSUPPORTED && s != NB_ERR_OUT_OF_MEMORY) abort();
        if (t) abort();
    } else {
        static const char *texts[] = {"", "a b\n", "ab<s> <r>  x", "\xe4\xbd\xa0\xff 12345 \xf0\x9f\x98\x80"};
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) exercise(t, texts[i], strlen(texts[i]), 0);
        exercise(t, (const char *)data, size < 512 ? size : 512, 0);
        nb_tokenizer_free(t);
    }
    exercise(fixed, (const char *)data, size, 1);
    return 0;
}
