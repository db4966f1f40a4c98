/* libcurl-multi + epoll streaming client (tools/bench/client.h).
 * Exercised by: tests/bench/test_bench_e2e.sh */
#include "tools/bench/client.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/progress.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct nb_xfer {
    CURL *easy;
    struct curl_slist *hdrs;
    char *body;
    nb_bench_req *req;
    const nb_bench_prompt *prompt;
    int chat;
    int64_t t0_ns, last_ns, last_text_ns;
    char *buf; /* partial SSE line(s) */
    size_t len, cap;
    long status;
    int saw_done, stream_error;
    int64_t usage_prompt, usage_completion;
    int64_t now_ns; /* arrival time of the bytes being parsed */
} nb_xfer;

typedef struct nb_loop {
    CURLM *multi;
    int epfd;
    long timeout_ms; /* from CURLMOPT_TIMERFUNCTION; -1: none */
} nb_loop;

static void nb_req_error(nb_bench_req *r, const char *fmt, const char *detail)
{
    if (r->error[0]) return; /* keep the first cause */
    snprintf(r->error, sizeof r->error, fmt, detail);
}

/* One `data:` payload. The arrival time of its bytes is the chunk's time. */
static void nb_sse_event(nb_xfer *x, const char *data, size_t n)
{
    x->last_ns = x->now_ns;
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        x->saw_done = 1;
        return;
    }
    cJSON *j = cJSON_ParseWithLength(data, n);
    if (!j) {
        x->stream_error = 1;
        nb_req_error(x->req, "malformed SSE chunk: %.100s", data);
        return;
    }
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (err) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(err, "message");
        x->stream_error = 1;
        nb_req_error(x->req, "error event: %.120s", cJSON_IsString(m) ? m->valuestring : "(no message)");
    }
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const char *text = NULL;
    if (ch) {
        if (x->chat) {
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(ch, "delta");
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(d, "content");
            const cJSON *rc = cJSON_GetObjectItemCaseSensitive(d, "reasoning_content");
            /* Reasoning text is generated text too: without it a thinking model's TTFT
             * would be the end of its reasoning. */
            if (cJSON_IsString(c) && c->valuestring[0]) text = c->valuestring;
            else if (cJSON_IsString(rc) && rc->valuestring[0]) text = rc->valuestring;
        } else {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(ch, "text");
            if (cJSON_IsString(t) && t->valuestring[0]) text = t->valuestring;
        }
    }
    if (text) {
        nb_bench_req *r = x->req;
        if (r->chunks == 0) r->ttft_s = (double)(x->now_ns - x->t0_ns) * 1e-9;
        else nb_bench_req_add_itl(r, (double)(x->now_ns - x->last_text_ns) * 1e-9);
        r->chunks++;
        x->last_text_ns = x->now_ns;
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    if (cJSON_IsObject(u)) {
        const cJSON *pt = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
        if (cJSON_IsNumber(pt)) x->usage_prompt = (int64_t)pt->valuedouble;
        if (cJSON_IsNumber(ct)) x->usage_completion = (int64_t)ct->valuedouble;
    }
    cJSON_Delete(j);
}

static size_t nb_on_write(char *ptr, size_t size, size_t nmemb, void *userp)
{
    nb_xfer *x = userp;
    size_t n = size * nmemb;
    if (!x->status) curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->len + n + 1 > x->cap) {
        size_t cap = x->cap ? x->cap : 4096;
        while (cap < x->len + n + 1) cap *= 2;
        char *b = realloc(x->buf, cap);
        if (!b) return 0; /* aborts the transfer: counted as failed */
        x->buf = b;
        x->cap = cap;
    }
    memcpy(x->buf + x->len, ptr, n);
    x->len += n;
    x->buf[x->len] = 0;
    if (x->status != 200) return n; /* keep the error body for the message */
    x->now_ns = nb_now_ns();
    size_t start = 0;
    for (;;) {
        char *nl = memchr(x->buf + start, '\n', x->len - start);
        if (!nl) break;
        size_t end = (size_t)(nl - x->buf), e = end;
        if (e > start && x->buf[e - 1] == '\r') e--;
        if (e - start >= 5 && !memcmp(x->buf + start, "data:", 5)) {
            size_t d = start + 5;
            while (d < e && x->buf[d] == ' ') d++;
            x->buf[e] = 0;
            nb_sse_event(x, x->buf + d, e - d);
        }
        start = end + 1;
    }
    memmove(x->buf, x->buf + start, x->len - start);
    x->len -= start;
    return n;
}

