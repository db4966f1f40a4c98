/* Unit tests of the server's pure parts: OpenAI request parsing and validation (status,
 * parameter named), the reasoning splitter (text and token-id modes, tags split across
 * deltas), the Prometheus rendering, the chat variables' raw JSON text (numbers keep their
 * spelling through to the template).
 *   build-srv/tests/test_oai_request [NAME_SUBSTRING] */
#include "nbtest.h"
#include "server/json_span.h"
#include "server/metrics.h"
#include "server/oai_request.h"
#include "server/reasoning.h"
#include "raw_json_check.h"
#include "server/strbuf.h"
#include "tokenizer/template/template.h"

static int nb_bad(nb_oai_kind k, const char *body, int http, const char *param)
{
    nb_oai_request r;
    nb_oai_error e = {0};
    int rc = nb_oai_parse(k, body, strlen(body), &r, &e);
    if (rc == 0) {
        nb_oai_request_free(&r);
        fprintf(stderr, "    accepted: %.80s\n", body);
        return 0;
    }
    int ok = e.http == http && (!param || !strcmp(e.param, param));
    if (!ok) fprintf(stderr, "    %.80s -> %d param '%s': %s\n", body, e.http, e.param, e.message);
    char *j = nb_oai_error_json(&e);
    ok &= j && strstr(j, "\"error\":{\"message\":") && strstr(j, "\"type\":");
    free(j);
    return ok;
}

static void test_completions_ok(void)
{
    const char *b = "{\"model\":\"m\",\"prompt\":[1,2,3],\"max_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,"
                    "\"top_k\":20,\"min_p\":0.1,\"repetition_penalty\":1.1,\"seed\":42,\"n\":2,\"stop\":[\"a\",\"bc\"],"
                    "\"stop_token_ids\":[5],\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                    "\"logprobs\":3,\"user\":\"u\",\"unknown_field\":{}}";
    nb_oai_request r;
    nb_oai_error e = {0};
    NB_CHECK(nb_oai_parse(NB_OAI_COMPLETIONS, b, strlen(b), &r, &e) == 0);
    NB_CHECK(r.n_prompts == 1 && r.prompts[0].n_ids == 3 && r.prompts[0].ids[2] == 3);
    NB_CHECK(r.sp.max_tokens == 7 && r.sp.n == 2 && r.sp.top_k == 20 && r.sp.seed == 42 && r.sp.ignore_eos);
    NB_CHECK_NEAR(r.sp.temperature, 0.5, 1e-6);
    NB_CHECK(r.sp.n_stop == 2 && !strcmp(r.sp.stop[1], "bc") && r.sp.n_stop_token_ids == 1);
    NB_CHECK(r.stream && r.include_usage && r.logprobs && r.top_logprobs == 3 && r.sp.logprobs);
    NB_CHECK(r.model && !strcmp(r.model, "m"));
    nb_oai_request_free(&r);
    const char *batch = "{\"prompt\":[\"ab\",\"c\"]}";
    NB_CHECK(nb_oai_parse(NB_OAI_COMPLETIONS, batch, strlen(batch), &r, &e) == 0);
    NB_CHECK(r.n_prompts == 2 && !strcmp(r.prompts[1].text, "c") && r.sp.max_tokens == 16 && !r.model);
    nb_oai_request_free(&r);
    const char *ids2 = "{\"prompt\":[[1,2],[3]],\"stop\":\"x\"}";
    NB_CHECK(nb_oai_parse(NB_OAI_COMPLETIONS, ids2, strlen(ids2), &r, &e) == 0);
    NB_CHECK(r.n_prompts == 2 && r.prompts[1].n_ids == 1 && r.sp.n_stop == 1 && !strcmp(r.sp.stop[0], "x"));
    nb_oai_request_free(&r);
}

