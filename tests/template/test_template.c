/* Unit tests of the chat-template interpreter (src/tokenizer/template/): lexer whitespace
 * rules, parser errors with line numbers, evaluator semantics, Python repr / float repr,
 * tojson, nb_chat_template_apply's variables, the render budgets, concurrent renders of
 * one template, and truncated / mutated templates that must fail cleanly (no crash).
 * Expected strings were produced by Python jinja2 3.1.6 in transformers' configuration
 * (tests/template/test_vs_jinja2.py checks the wider surface against it directly).
 *   build/tests/test_template [NAME_SUBSTRING] */
#include <pthread.h>
#include <stdint.h>

#include "base/file.h"
#include "nbtest.h"
#include "tokenizer/template/template.h"

/* Vars shared by the tests (the same values the jinja2 expectations used). */
static const char VARS[] =
    "{\"xs\": [1, 2, 3], \"d\": {\"a\": 1, \"b\": [1, \"x'\", null, true, 1.5]}, \"s\": \"h\\u00e9llo\", \"n\": null}";

/* Compile and render; returns the output (malloc'd) or NULL with *st set. */
static char *render(const char *src, const char *vars_json, nb_status *st)
{
    nb_template *t = NULL;
    cJSON *vars = vars_json ? cJSON_Parse(vars_json) : NULL;
    char *out = NULL;
    *st = nb_template_compile(src, strlen(src), "t", &t);
    if (*st == NB_OK) *st = nb_template_render(t, vars, &out, NULL);
    nb_template_free(t);
    cJSON_Delete(vars);
    return out;
}

static void expect(const char *src, const char *want)
{
    nb_status st;
    char *got = render(src, VARS, &st);
    NB_CHECK_MSG(st == NB_OK, "%s: %s", src, nb_last_error());
    if (got) NB_CHECK_MSG(!strcmp(got, want), "template %s\n    got  [%s]\n    want [%s]", src, got, want);
    free(got);
}

