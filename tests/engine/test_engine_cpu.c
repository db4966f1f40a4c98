/* The engine on the CPU backend with real models: synthetic glm5-tiny is numerically sane
 * (finite, non-degenerate logits) and deterministic; for every fixture family in
 * tests/fixtures/ and for glm5-tiny, a request's greedy output is identical alone and
 * batched with others, with chunked prefill and with preemption.
 * Run: build-eng/tests/test_engine_cpu [name-substring] (from the repository root) */
#include <pthread.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/sampling.h"
#include "model/synthetic.h"
#include "nbtest.h"
#include "tokenizer/template/template.h"
#include "tokenizer/tokenizer.h"

#define MAXTOK 64
#define NREQ 6

typedef struct outc {
    pthread_mutex_t mu;
    int32_t toks[MAXTOK];
    int n, finished;
    nb_finish_reason why;
} outc;

static void on_ev(const nb_engine_event *ev, void *u)
{
    outc *o = u;
    pthread_mutex_lock(&o->mu);
    if (ev->type == NB_EVENT_TOKENS)
        for (int i = 0; i < ev->n_tokens && o->n < MAXTOK; i++) o->toks[o->n++] = ev->token_ids[i];
    else {
        o->finished++;
        o->why = ev->finish_reason;
    }
    pthread_mutex_unlock(&o->mu);
}

/* user = outc[n]: one collector per choice */
static void on_ev_choice(const nb_engine_event *ev, void *u) { on_ev(ev, (outc *)u + ev->index); }

static void test_glm5_tiny_sane(void)
{
    nb_runner *r;
    NB_CHECK_STATUS(nb_model_runner_create("synthetic:glm5", 0, NB_KV_CACHE_AUTO, 8e9, &r), NB_ERR_OUT_OF_MEMORY); /* ~0.4 TiB (NVFP4 experts) */
    NB_CHECK(strstr(nb_last_error(), "GiB of weights") != NULL);
    NB_CHECK_OK(nb_model_runner_create("synthetic:glm5-tiny", 0, NB_KV_CACHE_AUTO, 8e9, &r));
    if (!r) return;
    NB_CHECK(r->vocab_size == 272 && r->n_eos == 3);
    NB_CHECK_OK(r->reserve_kv(r, 256));
    int32_t prompt[80], slots[80];
    for (int i = 0; i < 80; i++) {
        prompt[i] = (int32_t)(nb_mix64((uint64_t)i) % 256);
        slots[i] = i;
    }
    /* 80 tokens > index_topk 64: the DSA selection is active */
    nb_seq_step s = {.tokens = prompt, .n_tokens = 80, .start_pos = 0, .slots = slots, .all_logits = 0};
    nb_batch b = {.n_seqs = 1, .seqs = &s};
    float *lg = malloc(272 * sizeof *lg);
    NB_CHECK_OK(r->forward(r, &b, lg));
    double mean = 0, var = 0;
    int finite = 1;
    for (int v = 0; v < 272; v++) {
        finite &= isfinite(lg[v]);
        mean += lg[v];
    }
    mean /= 272;
    for (int v = 0; v < 272; v++) var += (lg[v] - mean) * (lg[v] - mean);
    double sd = sqrt(var / 272);
    fprintf(stderr, "  glm5-tiny logits: mean %.4f std %.4f\n", mean, sd);
    NB_CHECK(finite);
    NB_CHECK_MSG(sd > 0.05 && sd < 50, "logit std %g", sd);
    r->destroy(r);
    free(lg);
    /* same spec, same weights: a second build gives the same checkpoint bytes */
    nb_model_config c1, c2;
    nb_checkpoint *k1, *k2;
    NB_CHECK_OK(nb_synthetic_build("synthetic:glm5-tiny:num_hidden_layers=2,seed=3", &c1, &k1));
    NB_CHECK_OK(nb_synthetic_build("synthetic:glm5-tiny:num_hidden_layers=2,seed=3", &c2, &k2));
    NB_CHECK(c1.num_layers == 2 && nb_checkpoint_count(k1) == nb_checkpoint_count(k2));
    int same = 1;
    for (int i = 0; i < nb_checkpoint_count(k1); i++) {
        const nb_st_tensor *a = nb_checkpoint_at(k1, i), *t = nb_checkpoint_find(k2, a->name);
        same &= t && t->nbytes == a->nbytes && !memcmp(t->data, a->data, a->nbytes);
    }
    NB_CHECK(same);
    nb_checkpoint_close(k1);
    nb_checkpoint_close(k2);
    nb_model_config_free(&c1);
    nb_model_config_free(&c2);
    NB_CHECK_STATUS(nb_synthetic_build("synthetic:glm6", &c1, &k1), NB_ERR_INVALID_ARG);
    NB_CHECK_STATUS(nb_synthetic_build("synthetic:glm5-tiny:oops", &c1, &k1), NB_ERR_INVALID_ARG);
}