static int nb_on_socket(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
    nb_loop *L = userp;
    struct epoll_event ev = {0};
    ev.data.fd = s;
    if (what == CURL_POLL_REMOVE) {
        if (socketp) epoll_ctl(L->epfd, EPOLL_CTL_DEL, s, NULL);
        curl_multi_assign(L->multi, s, NULL);
        return 0;
    }
    ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
    if (socketp) {
        epoll_ctl(L->epfd, EPOLL_CTL_MOD, s, &ev);
    } else {
        epoll_ctl(L->epfd, EPOLL_CTL_ADD, s, &ev);
        curl_multi_assign(L->multi, s, L); /* any non-NULL marks "registered" */
    }
    return 0;
}

static int nb_on_timer(CURLM *m, long timeout_ms, void *userp)
{
    ((nb_loop *)userp)->timeout_ms = timeout_ms;
    return 0;
}

static char *nb_request_body(const nb_bench_client_cfg *cfg, const nb_bench_prompt *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", cfg->model ? cfg->model : "default");
    if (cfg->chat) {
        cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", p->text ? p->text : "");
        cJSON_AddItemToArray(msgs, m);
    } else if (p->ids) {
        cJSON_AddItemToObject(o, "prompt", cJSON_CreateIntArray(p->ids, p->n_ids));
    } else {
        cJSON_AddStringToObject(o, "prompt", p->text ? p->text : "");
    }
    cJSON_AddNumberToObject(o, "max_tokens", p->output_len);
    cJSON_AddNumberToObject(o, "temperature", 0);
    cJSON_AddBoolToObject(o, "stream", 1);
    cJSON *so = cJSON_AddObjectToObject(o, "stream_options");
    cJSON_AddBoolToObject(so, "include_usage", 1);
    if (cfg->ignore_eos) cJSON_AddBoolToObject(o, "ignore_eos", 1);
    for (const cJSON *c = cfg->extra ? cfg->extra->child : NULL; c; c = c->next) {
        cJSON *d = cJSON_Duplicate(c, 1);
        if (!d) continue; /* out of memory: the print below fails too and says so */
        if (cJSON_GetObjectItemCaseSensitive(o, c->string))
            cJSON_ReplaceItemInObjectCaseSensitive(o, c->string, d);
        else
            cJSON_AddItemToObject(o, c->string, d);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static nb_status nb_xfer_start(nb_loop *L, const nb_bench_client_cfg *cfg, nb_xfer *x, int64_t level_t0)
{
    char url[1024], auth[600];
    snprintf(url, sizeof url, "%s%s", cfg->base_url, cfg->chat ? "/v1/chat/completions" : "/v1/completions");
    x->body = nb_request_body(cfg, x->prompt);
    x->easy = curl_easy_init();
    if (!x->body || !x->easy) return nb_error(NB_ERR_OUT_OF_MEMORY, "bench: request setup");
    x->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    x->hdrs = curl_slist_append(x->hdrs, "Expect:"); /* no 100-continue round trip */
    if (cfg->api_key && cfg->api_key[0]) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", cfg->api_key);
        x->hdrs = curl_slist_append(x->hdrs, auth);
    }
    curl_easy_setopt(x->easy, CURLOPT_URL, url);
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, x->body);
    curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, nb_on_write);
    curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->easy, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, (long)(cfg->timeout_s * 1000));
    curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS, 60000L);
    x->t0_ns = x->last_ns = x->last_text_ns = nb_now_ns();
    x->req->start_s = (double)(x->t0_ns - level_t0) * 1e-9;
    x->req->want_output = x->prompt->output_len;
    CURLMcode mc = curl_multi_add_handle(L->multi, x->easy);
    if (mc != CURLM_OK) return nb_error(NB_ERR_INTERNAL, "bench: curl_multi_add_handle: %s", curl_multi_strerror(mc));
    return NB_OK;
}

