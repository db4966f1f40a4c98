/* Unit tests of the tokenizer: UTF-8 replacement, the GPT-2 byte map, the BPE core on
 * hand-made vocabularies (merge order, both merge forms, ignore_merges, byte_fallback,
 * unk), added-token flags, the streaming detokenizer (characters split across tokens,
 * byte-fallback runs), model-folder configs and malformed tokenizer.json files.
 *   build-tok/tests/test_tokenizer [NAME_SUBSTRING]
 * The comparison with the reference implementation is test_vs_hf.py. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "nbtest.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static nb_tokenizer *load_json(const char *json)
{
    nb_tokenizer *t = NULL;
    nb_status s = nb_tokenizer_load_json(json, strlen(json), "test.json", &t);
    if (s != NB_OK) fprintf(stderr, "  load failed: %s\n", nb_last_error());
    return t;
}

/* encode and compare with the expected ids */
static int enc_is(nb_tokenizer *t, const char *text, int add_special, const int32_t *want, size_t n_want)
{
    int32_t *ids;
    size_t n;
    if (nb_tokenizer_encode(t, text, strlen(text), add_special, &ids, &n) != NB_OK) {
        fprintf(stderr, "  encode failed: %s\n", nb_last_error());
        return 0;
    }
    int ok = n == n_want && (n == 0 || !memcmp(ids, want, n * sizeof *ids));
    if (!ok) {
        fprintf(stderr, "  encode('%s') =", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    return ok;
}
#define ENC_IS(t, text, sp, ...)                                                        \
    do {                                                                                \
        const int32_t w_[] = {__VA_ARGS__};                                             \
        NB_CHECK(enc_is(t, text, sp, w_, NB_ARRAY_LEN(w_)));                            \
    } while (0)

static int dec_is(nb_tokenizer *t, const int32_t *ids, size_t n, int skip, const char *want, size_t want_len)
{
    char *out;
    size_t len;
    if (nb_tokenizer_decode(t, ids, n, skip, &out, &len) != NB_OK) return 0;
    int ok = len == want_len && !memcmp(out, want, len);
    if (!ok) fprintf(stderr, "  decode = '%s' (%zu bytes), wanted '%s'\n", out, len, want);
    free(out);
    return ok;
}

/* stream ids one by one; check deltas concatenate to the full decode and return them */
static char *stream_all(nb_tokenizer *t, const int32_t *ids, size_t n, int skip, char deltas[][32])
{
    nb_detok *d;
    if (nb_detok_new(t, skip, &d) != NB_OK) return NULL;
    nb_tbuf acc = {0};
    nb_tbuf_put(&acc, "", 0);
    for (size_t i = 0; i <= n; i++) {
        const char *delta;
        size_t len;
        nb_status s = i < n ? nb_detok_push(d, ids[i], &delta, &len) : nb_detok_flush(d, &delta, &len);
        if (s != NB_OK) break;
        if (deltas) snprintf(deltas[i], 32, "%.*s", (int)len, delta);
        nb_tbuf_put(&acc, delta, len);
    }
    nb_detok_free(d);
    return acc.p;
}

/* ---- UTF-8 and the byte map --------------------------------------------------------------- */

static void test_utf8_lossy(void)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        /* expected outputs are Python's bytes.decode('utf-8', 'replace') */
        {"\xe4\xbdX\xa0", "\xef\xbf\xbdX\xef\xbf\xbd"},
        {"\xed\xa0\x80z", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz"},
        {"\xf0\x9f\x98", "\xef\xbf\xbd"},
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"ok \xf4\x90\x80\x80 no", "ok \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd no"},
        {"\xe0\x80\xaf", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xe4\xbd\xa0\xff", "\xe4\xbd\xa0\xef\xbf\xbd"},
        {"plain \xf0\x9f\x98\x80", "plain \xf0\x9f\x98\x80"},
    };
    for (size_t i = 0; i < NB_ARRAY_LEN(cases); i++) {
        nb_tbuf b = {0};
        NB_CHECK_OK(nb_utf8_lossy(&b, cases[i].in, strlen(cases[i].in)));
        NB_CHECK_MSG(b.n == strlen(cases[i].out) && !memcmp(b.p, cases[i].out, b.n), "case %zu", i);
        NB_CHECK(nb_utf8_valid(cases[i].in, strlen(cases[i].in)) == !strcmp(cases[i].in, cases[i].out));
        nb_tbuf_free(&b);
    }
    int complete;
    NB_CHECK(nb_utf8_scan((const unsigned char *)"\xe4\xbd", 2, &complete) == 2 && complete == 0);
    NB_CHECK(nb_utf8_scan((const unsigned char *)"\xe4\xbd\xa0", 3, &complete) == 3 && complete == 1);
    NB_CHECK(nb_utf8_scan((const unsigned char *)"\xf0\x9f\x98", 3, &complete) == 3 && complete == 0);
    NB_CHECK(nb_utf8_scan((const unsigned char *)"\xe0\x80", 2, &complete) == 1 && complete == -1);
    NB_CHECK(nb_utf8_scan((const unsigned char *)"\xff", 1, &complete) == 1 && complete == -1);
}

static void test_byte_map(void)
{
    int seen[512] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t c = nb_byte_char[b];
        NB_CHECK(c < 512 && !seen[c]);
        seen[c] = 1;
        NB_CHECK(nb_char_byte(c) == b);
    }
    NB_CHECK(nb_byte_char[' '] == 0x120); /* 'Ġ' */
    NB_CHECK(nb_byte_char['\n'] == 0x10A); /* 'Ċ' */
    NB_CHECK(nb_byte_char['A'] == 'A');
    NB_CHECK(nb_char_byte(0x41) == 0x41 && nb_char_byte(0x7F) == -1 && nb_char_byte(400) == -1);
}