/* Greedy outputs of NREQ prompts: one at a time on a roomy cache vs. all at once on a
 * cache small enough to preempt, with chunked prefill. */
static void check_invariance(const char *model, int kv_small, int chunk)
{
    outc alone[NREQ], batched[NREQ];
    int32_t prompts[NREQ][40];
    int plen[NREQ];
    nb_sampling_params sp = nb_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = 12;
    sp.ignore_eos = 1;
    for (int pass = 0; pass < 2; pass++) {
        nb_engine_params p = nb_engine_default_params();
        p.model = model;
        p.page_size = 4;
        p.max_total_tokens = pass == 0 ? 4096 : kv_small;
        p.max_running_requests = pass == 0 ? 1 : NREQ;
        p.chunked_prefill_size = pass == 0 ? 8192 : chunk;
        p.cpu_mem_gb = 1;
        nb_engine *e = NULL;
        NB_CHECK_OK(nb_engine_create(&p, &e));
        if (!e) return;
        nb_engine_info info;
        nb_engine_get_info(e, &info);
        outc *o = pass == 0 ? alone : batched;
        for (int r = 0; r < NREQ; r++) {
            if (pass == 0) {
                plen[r] = 3 + (int)(nb_mix64((uint64_t)r + 77) % 30);
                for (int i = 0; i < plen[r]; i++)
                    prompts[r][i] = 3 + (int32_t)(nb_mix64((uint64_t)(r * 131 + i)) % (uint64_t)(info.vocab_size - 3));
            }
            memset(&o[r], 0, sizeof o[r]);
            pthread_mutex_init(&o[r].mu, NULL);
            NB_CHECK_OK(nb_engine_submit(e, prompts[r], plen[r], &sp, on_ev, &o[r], NULL));
        }
        nb_engine_wait_idle(e);
        nb_engine_stats st;
        nb_engine_get_stats(e, &st);
        if (pass == 1) {
            fprintf(stderr, "  %s: %llu preemptions, %llu steps\n", model, (unsigned long long)st.preemptions,
                    (unsigned long long)st.steps);
            NB_CHECK_MSG(st.preemptions > 0, "%s: no preemption with %d KV tokens", model, kv_small);
        }
        NB_CHECK(st.kv_used_tokens == 0);
        nb_engine_destroy(e);
    }
    for (int r = 0; r < NREQ; r++) {
        NB_CHECK(alone[r].finished == 1 && batched[r].finished == 1);
        NB_CHECK_MSG(alone[r].n == 12 && batched[r].n == 12 && !memcmp(alone[r].toks, batched[r].toks, sizeof(int32_t) * 12),
                     "%s: request %d differs alone vs batched", model, r);
    }
}

static void test_invariance_glm5_tiny(void) { check_invariance("synthetic:glm5-tiny", 64, 16); }

static void test_invariance_fixtures(void)
{
    const char *fams[] = {"tests/fixtures/glm_moe_dsa", "tests/fixtures/deepseek_v3", "tests/fixtures/glm4_moe",
                          "tests/fixtures/qwen3_moe"};
    int ran = 0;
    for (size_t i = 0; i < NB_ARRAY_LEN(fams); i++) {
        struct stat sb;
        char p[256];
        snprintf(p, sizeof p, "%s/model.safetensors", fams[i]);
        if (stat(p, &sb) != 0) continue;
        check_invariance(fams[i], 64, 16);
        ran++;
    }
    if (!ran) nb_test_skip("no fixtures in tests/fixtures (run from the repository root)");
}

/* One greedy request of n_prompt ids and max_tokens (ignore_eos) through a fresh engine of p
 * (KV capacity 1024 tokens, 1 GiB): it finishes once, by length, with max_tokens tokens. */