static void nb_xfer_finish(nb_xfer *x, CURLcode rc)
{
    nb_bench_req *r = x->req;
    if (!x->status) curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
    r->latency_s = (double)(x->last_ns - x->t0_ns) * 1e-9;
    if (rc != CURLE_OK) {
        nb_req_error(r, "transfer failed: %s", curl_easy_strerror(rc));
        r->latency_s = (double)(nb_now_ns() - x->t0_ns) * 1e-9;
    } else if (x->status != 200) {
        char msg[140];
        snprintf(msg, sizeof msg, "HTTP %ld: %.110s", x->status, x->buf ? x->buf : "");
        for (char *c = msg; *c; c++)
            if (*c == '\n' || *c == '\r') *c = ' ';
        nb_req_error(r, "%s", msg);
        r->latency_s = (double)(nb_now_ns() - x->t0_ns) * 1e-9;
    } else if (!x->saw_done && !x->stream_error) {
        nb_req_error(r, "%s", "stream ended without data: [DONE]");
    }
    r->success = rc == CURLE_OK && x->status == 200 && x->saw_done && !x->stream_error;
    r->output_len = x->usage_completion >= 0 ? (int)x->usage_completion : x->prompt->output_len;
    r->prompt_len = x->usage_prompt >= 0 ? (int)x->usage_prompt : x->prompt->prompt_len;
    curl_slist_free_all(x->hdrs);
    curl_easy_cleanup(x->easy);
    free(x->body);
    free(x->buf);
    x->easy = NULL;
    x->hdrs = NULL;
    x->body = x->buf = NULL;
}

static void nb_raise_fd_limit(int want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    rlim_t need = (rlim_t)want + 256;
    if (rl.rlim_cur >= need) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < need)
        NB_LOG_WARN("bench", "open-file limit %llu is below %d concurrent connections",
                    (unsigned long long)rl.rlim_cur, want);
}

