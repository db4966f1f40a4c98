/* The benchmark's HTTP client: one thread drives every request of a level through the
 * libcurl multi interface and epoll (curl_multi_socket_action), so thousands of
 * Server-Sent-Event streams run concurrently without a thread each. Requests go to the
 * OpenAI streaming API (/v1/completions or /v1/chat/completions) with temperature 0,
 * stream_options.include_usage and, when asked, ignore_eos (then the keys of
 * --extra-request-body over them, as SGLang's bench_serving merges its own); every chunk is timed as
 * SGLang's bench_serving times it (see metrics.h).
 * Exercised by tests/bench/test_bench_e2e.sh (against tests/bench/fake_openai.py and the
 * real server) and `nibble bench`. */
#ifndef NB_TOOLS_BENCH_CLIENT_H
#define NB_TOOLS_BENCH_CLIENT_H

#include <cjson/cJSON.h>

#include "nibble.h"
#include "tools/bench/dataset.h"
#include "tools/bench/metrics.h"

typedef struct nb_bench_client_cfg {
    const char *base_url;  /* "http://127.0.0.1:30000" (no trailing /v1) */
    const char *model;     /* "model" field */
    const char *api_key;   /* Bearer token, or NULL */
    int chat;              /* 1: /v1/chat/completions, 0: /v1/completions */
    int concurrency;       /* most requests in flight at once (>= 1) */
    double request_rate;   /* Poisson arrivals per second; <= 0 or inf: all at once */
    int ignore_eos;
    uint64_t seed;         /* arrival times */
    double timeout_s;      /* per request */
    int progress;          /* draw a progress bar (on a TTY) */
    const char *label;     /* progress bar label */
    const cJSON *extra;    /* --extra-request-body: an object whose keys are set in every request
                              body over the bench's own (SGLang's payload.update), or NULL */
} nb_bench_client_cfg;

/* Run n prompts; reqs[i] receives prompt i's timeline (caller zeroes reqs; frees them with
 * nb_bench_req_free). *duration_s: from the first send to the last completion. A failed
 * request is not an error here (it is counted); errors are setup failures (curl, epoll). */
nb_status nb_bench_run(const nb_bench_client_cfg *cfg, const nb_bench_prompt *prompts, int n,
                       nb_bench_req *reqs, double *duration_s);

/* GET base_url + path into a malloc'd NUL-terminated buffer; *status gets the HTTP code.
 * Used for /metrics, /v1/models and /health. */
nb_status nb_bench_http_get(const char *base_url, const char *path, const char *api_key, double timeout_s,
                            char **body, long *status);

#endif