/* ---- BPE ---------------------------------------------------------------------------------- */

#define VOCAB_ABC "\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,\"abc\":5,\"aa\":6,\"aaa\":7"

static void test_bpe_merge_order(void)
{
    /* "b c" has the better rank: abc -> a + bc, and nothing merges a with bc */
    nb_tokenizer *t = load_json("{\"model\":{\"type\":\"BPE\",\"vocab\":{" VOCAB_ABC "},"
                                "\"merges\":[\"b c\",\"a b\",\"a a\"]}}");
    NB_CHECK(t != NULL);
    if (!t) return;
    ENC_IS(t, "abc", 0, 0, 4);
    ENC_IS(t, "ab", 0, 3);
    ENC_IS(t, "aaa", 0, 6, 0); /* equal ranks: the leftmost pair first */
    ENC_IS(t, "aaaa", 0, 6, 6);
    ENC_IS(t, "abab", 0, 3, 3);
    ENC_IS(t, "xa", 0, 0); /* no unk token: unknown characters are dropped, as HF does */
    for (int rep = 0; rep < 2; rep++) { /* a word that encodes to nothing, then its cache hit */
        int32_t *ids = NULL;
        size_t n = 1;
        NB_CHECK_OK(nb_tokenizer_encode(t, "xyz", 3, 0, &ids, &n));
        NB_CHECK(n == 0 && ids != NULL);
        free(ids);
    }
    nb_tokenizer_free(t);
    /* pair form, and "a b" first: abc -> ab + c -> abc through "ab c" */
    t = load_json("{\"model\":{\"type\":\"BPE\",\"vocab\":{" VOCAB_ABC "},"
                  "\"merges\":[[\"a\",\"b\"],[\"ab\",\"c\"],[\"a\",\"a\"],[\"aa\",\"a\"]]}}");
    NB_CHECK(t != NULL);
    if (!t) return;
    ENC_IS(t, "abc", 0, 5);
    ENC_IS(t, "aaa", 0, 7);
    ENC_IS(t, "aaaaa", 0, 6, 7); /* aa.a.a.a -> aa.aa.a -> aa.aaa */
    nb_tokenizer_free(t);
}

