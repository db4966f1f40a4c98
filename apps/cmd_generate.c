/* nibble generate: run prompts through the engine (paged KV, continuous batching,
 * sampling) and print the continuations.
 *   nibble generate --model DIR|synthetic:glm5-tiny (--prompt TEXT | --ids 5,17,42 |
 *                   --batch FILE.jsonl) [sampling flags] [--print-ids] [engine flags]
 * Defaults: greedy (--temperature 0) and --max-tokens 16, as the first greedy-only version
 * of this command. An eos id ends a sequence and is included in the ids (as HF does)
 * unless --ignore-eos. --print-ids prints only ids: one comma-separated line per choice
 * (per request in input order with --batch); the last line of a single request's output
 * is its ids. Without it: the text (or the ids when there is no tokenizer); with --batch
 * one JSON object per request. --batch lines hold "prompt" or "ids" plus sampling fields
 * (max_tokens, temperature, top_p, top_k, min_p, seed, ignore_eos, n, stop,
 * stop_token_ids, repetition_penalty, frequency_penalty, presence_penalty).
 * Try: build/nibble generate --model synthetic:glm5-tiny --prompt "Hello" --max-tokens 8 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine_cli.h"
#include "model_cli.h"
#include "nibble.h"
#include "tokenizer/tokenizer.h"

const char nb_cmd_generate_summary[] = "generate continuations through the engine (text, ids or a JSONL batch)";

#define NB_GEN_MAX_CHOICES 16

typedef struct gen_choice {
    int32_t *ids;
    int n, cap;
    char *text;
    size_t text_len, text_cap;
    nb_finish_reason why;
    int prompt_tokens, completion_tokens;
} gen_choice;

typedef struct gen_job {
    int32_t *prompt;
    int n_prompt;
    nb_sampling_params sp;
    nb_cli_stops stops;
    char *stop_copies[32];
    gen_choice ch[NB_GEN_MAX_CHOICES];
    int stream; /* print text as it arrives */
} gen_job;

typedef struct gen_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;
} gen_state;

static gen_state g_state = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        while (nc < *len + n + 1) nc *= 2;
        char *b = realloc(*buf, nc);
        if (!b) return;
        *buf = b;
        *cap = nc;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
}

static void on_event(const nb_engine_event *ev, void *user)
{
    gen_job *j = user;
    gen_choice *c = &j->ch[ev->index];
    if (ev->text && ev->text_len) {
        append(&c->text, &c->text_len, &c->text_cap, ev->text, ev->text_len);
        if (j->stream) {
            fwrite(ev->text, 1, ev->text_len, stdout);
            fflush(stdout);
        }
    }
    if (ev->type == NB_EVENT_TOKENS) {
        for (int i = 0; i < ev->n_tokens; i++) {
            if (c->n == c->cap) {
                int nc = c->cap ? 2 * c->cap : 64;
                int32_t *v = realloc(c->ids, (size_t)nc * sizeof *v);
                if (!v) return;
                c->ids = v;
                c->cap = nc;
            }
            c->ids[c->n++] = ev->token_ids[i];
        }
        return;
    }
    c->why = ev->finish_reason;
    c->prompt_tokens = ev->prompt_tokens;
    c->completion_tokens = ev->completion_tokens;
    if (ev->last) {
        pthread_mutex_lock(&g_state.mu);
        g_state.pending--;
        pthread_cond_broadcast(&g_state.cv);
        pthread_mutex_unlock(&g_state.mu);
    }
}

static const char *reason_name(nb_finish_reason r)
{
    return r == NB_FINISH_STOP ? "stop" : r == NB_FINISH_LENGTH ? "length" : r == NB_FINISH_ABORT ? "abort" : "none";
}

