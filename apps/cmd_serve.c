/* nibble serve: the OpenAI-compatible server.
 *   nibble serve --model synthetic:glm5-tiny --port 30000
 *   curl localhost:30000/v1/completions -d '{"prompt": "Hello", "max_tokens": 8}'
 * Loads the model behind a listening socket (/health answers 503 until it is ready),
 * serves until SIGINT/SIGTERM, then drains (--shutdown-timeout) and exits 0.
 * Docs: docs/server.md. Tests: tests/server/. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "engine/engine.h"
#include "server/reasoning.h"
#include "server/server.h"

const char nb_cmd_serve_summary[] = "serve a model over the OpenAI HTTP API (completions, chat, SSE, /metrics)";

static void nb_serve_usage(FILE *f)
{
    fprintf(f,
            "usage: nibble serve [options]\n"
            "  --model M                  model folder or synthetic:ARCH[:k=v,...] (default synthetic:glm5-tiny)\n"
            "  --tokenizer DIR            tokenizer folder (default: the model folder)\n"
            "  --host H                   bind address (default 127.0.0.1)\n"
            "  --port P                   port (default 30000; 0: any free port, printed)\n"
            "  --api-key KEY              require 'Authorization: Bearer KEY' on /v1 endpoints\n"
            "  --served-model-name NAME   model id in /v1/models and responses\n"
            "  --reasoning-parser P       glm45 | qwen3 | deepseek-r1: split reasoning_content in chat\n"
            "  --max-body-mb N            request body limit in MiB (default 32; larger gets 413)\n"
            "  --http-threads N           HTTP polling threads (default 1)\n"
            "  --shutdown-timeout S       grace period for running requests on SIGINT/SIGTERM (default 30)\n"
            "engine knobs (SGLang names and meanings):\n"
            "  --backend cpu|cuda  --device N  --threads N  --page-size N  --mem-fraction-static F\n"
            "  --cpu-mem-gb G  --max-total-tokens N  --max-running-requests N\n"
            "  --num-continuous-decode-steps N  --chunked-prefill-size N  --max-prefill-tokens N\n"
            "  --schedule-policy fcfs|lpm  --max-queued-requests N  --context-length N  --random-seed N\n"
            "  --cuda-graph-max-bs N (1024)  --disable-cuda-graph\n"
            "  --kv-cache-dtype auto|float32|bfloat16  (MLA latent rows in the KV cache; auto: bfloat16 on cuda)\n");
}

/* SIGINT/SIGTERM go to a handler, not to a mask: libraries (OpenBLAS) start threads before
 * main, so no mask set here could cover every thread. Before the model is loaded there is
 * nothing to drain, and a second signal means "now": both exit at once with the shell's
 * 128 + signal. The first signal after loading wakes main through a pipe. */
static volatile sig_atomic_t nb_sig_loaded, nb_sig_delivered;
static int nb_sig_pipe[2] = {-1, -1};

static void nb_on_signal(int sig)
{
    if (!nb_sig_loaded || nb_sig_delivered) {
        static const char msg[] = "nibble serve: exiting now\n";
        if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
        }
        _exit(128 + sig);
    }
    nb_sig_delivered = 1;
    int saved = errno;
    if (write(nb_sig_pipe[1], &sig, sizeof sig) < 0) {
    }
    errno = saved;
}

