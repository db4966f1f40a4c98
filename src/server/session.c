/* One generation request over HTTP: OpenAI body → prompt ids (tokenizer, chat template)
 * → engine submissions (one per prompt of a batch) → events copied off the engine thread
 * → SSE chunks or one JSON response, formatted on the HTTP thread.
 * Exercised by tests/server/test_server_openai.py and tests/server/test_server_curl.sh. */
#include "base/clock.h"
#include "base/log.h"
#include "server/server_internal.h"
#include "tokenizer/template/template.h"
#include "tokenizer/tokenizer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- lifetime ----------------------------------------------------------------------- */

void nb_srv_req_unref(nb_srv_req *r)
{
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    for (nb_srv_ev *e = r->ev_head, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    for (int i = 0; i < r->n_subs; i++) {
        free(r->subs[i].ids);
        free(r->subs[i].echo_text);
    }
    for (int i = 0; i < r->n_choices; i++) {
        nb_sb_free(&r->choices[i].text);
        nb_sb_free(&r->choices[i].reasoning);
        cJSON_Delete(r->choices[i].lp);
    }
    free(r->subs);
    free(r->choices);
    nb_sb_free(&r->out);
    nb_oai_request_free(&r->q);
    nb_srv_metrics_active(r->srv->metrics, -1);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void nb_session_abort(nb_srv_req *r)
{
    uint64_t ids[64];
    int n = 0;
    for (int base = 0; base < r->n_subs; base += 64) {
        n = 0;
        pthread_mutex_lock(&r->mu);
        for (int i = base; i < r->n_subs && i < base + 64; i++)
            if (r->subs[i].submitted && !r->subs[i].done) ids[n++] = r->subs[i].engine_id;
        pthread_mutex_unlock(&r->mu);
        for (int i = 0; i < n; i++) nb_engine_abort(r->srv->engine, ids[i]); /* NOT_FOUND: already done */
    }
    nb_error_clear();
}

void nb_session_conn_closed(nb_srv_req *r, int client_gone)
{
    pthread_mutex_lock(&r->mu);
    r->conn_alive = 0;
    r->client_gone |= client_gone;
    int live = !r->finished && r->subs_live > 0;
    pthread_mutex_unlock(&r->mu);
    nb_server_unwatch(r->srv, r);
    if (live) {
        NB_LOG_DEBUG("http", "%s: client gone, aborting", r->id);
        nb_session_abort(r);
    }
    nb_srv_req_unref(r);
}

/* Text of one event's token ids for a model without a tokenizer: "token_id:N" each. */
#define NB_ID_TEXT_MAX 4096

/* ---- engine thread ------------------------------------------------------------------ */

static void nb_on_event(const nb_engine_event *ev, void *user)
{
    nb_srv_sub *sub = user;
    nb_srv_req *r = sub->req;
    nb_server *s = r->srv;
    int64_t now = nb_now_ns();
    size_t nt = ev->type == NB_EVENT_TOKENS ? (size_t)ev->n_tokens : 0;
    size_t ntop = ev->top_logprobs ? (size_t)ev->n_top : 0;
    size_t tl = ev->type == NB_EVENT_TOKENS && ev->text ? ev->text_len : 0;
    /* A model without a tokenizer (synthetic:glm5 and the like) has no text: each token is
     * spelled as its logprobs entry is ("token_id:N"), so streamed chunks carry text and
     * clients (nibble bench, SGLang's bench_serving) see every token arrive. */
    char idtext[NB_ID_TEXT_MAX];
    if (!s->tok && nt) {
        tl = 0;
        for (size_t k = 0; k < nt && tl + 24 < sizeof idtext; k++)
            tl += (size_t)snprintf(idtext + tl, sizeof idtext - tl, "token_id:%d", (int)ev->token_ids[k]);
    }
    /* One allocation per event: header, ids, logprobs, top alternatives, text. */
    size_t sz = sizeof(nb_srv_ev) + nt * sizeof(int32_t) + (ev->logprobs ? nt * sizeof(float) : 0) +
                nt * ntop * sizeof(nb_token_logprob) + tl + 1 + 16;
    nb_srv_ev *e = calloc(1, sz);
    if (e) {
        char *p = (char *)(e + 1);
        e->choice = sub->prompt_index * r->n_per_prompt + ev->index;
        e->finish = ev->type == NB_EVENT_FINISH;
        e->reason = ev->finish_reason;
        e->completion_tokens = ev->completion_tokens;
        e->n_tokens = (int)nt;
        e->n_top = (int)ntop;
        p = (char *)(((uintptr_t)p + 7) & ~(uintptr_t)7);
        e->top = (nb_token_logprob *)p, p += nt * ntop * sizeof(nb_token_logprob);
        e->ids = (int32_t *)p, p += nt * sizeof(int32_t);
        if (ev->logprobs) e->lps = (float *)p, p += nt * sizeof(float);
        e->text = p;
        if (nt) memcpy(e->ids, ev->token_ids, nt * sizeof(int32_t));
        if (e->lps) memcpy(e->lps, ev->logprobs, nt * sizeof(float));
        if (ntop) memcpy(e->top, ev->top_logprobs, nt * ntop * sizeof(nb_token_logprob));
        if (!ntop) e->top = NULL;
        if (tl) memcpy(e->text, !s->tok && nt ? idtext : ev->text, tl);
        e->text[tl] = 0;
        e->text_len = tl;
    }
    pthread_mutex_lock(&r->mu);
    nb_srv_choice *ch = e && e->choice < r->n_choices ? &r->choices[e->choice] : NULL;
    if (ch && ev->type == NB_EVENT_TOKENS) {
        if (!ch->first_ns) {
            ch->first_ns = now;
            nb_srv_metrics_observe(s->metrics, NB_HIST_TTFT, (double)(now - r->t0_ns) * 1e-9);
        } else {
            double gap = (double)(now - ch->last_ns) * 1e-9 / (double)(nt ? nt : 1);
            for (size_t k = 0; k < nt; k++) nb_srv_metrics_observe(s->metrics, NB_HIST_ITL, gap);
        }
        ch->last_ns = now;
    } else if (ev->type == NB_EVENT_FINISH) {
        nb_srv_metrics_observe(s->metrics, NB_HIST_E2E, (double)(now - r->t0_ns) * 1e-9);
        nb_srv_metrics_finish(s->metrics, ev->finish_reason);
        if (ev->finish_reason == NB_FINISH_ABORT) r->any_abort = 1;
    }
    if (e) {
        if (r->ev_tail) r->ev_tail->next = e;
        else r->ev_head = e;
        r->ev_tail = e;
    }
    int last = ev->last;
    if (last) {
        sub->done = 1;
        if (--r->subs_live == 0) r->finished = 1;
    }
    if (r->suspended && r->conn_alive && (r->q.stream || r->finished)) {
        r->suspended = 0;
        MHD_resume_connection(r->conn);
    }
    int finished = r->finished;
    pthread_mutex_unlock(&r->mu);
    if (last) {
        if (finished) nb_server_live_remove(s, r);
        nb_srv_req_unref(r);
    }
}

/* Generated text may hold NUL bytes (a byte-level model can emit byte 0) that cJSON's C
 * strings would cut: such strings are escaped here and inserted as raw JSON. */
static void nb_add_text(cJSON *o, const char *key, const char *s, size_t n)
{
    nb_strbuf b = {0};
    nb_sb_add(&b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            nb_sb_add(&b, e, 2);
        } else if (c == '\n') {
            nb_sb_add(&b, "\\n", 2);
        } else if (c == '\r') {
            nb_sb_add(&b, "\\r", 2);
        } else if (c == '\t') {
            nb_sb_add(&b, "\\t", 2);
        } else if (c < 0x20 || c == 0x7f) {
            nb_sb_printf(&b, "\\u%04x", c);
        } else {
            nb_sb_add(&b, (const char *)&c, 1);
        }
    }
    nb_sb_add(&b, "\"", 1);
    if (!b.oom) cJSON_AddRawToObject(o, key, b.p);
    else cJSON_AddStringToObject(o, key, "");
    nb_sb_free(&b);
}

/* ---- formatting (HTTP thread) ------------------------------------------------------- */

static const char *nb_finish_str(nb_finish_reason fr)
{
    return fr == NB_FINISH_STOP ? "stop" : fr == NB_FINISH_LENGTH ? "length" : fr == NB_FINISH_ABORT ? "abort" : NULL;
}

/* The text of one token as the tokenizer spells it out (special tokens included). */
static char *nb_token_str(const nb_srv_req *r, int32_t id, size_t *len)
{
    char *s = NULL;
    size_t n = 0;
    if (!r->srv->tok || nb_tokenizer_decode(r->srv->tok, &id, 1, 0, &s, &n) != NB_OK) {
        nb_error_clear();
        char buf[32];
        snprintf(buf, sizeof buf, "token_id:%d", id);
        s = strdup(buf);
        n = s ? strlen(s) : 0;
    }
    if (len) *len = n;
    return s;
}

static cJSON *nb_bytes_array(const char *s, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)s[i]));
    return a;
}