static void test_bpe_ignore_merges_unk_fallback(void)
{
    /* ignore_merges: a word in the vocabulary is taken whole even without a merge path */
    nb_tokenizer *t = load_json("{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{" VOCAB_ABC "},"
                                "\"merges\":[\"a b\"]}}");
    NB_CHECK(t != NULL);
    if (!t) return;
    ENC_IS(t, "abc", 0, 5);
    ENC_IS(t, "aab", 0, 0, 3);
    nb_tokenizer_free(t);
    /* unk with fuse_unk, and byte_fallback when <0xNN> exists */
    t = load_json("{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,"
                  "\"vocab\":{\"<unk>\":0,\"a\":1,\"<0xC3>\":2,\"<0xA9>\":3},\"merges\":[]}}");
    NB_CHECK(t != NULL);
    if (!t) return;
    ENC_IS(t, "a\xc3\xa9" "a", 0, 1, 2, 3, 1); /* é has its bytes */
    ENC_IS(t, "axyz", 0, 1, 0);                /* x, y, z fused into one unk */
    const int32_t ids[] = {1, 2, 3, 2};
    NB_CHECK(dec_is(t, ids, 3, 0, "a <0xC3> <0xA9>", 15)); /* no decoder: tokens joined by spaces */
    nb_tokenizer_free(t);
}

static void test_bpe_decoders_bytefallback(void)
{
    nb_tokenizer *t = load_json(
        "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"a\":0,\"\\u2581b\":1,\"<0xE4>\":2,"
        "\"<0xBD>\":3,\"<0xA0>\":4},\"merges\":[]},"
        "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},"
        "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
        "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}}");
    NB_CHECK(t != NULL);
    if (!t) return;
    const int32_t ni[] = {2, 3, 4, 1, 0};
    NB_CHECK(dec_is(t, ni, 5, 0, "\xe4\xbd\xa0 ba", 6)); /* 你 b a */
    const int32_t bad[] = {2, 3, 0};                     /* truncated run: one U+FFFD per byte token */
    NB_CHECK(dec_is(t, bad, 3, 0, "\xef\xbf\xbd\xef\xbf\xbd" "a", 7));
    /* streaming: nothing until the character is complete; a run that turns out invalid
     * comes out as U+FFFD per byte, never as the bytes emitted earlier */
    char deltas[8][32];
    char *s = stream_all(t, ni, 5, 0, deltas);
    NB_CHECK(s && !strcmp(s, "\xe4\xbd\xa0 ba"));
    NB_CHECK(!strcmp(deltas[0], "") && !strcmp(deltas[1], "") && !strcmp(deltas[2], ""));
    NB_CHECK(!strcmp(deltas[3], "\xe4\xbd\xa0 b"));
    free(s);
    s = stream_all(t, bad, 3, 0, deltas);
    NB_CHECK(s && !strcmp(s, "\xef\xbf\xbd\xef\xbf\xbd" "a"));
    free(s);
    const int32_t trailing[] = {0, 2, 3}; /* stream ends inside a character: flush gives U+FFFD */
    s = stream_all(t, trailing, 3, 0, deltas);
    NB_CHECK(s && !strcmp(s, "a\xef\xbf\xbd\xef\xbf\xbd"));
    NB_CHECK(!strcmp(deltas[0], "a") && !strcmp(deltas[3], "\xef\xbf\xbd\xef\xbf\xbd"));
    free(s);
    nb_tokenizer_free(t);
}