static void one_greedy_request(nb_engine_params p, const int32_t *prompt, int n_prompt, int max_tokens)
{
    p.max_total_tokens = 1024;
    p.cpu_mem_gb = 1;
    nb_engine *e = NULL;
    NB_CHECK_OK(nb_engine_create(&p, &e));
    if (!e) return;
    nb_sampling_params sp = nb_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = 1;
    outc o;
    memset(&o, 0, sizeof o);
    pthread_mutex_init(&o.mu, NULL);
    NB_CHECK_OK(nb_engine_submit(e, prompt, n_prompt, &sp, on_ev, &o, NULL));
    nb_engine_wait_idle(e);
    NB_CHECK(o.finished == 1 && o.n == max_tokens && o.why == NB_FINISH_LENGTH);
    nb_engine_destroy(e);
}

static void test_nvfp4_experts(void)
{
    nb_engine_params p = nb_engine_default_params();
    p.model = "synthetic:glm5-tiny:num_hidden_layers=2,experts=nvfp4";
    const int32_t prompt[4] = {72, 105, 33, 10};
    one_greedy_request(p, prompt, 4, 8);
}

typedef struct textc {
    pthread_mutex_t mu;
    int32_t toks[256];
    int n, finished, stop_string;
    char text[4096];
    size_t len;
    nb_finish_reason why;
} textc;

static void on_text(const nb_engine_event *ev, void *u)
{
    textc *o = u;
    pthread_mutex_lock(&o->mu);
    if (ev->text && ev->text_len && o->len + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->len, ev->text, ev->text_len);
        o->len += ev->text_len;
    }
    if (ev->type == NB_EVENT_TOKENS)
        for (int i = 0; i < ev->n_tokens && o->n < 256; i++) o->toks[o->n++] = ev->token_ids[i];
    else {
        o->finished++;
        o->why = ev->finish_reason;
        o->stop_string = ev->stop_string;
    }
    pthread_mutex_unlock(&o->mu);
}

static void run_text(nb_engine *e, const int32_t *prompt, int n, const nb_sampling_params *sp, textc *o)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    NB_CHECK_OK(nb_engine_submit(e, prompt, n, sp, on_text, o, NULL));
    nb_engine_wait_idle(e);
}

/* glm5-tiny end to end with its byte tokenizer: streamed text equals decode(ids); a stop
 * string spanning several tokens ends generation and is not emitted; the chat template
 * renders GLM-style turns. */