/* Add one event's logprobs to `lp` (completions: tokens/token_logprobs/top_logprobs/
 * text_offset arrays; chat: content[] entries). */
static void nb_add_logprobs(nb_srv_req *r, nb_srv_choice *ch, const nb_srv_ev *e, cJSON *lp)
{
    if (!e->lps) return;
    int chat = r->q.kind == NB_OAI_CHAT;
    for (int k = 0; k < e->n_tokens; k++) {
        size_t n;
        char *tokstr = nb_token_str(r, e->ids[k], &n);
        if (!tokstr) continue;
        if (chat) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "token", tokstr);
            cJSON_AddNumberToObject(x, "logprob", e->lps[k]);
            cJSON_AddItemToObject(x, "bytes", nb_bytes_array(tokstr, n));
            cJSON *tops = cJSON_AddArrayToObject(x, "top_logprobs");
            for (int t = 0; e->top && t < e->n_top && t < r->q.top_logprobs; t++) {
                const nb_token_logprob *tp = &e->top[(size_t)k * (size_t)e->n_top + (size_t)t];
                size_t m;
                char *ts = nb_token_str(r, tp->id, &m);
                if (!ts) continue;
                cJSON *y = cJSON_CreateObject();
                cJSON_AddStringToObject(y, "token", ts);
                cJSON_AddNumberToObject(y, "logprob", tp->logprob);
                cJSON_AddItemToObject(y, "bytes", nb_bytes_array(ts, m));
                cJSON_AddItemToArray(tops, y);
                free(ts);
            }
            cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "content"), x);
        } else {
            cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "tokens"), cJSON_CreateString(tokstr));
            cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs"), cJSON_CreateNumber(e->lps[k]));
            cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "text_offset"),
                                 cJSON_CreateNumber((double)ch->text_offset));
            ch->text_offset += n;
            cJSON *tops = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
            cJSON *m = cJSON_CreateObject();
            for (int t = 0; e->top && t < e->n_top && t < r->q.top_logprobs; t++) {
                const nb_token_logprob *tp = &e->top[(size_t)k * (size_t)e->n_top + (size_t)t];
                char *ts = nb_token_str(r, tp->id, NULL);
                if (ts && !cJSON_GetObjectItemCaseSensitive(m, ts)) cJSON_AddNumberToObject(m, ts, tp->logprob);
                free(ts);
            }
            cJSON_AddItemToArray(tops, m);
        }
        free(tokstr);
    }
}

