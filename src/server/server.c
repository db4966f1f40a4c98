/* The HTTP daemon: libmicrohttpd in epoll mode with internal polling thread(s), request
 * routing, API-key check, body limit, GET endpoints, disconnect detection and graceful
 * shutdown (server/server.h). Generation requests are handled in session.c.
 * Exercised by tests/server/ (Python openai SDK, curl, fuzz) and `nibble serve`. */
#include "base/clock.h"
#include "base/log.h"
#include "server/server_internal.h"
#include "tokenizer/template/template.h"
#include "tokenizer/tokenizer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

nb_server_params nb_server_default_params(void)
{
    nb_server_params p = {0};
    p.host = "127.0.0.1";
    p.port = 30000;
    p.max_body_bytes = 32u << 20;
    p.http_threads = 1;
    p.max_connections = 16384;
    return p;
}

int nb_server_port(const nb_server *s) { return s->port; }

/* ---- responses ---------------------------------------------------------------------- */

enum MHD_Result nb_respond(struct MHD_Connection *c, nb_server *s, int status, const char *ctype, char *body,
                           const char *hdr_name, const char *hdr_value)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (hdr_name) MHD_add_response_header(r, hdr_name, hdr_value);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    nb_srv_metrics_http(s->metrics, status);
    return ret;
}

enum MHD_Result nb_respond_error(struct MHD_Connection *c, nb_server *s, const nb_oai_error *err)
{
    char *body = nb_oai_error_json(err);
    if (!body) return MHD_NO;
    if (err->http >= 500 && err->http != 503) NB_LOG_WARN("http", "%d: %s", err->http, err->message);
    else NB_LOG_DEBUG("http", "%d: %s", err->http, err->message);
    if (err->http == 503) return nb_respond(c, s, 503, "application/json", body, "Retry-After", "1");
    if (err->http == 401) return nb_respond(c, s, 401, "application/json", body, "WWW-Authenticate", "Bearer");
    return nb_respond(c, s, err->http, "application/json", body, NULL, NULL);
}

static enum MHD_Result nb_error_reply(struct MHD_Connection *c, nb_server *s, int http, const char *type,
                                      const char *code, const char *msg)
{
    nb_oai_error err;
    nb_oai_set_error(&err, http, type, "", code, "%s", msg);
    return nb_respond_error(c, s, &err);
}

/* ---- live requests and disconnect detection ----------------------------------------- */

void nb_server_live_add(nb_server *s, nb_srv_req *r)
{
    pthread_mutex_lock(&s->mu);
    r->next = s->live;
    r->prev = NULL;
    if (s->live) s->live->prev = r;
    s->live = r;
    r->in_live = 1;
    s->n_live++;
    pthread_mutex_unlock(&s->mu);
}

void nb_server_live_remove(nb_server *s, nb_srv_req *r)
{
    pthread_mutex_lock(&s->mu);
    if (r->in_live) {
        if (r->prev) r->prev->next = r->next;
        else s->live = r->next;
        if (r->next) r->next->prev = r->prev;
        r->in_live = 0;
        s->n_live--;
    }
    pthread_mutex_unlock(&s->mu);
}

/* Suspended connections are invisible to MHD, so a client that hangs up while its request
 * waits or streams would go unnoticed until the next write. The watcher keeps every
 * generation request's socket in an epoll set for EPOLLRDHUP and aborts on hang-up. The
 * event carries the request's serial, looked up in the live list, never a pointer. */
void nb_server_watch(nb_server *s, nb_srv_req *r)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci || s->watch_fd < 0) return;
    struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLHUP | EPOLLERR, .data.u64 = r->serial};
    pthread_mutex_lock(&r->mu);
    if (epoll_ctl(s->watch_fd, EPOLL_CTL_ADD, ci->connect_fd, &ev) == 0) r->watched = ci->connect_fd + 1;
    pthread_mutex_unlock(&r->mu);
}

void nb_server_unwatch(nb_server *s, nb_srv_req *r)
{
    pthread_mutex_lock(&r->mu);
    int fd = r->watched - 1;
    r->watched = 0;
    pthread_mutex_unlock(&r->mu);
    if (fd >= 0) epoll_ctl(s->watch_fd, EPOLL_CTL_DEL, fd, NULL);
}