static void test_glm5_tiny_text_and_stops(void)
{
    nb_engine_params p = nb_engine_default_params();
    p.model = "synthetic:glm5-tiny";
    p.max_total_tokens = 4096;
    p.cpu_mem_gb = 1;
    nb_engine *e = NULL;
    NB_CHECK_OK(nb_engine_create(&p, &e));
    if (!e) return;
    const struct nb_tokenizer *tok = nb_engine_tokenizer(e);
    NB_CHECK(tok != NULL);
    const char *tpl_src = nb_engine_chat_template(e);
    NB_CHECK(tpl_src != NULL);
    if (!tok || !tpl_src) {
        nb_engine_destroy(e);
        return;
    }
    /* the template */
    nb_template *tpl = NULL;
    NB_CHECK_OK(nb_template_compile(tpl_src, strlen(tpl_src), "glm5-tiny", &tpl));
    if (tpl) {
        cJSON *msgs = cJSON_Parse("[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                  "{\"role\":\"user\",\"content\":\"Hi\"}]");
        char *out = NULL;
        NB_CHECK_OK(nb_chat_template_apply(tpl, msgs, NULL, 1, NULL, NULL, "<|endoftext|>", &out, NULL));
        NB_CHECK_MSG(out && !strcmp(out, "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|>\n"), "'%s'",
                     out ? out : "(null)");
        free(out);
        cJSON *kw = cJSON_Parse("{\"enable_thinking\":false}");
        NB_CHECK_OK(nb_chat_template_apply(tpl, msgs, NULL, 1, kw, NULL, NULL, &out, NULL));
        NB_CHECK_MSG(out && strstr(out, "<|assistant|>\n<think></think>\n"), "'%s'", out ? out : "(null)");
        free(out);
        cJSON_Delete(kw);
        cJSON_Delete(msgs);
        nb_template_free(tpl);
    }
    /* specials are single tokens; eos ids come from the config */
    NB_CHECK(nb_tokenizer_token_to_id(tok, "<|user|>") == 263);
    nb_engine_info info;
    nb_engine_get_info(e, &info);
    NB_CHECK(info.n_eos >= 3);

    int32_t *prompt;
    size_t np;
    NB_CHECK_OK(nb_tokenizer_encode(tok, "The quick brown fox", 19, 1, &prompt, &np));
    nb_sampling_params sp = nb_sampling_default_params();
    sp.temperature = 0.8f;
    sp.seed = 11;
    sp.max_tokens = 40;
    sp.ignore_eos = 1;
    sp.skip_special_tokens = 1;
    textc a, b;
    run_text(e, prompt, (int)np, &sp, &a);
    NB_CHECK(a.finished == 1 && a.n == 40 && a.why == NB_FINISH_LENGTH);
    char *dec = NULL;
    size_t dl = 0;
    NB_CHECK_OK(nb_tokenizer_decode(tok, a.toks, (size_t)a.n, 1, &dec, &dl));
    NB_CHECK_MSG(dec && dl == a.len && !memcmp(dec, a.text, dl), "streamed text differs from decode (%zu vs %zu bytes)",
                 a.len, dl);
    /* a stop string made of the text of output tokens 5..7 (spanning tokens) */
    char *piece = NULL;
    size_t pl = 0;
    int at = -1;
    for (int s0 = 5; s0 < 30 && at < 0; s0++) {
        free(piece);
        piece = NULL;
        nb_tokenizer_decode(tok, a.toks + s0, 3, 1, &piece, &pl);
        if (pl < 2 || memchr(piece, 0, pl)) continue;
        char *first = memmem(a.text, a.len, piece, pl);
        if (first) at = (int)(first - a.text);
    }
    NB_CHECK(at >= 0);
    if (at >= 0) {
        const char *stops[2] = {"\x01never\x02", piece};
        sp.stop = stops;
        sp.n_stop = 2;
        run_text(e, prompt, (int)np, &sp, &b);
        NB_CHECK(b.finished == 1 && b.why == NB_FINISH_STOP && b.stop_string == 1);
        NB_CHECK_MSG(b.len == (size_t)at && !memcmp(b.text, a.text, (size_t)at), "emitted %zu bytes, want %d", b.len, at);
        NB_CHECK(b.n < a.n && !memcmp(b.toks, a.toks, (size_t)b.n * sizeof(int32_t)));
    }
    /* a stop string that begins with the last character of the text but never completes:
     * that character is held back until the end and must still arrive (with the last
     * token), so the text equals the unstopped run */
    if (a.len > 0) {
        char tailstop[8] = {a.text[a.len - 1], '\x7f', '\x7f', 0};
        if ((unsigned char)tailstop[0] < 0x80) {
            const char *stops[1] = {tailstop};
            sp.stop = stops;
            sp.n_stop = 1;
            textc c;
            run_text(e, prompt, (int)np, &sp, &c);
            NB_CHECK(c.why == NB_FINISH_LENGTH && c.n == a.n);
            NB_CHECK_MSG(c.len == a.len && !memcmp(c.text, a.text, a.len), "held-back tail lost: %zu of %zu bytes",
                         c.len, a.len);
        }
    }
    free(piece);
    free(dec);
    free(prompt);
    nb_engine_destroy(e);
}

/* Every synthetic family, shrunk by overrides, loads through the normal binder, gives
 * finite logits and runs through the engine (also with NVFP4 experts). */
static void test_synthetic_families(void)
{
    const char *specs[] = {
        "synthetic:deepseek-v3:hidden_size=64,num_hidden_layers=2,first_k_dense_replace=1,intermediate_size=128,"
        "moe_intermediate_size=32,n_routed_experts=8,num_experts_per_tok=2,n_group=2,topk_group=1,num_attention_heads=2,"
        "num_key_value_heads=2,q_lora_rank=32,kv_lora_rank=16,qk_nope_head_dim=16,qk_rope_head_dim=8,v_head_dim=16,"
        "vocab_size=300",
        "synthetic:glm4-moe:hidden_size=64,num_hidden_layers=2,first_k_dense_replace=1,intermediate_size=128,"
        "moe_intermediate_size=32,n_routed_experts=8,num_experts_per_tok=2,num_attention_heads=4,num_key_value_heads=2,"
        "head_dim=16,vocab_size=300,use_qk_norm=true",
        "synthetic:qwen3-moe:hidden_size=64,num_hidden_layers=2,intermediate_size=128,moe_intermediate_size=32,"
        "num_experts=8,num_experts_per_tok=2,num_attention_heads=4,num_key_value_heads=2,head_dim=16,vocab_size=300,"
        "experts=nvfp4",
        "synthetic:glm5:hidden_size=64,num_hidden_layers=2,first_k_dense_replace=1,intermediate_size=128,"
        "moe_intermediate_size=32,n_routed_experts=8,num_experts_per_tok=2,num_attention_heads=2,num_key_value_heads=2,"
        "q_lora_rank=32,kv_lora_rank=16,qk_nope_head_dim=16,qk_rope_head_dim=8,v_head_dim=16,index_n_heads=2,"
        "index_head_dim=16,index_topk=8,vocab_size=300",
    };
    for (size_t i = 0; i < NB_ARRAY_LEN(specs); i++) {
        nb_engine_params p = nb_engine_default_params();
        p.model = specs[i];
        p.max_total_tokens = 512;
        p.page_size = 8;
        p.cpu_mem_gb = 1;
        nb_engine *e = NULL;
        NB_CHECK_OK(nb_engine_create(&p, &e));
        if (!e) continue;
        int32_t prompt[12] = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26};
        nb_sampling_params sp = nb_sampling_default_params();
        sp.temperature = 0;
        sp.max_tokens = 6;
        sp.ignore_eos = 1;
        outc a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        pthread_mutex_init(&a.mu, NULL);
        pthread_mutex_init(&b.mu, NULL);
        NB_CHECK_OK(nb_engine_submit(e, prompt, 12, &sp, on_ev, &a, NULL));
        NB_CHECK_OK(nb_engine_submit(e, prompt, 12, &sp, on_ev, &b, NULL));
        nb_engine_wait_idle(e);
        NB_CHECK_MSG(a.finished == 1 && a.n == 6 && b.n == 6 && !memcmp(a.toks, b.toks, sizeof(int32_t) * 6), "%s",
                     specs[i]);
        nb_engine_destroy(e);
    }
}