int nb_cmd_serve(int argc, char **argv)
{
    nb_engine_params ep = nb_engine_default_params();
    ep.model = "synthetic:glm5-tiny";
    nb_server_params sp = nb_server_default_params();
    double shutdown_timeout = 30;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NB_ARG(name) (!strcmp(a, name) && v && (i++, 1))
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            nb_serve_usage(stdout);
            return 0;
        } else if (NB_ARG("--model") || NB_ARG("--model-path")) ep.model = v;
        else if (NB_ARG("--tokenizer")) ep.tokenizer = v;
        else if (NB_ARG("--host")) sp.host = v;
        else if (NB_ARG("--port")) sp.port = atoi(v);
        else if (NB_ARG("--api-key")) sp.api_key = v;
        else if (NB_ARG("--served-model-name")) sp.served_model_name = v;
        else if (NB_ARG("--max-body-mb")) sp.max_body_bytes = (size_t)(atof(v) * 1024 * 1024);
        else if (NB_ARG("--http-threads")) sp.http_threads = atoi(v);
        else if (NB_ARG("--shutdown-timeout")) shutdown_timeout = atof(v);
        else if (NB_ARG("--reasoning-parser")) {
            int k = nb_reasoning_parse_kind(v);
            if (k < 0) {
                fprintf(stderr, "nibble serve: --reasoning-parser %s: use glm45, qwen3 or deepseek-r1\n", v);
                return 2;
            }
            sp.reasoning_parser = k;
        } else if (NB_ARG("--backend")) {
            int b = nb_backend_parse(v);
            if (b < 0) {
                fprintf(stderr, "nibble serve: --backend %s: use cpu or cuda\n", v);
                return 2;
            }
            ep.backend = (nb_backend)b;
        } else if (NB_ARG("--schedule-policy")) {
            int k = nb_schedule_policy_parse(v);
            if (k < 0) {
                fprintf(stderr, "nibble serve: --schedule-policy %s: use fcfs or lpm\n", v);
                return 2;
            }
            ep.schedule_policy = (nb_schedule_policy)k;
        } else if (NB_ARG("--kv-cache-dtype")) {
            int k = nb_kv_cache_dtype_parse(v);
            if (k < 0) {
                fprintf(stderr, "nibble serve: --kv-cache-dtype %s: use auto, float32 (fp32) or bfloat16 (bf16)\n", v);
                return 2;
            }
            ep.kv_cache_dtype = (nb_kv_cache_dtype)k;
        } else if (NB_ARG("--device")) ep.device = atoi(v);
        else if (NB_ARG("--threads")) ep.threads = atoi(v);
        else if (NB_ARG("--page-size")) ep.page_size = atoi(v);
        else if (NB_ARG("--mem-fraction-static")) ep.mem_fraction_static = atof(v);
        else if (NB_ARG("--cpu-mem-gb")) ep.cpu_mem_gb = atof(v);
        else if (NB_ARG("--max-total-tokens")) ep.max_total_tokens = atoll(v);
        else if (NB_ARG("--max-running-requests")) ep.max_running_requests = atoi(v);
        else if (NB_ARG("--num-continuous-decode-steps")) ep.num_continuous_decode_steps = atoi(v);
        else if (NB_ARG("--chunked-prefill-size")) ep.chunked_prefill_size = atoi(v);
        else if (NB_ARG("--max-prefill-tokens")) ep.max_prefill_tokens = atoi(v);
        else if (NB_ARG("--max-queued-requests")) ep.max_queued_requests = atoi(v);
        else if (NB_ARG("--context-length")) ep.context_length = atoi(v);
        else if (NB_ARG("--random-seed")) ep.random_seed = strtoull(v, NULL, 10);
        else if (NB_ARG("--cuda-graph-max-bs")) ep.cuda_graph_max_bs = atoi(v);
        else if (!strcmp(a, "--disable-cuda-graph")) ep.disable_cuda_graph = 1;
        else {
            fprintf(stderr, "nibble serve: unknown or incomplete option '%s'\n\n", a);
            nb_serve_usage(stderr);
            return 2;
        }
#undef NB_ARG
    }
    if (sp.port < 0 || sp.port > 65535 || !(shutdown_timeout >= 0)) {
        fprintf(stderr, "nibble serve: --port must be 0..65535 and --shutdown-timeout >= 0\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = nb_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (pipe(nb_sig_pipe) != 0 || sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
        fprintf(stderr, "nibble serve: cannot install signal handlers\n");
        return 1;
    }
    nb_server *srv;
    if (nb_server_start(&sp, &srv) != NB_OK) {
        fprintf(stderr, "nibble serve: %s\n", nb_last_error());
        return 1;
    }
    /* The port line is for scripts that start the server on port 0. */
    printf("nibble serve: listening on http://%s:%d\n", sp.host, nb_server_port(srv));
    fflush(stdout);
    nb_engine *eng;
    nb_status st = nb_engine_create(&ep, &eng);
    if (st != NB_OK) {
        fprintf(stderr, "nibble serve: %s: %s\n", ep.model, nb_last_error());
        nb_server_free(srv);
        return 1;
    }
    if (nb_server_set_engine(srv, eng) != NB_OK) nb_error_clear(); /* logged; completions still serve */
    nb_sig_loaded = 1;
    printf("nibble serve: ready\n");
    fflush(stdout);
    int sig = 0;
    while (read(nb_sig_pipe[0], &sig, sizeof sig) != (ssize_t)sizeof sig && errno == EINTR) {
    }
    NB_LOG_INFO("http", "%s received", sig == SIGINT ? "SIGINT" : "SIGTERM");
    nb_server_shutdown(srv, shutdown_timeout);
    nb_engine_destroy(eng);
    nb_server_free(srv);
    return 0;
}