static void test_decoders_misc(void)
{
    /* Strip counts `stop` characters from the end of each token; legacy Metaspace
     * add_prefix_space=true means prepend_scheme "always" (the first token loses its ▁) */
    nb_tokenizer *t = load_json(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"axx\":0,\"bx\":1,\"\\u2581c\":2,\"xxx\":3},\"merges\":[]},"
        "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
        "\"add_prefix_space\":true},{\"type\":\"Strip\",\"content\":\"x\",\"start\":0,\"stop\":2}]}}");
    NB_CHECK(t != NULL);
    if (!t) return;
    const int32_t a[] = {0, 1, 2};
    NB_CHECK(dec_is(t, a, 3, 0, "ab c", 4));
    const int32_t b[] = {2, 3, 0};
    NB_CHECK(dec_is(t, b, 3, 0, "cxa", 3));
    nb_tokenizer_free(t);
}

/* ---- concurrency: several threads share one tokenizer (and its word cache) --------------- */

#define NB_THR_WORDS 300
static nb_tokenizer *thr_tok;
static char thr_text[NB_THR_WORDS][24];
static int32_t thr_want[NB_THR_WORDS][24];
static size_t thr_nwant[NB_THR_WORDS];

static void *thr_main(void *arg)
{
    intptr_t bad = 0;
    for (int rep = 0; rep < 20; rep++)
        for (int i = 0; i < NB_THR_WORDS; i++) {
            int k = (i * 7 + rep * 13 + (int)(intptr_t)arg) % NB_THR_WORDS;
            int32_t *ids;
            size_t n;
            if (nb_tokenizer_encode(thr_tok, thr_text[k], strlen(thr_text[k]), 0, &ids, &n) != NB_OK) return (void *)1;
            bad |= n != thr_nwant[k] || memcmp(ids, thr_want[k], n * sizeof *ids);
            free(ids);
        }
    return (void *)bad;
}

static void test_threads(void)
{
    thr_tok = load_json("{\"model\":{\"type\":\"BPE\",\"vocab\":{" VOCAB_ABC "},"
                        "\"merges\":[\"b c\",\"a b\",\"a a\",\"aa a\"]},"
                        "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\"c\"},"
                        "\"behavior\":\"MergedWithPrevious\"}}");
    NB_CHECK(thr_tok != NULL);
    if (!thr_tok) return;
    unsigned seed = 12345;
    for (int i = 0; i < NB_THR_WORDS; i++) {
        int len = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 20;
        for (int j = 0; j < len; j++) thr_text[i][j] = "abc"[((seed = seed * 1103515245u + 12345u) >> 16) % 3];
        thr_text[i][len] = 0;
    }
    /* reference results from a fresh tokenizer, one thread, no cache hits */
    nb_tokenizer *ref = load_json("{\"model\":{\"type\":\"BPE\",\"vocab\":{" VOCAB_ABC "},"
                                  "\"merges\":[\"b c\",\"a b\",\"a a\",\"aa a\"]},"
                                  "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\"c\"},"
                                  "\"behavior\":\"MergedWithPrevious\"}}");
    NB_CHECK(ref != NULL);
    if (!ref) return;
    for (int i = 0; i < NB_THR_WORDS; i++) {
        int32_t *ids;
        NB_CHECK_OK(nb_tokenizer_encode(ref, thr_text[i], strlen(thr_text[i]), 0, &ids, &thr_nwant[i]));
        memcpy(thr_want[i], ids, thr_nwant[i] * sizeof *ids);
        free(ids);
    }
    pthread_t th[4];
    for (intptr_t i = 0; i < 4; i++) pthread_create(&th[i], NULL, thr_main, (void *)i);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        NB_CHECK(r == NULL);
    }
    nb_tokenizer_free(ref);
    nb_tokenizer_free(thr_tok);
}

/* ---- built-in byte tokenizer and the byte-level streaming case ------------------------------- */

static const char *const glm_specials[] = {"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
                                           "<|observation|>", "<think>", "</think>", "<|endoftext|>"};