static void *nb_watch_main(void *arg)
{
    nb_server *s = arg;
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(s->watch_fd, evs, 64, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 == 0) return NULL; /* the stop pipe */
            nb_srv_req *hit = NULL;
            pthread_mutex_lock(&s->mu);
            for (nb_srv_req *r = s->live; r; r = r->next)
                if (r->serial == evs[i].data.u64) {
                    hit = r;
                    pthread_mutex_lock(&r->mu);
                    r->refs++;
                    pthread_mutex_unlock(&r->mu);
                    break;
                }
            pthread_mutex_unlock(&s->mu);
            if (!hit) continue;
            pthread_mutex_lock(&hit->mu);
            int fd = hit->watched - 1;
            hit->watched = 0;
            hit->client_gone = 1;
            pthread_mutex_unlock(&hit->mu);
            if (fd >= 0) epoll_ctl(s->watch_fd, EPOLL_CTL_DEL, fd, NULL);
            NB_LOG_DEBUG("http", "%s: client hung up, aborting", hit->id);
            nb_session_abort(hit);
            nb_srv_req_unref(hit);
        }
    }
    return NULL;
}

/* ---- GET endpoints ------------------------------------------------------------------ */

static cJSON *nb_model_object(nb_server *s)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->served_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "nibble");
    cJSON_AddStringToObject(m, "root", s->info.model_name);
    cJSON_AddNumberToObject(m, "max_model_len", s->info.context_length);
    cJSON_AddNumberToObject(m, "vocab_size", s->info.vocab_size);
    return m;
}

/* GET /v1/models, or GET /v1/models/ID when id is not NULL. */
static enum MHD_Result nb_get_models(struct MHD_Connection *c, nb_server *s, const char *id)
{
    cJSON *o;
    if (id) {
        if (!s->ready || (strcmp(id, s->served_name) && strcmp(id, s->info.model_name)))
            return nb_error_reply(c, s, 404, "invalid_request_error", "model_not_found", "no such model");
        o = nb_model_object(s);
    } else {
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON *d = cJSON_AddArrayToObject(o, "data");
        if (s->ready) cJSON_AddItemToArray(d, nb_model_object(s));
    }
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return body ? nb_respond(c, s, 200, "application/json", body, NULL, NULL) : MHD_NO;
}

static enum MHD_Result nb_get_metrics(struct MHD_Connection *c, nb_server *s)
{
    nb_strbuf b = {0};
    nb_srv_metrics_render(s->metrics, s->ready ? s->engine : NULL, s->ready, &b);
    if (b.oom || !b.p) {
        nb_sb_free(&b);
        return MHD_NO;
    }
    return nb_respond(c, s, 200, "text/plain; version=0.0.4", b.p, NULL, NULL);
}

/* ---- request dispatch --------------------------------------------------------------- */

static int nb_authorized(struct MHD_Connection *c, nb_server *s)
{
    if (!s->api_key[0]) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
    h += 7;
    while (*h == ' ') h++;
    /* Constant-time compare: the key must not leak through timing. */
    size_t n = strlen(s->api_key), m = strlen(h);
    unsigned diff = n != m;
    for (size_t i = 0; i < n; i++) diff |= (unsigned)(s->api_key[i] ^ (i < m ? h[i] : 0));
    return diff == 0;
}