/* Expect failure with `status` and a message containing `needle`. */
static void expect_error(const char *src, nb_status status, const char *needle)
{
    nb_status st;
    char *got = render(src, VARS, &st);
    NB_CHECK_MSG(st == status, "%s: status %s (%s), wanted %s", src, nb_strerror(st), nb_last_error(),
                 nb_strerror(status));
    NB_CHECK_MSG(strstr(nb_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", src, nb_last_error(), needle);
    free(got);
}

static void test_whitespace(void)
{
    expect("a\n  {% if true %}\n  yes\n  {% endif %}\nb", "a\n  yes\nb");           /* trim + lstrip */
    expect("a\n  {%- if true -%}\n  yes\n  {%- endif -%}\n  b", "ayesb");              /* - markers */
    expect("  {% for x in [1,2] %}\n    {{ x }}\n  {% endfor %}\nend\n", "    1\n    2\nend"); /* trailing \n dropped */
    expect("x  {%+ if true %}y{% endif %}  \n  {# c #}\nz", "x  y  \nz");                  /* {%+ and comments */
    expect("{% raw %}{{ a }}{% endraw %}|{#- c -#}  d", "{{ a }}|d");
    expect("line1\r\nline2\r\n{% if true %}\r\nin\r\n{% endif %}\r\n", "line1\nline2\nin\n");
}

static void test_values(void)
{
    expect("{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 2.5 }} {{ -0.0 }} {{ 1/3 }} {{ 3.0 }} {{ 123456789.125 }}",
           "0.30000000000000004 1e+16 1000000000000000.0 1e-05 2.5 -0.0 0.3333333333333333 3.0 123456789.125");
    expect("{{ d }}|{{ n }}|{{ undefined_thing }}|{{ (1,) }}", "{'a': 1, 'b': [1, \"x'\", None, True, 1.5]}|None||(1,)");
    expect("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 'ab' * 2 }} {{ 1 == 1.0 }} {{ 'a' ~ 1 ~ none }}",
           "3 -4 2 1024 abab True a1None");
    expect("{{ s | length }} {{ s[1:3] }} {{ s.upper() }} {{ s[::-1] }}", "5 él HÉLLO olléh");
    expect("{{ d.b.1 }} {{ d['b'][-1] }} {{ d.zz is defined }} {{ n is none }} {{ xs | join('-') }}", "x' 1.5 False True 1-2-3");
}

static void test_tojson(void)
{
    expect("{{ {'a': 'é\\n\"', 'b': [1, none, true, 0.5]} | tojson }}|{{ 'é😀' | tojson(ensure_ascii=true) }}|{{ [1,{'k':[]}] | tojson(indent=2) }}",
           "{\"a\": \"é\\n\\\"\", \"b\": [1, null, true, 0.5]}|\"\\u00e9\\ud83d\\ude00\"|[\n  1,\n  {\n    \"k\": []\n  }\n]");
}

static void test_statements(void)
{
    expect("{% set ns = namespace(n=0) %}{% for m in d.b if m is not none %}{% if loop.first %}[{% endif %}{{ loop.index }}:{{ m }}{{ ',' if not loop.last else ']' }}{% set ns.n = ns.n + 1 %}{% endfor %} n={{ ns.n }}",
           "[1:1,2:x',3:True,4:1.5] n=4");
    expect("{% macro t(c) %}{% if c is string %}{{ c }}{% else %}{% for p in c %}{{ p.text }}{% endfor %}{% endif %}{% endmacro %}{% set v = t([{'text': 'a'}, {'text': 'b'}]) %}{{ v ~ '!' if v else 'empty' }}|{{ t('') or 'falsy' }}",
           "ab!|falsy");
    /* jinja2 scoping: a loop iteration's assignments stay in that iteration */
    expect("{% set x = 0 %}{% for i in xs %}{{ x }}{% set x = i %}{% endfor %}{{ x }}", "0000");
    expect("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% else %}E{% endfor %}", "1");
    expect("{% for x in [] %}no{% else %}empty{% endfor %}", "empty");
    /* jinja2 quirks: else runs unless an iteration reached the end of the body; block set
     * and filter bodies are scopes of their own */
    expect("{% for i in xs %}{% if loop.first %}{% break %}{% endif %}{{ i }}{% else %}E{% endfor %}|"
           "{% for i in xs %}{% continue %}{% else %}E2{% endfor %}|"
           "{% for i in xs %}{{ i }}{% if i == 2 %}{% break %}{% endif %}{% else %}E3{% endfor %}",
           "E|E2|12");
    expect("{% set b %}{% set q = 2 %}{{ q }}{% endset %}{{ b }}{{ q }}|{% filter upper %}{% set r = 1 %}a{% endfilter %}{{ r }}",
           "2|A");
}

static void test_syntax_errors_name_the_line(void)
{
    expect_error("ok\nok\n{% if x %}\nunclosed", NB_ERR_FORMAT, "line 4");
    expect_error("{{ 1 +\n}}", NB_ERR_FORMAT, "template t line 2");
    expect_error("a\n{% unknowntag %}", NB_ERR_FORMAT, "line 2");
    expect_error("\n\n{{ x | nosuchfilter }}", NB_ERR_FORMAT, "line 3: no filter named 'nosuchfilter'");
    expect_error("{% break %}", NB_ERR_FORMAT, "outside of a loop");
    expect_error("{{ 'unterminated }}", NB_ERR_FORMAT, "unterminated string");
    expect_error("{# never closed", NB_ERR_FORMAT, "comment");
    expect_error("{{ s[1:,:2] }}", NB_ERR_FORMAT, "slice"); /* found by fuzz_template */
}

static void test_runtime_errors(void)
{
    expect_error("line1\n{{ raise_exception('Conversation roles must alternate') }}", NB_ERR_INVALID_ARG,
                 "line 2: raise_exception: Conversation roles must alternate");
    expect_error("{{ missing.attr }}", NB_ERR_INVALID_ARG, "'missing' is undefined");
    expect_error("{{ xs.append(4) }}", NB_ERR_INVALID_ARG, "unsafe");
    expect_error("{{ 1 / 0 }}", NB_ERR_INVALID_ARG, "division by zero");
    expect_error("{{ d | tojson }}{{ missing | tojson }}", NB_ERR_INVALID_ARG, "not JSON serializable");
}

static void test_budgets(void)
{
    /* quadratic string growth is stopped by the render's memory budget */
    expect_error("{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' %}{% endfor %}{{ ns.s | length }}",
                 NB_ERR_OUT_OF_MEMORY, "memory budget");
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NB_ERR_OUT_OF_MEMORY, "recursion");
    /* 1e10 iterations would run for hours: the step budget stops them (a fraction of a second) */
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NB_ERR_OUT_OF_MEMORY,
                 "step budget");
    /* 4.5 million iterations of a quadratic scan stay within every budget */
    expect("{% for i in range(3000) %}{% for j in range(i) %}{% set x = j %}{% endfor %}{% endfor %}done", "done");
    char deep[4000];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    snprintf(deep + k, sizeof deep - k, " }}");
    expect_error(deep, NB_ERR_FORMAT, "nesting");
    expect("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me is defined }}", "True");
}