static void test_builtin_bytes(void)
{
    nb_tokenizer *t;
    NB_CHECK_OK(nb_tokenizer_builtin_bytes(glm_specials, NB_ARRAY_LEN(glm_specials), &t));
    if (!t) return;
    NB_CHECK(nb_tokenizer_vocab_size(t) == 256 + 9);
    NB_CHECK(nb_tokenizer_token_to_id(t, "<|user|>") == 259);
    NB_CHECK(!strcmp(nb_tokenizer_id_to_token(t, 32), "\xc4\xa0")); /* 'Ġ' */
    NB_CHECK(nb_tokenizer_is_special(t, 264) && !nb_tokenizer_is_special(t, 65));
    NB_CHECK(nb_tokenizer_is_eos(t, 264) && nb_tokenizer_is_eos(t, 259) && nb_tokenizer_is_eos(t, 261));
    NB_CHECK(!nb_tokenizer_is_eos(t, 260) && nb_tokenizer_bos_id(t) == -1);
    NB_CHECK(nb_tokenizer_eos_token(t) && !strcmp(nb_tokenizer_eos_token(t), "<|endoftext|>"));
    ENC_IS(t, "[gMASK]<sop><|user|>\nhi", 1, 256, 257, 259, 10, 'h', 'i');
    ENC_IS(t, "\xc3\xa9<think>", 0, 0xC3, 0xA9, 262);
    const int32_t ids[] = {259, 'h', 0xE4, 0xBD, 0xA0, 0xF0, 0x9F, 0x98, 0x80, 264};
    NB_CHECK(dec_is(t, ids, 10, 0, "<|user|>h\xe4\xbd\xa0\xf0\x9f\x98\x80<|endoftext|>", 29));
    NB_CHECK(dec_is(t, ids, 10, 1, "h\xe4\xbd\xa0\xf0\x9f\x98\x80", 8));
    char deltas[16][32];
    char *s = stream_all(t, ids, 10, 1, deltas);
    NB_CHECK(s && !strcmp(s, "h\xe4\xbd\xa0\xf0\x9f\x98\x80"));
    NB_CHECK(!strcmp(deltas[1], "h") && !strcmp(deltas[2], "") && !strcmp(deltas[3], ""));
    NB_CHECK(!strcmp(deltas[4], "\xe4\xbd\xa0"));
    NB_CHECK(!strcmp(deltas[5], "") && !strcmp(deltas[7], "") && !strcmp(deltas[8], "\xf0\x9f\x98\x80"));
    free(s);
    /* invalid input bytes are replaced before matching, as the reference sees them */
    ENC_IS(t, "a\xff" "b", 0, 'a', 0xEF, 0xBF, 0xBD, 'b');
    nb_tokenizer_free(t);
}

/* ---- added tokens ------------------------------------------------------------------------- */

static void test_added_flags(void)
{
    /* byte-level vocab of single characters; added tokens with lstrip / rstrip / single_word */
    nb_tokenizer *t = load_json(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\" \":2},\"merges\":[]},"
        "\"added_tokens\":["
        "{\"id\":10,\"content\":\"<m>\",\"special\":true,\"lstrip\":true,\"rstrip\":false,\"normalized\":false},"
        "{\"id\":11,\"content\":\"<r>\",\"special\":false,\"lstrip\":false,\"rstrip\":true,\"normalized\":false},"
        "{\"id\":12,\"content\":\"ab\",\"special\":false,\"single_word\":true,\"normalized\":true},"
        "{\"id\":13,\"content\":\"<m>x\",\"special\":true,\"normalized\":false}]}");
    NB_CHECK(t != NULL);
    if (!t) return;
    ENC_IS(t, "a  <m>b", 0, 0, 10, 1);  /* lstrip eats the spaces before */
    ENC_IS(t, "a<r>  b", 0, 0, 11, 1);  /* rstrip eats the spaces after */
    ENC_IS(t, "a ab b", 0, 0, 2, 12, 2, 1);
    ENC_IS(t, "aab", 0, 0, 0, 1); /* not a single word */
    ENC_IS(t, "<m>x<m>", 0, 13, 10); /* longest match first */
    nb_tokenizer_free(t);
}