static enum MHD_Result nb_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                     const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    nb_server *s = cls;
    nb_conn_ctx *ctx = *con_cls;
    int is_post = !strcmp(method, "POST"), is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        if (!ctx) return MHD_NO;
        *con_cls = ctx;
        pthread_mutex_lock(&s->mu);
        s->n_conns++;
        pthread_mutex_unlock(&s->mu);
        if (is_post) {
            /* Refuse before reading a body nobody will use. */
            if (!strncmp(url, "/v1/", 4) && !nb_authorized(c, s)) {
                ctx->too_large = 2;
                return nb_error_reply(c, s, 401, "invalid_request_error", "invalid_api_key",
                                      "missing or incorrect API key (send Authorization: Bearer KEY)");
            }
            const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
            if (cl && strtoull(cl, NULL, 10) > s->p.max_body_bytes) {
                ctx->too_large = 2; /* answered at once; the body is never read (2: answered) */
                char msg[128];
                snprintf(msg, sizeof msg, "request body exceeds %zu bytes", s->p.max_body_bytes);
                return nb_error_reply(c, s, 413, "invalid_request_error", "request_too_large", msg);
            }
            return MHD_YES; /* wait for the body */
        }
    }
    if (ctx->too_large == 2) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (ctx->req) {
        /* Resumed (non-stream finished) or a late call after a response was queued. */
        if (!ctx->is_stream) return nb_session_complete(s, c, ctx);
        return MHD_YES;
    }
    if (is_post && *upload_size) {
        if (!ctx->too_large && ctx->body.len + *upload_size > s->p.max_body_bytes) ctx->too_large = 1;
        if (!ctx->too_large) nb_sb_add(&ctx->body, upload, *upload_size);
        if (ctx->body.oom) ctx->too_large = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    int gen = !strcmp(url, "/v1/completions") ? 1 : !strcmp(url, "/v1/chat/completions") ? 2 : 0;
    int v1 = !strncmp(url, "/v1/", 4);
    if (!strcmp(url, "/health") || !strcmp(url, "/health_generate")) {
        if (!is_get) return nb_error_reply(c, s, 405, "invalid_request_error", "method_not_allowed", "use GET");
        const char *st = s->draining ? "draining" : s->ready ? "ok" : "loading";
        char body[64];
        snprintf(body, sizeof body, "{\"status\":\"%s\"}", st);
        return nb_respond(c, s, s->ready && !s->draining ? 200 : 503, "application/json", strdup(body), NULL, NULL);
    }
    if (!strcmp(url, "/metrics")) {
        if (!is_get) return nb_error_reply(c, s, 405, "invalid_request_error", "method_not_allowed", "use GET");
        return nb_get_metrics(c, s);
    }
    if (!strcmp(url, "/version")) {
        char body[128];
        snprintf(body, sizeof body, "{\"version\":\"%s\"}", nb_version());
        return nb_respond(c, s, 200, "application/json", strdup(body), NULL, NULL);
    }
    if (v1 && !nb_authorized(c, s))
        return nb_error_reply(c, s, 401, "invalid_request_error", "invalid_api_key",
                              "missing or incorrect API key (send Authorization: Bearer KEY)");
    if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11)) {
        if (!is_get) return nb_error_reply(c, s, 405, "invalid_request_error", "method_not_allowed", "use GET");
        return nb_get_models(c, s, url[10] == '/' ? url + 11 : NULL);
    }
    if (!gen) return nb_error_reply(c, s, 404, "invalid_request_error", "not_found", "no such endpoint");
    if (!is_post) return nb_error_reply(c, s, 405, "invalid_request_error", "method_not_allowed", "use POST");
    if (ctx->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body exceeds %zu bytes", s->p.max_body_bytes);
        return nb_error_reply(c, s, 413, "invalid_request_error", "request_too_large", msg);
    }
    if (!s->ready) return nb_error_reply(c, s, 503, "server_error", "loading", "the model is still loading");
    if (s->draining) return nb_error_reply(c, s, 503, "server_error", "shutting_down", "the server is shutting down");
    return nb_session_begin(s, c, ctx, gen == 2 ? NB_OAI_CHAT : NB_OAI_COMPLETIONS);
}

static void nb_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode tc)
{
    nb_server *s = cls;
    nb_conn_ctx *ctx = *con_cls;
    if (!ctx) return;
    *con_cls = NULL;
    if (ctx->req) nb_session_conn_closed(ctx->req, tc != MHD_REQUEST_TERMINATED_COMPLETED_OK);
    nb_sb_free(&ctx->body);
    free(ctx);
    pthread_mutex_lock(&s->mu);
    s->n_conns--;
    pthread_mutex_unlock(&s->mu);
}

static void nb_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = 0;
    NB_LOG_DEBUG("http", "mhd: %s", line);
}