static int usage(FILE *f)
{
    fprintf(f,
            "usage: nibble generate --model M (--prompt TEXT | --ids 5,17,42 | --batch FILE.jsonl) [--print-ids]\n"
            "                       [sampling flags] [engine flags]\n"
            "Greedy by default (--temperature 0), --max-tokens 16.\n\n%s\n%s",
            nb_cli_sampling_usage, nb_cli_engine_usage);
    return f == stdout ? 0 : 2;
}

static int encode(const nb_engine *e, const char *text, int32_t **ids, int *n)
{
    const struct nb_tokenizer *tok = nb_engine_tokenizer(e);
    if (!tok) {
        fprintf(stderr, "nibble generate: this model has no tokenizer; use --ids\n");
        return -1;
    }
    size_t nn;
    nb_status s = nb_tokenizer_encode(tok, text, strlen(text), 1, ids, &nn);
    if (s != NB_OK) {
        fprintf(stderr, "nibble generate: tokenizing the prompt: %s\n", nb_last_error());
        return -1;
    }
    *n = (int)nn;
    return 0;
}

/* One JSONL line → a job (sampling fields over the command line's). */
static int parse_line(const nb_engine *e, const char *line, int lineno, const nb_sampling_params *base, gen_job *j)
{
    cJSON *o = cJSON_Parse(line);
    if (!cJSON_IsObject(o)) {
        fprintf(stderr, "nibble generate: --batch line %d: not a JSON object\n", lineno);
        cJSON_Delete(o);
        return -1;
    }
    int rc = 0;
    j->sp = *base;
    j->sp.stop = NULL;
    j->sp.n_stop = 0;
    j->sp.stop_token_ids = NULL;
    j->sp.n_stop_token_ids = 0;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(o, "ids");
    if (cJSON_IsString(prompt)) {
        rc = encode(e, prompt->valuestring, &j->prompt, &j->n_prompt);
    } else if (cJSON_IsArray(ids)) {
        int n = cJSON_GetArraySize(ids);
        j->prompt = malloc((size_t)(n > 0 ? n : 1) * sizeof *j->prompt);
        j->n_prompt = n;
        int k = 0;
        for (const cJSON *x = ids->child; x; x = x->next) {
            if (!cJSON_IsNumber(x) || x->valuedouble < 0) rc = -1;
            j->prompt[k++] = (int32_t)x->valuedouble;
        }
        if (rc) fprintf(stderr, "nibble generate: --batch line %d: 'ids' must be token ids\n", lineno);
    } else {
        fprintf(stderr, "nibble generate: --batch line %d: needs \"prompt\" (string) or \"ids\" (array)\n", lineno);
        rc = -1;
    }
    const cJSON *v;
#define NUMF(key, field, type)                                                                  \
    if ((v = cJSON_GetObjectItemCaseSensitive(o, key)) && cJSON_IsNumber(v)) j->sp.field = (type)v->valuedouble;
    NUMF("max_tokens", max_tokens, int)
    NUMF("max_new_tokens", max_tokens, int)
    NUMF("temperature", temperature, float)
    NUMF("top_p", top_p, float)
    NUMF("top_k", top_k, int)
    NUMF("min_p", min_p, float)
    NUMF("seed", seed, int64_t)
    NUMF("n", n, int)
    NUMF("repetition_penalty", repetition_penalty, float)
    NUMF("frequency_penalty", frequency_penalty, float)
    NUMF("presence_penalty", presence_penalty, float)
    NUMF("top_logprobs", top_logprobs, int)
#undef NUMF
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "ignore_eos"))) j->sp.ignore_eos = cJSON_IsTrue(v);
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "logprobs"))) j->sp.logprobs = cJSON_IsTrue(v);
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "stop"))) {
        const cJSON *one = cJSON_IsArray(v) ? v->child : v;
        for (; one && j->stops.n_strs < 32; one = cJSON_IsArray(v) ? one->next : NULL) {
            if (!cJSON_IsString(one)) continue;
            j->stop_copies[j->stops.n_strs] = strdup(one->valuestring);
            j->stops.strs[j->stops.n_strs] = j->stop_copies[j->stops.n_strs];
            j->stops.n_strs++;
        }
        j->sp.stop = j->stops.strs;
        j->sp.n_stop = j->stops.n_strs;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "stop_token_ids")) && cJSON_IsArray(v)) {
        for (const cJSON *x = v->child; x && j->stops.n_ids < 64; x = x->next)
            if (cJSON_IsNumber(x)) j->stops.ids[j->stops.n_ids++] = (int32_t)x->valuedouble;
        j->sp.stop_token_ids = j->stops.ids;
        j->sp.n_stop_token_ids = j->stops.n_ids;
    }
    if (j->sp.n > NB_GEN_MAX_CHOICES) {
        fprintf(stderr, "nibble generate: --batch line %d: n = %d (at most %d here)\n", lineno, j->sp.n,
                NB_GEN_MAX_CHOICES);
        rc = -1;
    }
    cJSON_Delete(o);
    return rc;
}