/* ---- model folder ------------------------------------------------------------------------- */

static void test_load_dir(void)
{
    char dir[] = "/tmp/nb_tok_testXXXXXX";
    if (!mkdtemp(dir)) {
        nb_test_skip("mkdtemp failed");
        return;
    }
    char p[256];
    const char *tj = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]},"
                     "\"added_tokens\":[{\"id\":2,\"content\":\"<s>\",\"special\":true},"
                     "{\"id\":3,\"content\":\"</s>\",\"special\":true},{\"id\":4,\"content\":\"<eot>\",\"special\":true}],"
                     "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\","
                     "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],"
                     "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[2],\"tokens\":[\"<s>\"]}}}}";
    const char *cfg = "{\"bos_token\":{\"__type\":\"AddedToken\",\"content\":\"<s>\"},\"eos_token\":\"</s>\","
                      "\"add_bos_token\":true,\"chat_template\":[{\"name\":\"default\",\"template\":\"D\"},"
                      "{\"name\":\"tool_use\",\"template\":\"T\"}]}";
    NB_CHECK_OK(nb_write_file(nb_path_join(p, sizeof p, dir, "tokenizer.json"), tj, strlen(tj)));
    NB_CHECK_OK(nb_write_file(nb_path_join(p, sizeof p, dir, "tokenizer_config.json"), cfg, strlen(cfg)));
    NB_CHECK_OK(nb_write_file(nb_path_join(p, sizeof p, dir, "generation_config.json"), "{\"eos_token_id\":[4,3]}", 22));
    nb_tokenizer *t = NULL;
    NB_CHECK_OK(nb_tokenizer_load(dir, &t));
    if (t) {
        NB_CHECK(nb_tokenizer_bos_id(t) == 2 && !strcmp(nb_tokenizer_bos_token(t), "<s>"));
        NB_CHECK(nb_tokenizer_add_bos(t) == 1);
        const int32_t *eos;
        NB_CHECK(nb_tokenizer_eos_ids(t, &eos) == 2 && eos[0] == 4 && eos[1] == 3);
        NB_CHECK(nb_tokenizer_chat_template_count(t) == 2);
        NB_CHECK(!strcmp(nb_tokenizer_chat_template(t, NULL), "D"));
        NB_CHECK(!strcmp(nb_tokenizer_chat_template(t, "tool_use"), "T"));
        NB_CHECK(nb_tokenizer_chat_template(t, "nope") == NULL);
        ENC_IS(t, "ab</s>", 1, 2, 0, 1, 3);
        ENC_IS(t, "ab", 0, 0, 1);
        nb_tokenizer_free(t);
    }
    /* chat_template.jinja overrides the default template */
    NB_CHECK_OK(nb_write_file(nb_path_join(p, sizeof p, dir, "chat_template.jinja"), "J{{x}}", 6));
    /* additional_chat_templates/NAME.jinja adds named templates */
    char sub[300];
    NB_CHECK_OK(nb_mkdirs(nb_path_join(sub, sizeof sub, dir, "additional_chat_templates")));
    NB_CHECK_OK(nb_write_file(nb_path_join(p, sizeof p, sub, "rag.jinja"), "R", 1));
    NB_CHECK_OK(nb_tokenizer_load(dir, &t));
    if (t) {
        NB_CHECK(!strcmp(nb_tokenizer_chat_template(t, "default"), "J{{x}}"));
        NB_CHECK(!strcmp(nb_tokenizer_chat_template(t, "rag"), "R"));
        NB_CHECK(nb_tokenizer_chat_template_count(t) == 3);
        nb_tokenizer_free(t);
    }
    unlink(nb_path_join(p, sizeof p, sub, "rag.jinja"));
    rmdir(sub);
    const char *names[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"};
    for (size_t i = 0; i < 4; i++) unlink(nb_path_join(p, sizeof p, dir, names[i]));
    rmdir(dir);
    /* a folder without tokenizer.json */
    NB_CHECK_STATUS(nb_tokenizer_load("/nonexistent/dir", &t), NB_ERR_IO);
}