/* ---- lifecycle ---------------------------------------------------------------------- */

nb_status nb_server_start(const nb_server_params *p, nb_server **out)
{
    *out = NULL;
    nb_server *s = calloc(1, sizeof *s);
    if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "server");
    s->p = *p;
    snprintf(s->host, sizeof s->host, "%s", p->host ? p->host : "127.0.0.1");
    snprintf(s->api_key, sizeof s->api_key, "%s", p->api_key ? p->api_key : "");
    snprintf(s->served_name, sizeof s->served_name, "%s", p->served_model_name ? p->served_model_name : "");
    if (!s->p.max_body_bytes) s->p.max_body_bytes = 32u << 20;
    if (s->p.http_threads < 1) s->p.http_threads = 1;
    if (s->p.max_connections < 16) s->p.max_connections = 16384;
    pthread_mutex_init(&s->mu, NULL);
    s->metrics = nb_srv_metrics_new();
    s->watch_fd = epoll_create1(EPOLL_CLOEXEC);
    if (!s->metrics || s->watch_fd < 0 || pipe(s->watch_stop_pipe) != 0) {
        nb_server_free(s);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "server: metrics or epoll set");
    }
    struct epoll_event sev = {.events = EPOLLIN, .data.u64 = 0};
    epoll_ctl(s->watch_fd, EPOLL_CTL_ADD, s->watch_stop_pipe[0], &sev);
    /* Thousands of streams need thousands of descriptors. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)p->port);
    if (inet_pton(AF_INET, s->host, &sa.sin_addr) != 1) {
        nb_server_free(s);
        return nb_error(NB_ERR_INVALID_ARG, "--host '%s': not an IPv4 address", p->host);
    }
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    /* The pool option only when asked for: MHD warns about a pool of one. */
    struct MHD_OptionItem pool[] = {
        {s->p.http_threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, (intptr_t)s->p.http_threads, NULL},
        {MHD_OPTION_END, 0, NULL}};
    s->mhd = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, nb_on_request, s, MHD_OPTION_SOCK_ADDR,
                              (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, nb_on_completed, s,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->p.max_connections,
                              MHD_OPTION_LISTEN_BACKLOG_SIZE, 4096u, MHD_OPTION_CONNECTION_TIMEOUT, 600u,
                              MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)256 * 1024, MHD_OPTION_EXTERNAL_LOGGER,
                              nb_mhd_log, NULL, MHD_OPTION_ARRAY, pool, MHD_OPTION_END);
    if (!s->mhd) {
        int port = p->port;
        nb_server_free(s);
        return nb_error(NB_ERR_IO, "server: cannot listen on %s:%d (in use, or no permission)", p->host, port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : p->port;
    if (pthread_create(&s->watch_th, NULL, nb_watch_main, s) != 0) {
        nb_server_free(s);
        return nb_error(NB_ERR_INTERNAL, "server: pthread_create failed");
    }
    NB_LOG_INFO("http", "listening on http://%s:%d (loading the model)", s->host, s->port);
    *out = s;
    return NB_OK;
}

nb_status nb_server_set_engine(nb_server *s, nb_engine *e)
{
    NB_TRY(nb_engine_get_info(e, &s->info));
    s->engine = e;
    s->tok = nb_engine_tokenizer(e);
    if (!s->served_name[0]) snprintf(s->served_name, sizeof s->served_name, "%s", s->info.model_name);
    s->think_open_id = s->think_close_id = -1;
    if (s->tok) {
        s->bos = nb_tokenizer_bos_token(s->tok);
        s->eos = nb_tokenizer_eos_token(s->tok);
        /* Special think tags vanish from decoded text: the reasoning split follows ids. */
        int32_t o = nb_tokenizer_token_to_id(s->tok, "<think>"), c = nb_tokenizer_token_to_id(s->tok, "</think>");
        if (o >= 0 && c >= 0 && nb_tokenizer_is_special(s->tok, o) && nb_tokenizer_is_special(s->tok, c))
            s->think_open_id = o, s->think_close_id = c;
    }
    nb_status st = NB_OK;
    const char *src = nb_engine_chat_template(e);
    if (src) {
        st = nb_template_compile(src, strlen(src), "chat_template", &s->tpl);
        if (st != NB_OK) {
            snprintf(s->tpl_error, sizeof s->tpl_error, "%s", nb_last_error());
            NB_LOG_WARN("http", "chat template does not compile, /v1/chat/completions disabled: %s", s->tpl_error);
        }
    } else {
        NB_LOG_WARN("http", "the model has no chat template: /v1/chat/completions answers 400");
    }
    __atomic_store_n(&s->ready, 1, __ATOMIC_SEQ_CST);
    NB_LOG_INFO("http", "serving '%s' on http://%s:%d (context %d tokens)", s->served_name, s->host, s->port,
                s->info.context_length);
    return st;
}

static void nb_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void nb_server_shutdown(nb_server *s, double grace_s)
{
    if (!s || !s->mhd) return;
    __atomic_store_n(&s->draining, 1, __ATOMIC_SEQ_CST);
    MHD_socket lfd = MHD_quiesce_daemon(s->mhd);
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    pthread_mutex_lock(&s->mu);
    int live = s->n_live;
    pthread_mutex_unlock(&s->mu);
    NB_LOG_INFO("http", "shutting down: %d request(s) running, grace %.1f s", live, grace_s);
    int64_t deadline = nb_now_ns() + (int64_t)(grace_s * 1e9);
    while (live > 0 && nb_now_ns() < deadline) {
        nb_sleep_ms(20);
        pthread_mutex_lock(&s->mu);
        live = s->n_live;
        pthread_mutex_unlock(&s->mu);
    }
    if (live > 0 && s->engine) {
        NB_LOG_WARN("http", "grace period over: aborting %d request(s)", live);
        /* Take references under the lock, abort outside it (abort may take engine locks). */
        pthread_mutex_lock(&s->mu);
        nb_srv_req **v = calloc((size_t)s->n_live + 1, sizeof *v);
        int n = 0;
        for (nb_srv_req *r = s->live; r && v; r = r->next) {
            pthread_mutex_lock(&r->mu);
            r->refs++;
            pthread_mutex_unlock(&r->mu);
            v[n++] = r;
        }
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < n; i++) {
            nb_session_abort(v[i]);
            nb_srv_req_unref(v[i]);
        }
        free(v);
    }
    /* Let the final events and [DONE] reach the clients. */
    int64_t flush_deadline = nb_now_ns() + 5000000000LL;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int busy = s->n_live + s->n_conns;
        pthread_mutex_unlock(&s->mu);
        if (!busy || nb_now_ns() > flush_deadline) break;
        nb_sleep_ms(20);
    }
    pthread_mutex_lock(&s->mu);
    int stuck = s->n_live;
    pthread_mutex_unlock(&s->mu);
    if (stuck) NB_LOG_WARN("http", "%d request(s) still live at stop", stuck);
    /* libmicrohttpd must not be stopped with suspended connections: wake them all; with
     * `stopping` set they close instead of parking again. */
    __atomic_store_n(&s->stopping, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&s->mu);
    for (nb_srv_req *r = s->live; r; r = r->next) {
        pthread_mutex_lock(&r->mu);
        if (r->suspended && r->conn_alive) {
            r->suspended = 0;
            MHD_resume_connection(r->conn);
        }
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&s->mu);
    if (stuck) nb_sleep_ms(100);
    MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
    NB_LOG_INFO("http", "stopped");
}

void nb_server_free(nb_server *s)
{
    if (!s) return;
    if (s->mhd) MHD_stop_daemon(s->mhd);
    if (s->watch_th) {
        char b = 1;
        if (write(s->watch_stop_pipe[1], &b, 1) == 1) pthread_join(s->watch_th, NULL);
    }
    if (s->watch_fd >= 0) close(s->watch_fd);
    if (s->watch_stop_pipe[0] > 0) close(s->watch_stop_pipe[0]), close(s->watch_stop_pipe[1]);
    if (s->tpl) nb_template_free(s->tpl);
    nb_srv_metrics_free(s->metrics);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