static cJSON *nb_new_logprobs(const nb_srv_req *r)
{
    cJSON *lp = cJSON_CreateObject();
    if (r->q.kind == NB_OAI_CHAT) {
        cJSON_AddArrayToObject(lp, "content");
    } else {
        cJSON_AddArrayToObject(lp, "tokens");
        cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON_AddArrayToObject(lp, "top_logprobs");
        cJSON_AddArrayToObject(lp, "text_offset");
    }
    return lp;
}

static cJSON *nb_chunk_head(const nb_srv_req *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", r->q.kind == NB_OAI_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", r->srv->served_name);
    return o;
}

static void nb_add_usage(const nb_srv_req *r, cJSON *o)
{
    int comp = 0;
    for (int i = 0; i < r->n_choices; i++) comp += r->choices[i].completion_tokens;
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", r->prompt_tokens_total);
    cJSON_AddNumberToObject(u, "completion_tokens", comp);
    cJSON_AddNumberToObject(u, "total_tokens", r->prompt_tokens_total + comp);
}

static void nb_emit(nb_srv_req *r, cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) {
        r->out.oom = 1;
        return;
    }
    nb_sb_puts(&r->out, "data: ");
    nb_sb_puts(&r->out, s);
    nb_sb_puts(&r->out, "\n\n");
    free(s);
}