static void test_chat_ok(void)
{
    const char *b = "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":"
                    "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\","
                    "\"tool_calls\":[{\"id\":\"1\"}]}],\"enable_thinking\":false,\"max_completion_tokens\":9,"
                    "\"logprobs\":true,\"top_logprobs\":2,\"tools\":[{\"type\":\"function\"}]}";
    nb_oai_request r;
    nb_oai_error e = {0};
    NB_CHECK(nb_oai_parse(NB_OAI_CHAT, b, strlen(b), &r, &e) == 0);
    NB_CHECK(cJSON_GetArraySize(r.messages) == 3);
    const cJSON *c = cJSON_GetObjectItem(cJSON_GetArrayItem(r.messages, 1), "content");
    NB_CHECK(cJSON_IsString(c) && !strcmp(c->valuestring, "a\nb"));
    NB_CHECK(cJSON_IsFalse(cJSON_GetObjectItem(r.template_kwargs, "enable_thinking")));
    NB_CHECK(r.sp.max_tokens == 9 && r.max_tokens_given && r.logprobs && r.top_logprobs == 2 && r.tools);
    NB_CHECK(r.add_generation_prompt && r.separate_reasoning);
    nb_oai_request_free(&r);
    const char *d = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    NB_CHECK(nb_oai_parse(NB_OAI_CHAT, d, strlen(d), &r, &e) == 0);
    NB_CHECK(r.sp.max_tokens == -1 && !r.max_tokens_given); /* chat: up to the context */
    nb_oai_request_free(&r);
}