/* n choices share the full prompt pages of choice 0 on the real model: each choice equals
 * a separate request with seed + i. */
static void test_choices_share_prompt(void)
{
    nb_engine_params p = nb_engine_default_params();
    p.model = "synthetic:glm5-tiny";
    p.max_total_tokens = 2048;
    p.page_size = 16;
    p.cpu_mem_gb = 1;
    nb_engine *e = NULL;
    NB_CHECK_OK(nb_engine_create(&p, &e));
    if (!e) return;
    int32_t prompt[45];
    for (int i = 0; i < 45; i++) prompt[i] = (int32_t)(nb_mix64((uint64_t)i + 5) % 256);
    nb_sampling_params sp = nb_sampling_default_params();
    sp.temperature = 0.9f;
    sp.seed = 21;
    sp.max_tokens = 10;
    sp.ignore_eos = 1;
    sp.n = 3;
    outc sep[3];
    for (int i = 0; i < 3; i++) {
        nb_sampling_params one = sp;
        one.n = 1;
        one.seed = 21 + i;
        memset(&sep[i], 0, sizeof sep[i]);
        pthread_mutex_init(&sep[i].mu, NULL);
        NB_CHECK_OK(nb_engine_submit(e, prompt, 45, &one, on_ev, &sep[i], NULL));
        nb_engine_wait_idle(e);
    }
    nb_engine_stats before, after;
    nb_engine_get_stats(e, &before);
    outc joint[3];
    for (int i = 0; i < 3; i++) {
        memset(&joint[i], 0, sizeof joint[i]);
        pthread_mutex_init(&joint[i].mu, NULL);
    }
    NB_CHECK_OK(nb_engine_submit(e, prompt, 45, &sp, on_ev_choice, joint, NULL));
    nb_engine_wait_idle(e);
    nb_engine_get_stats(e, &after);
    /* 45 prompt tokens for choice 0, 45 - 32 for each of the others */
    NB_CHECK_MSG(after.prefill_tokens_computed - before.prefill_tokens_computed == 45 + 13 + 13, "%llu",
                 (unsigned long long)(after.prefill_tokens_computed - before.prefill_tokens_computed));
    for (int i = 0; i < 3; i++)
        NB_CHECK_MSG(joint[i].n == 10 && sep[i].n == 10 && !memcmp(joint[i].toks, sep[i].toks, 10 * sizeof(int32_t)),
                     "choice %d differs from its separate request", i);
    nb_engine_destroy(e);
}