/* ---- malformed files ---------------------------------------------------------------------- */

static void expect_bad(const char *json, nb_status want, const char *needle)
{
    nb_tokenizer *t = NULL;
    nb_status s = nb_tokenizer_load_json(json, strlen(json), "bad.json", &t);
    NB_CHECK_MSG(s == want && t == NULL, "status %s for %s", nb_strerror(s), json);
    NB_CHECK_MSG(strstr(nb_last_error(), needle) != NULL, "message '%s' lacks '%s'", nb_last_error(), needle);
    nb_tokenizer_free(t);
}

static void test_malformed(void)
{
    expect_bad("{\"model\":", NB_ERR_FORMAT, "invalid JSON");
    expect_bad("[1,2]", NB_ERR_FORMAT, "top level");
    expect_bad("{}", NB_ERR_FORMAT, "model");
    expect_bad("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", NB_ERR_UNSUPPORTED, "WordPiece");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":[]}}", NB_ERR_FORMAT, "model.vocab");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"x\"}}}", NB_ERR_FORMAT, "model.vocab['a']");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}", NB_ERR_FORMAT,
               "model.merges[0]");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a\"]}}", NB_ERR_FORMAT,
               "model.merges[0]");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[\"a\"]]}}", NB_ERR_FORMAT,
               "model.merges[0]");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":{\"type\":\"Split\","
               "\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}}",
               NB_ERR_FORMAT, "pre_tokenizer.pattern");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":{\"type\":\"Sequence\","
               "\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"String\":\"x\"},\"behavior\":\"Sideways\"}]}}",
               NB_ERR_FORMAT, "pre_tokenizer.pretokenizers[0].behavior");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"normalizer\":{\"type\":\"Precompiled\"}}",
               NB_ERR_UNSUPPORTED, "Precompiled");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"decoder\":{\"no_type\":1}}", NB_ERR_FORMAT,
               "decoder.type");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"added_tokens\":[{\"content\":\"x\"}]}",
               NB_ERR_FORMAT, "added_tokens[0].id");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"post_processor\":{\"type\":\"TemplateProcessing\","
               "\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}}],\"special_tokens\":{}}}",
               NB_ERR_FORMAT, "special_tokens['<s>']");
    /* an unk_token missing from the vocabulary fails when it is needed, as in HF */
    nb_tokenizer *t = load_json("{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"vocab\":{\"a\":0}}}");
    NB_CHECK(t != NULL);
    if (!t) return;
    ENC_IS(t, "aa", 0, 0, 0);
    int32_t *ids = NULL;
    size_t n;
    NB_CHECK_STATUS(nb_tokenizer_encode(t, "ax", 2, 0, &ids, &n), NB_ERR_FORMAT);
    NB_CHECK(strstr(nb_last_error(), "unk_token") != NULL);
    free(ids);
    nb_tokenizer_free(t);
}

static const nb_test tests[] = {
    {"utf8_lossy", test_utf8_lossy},
    {"byte_map", test_byte_map},
    {"bpe_merge_order", test_bpe_merge_order},
    {"bpe_ignore_merges_unk_fallback", test_bpe_ignore_merges_unk_fallback},
    {"decode_bytefallback_stream", test_bpe_decoders_bytefallback},
    {"builtin_bytes_stream", test_builtin_bytes},
    {"added_flags", test_added_flags},
    {"threads", test_threads},
    {"decoders_misc", test_decoders_misc},
    {"load_dir", test_load_dir},
    {"malformed", test_malformed},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