static void test_rejections(void)
{
    nb_oai_kind C = NB_OAI_COMPLETIONS, H = NB_OAI_CHAT;
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\"", 400, ""));
    NB_CHECK(nb_bad(C, "[1,2]", 400, ""));
    NB_CHECK(nb_bad(C, "{}", 400, "prompt"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"\"}", 400, "prompt"));
    NB_CHECK(nb_bad(C, "{\"prompt\":[]}", 400, "prompt"));
    NB_CHECK(nb_bad(C, "{\"prompt\":[1,-2]}", 400, "prompt"));
    NB_CHECK(nb_bad(C, "{\"prompt\":[1.5]}", 400, "prompt"));
    NB_CHECK(nb_bad(C, "{\"prompt\":[\"a\",[1]]}", 400, "prompt"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", 400, "temperature"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"temperature\":1e400}", 400, "temperature"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"max_tokens\":1e300}", 400, "max_tokens"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"max_tokens\":0}", 400, "max_tokens"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"n\":0}", 400, "n"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"n\":129}", 400, "n"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"top_p\":0}", 400, "top_p"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"seed\":1e300}", 400, "seed"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"stream\":1}", 400, "stream"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"stop\":[\"\"]}", 400, "stop"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"stop\":7}", 400, "stop"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"logit_bias\":{\"1\":5}}", 400, "logit_bias"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"best_of\":3}", 400, "best_of"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"logprobs\":21}", 400, "logprobs"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"model\":5}", 400, "model"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":\"yes\"}}", 400, "stream_options"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"regex\":\"a+\"}", 400, "regex"));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"x\",\"stop_token_ids\":[1,\"a\"]}", 400, "stop_token_ids"));
    NB_CHECK(nb_bad(H, "{\"messages\":[]}", 400, "messages"));
    NB_CHECK(nb_bad(H, "{\"messages\":{}}", 400, "messages"));
    NB_CHECK(nb_bad(H, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages[0].role"));
    NB_CHECK(nb_bad(H, "{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content"));
    NB_CHECK(nb_bad(H, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content"));
    NB_CHECK(nb_bad(H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400,
                    "messages[0].content[0]"));
    NB_CHECK(nb_bad(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", 400, "top_logprobs"));
    NB_CHECK(nb_bad(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", 400, "tools"));
    NB_CHECK(nb_bad(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":[]}", 400,
                    "chat_template_kwargs"));
    /* Invalid UTF-8 (a lone continuation byte, an overlong '/', a surrogate) and deep nesting. */
    NB_CHECK(nb_bad(C, "{\"prompt\":\"a\x80\"}", 400, ""));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"\xc0\xaf\"}", 400, ""));
    NB_CHECK(nb_bad(C, "{\"prompt\":\"\xed\xa0\x80\"}", 400, ""));
    char deep[5000];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    NB_CHECK(nb_bad(C, deep, 400, ""));
    /* A giant stop list is refused, naming stop. */
    char *big = malloc(200000);
    strcpy(big, "{\"prompt\":\"x\",\"stop\":[");
    for (int i = 0; i < 1000; i++) strcat(big, i ? ",\"s\"" : "\"s\"");
    strcat(big, "]}");
    NB_CHECK(nb_bad(C, big, 400, "stop"));
    free(big);
}

static void test_utf8(void)
{
    NB_CHECK(nb_oai_utf8_valid("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 15));
    NB_CHECK(!nb_oai_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    NB_CHECK(!nb_oai_utf8_valid("\xe2\x82", 2));         /* truncated */
}

static void nb_feed_all(nb_reasoning *r, const char *const *parts, int n, char *reason, char *content)
{
    nb_strbuf a = {0}, b = {0};
    for (int i = 0; i < n; i++) nb_reasoning_feed(r, parts[i], strlen(parts[i]), &a, &b);
    nb_reasoning_flush(r, &a, &b);
    snprintf(reason, 256, "%s", a.p ? a.p : "");
    snprintf(content, 256, "%s", b.p ? b.p : "");
    nb_sb_free(&a);
    nb_sb_free(&b);
}

static void test_reasoning_text(void)
{
    char rs[256], ct[256];
    nb_reasoning r;
    const char *split[] = {" <thi", "nk>abc</th", "ink>xyz", "!"};
    nb_reasoning_init(&r, NB_REASONING_GLM45, 0);
    nb_feed_all(&r, split, 4, rs, ct);
    NB_CHECK(!strcmp(rs, "abc") && !strcmp(ct, "xyz!"));
    const char *plain[] = {"hello <think>not at start</think>"};
    nb_reasoning_init(&r, NB_REASONING_QWEN3, 0);
    nb_feed_all(&r, plain, 1, rs, ct);
    NB_CHECK(!strcmp(rs, "") && !strcmp(ct, "hello <think>not at start</think>"));
    const char *r1[] = {"<think>", "plan", "</", "think>", "answer"};
    nb_reasoning_init(&r, NB_REASONING_DEEPSEEK_R1, 0);
    nb_feed_all(&r, r1, 5, rs, ct);
    NB_CHECK(!strcmp(rs, "plan") && !strcmp(ct, "answer"));
    const char *r1b[] = {"plan <", "x</think>done"};
    nb_reasoning_init(&r, NB_REASONING_DEEPSEEK_R1, 0);
    nb_feed_all(&r, r1b, 2, rs, ct);
    NB_CHECK(!strcmp(rs, "plan <x") && !strcmp(ct, "done"));
    const char *open[] = {"still thinking"};
    nb_reasoning_init(&r, NB_REASONING_GLM45, 1); /* the prompt opened <think> */
    nb_feed_all(&r, open, 1, rs, ct);
    NB_CHECK(!strcmp(rs, "still thinking") && !strcmp(ct, ""));
    const char *none[] = {"<think>x</think>y"};
    nb_reasoning_init(&r, NB_REASONING_NONE, 0);
    nb_feed_all(&r, none, 1, rs, ct);
    NB_CHECK(!strcmp(ct, "<think>x</think>y"));
    NB_CHECK(nb_reasoning_prompt_open("a<think>b</think><think>", 24));
    NB_CHECK(!nb_reasoning_prompt_open("a<think>b</think>", 17));
    NB_CHECK(nb_reasoning_parse_kind("deepseek-r1") == NB_REASONING_DEEPSEEK_R1 && nb_reasoning_parse_kind("x") < 0);
}

static void test_reasoning_ids(void)
{
    nb_reasoning r;
    nb_strbuf a = {0}, b = {0};
    nb_reasoning_init(&r, NB_REASONING_GLM45, 0);
    nb_reasoning_use_ids(&r, 10, 11);
    int32_t t0[] = {10}, t1[] = {5}, t2[] = {11}, t3[] = {6};
    nb_reasoning_feed_tokens(&r, t0, 1, "", 0, &a, &b); /* <think> decodes to nothing */
    nb_reasoning_feed_tokens(&r, t1, 1, "hm", 2, &a, &b);
    nb_reasoning_feed_tokens(&r, t2, 1, "", 0, &a, &b);
    nb_reasoning_feed_tokens(&r, t3, 1, "ok", 2, &a, &b);
    NB_CHECK(a.p && !strcmp(a.p, "hm") && b.p && !strcmp(b.p, "ok"));
    nb_sb_free(&a);
    nb_sb_free(&b);
    nb_reasoning_init(&r, NB_REASONING_QWEN3, 0);
    nb_reasoning_use_ids(&r, 10, 11);
    nb_reasoning_feed_tokens(&r, t1, 1, "hi", 2, &a, &b);
    NB_CHECK(!a.p && b.p && !strcmp(b.p, "hi"));
    nb_sb_free(&b);
}

static void test_metrics_render(void)
{
    nb_srv_metrics *m = nb_srv_metrics_new();
    nb_srv_metrics_observe(m, NB_HIST_TTFT, 0.003);
    nb_srv_metrics_observe(m, NB_HIST_TTFT, 1000);
    nb_srv_metrics_finish(m, NB_FINISH_LENGTH);
    nb_srv_metrics_http(m, 413);
    nb_strbuf o = {0};
    nb_srv_metrics_render(m, NULL, 0, &o);
    NB_CHECK(o.p && strstr(o.p, "nibble:server_ready 0\n"));
    NB_CHECK(strstr(o.p, "nibble:time_to_first_token_seconds_bucket{le=\"0.001\"} 0\n"));
    NB_CHECK(strstr(o.p, "nibble:time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"));
    NB_CHECK(strstr(o.p, "nibble:time_to_first_token_seconds_bucket{le=\"160\"} 1\n"));
    NB_CHECK(strstr(o.p, "nibble:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
    NB_CHECK(strstr(o.p, "nibble:time_to_first_token_seconds_count 2\n"));
    NB_CHECK(strstr(o.p, "nibble:request_finished_total{finish_reason=\"length\"} 1\n"));
    NB_CHECK(strstr(o.p, "nibble:http_responses_total{code=\"413\"} 1\n"));
    NB_CHECK(strstr(o.p, "# TYPE nibble:e2e_request_latency_seconds histogram\n"));
    nb_sb_free(&o);
    nb_srv_metrics_free(m);
}

#define NB_CHECK_STR(got, want) NB_CHECK_MSG(!strcmp((got), (want)), "got  %s\n      want %s", (got), (want))

static int nb_raw_matches(const nb_oai_request *r)
{
    int ok = nb_raw_json_agrees(r);
    if (!ok) fprintf(stderr, "    raw: %s | %s | %s\n", r->messages_json, r->tools_json, r->kwargs_json);
    return ok;
}

static void test_chat_raw_json(void)
{
    const char *b = "\xEF\xBB\xBF \n{\"tools\" : [ {\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                    "{\"x\":1.0,\"big\":12345678901234567890,\"e\":1e100,\"n\":[0.5,{\"y\":-0.0}],\"s\":\"]}\\\"[\"},"
                    "\"i\":9007199254740993}} ],"
                    "\"messages\":[{\"role\":\"user\",\"w\":2.50,\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                    "{\"type\":\"text\",\"text\":\"\\u00e9\\\"}\"}],\"z\":[1.0]},"
                    "{\"role\":\"assistant\",\"content\":\"ok\",\"t\":{\"v\":3.0}}],"
                    "\"chat_template_kwargs\":{\"temp\":0.10},\"enable_thinking\":false}";
    nb_oai_request r;
    nb_oai_error e = {0};
    NB_CHECK(nb_oai_parse(NB_OAI_CHAT, b, strlen(b), &r, &e) == 0);
    if (!r.messages_json) return;
    NB_CHECK_STR(r.tools_json, "[ {\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                                  "{\"x\":1.0,\"big\":12345678901234567890,\"e\":1e100,\"n\":[0.5,{\"y\":-0.0}],"
                                  "\"s\":\"]}\\\"[\"},\"i\":9007199254740993}} ]");
    NB_CHECK_STR(r.messages_json, "[{\"role\":\"user\",\"w\":2.50,\"content\":\"a\\n\xC3\xA9\\\"}\",\"z\":[1.0]},"
                                     "{\"role\":\"assistant\",\"content\":\"ok\",\"t\":{\"v\":3.0}}]");
    NB_CHECK_STR(r.kwargs_json, "{\"temp\":0.10,\"enable_thinking\":false}");
    NB_CHECK(nb_raw_matches(&r));
    /* Through the template: what transformers prints (json.dumps / str of Python numbers).
     * 2^53 + 1 survives (a double would not). "big" (past int64) is exact in the text handed
     * over, but the template's JSON reader makes it a float, so it is left out here. */
    const char *src = "{% set p = tools[0].function.parameters %}{{ p.x }}|{{ p.e }}|{{ p.n | tojson }}|"
                      "{{ p.s | tojson }}|{{ tools[0].function.i }}|{{ messages[0].w }}|{{ messages[0].z }}|"
                      "{{ messages[1].t.v }}|{{ temp }}|{{ enable_thinking }}|{{ messages[0].content }}";
    nb_template *t = NULL;
    NB_CHECK(nb_template_compile(src, strlen(src), "t", &t) == NB_OK);
    char *out = NULL;
    size_t n = 0;
    NB_CHECK(t && nb_chat_template_apply_json(t, r.messages_json, r.tools_json, 1, r.kwargs_json, NULL, NULL, &out,
                                              &n) == NB_OK);
    NB_CHECK_STR(out ? out : "", "1.0|1e+100|[0.5, {\"y\": -0.0}]|\"]}\\\"[\"|9007199254740993|2.5|[1.0]|3.0|0.1|"
                                 "False|a\n\xC3\xA9\"}");
    free(out);
    nb_template_free(t);
    nb_oai_request_free(&r);

    /* Defaults: no tools, no kwargs; enable_thinking into an empty object; kwargs kept when
     * they name enable_thinking themselves; duplicate keys stay in step with cJSON's list. */
    const char *cases[][2] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "{}"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"enable_thinking\":true,\"chat_template_kwargs\":{ }}",
         "{ \"enable_thinking\":true}"},
        {"{\"enable_thinking\":true,\"chat_template_kwargs\":{\"enable_thinking\":false},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "{\"enable_thinking\":false}"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"p\"}],\"content\":\"q\"}],"
         "\"tools\":null,\"messages\":7}",
         "{}"},
    };
    for (size_t i = 0; i < NB_ARRAY_LEN(cases); i++) {
        NB_CHECK(nb_oai_parse(NB_OAI_CHAT, cases[i][0], strlen(cases[i][0]), &r, &e) == 0);
        if (!r.messages_json) continue;
        NB_CHECK_STR(r.kwargs_json, cases[i][1]);
        NB_CHECK(!r.tools_json && nb_raw_matches(&r));
        nb_oai_request_free(&r);
    }
    const char *dup = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"p\"}],\"content\":1.0}]}";
    NB_CHECK(nb_oai_parse(NB_OAI_CHAT, dup, strlen(dup), &r, &e) == 0);
    if (r.messages_json) NB_CHECK_STR(r.messages_json, "[{\"role\":\"user\",\"content\":\"p\",\"content\":1.0}]");
    nb_oai_request_free(&r);
}

/* ---- random chat bodies: odd whitespace, number spellings, duplicate keys, escapes ---- */

static uint64_t nb_rs = 0x9E3779B97F4A7C15ull;
static unsigned nb_rnd(unsigned n)
{
    nb_rs ^= nb_rs << 13, nb_rs ^= nb_rs >> 7, nb_rs ^= nb_rs << 17;
    return (unsigned)(nb_rs >> 11) % n;
}
static void nb_ws(nb_strbuf *b)
{
    static const char ws[] = " \t\n\r\x01\x1f";
    for (unsigned i = nb_rnd(3); i > 0; i--) nb_sb_add(b, ws + nb_rnd(sizeof ws - 1), 1);
}
static void nb_pick(nb_strbuf *b, const char *const *set, unsigned n) { nb_sb_puts(b, set[nb_rnd(n)]); }
static const char *const nb_nums[] = {"1.0", "-0.0", "1e100", "1E+5", "12345678901234567890", "0.10", "3", "-7.25e-3",
                                      "9007199254740993", "2.50"};
static const char *const nb_strs[] = {"\"a\"", "\"]}\\\"[\"", "\"\\u00e9\"", "\"{\"", "\"\"", "\"\\\\\"", "\"\xC3\xA9,:\""};
static const char *const nb_keys[] = {"\"k\"", "\"k\"", "\"x\\\"}\"", "\"n\""};

static void nb_rand_value(nb_strbuf *b, int depth)
{
    unsigned kind = nb_rnd(depth > 3 ? 4 : 6);
    if (kind == 0) nb_pick(b, nb_nums, NB_ARRAY_LEN(nb_nums));
    else if (kind == 1) nb_pick(b, nb_strs, NB_ARRAY_LEN(nb_strs));
    else if (kind == 2) nb_sb_puts(b, nb_rnd(2) ? "true" : "null");
    else if (kind == 3) nb_pick(b, nb_nums, NB_ARRAY_LEN(nb_nums));
    else {
        int obj = kind == 5;
        nb_sb_puts(b, obj ? "{" : "[");
        for (unsigned i = 0, n = nb_rnd(4); i < n; i++) {
            if (i) nb_sb_puts(b, ",");
            nb_ws(b);
            if (obj) nb_pick(b, nb_keys, NB_ARRAY_LEN(nb_keys)), nb_ws(b), nb_sb_puts(b, ":"), nb_ws(b);
            nb_rand_value(b, depth + 1);
            nb_ws(b);
        }
        nb_sb_puts(b, obj ? "}" : "]");
    }
}

/* One body; *parts: some content was a list of parts. Spans of messages/tools/kwargs in b. */
static void nb_rand_body(nb_strbuf *b, int *parts, size_t span[3][2], int *think)
{
    *parts = 0, *think = -1;
    memset(span, 0, sizeof(size_t[3][2]));
    nb_sb_clear(b);
    nb_ws(b);
    nb_sb_puts(b, "{");
    unsigned order = nb_rnd(6);
    for (int f = 0; f < 5; f++) {
        int which = (int)((f + order) % 5);
        if (f) nb_sb_puts(b, ",");
        nb_ws(b);
        static const char *const names[] = {"\"messages\"", "\"tools\"", "\"chat_template_kwargs\"", "\"extra\"",
                                            "\"enable_thinking\""};
        nb_sb_puts(b, names[which]);
        nb_ws(b), nb_sb_puts(b, ":"), nb_ws(b);
        size_t at = b->len;
        if (which == 0) {
            nb_sb_puts(b, "[");
            for (unsigned i = 0, n = 1 + nb_rnd(3); i < n; i++) {
                nb_sb_puts(b, i ? ",{" : "{");
                for (unsigned k = 0, m = nb_rnd(3); k < m; k++) nb_sb_puts(b, "\"k\":"), nb_rand_value(b, 1), nb_sb_puts(b, ",");
                nb_sb_puts(b, "\"role\":\"user\",");
                nb_ws(b);
                nb_sb_puts(b, "\"content\"");
                nb_ws(b), nb_sb_puts(b, ":"), nb_ws(b);
                if (nb_rnd(2)) {
                    *parts = 1;
                    nb_sb_puts(b, "[{\"type\":\"text\",\"text\":");
                    nb_pick(b, nb_strs, NB_ARRAY_LEN(nb_strs));
                    nb_sb_puts(b, "}, {\"text\":\"b\", \"type\":\"text\", \"z\":1.0}]");
                } else {
                    nb_pick(b, nb_strs, NB_ARRAY_LEN(nb_strs));
                }
                if (nb_rnd(2)) nb_sb_puts(b, ",\"w\":"), nb_rand_value(b, 1);
                nb_ws(b);
                nb_sb_puts(b, "}");
            }
            nb_sb_puts(b, "]");
        } else if (which == 1 || which == 2) {
            nb_sb_puts(b, which == 1 ? "[" : "");
            nb_sb_puts(b, "{\"k\":");
            nb_rand_value(b, 1);
            nb_sb_puts(b, which == 1 ? "}]" : "}");
        } else if (which == 3) {
            nb_rand_value(b, 0);
        } else {
            *think = (int)nb_rnd(2);
            nb_sb_puts(b, *think ? "true" : "false");
        }
        if (which < 3) span[which][0] = at, span[which][1] = b->len;
        nb_ws(b);
    }
    nb_sb_puts(b, "}");
    nb_ws(b);
}

static void test_chat_raw_random(void)
{
    nb_strbuf b = {0};
    size_t span[3][2];
    int parts, think, accepted = 0;
    for (int it = 0; it < 3000; it++) {
        nb_rand_body(&b, &parts, span, &think);
        nb_oai_request r;
        nb_oai_error e = {0};
        if (nb_oai_parse(NB_OAI_CHAT, b.p, b.len, &r, &e)) {
            NB_CHECK_MSG(e.http == 400, "%d %s: %s", e.http, e.message, b.p); /* never a 5xx */
            continue;
        }
        accepted++;
        NB_CHECK_MSG(nb_raw_matches(&r), "%s", b.p);
        /* Untouched values are the body's bytes exactly. */
        if (!parts && r.messages_json)
            NB_CHECK(strlen(r.messages_json) == span[0][1] - span[0][0] &&
                     !memcmp(r.messages_json, b.p + span[0][0], span[0][1] - span[0][0]));
        NB_CHECK(r.tools_json && strlen(r.tools_json) == span[1][1] - span[1][0] &&
                 !memcmp(r.tools_json, b.p + span[1][0], span[1][1] - span[1][0]));
        if (r.kwargs_json && !strstr(r.kwargs_json, "enable_thinking"))
            NB_CHECK(strlen(r.kwargs_json) == span[2][1] - span[2][0] &&
                     !memcmp(r.kwargs_json, b.p + span[2][0], span[2][1] - span[2][0]));
        nb_oai_request_free(&r);
    }
    /* Only a number cJSON cannot read (none here) could refuse a body: all must pass. */
    NB_CHECK_MSG(accepted == 3000, "accepted %d of 3000", accepted);
    nb_sb_free(&b);
}

static void test_nul_byte(void)
{
    const char b[] = "{\"messages\":[{\"role\":\"user\0x\",\"content\":\"x\"}]}";
    nb_oai_request r;
    nb_oai_error e = {0};
    NB_CHECK(nb_oai_parse(NB_OAI_CHAT, b, sizeof b - 1, &r, &e) == -1 && e.http == 400 && !strcmp(e.code, "invalid_json"));
    const char ok[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}";
    NB_CHECK(nb_oai_parse(NB_OAI_CHAT, ok, sizeof ok - 1, &r, &e) == 0);
    if (r.messages_json) NB_CHECK(strstr(r.messages_json, "a\\u0000b") != NULL);
    nb_oai_request_free(&r);
}

static void test_json_span(void)
{
    const char *s = "{ \"a\\\"}\" : [1, \"]\", {\"b\":{}}] ,\"c\":-1.5e3,\"d\":true,\"a\\\"}\":null }";
    size_t n = strlen(s), ks, ke, vs, ve;
    nb_json_iter it;
    NB_CHECK(nb_json_iter_begin(&it, s, n, 0) == 0);
    const char *keys[] = {"\"a\\\"}\"", "\"c\"", "\"d\"", "\"a\\\"}\""};
    const char *vals[] = {"[1, \"]\", {\"b\":{}}]", "-1.5e3", "true", "null"};
    for (int i = 0; i < 4; i++) {
        NB_CHECK(nb_json_iter_next(&it, &ks, &ke, &vs, &ve) == 1);
        NB_CHECK(ke - ks == strlen(keys[i]) && !memcmp(s + ks, keys[i], ke - ks));
        NB_CHECK(ve - vs == strlen(vals[i]) && !memcmp(s + vs, vals[i], ve - vs));
    }
    NB_CHECK(nb_json_iter_next(&it, &ks, &ke, &vs, &ve) == 0);
    NB_CHECK(nb_json_iter_begin(&it, s, n, 1) == -1);
    const char *bad[] = {"[1 2]", "[\"x", "{\"a\" 1}", "[1,", "{1:2}", "[tru]"};
    for (size_t i = 0; i < NB_ARRAY_LEN(bad); i++) {
        NB_CHECK(nb_json_iter_begin(&it, bad[i], strlen(bad[i]), 0) == 0);
        int rc;
        while ((rc = nb_json_iter_next(&it, &ks, &ke, &vs, &ve)) == 1) {}
        NB_CHECK(rc == -1);
    }
}

static const nb_test tests[] = {
    {"completions_ok", test_completions_ok}, {"chat_ok", test_chat_ok},           {"rejections", test_rejections},
    {"utf8", test_utf8},                     {"reasoning_text", test_reasoning_text}, {"reasoning_ids", test_reasoning_ids},
    {"metrics_render", test_metrics_render}, {"chat_raw_json", test_chat_raw_json}, {"json_span", test_json_span},
    {"nul_byte", test_nul_byte}, {"chat_raw_random", test_chat_raw_random},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