/* One chunk carrying text/reasoning/logprobs/finish for choice i. */
static void nb_emit_choice(nb_srv_req *r, int i, const char *text, size_t tl, const char *reason, size_t rl,
                           cJSON *lp, const char *finish, int role)
{
    cJSON *o = nb_chunk_head(r), *arr = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(arr, c);
    cJSON_AddNumberToObject(c, "index", i);
    if (r->q.kind == NB_OAI_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (tl || role) nb_add_text(d, "content", text ? text : "", tl);
        if (rl) nb_add_text(d, "reasoning_content", reason, rl);
    } else {
        nb_add_text(c, "text", text ? text : "", tl);
    }
    if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    if (r->q.continuous_usage) nb_add_usage(r, o);
    nb_emit(r, o);
}

/* Route an event's text through the choice's reasoning splitter (chat) or straight. */
static void nb_split_text(nb_srv_req *r, nb_srv_choice *ch, const int32_t *ids, int n_ids, const char *text,
                          size_t n, nb_strbuf *content, nb_strbuf *reason, int flush)
{
    if (r->q.kind == NB_OAI_CHAT) {
        if (n || ids) nb_reasoning_feed_tokens(&ch->rp, ids, n_ids, text ? text : "", n, reason, content);
        if (flush) nb_reasoning_flush(&ch->rp, reason, content);
    } else if (n) {
        nb_sb_add(content, text, n);
    }
}

static void nb_stream_event(nb_srv_req *r, nb_srv_ev *e)
{
    if (e->choice >= r->n_choices) return;
    nb_srv_choice *ch = &r->choices[e->choice];
    nb_strbuf content = {0}, reason = {0};
    if (!ch->started) {
        ch->started = 1;
        const nb_srv_sub *sub = &r->subs[e->choice / r->n_per_prompt];
        if (r->q.kind == NB_OAI_CHAT) nb_emit_choice(r, e->choice, NULL, 0, NULL, 0, NULL, NULL, 1);
        else if (sub->echo_text) nb_sb_puts(&content, sub->echo_text);
    }
    if (!e->finish) {
        ch->completion_tokens += e->n_tokens;
        nb_split_text(r, ch, e->ids, e->n_tokens, e->text, e->text_len, &content, &reason, 0);
        cJSON *lp = NULL;
        if (e->lps) {
            lp = nb_new_logprobs(r);
            nb_add_logprobs(r, ch, e, lp);
        }
        if (content.len || reason.len || lp)
            nb_emit_choice(r, e->choice, content.p, content.len, reason.p, reason.len, lp, NULL, 0);
    } else {
        ch->finished = 1;
        ch->reason = e->reason;
        ch->completion_tokens = e->completion_tokens;
        nb_split_text(r, ch, NULL, 0, NULL, 0, &content, &reason, 1);
        nb_emit_choice(r, e->choice, content.p, content.len, reason.p, reason.len, NULL, nb_finish_str(e->reason), 0);
    }
    nb_sb_free(&content);
    nb_sb_free(&reason);
}

static void nb_accum_event(nb_srv_req *r, nb_srv_ev *e)
{
    if (e->choice >= r->n_choices) return;
    nb_srv_choice *ch = &r->choices[e->choice];
    if (!ch->started) {
        ch->started = 1;
        const nb_srv_sub *sub = &r->subs[e->choice / r->n_per_prompt];
        if (sub->echo_text) nb_sb_puts(&ch->text, sub->echo_text);
    }
    if (!e->finish) {
        nb_split_text(r, ch, e->ids, e->n_tokens, e->text, e->text_len, &ch->text, &ch->reasoning, 0);
        if (e->lps) {
            if (!ch->lp) ch->lp = nb_new_logprobs(r);
            nb_add_logprobs(r, ch, e, ch->lp);
        }
    } else {
        nb_split_text(r, ch, NULL, 0, NULL, 0, &ch->text, &ch->reasoning, 1);
        ch->finished = 1;
        ch->reason = e->reason;
        ch->completion_tokens = e->completion_tokens;
    }
}