nb_status nb_bench_run(const nb_bench_client_cfg *cfg, const nb_bench_prompt *prompts, int n,
                       nb_bench_req *reqs, double *duration_s)
{
    if (n <= 0 || cfg->concurrency < 1)
        return nb_error(NB_ERR_INVALID_ARG, "bench: %d prompts at concurrency %d", n, cfg->concurrency);
    nb_raise_fd_limit(NB_MIN(cfg->concurrency, n));
    nb_loop L = {.timeout_ms = -1};
    L.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (L.epfd < 0) return nb_error(NB_ERR_IO, "bench: epoll_create1: %s", strerror(errno));
    L.multi = curl_multi_init();
    nb_xfer *xs = calloc((size_t)n, sizeof *xs);
    double *arrive = calloc((size_t)n, sizeof *arrive);
    if (!L.multi || !xs || !arrive) {
        close(L.epfd);
        if (L.multi) curl_multi_cleanup(L.multi);
        free(xs), free(arrive);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "bench: client state for %d requests", n);
    }
    curl_multi_setopt(L.multi, CURLMOPT_SOCKETFUNCTION, nb_on_socket);
    curl_multi_setopt(L.multi, CURLMOPT_SOCKETDATA, &L);
    curl_multi_setopt(L.multi, CURLMOPT_TIMERFUNCTION, nb_on_timer);
    curl_multi_setopt(L.multi, CURLMOPT_TIMERDATA, &L);
    curl_multi_setopt(L.multi, CURLMOPT_MAXCONNECTS, (long)NB_MIN(cfg->concurrency, n) + 16);
    /* Poisson arrivals (exponential gaps) when a rate is set; otherwise all at t = 0. */
    uint64_t rng = cfg->seed ^ 0x5eedULL;
    double t = 0;
    int paced = cfg->request_rate > 0 && isfinite(cfg->request_rate);
    for (int i = 0; i < n; i++) {
        arrive[i] = t;
        if (paced) {
            double u = ((double)(nb_bench_rng(&rng) >> 11) + 0.5) / 9007199254740992.0;
            t += -log(u) / cfg->request_rate;
        }
        xs[i].req = &reqs[i];
        xs[i].prompt = &prompts[i];
        xs[i].chat = cfg->chat;
        xs[i].usage_prompt = xs[i].usage_completion = -1;
    }
    nb_progress bar;
    if (cfg->progress) nb_progress_begin(&bar, cfg->label ? cfg->label : "bench", (uint64_t)n, "req");
    nb_status st = NB_OK;
    int next = 0, inflight = 0, done = 0, running = 0;
    int64_t t0 = nb_now_ns(), t_end = t0;
    struct epoll_event evs[256];
    while (done < n && st == NB_OK) {
        double now_s = (double)(nb_now_ns() - t0) * 1e-9;
        while (next < n && inflight < cfg->concurrency && arrive[next] <= now_s) {
            st = nb_xfer_start(&L, cfg, &xs[next], t0);
            if (st != NB_OK) break;
            next++;
            inflight++;
        }
        if (st != NB_OK) break;
        long wait = L.timeout_ms < 0 ? 100 : NB_MIN(L.timeout_ms, 100L);
        if (next < n && inflight < cfg->concurrency) {
            long until = (long)ceil((arrive[next] - now_s) * 1000);
            if (until < wait) wait = until < 0 ? 0 : until;
        }
        int ne = epoll_wait(L.epfd, evs, (int)NB_ARRAY_LEN(evs), (int)wait);
        if (ne < 0 && errno != EINTR) {
            st = nb_error(NB_ERR_IO, "bench: epoll_wait: %s", strerror(errno));
            break;
        }
        if (ne <= 0) {
            curl_multi_socket_action(L.multi, CURL_SOCKET_TIMEOUT, 0, &running);
        } else {
            for (int i = 0; i < ne; i++) {
                int fl = (evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
                         (evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                         (evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
                curl_multi_socket_action(L.multi, evs[i].data.fd, fl, &running);
            }
            if (L.timeout_ms == 0) curl_multi_socket_action(L.multi, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(L.multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            nb_xfer *x;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode rc = msg->data.result;
            curl_multi_remove_handle(L.multi, msg->easy_handle);
            nb_xfer_finish(x, rc);
            inflight--;
            done++;
            t_end = nb_now_ns();
            if (!x->req->success) NB_LOG_DEBUG("bench", "request failed: %s", x->req->error);
        }
        if (cfg->progress) nb_progress_update(&bar, (uint64_t)done);
    }
    if (cfg->progress) nb_progress_end(&bar);
    for (int i = 0; i < n; i++)
        if (xs[i].easy) {
            curl_multi_remove_handle(L.multi, xs[i].easy);
            nb_xfer_finish(&xs[i], CURLE_ABORTED_BY_CALLBACK);
        }
    *duration_s = (double)(t_end - t0) * 1e-9;
    curl_multi_cleanup(L.multi);
    close(L.epfd);
    free(xs);
    free(arrive);
    return st;
}

typedef struct nb_membuf {
    char *p;
    size_t n;
} nb_membuf;

static size_t nb_on_get(char *ptr, size_t size, size_t nmemb, void *userp)
{
    nb_membuf *b = userp;
    size_t n = size * nmemb;
    char *q = realloc(b->p, b->n + n + 1);
    if (!q) return 0;
    memcpy(q + b->n, ptr, n);
    b->n += n;
    q[b->n] = 0;
    b->p = q;
    return n;
}

nb_status nb_bench_http_get(const char *base_url, const char *path, const char *api_key, double timeout_s,
                            char **body, long *status)
{
    char url[1024], auth[600];
    snprintf(url, sizeof url, "%s%s", base_url, path);
    *body = NULL;
    *status = 0;
    CURL *e = curl_easy_init();
    if (!e) return nb_error(NB_ERR_OUT_OF_MEMORY, "bench: curl_easy_init");
    nb_membuf b = {0};
    struct curl_slist *h = NULL;
    if (api_key && api_key[0]) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", api_key);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, nb_on_get);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    CURLcode rc = curl_easy_perform(e);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    if (rc != CURLE_OK) {
        free(b.p);
        return nb_error(NB_ERR_IO, "%s: %s", url, curl_easy_strerror(rc));
    }
    *body = b.p ? b.p : strdup("");
    return NB_OK;
}