static void test_chat_apply(void)
{
    const char *src = "{{ bos_token }}|{{ eos_token is defined }}|{{ tools is none }}|{{ documents is none }}|"
                      "{{ add_generation_prompt }}|{{ enable_thinking | default('unset') }}|"
                      "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}";
    nb_template *t;
    NB_CHECK_OK(nb_template_compile(src, strlen(src), "chat", &t));
    cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]");
    cJSON *kw = cJSON_Parse("{\"enable_thinking\": false, \"bos_token\": \"<B>\"}");
    char *out;
    size_t n;
    NB_CHECK_OK(nb_chat_template_apply(t, msgs, NULL, 1, NULL, "<s>", NULL, &out, &n));
    NB_CHECK_MSG(!strcmp(out, "<s>|False|True|True|True|unset|user:hi;assistant:yo;"), "got [%s]", out);
    NB_CHECK(n == strlen(out));
    free(out);
    /* kwargs override the named variables, as Python keyword arguments would */
    NB_CHECK_OK(nb_chat_template_apply(t, msgs, msgs, 0, kw, "<s>", "</s>", &out, NULL));
    NB_CHECK_MSG(!strcmp(out, "<B>|True|False|True|False|False|user:hi;assistant:yo;"), "got [%s]", out);
    free(out);
    NB_CHECK_STATUS(nb_chat_template_apply(t, kw, NULL, 0, NULL, NULL, NULL, &out, NULL), NB_ERR_INVALID_ARG);
    cJSON_Delete(msgs);
    cJSON_Delete(kw);
    nb_template_free(t);
}

static void test_chat_apply_json(void)
{
    const char *src = "{{ messages[0].n }}|{{ messages[0].n | tojson }}|{{ tools }}|{{ flag }}|{{ bos_token }}";
    nb_template *t;
    NB_CHECK_OK(nb_template_compile(src, strlen(src), "json", &t));
    char *out;
    /* JSON text keeps 1.0 a float, as Python's json.loads does */
    NB_CHECK_OK(nb_chat_template_apply_json(t, "[{\"n\": [1.0, 1, 2.50, 1e5, -0, 0.1, \"\\u00e9\\ud83d\\ude00\"]}]", NULL, 0,
                                            "{\"flag\": true}", NULL, NULL, &out, NULL));
    NB_CHECK_MSG(!strcmp(out, "[1.0, 1, 2.5, 100000.0, 0, 0.1, '\xc3\xa9\xf0\x9f\x98\x80']|"
                              "[1.0, 1, 2.5, 100000.0, 0, 0.1, \"\xc3\xa9\xf0\x9f\x98\x80\"]|None|True|"),
                 "got [%s]", out);
    free(out);
    NB_CHECK_STATUS(nb_chat_template_apply_json(t, "[{\"n\": }]", NULL, 0, NULL, NULL, NULL, &out, NULL),
                    NB_ERR_INVALID_ARG);
    NB_CHECK_MSG(strstr(nb_last_error(), "messages: JSON") && strstr(nb_last_error(), "column 8"), "%s", nb_last_error());
    NB_CHECK_STATUS(nb_chat_template_apply_json(t, "{}", NULL, 0, NULL, NULL, NULL, &out, NULL), NB_ERR_INVALID_ARG);
    NB_CHECK_STATUS(nb_chat_template_apply_json(t, "[]", NULL, 0, "[1]", NULL, NULL, &out, NULL), NB_ERR_INVALID_ARG);
    nb_template_free(t);
}

typedef struct render_job {
    const nb_template *t;
    const cJSON *vars;
    const char *want;
    int bad;
} render_job;

