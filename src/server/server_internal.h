/* Internals shared by server.c (HTTP daemon, routing, lifecycle) and session.c (one
 * generation request: prompt building, engine submit, event queue, OpenAI formatting). */
#ifndef NB_SERVER_SERVER_INTERNAL_H
#define NB_SERVER_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>

#include "server/metrics.h"
#include "server/oai_request.h"
#include "server/reasoning.h"
#include "server/server.h"
#include "server/strbuf.h"

struct nb_template;
struct nb_tokenizer;
typedef struct nb_srv_req nb_srv_req;

struct nb_server {
    nb_server_params p;
    char host[256], api_key[512], served_name[256];
    struct MHD_Daemon *mhd;
    int port;
    nb_engine *engine; /* NULL while loading */
    nb_engine_info info;
    const struct nb_tokenizer *tok;
    struct nb_template *tpl;
    char tpl_error[512];
    const char *bos, *eos;
    int32_t think_open_id, think_close_id; /* >= 0 when <think>/</think> are special tokens */
    nb_srv_metrics *metrics;
    volatile int ready, draining, stopping; /* stopping: HTTP is about to stop, never suspend */
    pthread_mutex_t mu;     /* guards live list and counters below */
    nb_srv_req *live;       /* generation requests with engine work outstanding */
    int n_live, n_conns;    /* n_conns: connection contexts not yet completed */
    uint64_t next_serial;
    int watch_fd;           /* epoll set of client sockets (disconnect detection) */
    pthread_t watch_th;
    int watch_stop_pipe[2];
};

/* One event copied from the engine thread. */
typedef struct nb_srv_ev {
    struct nb_srv_ev *next;
    int choice;     /* global index: prompt * n + choice */
    int finish;     /* 0: tokens, 1: finish */
    nb_finish_reason reason;
    int completion_tokens;
    int n_tokens, n_top;
    int32_t *ids;
    float *lps;
    nb_token_logprob *top; /* [n_tokens * n_top] */
    char *text;
    size_t text_len;
} nb_srv_ev;

typedef struct nb_srv_choice {
    nb_reasoning rp;
    nb_strbuf text, reasoning; /* non-stream accumulation */
    cJSON *lp;                 /* non-stream logprobs accumulation */
    size_t text_offset;        /* completions logprobs text_offset */
    int started, finished, completion_tokens;
    nb_finish_reason reason;
    int64_t first_ns, last_ns;
} nb_srv_choice;

typedef struct nb_srv_sub {
    nb_srv_req *req;
    int prompt_index;
    uint64_t engine_id;
    int submitted, done;
    int32_t *ids;
    int n_ids;
    char *echo_text; /* prompt text for echo */
} nb_srv_sub;

struct nb_srv_req {
    nb_server *srv;
    pthread_mutex_t mu;
    int refs;
    uint64_t serial;
    nb_srv_req *prev, *next; /* live list (srv->mu) */
    int in_live;
    struct MHD_Connection *conn;
    int conn_alive, suspended, watched, client_gone;
    nb_oai_request q;
    nb_srv_sub *subs;
    int n_subs, subs_live;
    nb_srv_choice *choices;
    int n_choices, n_per_prompt;
    nb_srv_ev *ev_head, *ev_tail;
    int finished;              /* every sub delivered its last event */
    int any_abort;
    /* output (HTTP thread only) */
    nb_strbuf out;
    size_t out_off;
    int done_sent, usage_sent;
    char id[48];
    long created;
    int64_t t0_ns;
    int prompt_tokens_total;
    int prompt_open;           /* rendered chat prompt ends inside <think> */
};

/* Per-connection state kept in MHD's con_cls. */
typedef struct nb_conn_ctx {
    nb_strbuf body;
    int too_large;
    nb_srv_req *req;
    int is_stream;
} nb_conn_ctx;

/* session.c */
/* Handle a complete POST body for a generation endpoint: parse, validate, submit, and
 * queue a response (error, stream) or suspend (non-stream). */
enum MHD_Result nb_session_begin(nb_server *s, struct MHD_Connection *c, nb_conn_ctx *ctx, nb_oai_kind kind);
/* Called again after a non-stream request was resumed: queue the full response. */
enum MHD_Result nb_session_complete(nb_server *s, struct MHD_Connection *c, nb_conn_ctx *ctx);
/* The HTTP side is done with the request (response sent or client gone). */
void nb_session_conn_closed(nb_srv_req *r, int client_gone);
void nb_srv_req_unref(nb_srv_req *r);
/* Abort every engine request of r (disconnect, shutdown). Thread-safe. */
void nb_session_abort(nb_srv_req *r);

/* server.c */
enum MHD_Result nb_respond(struct MHD_Connection *c, nb_server *s, int status, const char *ctype, char *body,
                           const char *hdr_name, const char *hdr_value);
enum MHD_Result nb_respond_error(struct MHD_Connection *c, nb_server *s, const nb_oai_error *err);
void nb_server_live_add(nb_server *s, nb_srv_req *r);
void nb_server_live_remove(nb_server *s, nb_srv_req *r);
void nb_server_watch(nb_server *s, nb_srv_req *r);
void nb_server_unwatch(nb_server *s, nb_srv_req *r);

#endif