static int read_batch(const nb_engine *e, const char *path, const nb_sampling_params *base, gen_job **jobs, int *n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "nibble generate: --batch %s: cannot open\n", path);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    int cnt = 0, jcap = 0, lineno = 0, rc = 0;
    gen_job *js = NULL;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        char *s = line;
        while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') s++;
        if (!*s) continue;
        if (cnt == jcap) {
            jcap = jcap ? 2 * jcap : 16;
            gen_job *nj = realloc(js, (size_t)jcap * sizeof *nj);
            if (!nj) {
                rc = -1;
                break;
            }
            js = nj;
        }
        memset(&js[cnt], 0, sizeof js[cnt]);
        if (parse_line(e, s, lineno, base, &js[cnt])) {
            rc = -1;
            cnt++;
            break;
        }
        cnt++;
    }
    free(line);
    fclose(f);
    *jobs = js;
    *n = cnt;
    return rc;
}

static void print_ids(const gen_choice *c)
{
    for (int i = 0; i < c->n; i++) printf("%s%d", i ? "," : "", c->ids[i]);
    printf("\n");
}

int nb_cmd_generate(int argc, char **argv)
{
    nb_engine_params ep = nb_engine_default_params();
    nb_sampling_params sp = nb_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = 16;
    nb_cli_stops stops;
    memset(&stops, 0, sizeof stops);
    const char *prompt = NULL, *ids_s = NULL, *batch = NULL;
    int want_ids = 0;
    (void)nb_cli_check_backend; /* model_cli.h's; the engine checks --backend itself */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
        if (!strcmp(a, "--print-ids")) {
            want_ids = 1;
            continue;
        }
        int r = nb_cli_engine_flag(argc, argv, &i, &ep);
        if (r == 0) r = nb_cli_sampling_flag(argc, argv, &i, &sp, &stops);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (i + 1 < argc && !strcmp(a, "--prompt")) prompt = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--ids")) ids_s = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--batch")) batch = argv[++i];
        else {
            fprintf(stderr, "nibble generate: unknown or incomplete option '%s'\n", a);
            return usage(stderr);
        }
    }
    if (!ep.model || (!!prompt + !!ids_s + !!batch) != 1) {
        fprintf(stderr, "nibble generate: --model and exactly one of --prompt, --ids, --batch are required\n");
        return usage(stderr);
    }
    if (sp.n > NB_GEN_MAX_CHOICES) {
        fprintf(stderr, "nibble generate: --n %d: at most %d\n", sp.n, NB_GEN_MAX_CHOICES);
        return 2;
    }
    nb_engine *e = NULL;
    nb_status s = nb_engine_create(&ep, &e);
    if (s != NB_OK) {
        fprintf(stderr, "nibble generate: %s: %s\n", nb_strerror(s), nb_last_error());
        return 1;
    }
    gen_job *jobs = NULL;
    int n_jobs = 0, rc = 0;
    if (batch) {
        rc = read_batch(e, batch, &sp, &jobs, &n_jobs);
    } else {
        jobs = calloc(1, sizeof *jobs);
        n_jobs = 1;
        jobs[0].sp = sp;
        rc = prompt ? encode(e, prompt, &jobs[0].prompt, &jobs[0].n_prompt)
                    : nb_cli_parse_ids(ids_s, &jobs[0].prompt, &jobs[0].n_prompt);
        jobs[0].stream = !want_ids && sp.n == 1 && nb_engine_tokenizer(e) != NULL;
    }
    int64_t t0 = nb_now_ns();
    int submitted = 0;
    for (int k = 0; k < n_jobs && rc == 0; k++) {
        pthread_mutex_lock(&g_state.mu);
        g_state.pending++;
        pthread_mutex_unlock(&g_state.mu);
        s = nb_engine_submit(e, jobs[k].prompt, jobs[k].n_prompt, &jobs[k].sp, on_event, &jobs[k], NULL);
        if (s != NB_OK) {
            pthread_mutex_lock(&g_state.mu);
            g_state.pending--;
            pthread_mutex_unlock(&g_state.mu);
            fprintf(stderr, "nibble generate: request %d: %s: %s\n", k + 1, nb_strerror(s), nb_last_error());
            rc = -1;
        } else {
            submitted++;
        }
    }
    pthread_mutex_lock(&g_state.mu);
    while (g_state.pending > 0) pthread_cond_wait(&g_state.cv, &g_state.mu);
    pthread_mutex_unlock(&g_state.mu);
    double secs = (double)(nb_now_ns() - t0) * 1e-9;
    int64_t gen_tokens = 0;
    for (int k = 0; k < submitted; k++) {
        gen_job *j = &jobs[k];
        for (int c = 0; c < j->sp.n; c++) gen_tokens += j->ch[c].n;
        if (want_ids) {
            for (int c = 0; c < j->sp.n; c++) print_ids(&j->ch[c]);
        } else if (batch) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "index", k);
            cJSON *chs = cJSON_AddArrayToObject(o, "choices");
            for (int c = 0; c < j->sp.n; c++) {
                cJSON *x = cJSON_CreateObject();
                if (nb_engine_tokenizer(e)) cJSON_AddStringToObject(x, "text", j->ch[c].text ? j->ch[c].text : "");
                cJSON_AddItemToObject(x, "ids", cJSON_CreateIntArray((const int *)j->ch[c].ids, j->ch[c].n));
                cJSON_AddStringToObject(x, "finish_reason", reason_name(j->ch[c].why));
                cJSON_AddItemToArray(chs, x);
            }
            cJSON *u = cJSON_AddObjectToObject(o, "usage");
            cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
            int comp = 0;
            for (int c = 0; c < j->sp.n; c++) comp += j->ch[c].completion_tokens;
            cJSON_AddNumberToObject(u, "completion_tokens", comp);
            char *txt = cJSON_PrintUnformatted(o);
            if (txt) printf("%s\n", txt);
            free(txt);
            cJSON_Delete(o);
        } else if (j->stream) {
            printf("\n");
        } else {
            for (int c = 0; c < j->sp.n; c++) {
                if (j->ch[c].text) printf("%s\n", j->ch[c].text);
                else print_ids(&j->ch[c]);
            }
        }
    }
    fflush(stdout);
    fprintf(stderr, "generate: %d request(s), %lld tokens in %.2f s (%.1f tok/s)\n", submitted, (long long)gen_tokens,
            secs, secs > 0 ? (double)gen_tokens / secs : 0.0);
    nb_engine_destroy(e);
    for (int k = 0; k < n_jobs; k++) {
        free(jobs[k].prompt);
        for (int c = 0; c < NB_GEN_MAX_CHOICES; c++) {
            free(jobs[k].ch[c].ids);
            free(jobs[k].ch[c].text);
        }
        for (int c = 0; c < 32; c++) free(jobs[k].stop_copies[c]);
    }
    free(jobs);
    return rc ? 1 : 0;
}
