#!/usr/bin/env python3
"""A tiny OpenAI-compatible streaming server: the test double for `nibble bench` when no
real server is at hand. Each request streams exactly max_tokens one-token chunks, DELAY
seconds apart, then a usage chunk (if stream_options.include_usage) and `data: [DONE]`.
It keeps Prometheus-style counters at /metrics so the bench's scraper can be checked, and the
last request body at /debug/last_body so a test can see what the bench sent.
  python3 tests/bench/fake_openai.py PORT [DELAY_S]
Standard library only."""
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATS = {"prompt": 0, "gen": 0, "running": 0}
LAST = {"body": None}
DELAY = float(sys.argv[2]) if len(sys.argv) > 2 else 0.002


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # One chunk per token must leave at once, not wait for Nagle.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def _send(self, code, body, ctype="application/json"):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": "fake-model", "object": "model", "owned_by": "test", "vocab_size": 1000}]}))
        elif self.path == "/debug/last_body":
            with LOCK:
                self._send(200, json.dumps(LAST["body"]))
        elif self.path == "/metrics":
            with LOCK:
                s = dict(STATS)
            self._send(200, "nibble:prompt_tokens_total %d\nnibble:generation_tokens_total %d\n"
                       "nibble:num_requests_running %d\nnibble:kv_cache_usage_perc 0.25\n"
                       % (s["prompt"], s["gen"], s["running"]), "text/plain")
        else:
            self._send(404, json.dumps({"error": {"message": "no such path", "type": "not_found"}}))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        chat = self.path == "/v1/chat/completions"
        if chat:
            plen = len(body["messages"][0]["content"])
        else:
            p = body["prompt"]
            plen = len(p) if isinstance(p, (list, str)) else 0
        n = int(body.get("max_tokens", 16))
        with LOCK:
            STATS["running"] += 1
            LAST["body"] = body
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(obj):
            data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        for i in range(n):
            time.sleep(DELAY)
            if chat:
                event({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "x"},
                       "finish_reason": None if i + 1 < n else "length"}]})
            else:
                event({"object": "text_completion", "choices": [{"index": 0, "text": "x",
                       "finish_reason": None if i + 1 < n else "length"}]})
        # Count before the stream ends, as a real server does: a client that reads
        # /metrics right after [DONE] must see this request.
        with LOCK:
            STATS["running"] -= 1
            STATS["prompt"] += plen
            STATS["gen"] += n
        if (body.get("stream_options") or {}).get("include_usage"):
            event({"choices": [], "usage": {"prompt_tokens": plen, "completion_tokens": n,
                                            "total_tokens": plen + n}})
        event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


if __name__ == "__main__":
    ThreadingHTTPServer.request_queue_size = 4096
    srv = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    srv.daemon_threads = True
    srv.serve_forever()