/* --kv-cache-dtype: the names, and glm5-tiny on a BF16 latent cache: fewer bytes per token
 * (latent + k_pe in BF16, the DSA keys float32), the same prompt's logits within BF16 error of
 * the float32 cache's, and the engine serving a request on it. */
static void test_kv_cache_dtype(void)
{
    NB_CHECK(nb_kv_cache_dtype_parse("auto") == NB_KV_CACHE_AUTO);
    NB_CHECK(nb_kv_cache_dtype_parse("float32") == NB_KV_CACHE_F32 && nb_kv_cache_dtype_parse("fp32") == NB_KV_CACHE_F32);
    NB_CHECK(nb_kv_cache_dtype_parse("bfloat16") == NB_KV_CACHE_BF16 && nb_kv_cache_dtype_parse("bf16") == NB_KV_CACHE_BF16);
    NB_CHECK(nb_kv_cache_dtype_parse("fp8") < 0 && nb_kv_cache_dtype_parse("") < 0 && nb_kv_cache_dtype_parse("BF16") < 0);
    nb_runner *r[2] = {NULL, NULL};
    float *lg[2] = {malloc(272 * sizeof(float)), malloc(272 * sizeof(float))};
    int32_t prompt[80], slots[80];
    for (int i = 0; i < 80; i++) {
        prompt[i] = (int32_t)(nb_mix64((uint64_t)i + 7) % 256);
        slots[i] = 79 - i;
    }
    for (int k = 0; k < 2; k++) {
        NB_CHECK_OK(nb_model_runner_create("synthetic:glm5-tiny", 0, k ? NB_KV_CACHE_BF16 : NB_KV_CACHE_F32, 8e9, &r[k]));
        if (!r[k]) return;
        NB_CHECK_OK(r[k]->reserve_kv(r[k], 128));
        nb_seq_step s = {.tokens = prompt, .n_tokens = 80, .start_pos = 0, .slots = slots, .all_logits = 0};
        nb_batch b = {.n_seqs = 1, .seqs = &s};
        NB_CHECK_OK(r[k]->forward(r[k], &b, lg[k]));
    }
    fprintf(stderr, "  glm5-tiny KV bytes per token: float32 %lld, BF16 latent %lld\n", (long long)r[0]->kv_bytes_per_token,
            (long long)r[1]->kv_bytes_per_token);
    NB_CHECK(r[1]->kv_bytes_per_token < r[0]->kv_bytes_per_token * 3 / 4);
    double d = 0, n = 0;
    for (int v = 0; v < 272; v++) d += (lg[0][v] - lg[1][v]) * (lg[0][v] - lg[1][v]), n += lg[0][v] * lg[0][v];
    fprintf(stderr, "  glm5-tiny logits, BF16 latent cache against float32: rel err %.3g\n", sqrt(d / n));
    NB_CHECK(sqrt(d / n) <= 1e-2 && d > 0); /* different (rounded rows), and close */
    for (int k = 0; k < 2; k++) r[k]->destroy(r[k]), free(lg[k]);

    nb_engine_params p = nb_engine_default_params();
    p.model = "synthetic:glm5-tiny";
    p.kv_cache_dtype = NB_KV_CACHE_BF16;
    one_greedy_request(p, prompt, 20, 6);
}

static const nb_test tests[] = {
    {"kv_cache_dtype", test_kv_cache_dtype},
    {"choices_share_prompt", test_choices_share_prompt},
    {"synthetic_families", test_synthetic_families},
    {"glm5_tiny_text_and_stops", test_glm5_tiny_text_and_stops},
    {"glm5_tiny_sane", test_glm5_tiny_sane},
    {"invariance_glm5_tiny", test_invariance_glm5_tiny},
    {"invariance_fixtures", test_invariance_fixtures},
    {"nvfp4_experts", test_nvfp4_experts},
};

int main(int argc, char **argv)
{
    nb_log_set(NB_LOG_WARN, NULL, NULL);
    return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
}