static void *render_many(void *arg)
{
    render_job *j = arg;
    for (int i = 0; i < 200; i++) {
        char *out;
        if (nb_template_render(j->t, j->vars, &out, NULL) != NB_OK || strcmp(out, j->want)) j->bad++;
        else free(out);
    }
    return NULL;
}

static void test_concurrent_renders(void)
{
    const char *src = "{% set ns = namespace(t=0) %}{% for x in xs %}{% set ns.t = ns.t + x %}{{ x }},{% endfor %}"
                      "{{ ns.t }}{{ d | tojson }}{{ s | upper }}";
    nb_template *t;
    NB_CHECK_OK(nb_template_compile(src, strlen(src), "mt", &t));
    cJSON *vars = cJSON_Parse(VARS);
    char *want;
    NB_CHECK_OK(nb_template_render(t, vars, &want, NULL));
    render_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (render_job){t, vars, want, 0};
        pthread_create(&th[i], NULL, render_many, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        NB_CHECK(jobs[i].bad == 0);
    }
    free(want);
    cJSON_Delete(vars);
    nb_template_free(t);
}

/* Every prefix of the project's templates, and byte mutations of them, must compile or
 * fail with a message, and render or fail with a message: never crash or leak (ASan). */
static void test_truncations_and_mutations(void)
{
    static const char *const files[] = {"tests/template/templates/glm_style.jinja",
                                        "tests/template/templates/deepseek_style.jinja",
                                        "tests/template/templates/qwen_style.jinja",
                                        "tests/template/templates/features.jinja"};
    cJSON *vars = cJSON_Parse("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
                              "\"content\": \"<think>r</think>a\", \"tool_calls\": [{\"function\": {\"name\": \"f\", "
                              "\"arguments\": {\"k\": 1}}}]}, {\"role\": \"tool\", \"content\": \"out\"}], \"tools\": "
                              "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"add_generation_prompt\": true}");
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    size_t compiled = 0, rendered = 0, total = 0;
    for (size_t f = 0; f < NB_ARRAY_LEN(files); f++) {
        char *src;
        size_t len;
        if (nb_read_file(files[f], &src, &len, 0) != NB_OK) {
            NB_CHECK_MSG(0, "%s", nb_last_error());
            continue;
        }
        char *buf = malloc(len + 1);
        for (size_t cut = 0; cut <= len + 64; cut++) {
            size_t n = cut <= len ? cut : len;
            memcpy(buf, src, n);
            if (cut > len) { /* mutations: flip a few bytes to template punctuation */
                static const char punct[] = "{}%#-+()[]'\"|.,:~ \n";
                for (int m = 0; m < 3; m++) {
                    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                    buf[(rng >> 33) % n] = punct[(rng >> 13) % (sizeof punct - 1)];
                }
            }
            nb_template *t = NULL;
            total++;
            nb_status st = nb_template_compile(buf, n, "cut", &t);
            if (st != NB_OK) {
                NB_CHECK_MSG(st == NB_ERR_FORMAT && nb_last_error()[0], "compile of %zu bytes: %s", n, nb_strerror(st));
                continue;
            }
            compiled++;
            char *out = NULL;
            st = nb_template_render(t, vars, &out, NULL);
            if (st == NB_OK) rendered++, free(out);
            else NB_CHECK_MSG((st == NB_ERR_INVALID_ARG || st == NB_ERR_OUT_OF_MEMORY) && nb_last_error()[0],
                              "render of %zu bytes: %s", n, nb_strerror(st));
            nb_template_free(t);
        }
        free(buf);
        free(src);
    }
    fprintf(stderr, "  %zu inputs: %zu compiled, %zu rendered\n", total, compiled, rendered);
    NB_CHECK(compiled > 0 && rendered > 0);
    cJSON_Delete(vars);
}

static const nb_test tests[] = {
    {"whitespace", test_whitespace},
    {"values", test_values},
    {"tojson", test_tojson},
    {"statements", test_statements},
    {"syntax_errors_name_the_line", test_syntax_errors_name_the_line},
    {"runtime_errors", test_runtime_errors},
    {"budgets", test_budgets},
    {"chat_apply", test_chat_apply},
    {"chat_apply_json", test_chat_apply_json},
    {"concurrent_renders", test_concurrent_renders},
    {"truncations_and_mutations", test_truncations_and_mutations},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