static nb_srv_ev *nb_take_events(nb_srv_req *r, int *finished)
{
    pthread_mutex_lock(&r->mu);
    nb_srv_ev *e = r->ev_head;
    r->ev_head = r->ev_tail = NULL;
    *finished = r->finished;
    pthread_mutex_unlock(&r->mu);
    return e;
}

static ssize_t nb_stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    nb_srv_req *r = cls;
    for (;;) {
        if (r->out_off < r->out.len) {
            size_t n = NB_MIN(max, r->out.len - r->out_off);
            memcpy(buf, r->out.p + r->out_off, n);
            r->out_off += n;
            if (r->out_off == r->out.len) {
                nb_sb_clear(&r->out);
                r->out_off = 0;
            }
            return (ssize_t)n;
        }
        if (r->done_sent) return MHD_CONTENT_READER_END_OF_STREAM;
        if (r->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        pthread_mutex_lock(&r->mu);
        nb_srv_ev *e = r->ev_head;
        r->ev_head = r->ev_tail = NULL;
        int finished = r->finished;
        if (!e && !finished && __atomic_load_n(&r->srv->stopping, __ATOMIC_SEQ_CST)) {
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (!e && !finished) {
            /* Nothing to send: park the connection until the engine delivers. */
            r->suspended = 1;
            MHD_suspend_connection(r->conn);
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
        pthread_mutex_unlock(&r->mu);
        for (nb_srv_ev *n; e; e = n) {
            n = e->next;
            nb_stream_event(r, e);
            free(e);
        }
        if (finished) {
            if (r->q.include_usage) {
                cJSON *o = nb_chunk_head(r);
                cJSON_AddArrayToObject(o, "choices");
                nb_add_usage(r, o);
                nb_emit(r, o);
            }
            nb_sb_puts(&r->out, "data: [DONE]\n\n");
            r->done_sent = 1;
        }
    }
}

static void nb_stream_free(void *cls) { nb_srv_req_unref(cls); }

enum MHD_Result nb_session_complete(nb_server *s, struct MHD_Connection *c, nb_conn_ctx *ctx)
{
    nb_srv_req *r = ctx->req;
    int finished;
    nb_srv_ev *e = nb_take_events(r, &finished);
    for (nb_srv_ev *n; e; e = n) {
        n = e->next;
        nb_accum_event(r, e);
        free(e);
    }
    if (!finished) { /* resumed early (shutdown): wait again, unless HTTP is stopping */
        if (__atomic_load_n(&s->stopping, __ATOMIC_SEQ_CST)) return MHD_NO;
        pthread_mutex_lock(&r->mu);
        if (!r->finished) {
            r->suspended = 1;
            MHD_suspend_connection(c);
            pthread_mutex_unlock(&r->mu);
            return MHD_YES;
        }
        pthread_mutex_unlock(&r->mu);
        return nb_session_complete(s, c, ctx);
    }
    if (r->any_abort) {
        pthread_mutex_lock(&r->mu);
        int gone = r->client_gone;
        pthread_mutex_unlock(&r->mu);
        if (gone) return MHD_NO; /* nobody to answer: close */
        nb_oai_error err;
        nb_oai_set_error(&err, 503, "server_error", "", "aborted",
                         "request aborted (server shutting down or engine failure)");
        return nb_respond_error(c, s, &err);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", r->q.kind == NB_OAI_CHAT ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", s->served_name);
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < r->n_choices; i++) {
        nb_srv_choice *ch = &r->choices[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "index", i);
        if (r->q.kind == NB_OAI_CHAT) {
            cJSON *m = cJSON_AddObjectToObject(x, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            nb_add_text(m, "content", ch->text.p ? ch->text.p : "", ch->text.len);
            if (ch->rp.kind != NB_REASONING_NONE) {
                if (ch->reasoning.len) nb_add_text(m, "reasoning_content", ch->reasoning.p, ch->reasoning.len);
                else cJSON_AddNullToObject(m, "reasoning_content");
            }
        } else {
            nb_add_text(x, "text", ch->text.p ? ch->text.p : "", ch->text.len);
        }
        if (ch->lp) {
            cJSON_AddItemToObject(x, "logprobs", ch->lp);
            ch->lp = NULL;
        } else {
            cJSON_AddNullToObject(x, "logprobs");
        }
        const char *fr = nb_finish_str(ch->reason);
        if (fr) cJSON_AddStringToObject(x, "finish_reason", fr);
        else cJSON_AddNullToObject(x, "finish_reason");
        cJSON_AddItemToArray(arr, x);
    }
    nb_add_usage(r, o);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!body) {
        nb_oai_error err;
        nb_oai_set_error(&err, 500, "server_error", "", "", "out of memory formatting the response");
        return nb_respond_error(c, s, &err);
    }
    return nb_respond(c, s, 200, "application/json", body, NULL, NULL);
}

/* ---- building and submitting -------------------------------------------------------- */

static int nb_prompt_ids(nb_server *s, nb_srv_req *r, nb_oai_error *err)
{
    const nb_oai_request *q = &r->q;
    if (q->kind == NB_OAI_COMPLETIONS) {
        r->n_subs = q->n_prompts;
        r->subs = calloc((size_t)r->n_subs, sizeof *r->subs);
        if (!r->subs) goto oom;
        for (int i = 0; i < q->n_prompts; i++) {
            nb_srv_sub *sub = &r->subs[i];
            const nb_oai_prompt *p = &q->prompts[i];
            sub->req = r;
            sub->prompt_index = i;
            if (p->ids) {
                sub->ids = malloc((size_t)p->n_ids * sizeof(int32_t) + 1);
                if (!sub->ids) goto oom;
                memcpy(sub->ids, p->ids, (size_t)p->n_ids * sizeof(int32_t));
                sub->n_ids = p->n_ids;
                for (int k = 0; k < p->n_ids; k++)
                    if (p->ids[k] >= s->info.vocab_size) {
                        nb_oai_set_error(err, 400, "invalid_request_error", "prompt", "invalid_value",
                                         "prompt token id %d is outside the vocabulary of %d", p->ids[k],
                                         s->info.vocab_size);
                        return -1;
                    }
                if (q->echo && s->tok) {
                    size_t n;
                    if (nb_tokenizer_decode(s->tok, p->ids, (size_t)p->n_ids, q->sp.skip_special_tokens,
                                            &sub->echo_text, &n) != NB_OK)
                        nb_error_clear();
                }
            } else {
                if (!s->tok) {
                    nb_oai_set_error(err, 400, "invalid_request_error", "prompt", "invalid_value",
                                     "this model has no tokenizer: send the prompt as token ids");
                    return -1;
                }
                size_t n = 0;
                if (nb_tokenizer_encode(s->tok, p->text, p->text_len, 1, &sub->ids, &n) != NB_OK) {
                    nb_oai_set_error(err, 400, "invalid_request_error", "prompt", "invalid_value",
                                     "prompt could not be tokenized: %s", nb_last_error());
                    return -1;
                }
                sub->n_ids = (int)n;
                if (q->echo && !(sub->echo_text = strdup(p->text))) goto oom;
            }
        }
        return 0;
    }
    /* chat */
    if (!s->tok) {
        nb_oai_set_error(err, 400, "invalid_request_error", "messages", "invalid_value",
                         "this model has no tokenizer: use /v1/completions with token ids");
        return -1;
    }
    if (!s->tpl) {
        nb_oai_set_error(err, 400, "invalid_request_error", "messages", "invalid_value",
                         "this model has no usable chat template%s%s", s->tpl_error[0] ? ": " : "", s->tpl_error);
        return -1;
    }
    char *text = NULL;
    size_t tl = 0;
    /* The request's own JSON text, not the cJSON trees: numbers keep their spelling ("1.0",
     * big integers), as transformers sees them through Python's json. */
    if (nb_chat_template_apply_json(s->tpl, q->messages_json, q->tools_json, q->add_generation_prompt,
                                    q->kwargs_json, s->bos, s->eos, &text, &tl) != NB_OK) {
        nb_oai_set_error(err, 400, "invalid_request_error", "messages", "invalid_value", "chat template: %s",
                         nb_last_error());
        return -1;
    }
    r->prompt_open = nb_reasoning_prompt_open(text, tl);
    r->n_subs = 1;
    r->subs = calloc(1, sizeof *r->subs);
    if (!r->subs) {
        free(text);
        goto oom;
    }
    r->subs[0].req = r;
    size_t n = 0;
    nb_status st = nb_tokenizer_encode(s->tok, text, tl, 0, &r->subs[0].ids, &n);
    free(text);
    if (st != NB_OK) {
        nb_oai_set_error(err, 400, "invalid_request_error", "messages", "invalid_value",
                         "rendered prompt could not be tokenized: %s", nb_last_error());
        return -1;
    }
    r->subs[0].n_ids = (int)n;
    return 0;
oom:
    nb_oai_set_error(err, 500, "server_error", "", "", "out of memory");
    return -1;
}

static int nb_check_lengths(nb_server *s, nb_srv_req *r, nb_oai_error *err)
{
    int ctxlen = s->info.context_length;
    for (int i = 0; i < r->n_subs; i++) {
        int n = r->subs[i].n_ids;
        if (n == 0) {
            nb_oai_set_error(err, 400, "invalid_request_error", r->q.kind == NB_OAI_CHAT ? "messages" : "prompt",
                             "invalid_value", "the prompt is empty after tokenization");
            return -1;
        }
        int64_t want = (int64_t)n + (r->q.sp.max_tokens > 0 ? r->q.sp.max_tokens : 1);
        if (ctxlen > 0 && want > ctxlen) {
            nb_oai_set_error(err, 400, "invalid_request_error",
                             r->q.max_tokens_given ? "max_tokens" : (r->q.kind == NB_OAI_CHAT ? "messages" : "prompt"),
                             "context_length_exceeded",
                             "This model's maximum context length is %d tokens. However, you requested %lld tokens "
                             "(%d in the prompt, %d in the completion).",
                             ctxlen, (long long)want, n, r->q.sp.max_tokens > 0 ? r->q.sp.max_tokens : 1);
            return -1;
        }
        r->prompt_tokens_total += n;
    }
    for (int i = 0; i < r->q.sp.n_stop_token_ids; i++)
        if (r->q.sp.stop_token_ids[i] >= s->info.vocab_size) {
            nb_oai_set_error(err, 400, "invalid_request_error", "stop_token_ids", "invalid_value",
                             "stop_token_ids[%d] = %d is outside the vocabulary of %d", i, r->q.sp.stop_token_ids[i],
                             s->info.vocab_size);
            return -1;
        }
    return 0;
}

enum MHD_Result nb_session_begin(nb_server *s, struct MHD_Connection *c, nb_conn_ctx *ctx, nb_oai_kind kind)
{
    nb_oai_error err = {0};
    nb_srv_req *r = calloc(1, sizeof *r);
    if (!r) {
        nb_oai_set_error(&err, 500, "server_error", "", "", "out of memory");
        return nb_respond_error(c, s, &err);
    }
    pthread_mutex_init(&r->mu, NULL);
    r->srv = s;
    r->refs = 1; /* the connection's */
    r->conn = c;
    r->conn_alive = 1;
    r->t0_ns = nb_now_ns();
    r->created = (long)time(NULL);
    nb_srv_metrics_active(s->metrics, +1);
    ctx->req = r;
    if (nb_oai_parse(kind, ctx->body.p ? ctx->body.p : "", ctx->body.len, &r->q, &err))
        return nb_respond_error(c, s, &err);
    nb_sb_free(&ctx->body);
    if (r->q.model && strcmp(r->q.model, s->served_name) && strcmp(r->q.model, s->info.model_name)) {
        nb_oai_set_error(&err, 404, "invalid_request_error", "model", "model_not_found",
                         "The model '%.200s' does not exist (this server serves '%.200s')", r->q.model,
                         s->served_name);
        return nb_respond_error(c, s, &err);
    }
    if (nb_prompt_ids(s, r, &err) || nb_check_lengths(s, r, &err)) return nb_respond_error(c, s, &err);
    r->n_per_prompt = r->q.sp.n;
    r->n_choices = r->n_subs * r->n_per_prompt;
    r->choices = calloc((size_t)r->n_choices, sizeof *r->choices);
    if (!r->choices) {
        nb_oai_set_error(&err, 500, "server_error", "", "", "out of memory");
        return nb_respond_error(c, s, &err);
    }
    nb_reasoning_kind rk = kind == NB_OAI_CHAT && r->q.separate_reasoning ? (nb_reasoning_kind)s->p.reasoning_parser
                                                                            : NB_REASONING_NONE;
    for (int i = 0; i < r->n_choices; i++) {
        nb_reasoning_init(&r->choices[i].rp, rk, r->prompt_open);
        if (s->think_close_id >= 0 && r->q.sp.skip_special_tokens)
            nb_reasoning_use_ids(&r->choices[i].rp, s->think_open_id, s->think_close_id);
    }
    pthread_mutex_lock(&s->mu);
    r->serial = ++s->next_serial;
    pthread_mutex_unlock(&s->mu);
    snprintf(r->id, sizeof r->id, "%s%08lx%012" PRIx64, kind == NB_OAI_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long)r->created, r->serial);
    if (s->draining) {
        nb_oai_set_error(&err, 503, "server_error", "", "shutting_down", "the server is shutting down");
        return nb_respond_error(c, s, &err);
    }
    nb_server_live_add(s, r);
    int submitted = 0;
    nb_status st = NB_OK;
    for (int i = 0; i < r->n_subs; i++) {
        nb_srv_sub *sub = &r->subs[i];
        pthread_mutex_lock(&r->mu);
        r->refs++; /* the engine's, dropped on the last event */
        r->subs_live++;
        sub->submitted = 1;
        pthread_mutex_unlock(&r->mu);
        st = nb_engine_submit(s->engine, sub->ids, sub->n_ids, &r->q.sp, nb_on_event, sub, &sub->engine_id);
        if (st != NB_OK) {
            pthread_mutex_lock(&r->mu);
            r->refs--;
            sub->submitted = 0;
            int left = --r->subs_live;
            pthread_mutex_unlock(&r->mu);
            if (left == 0) nb_server_live_remove(s, r);
            break;
        }
        submitted++;
    }
    if (st != NB_OK) {
        if (st == NB_ERR_BUSY)
            nb_oai_set_error(&err, 503, "server_error", "", "queue_full",
                             "too many requests are waiting (--max-queued-requests); retry later");
        else if (st == NB_ERR_ABORTED)
            nb_oai_set_error(&err, 503, "server_error", "", "shutting_down", "the engine is shutting down: %s",
                             nb_last_error());
        else if (st == NB_ERR_INVALID_ARG)
            nb_oai_set_error(&err, 400, "invalid_request_error", "", "invalid_value", "%s", nb_last_error());
        else
            nb_oai_set_error(&err, 500, "server_error", "", "", "%s", nb_last_error());
        if (submitted) nb_session_abort(r);
        return nb_respond_error(c, s, &err);
    }
    nb_server_watch(s, r);
    if (r->q.stream) {
        ctx->is_stream = 1;
        pthread_mutex_lock(&r->mu);
        r->refs++; /* the response's, dropped by nb_stream_free */
        pthread_mutex_unlock(&r->mu);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, nb_stream_reader, r,
                                                                      nb_stream_free);
        if (!resp) {
            nb_srv_req_unref(r);
            nb_session_abort(r);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Request-Id", r->id);
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        nb_srv_metrics_http(s->metrics, 200);
        return ret;
    }
    pthread_mutex_lock(&r->mu);
    if (!r->finished) {
        r->suspended = 1;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&r->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&r->mu);
    return nb_session_complete(s, c, ctx);
}
