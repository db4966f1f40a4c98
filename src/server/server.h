/* nibble's OpenAI-compatible HTTP server on libmicrohttpd: epoll with an internal polling
 * thread (or a small pool), streaming through suspended connections (no thread per
 * connection), one engine behind it.
 *   nb_server_start(&p, &s)        listen; /health answers 503 while the model loads
 *   nb_server_set_engine(s, e)     serve (compiles the chat template)
 *   nb_server_shutdown(s, grace)   stop accepting, drain, abort the rest, stop HTTP
 *   nb_engine_destroy(e); nb_server_free(s);
 * Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health,
 * GET /metrics, GET /version. JSON lives in src/server only; the engine sees typed
 * requests. Docs: docs/server.md. Tests: tests/server/. */
#ifndef NB_SERVER_SERVER_H
#define NB_SERVER_SERVER_H

#include <stddef.h>

#include "nibble.h"

typedef struct nb_server nb_server;

typedef struct nb_server_params {
    const char *host;              /* bind address; default "127.0.0.1" */
    int port;                      /* default 30000; 0 picks a free port (nb_server_port) */
    const char *api_key;           /* NULL: no auth; else every /v1 endpoint needs "Authorization: Bearer KEY" */
    const char *served_model_name; /* NULL: the engine's model name */
    size_t max_body_bytes;         /* larger bodies get 413; default 32 MiB */
    int reasoning_parser;          /* nb_reasoning_kind; default none */
    int http_threads;              /* MHD polling threads; default 1 */
    int max_connections;           /* default 16384 */
} nb_server_params;

nb_server_params nb_server_default_params(void);

/* Bind and start serving /health (503), /metrics and 503s for /v1 until an engine is set.
 * NB_ERR_IO when the address cannot be bound (named in the message). */
nb_status nb_server_start(const nb_server_params *p, nb_server **out);

/* The port actually bound (useful with port 0). */
int nb_server_port(const nb_server *s);

/* Attach the loaded engine; from now on /health is 200. NB_ERR_FORMAT when the model's
 * chat template does not compile (chat then answers 400 naming the template error; the
 * server still serves completions). */
nb_status nb_server_set_engine(nb_server *s, nb_engine *e);

/* Graceful stop: refuse new connections and requests (503), wait up to grace_s seconds
 * for running requests, abort the rest (streams end with finish_reason "abort" and
 * [DONE]), flush, stop HTTP. Call before nb_engine_destroy. */
void nb_server_shutdown(nb_server *s, double grace_s);

/* Free (after nb_server_shutdown and nb_engine_destroy). NULL is a no-op. */
void nb_server_free(nb_server *s);

#endif
