#!/usr/bin/env python3
"""Load and disconnect tests of `nibble serve` (stdlib only):
  1. 1,000 concurrent streaming clients (driven by `nibble bench`, one epoll thread) all
     complete without an error, and the server is idle afterwards;
  2. clients that hang up mid-stream, while queued, or during a non-streaming request get
     their requests aborted: running/waiting requests, used KV pages and live HTTP requests
     return to zero (read from /metrics), and the server keeps serving;
  3. --max-queued-requests overflow answers 503 with Retry-After.
  NIBBLE_BIN=build/nibble python3 tests/server/test_server_load.py"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import srvlib  # noqa: E402

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("  FAIL:", what, file=sys.stderr)


def wait_idle(base, timeout=20):
    names = ["nibble:num_requests_running", "nibble:num_requests_waiting", "nibble:kv_cache_used_tokens",
             "nibble:kv_pages_used", "nibble:http_requests_active"]
    deadline = time.time() + timeout
    while True:
        vals = {n: srvlib.metric(base, n) for n in names}
        if all(v == 0 for v in vals.values()) or time.time() > deadline:
            return vals
        time.sleep(0.05)


def load(base, n=1000):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "load.jsonl")
        t0 = time.time()
        r = subprocess.run([srvlib.BIN, "bench", "--base-url", base, "--concurrency", str(n), "--num-prompts", str(n),
                            "--input-len", "8", "--output-len", "4", "--warmup", "0", "--output-file", out],
                           capture_output=True, text=True, timeout=240)
        print(r.stdout[-1500:])
        check(r.returncode == 0, f"bench exit {r.returncode}: {r.stderr[-500:]}")
        row = json.loads(open(out).read().splitlines()[0])
        check(row["completed"] == n and row["failed"] == 0, f"{row['completed']} completed, {row['failed']} failed")
        check(row["total_output_tokens"] == 4 * n, f"output tokens {row['total_output_tokens']}")
        check(row["peak_concurrency"] == n, f"peak in flight {row['peak_concurrency']} (want {n})")
        print(f"{n} concurrent streams: {time.time() - t0:.1f} s")
    vals = wait_idle(base)
    check(all(v == 0 for v in vals.values()), f"not idle after the load: {vals}")


def post_raw(base, path, body):
    host, port = base.split("//")[1].split(":")
    sk = socket.create_connection((host, int(port)), timeout=60)
    data = json.dumps(body).encode()
    sk.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
               % (path.encode(), len(data), data))
    return sk


def disconnects(base):
    aborted0 = srvlib.metric(base, 'nibble:request_finished_total{finish_reason="abort"}') or 0
    body = {"prompt": [65] * 32, "max_tokens": 4000, "ignore_eos": True, "stream": True}
    # Mid-stream: read until the first token chunk, then hang up.
    streams = [post_raw(base, "/v1/completions", body) for _ in range(16)]
    for sk in streams:
        buf = b""
        while b"data: {" not in buf:
            got = sk.recv(65536)
            if not got:
                break
            buf += got
        check(b"data: {" in buf, "a stream delivered a chunk before the hang-up")
    running = srvlib.metric(base, "nibble:num_requests_running")
    check(running >= 16, f"{running} running before the hang-up")
    for sk in streams:
        sk.close()
    # Non-streaming and chat requests whose clients leave before any output is written.
    quiet = [post_raw(base, "/v1/completions", dict(body, stream=False)) for _ in range(4)]
    quiet += [post_raw(base, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                     "max_tokens": 4000, "ignore_eos": True}) for _ in range(4)]
    time.sleep(0.3)
    for sk in quiet:
        sk.close()
    t0 = time.time()
    vals = wait_idle(base)
    check(all(v == 0 for v in vals.values()), f"not idle after hang-ups: {vals}")
    print(f"hang-ups cleaned up in {time.time() - t0:.2f} s: {vals}")
    aborted = (srvlib.metric(base, 'nibble:request_finished_total{finish_reason="abort"}') or 0) - aborted0
    check(aborted == 24, f"{aborted} requests aborted (want 24)")
    st, _, b = srvlib.http("POST", base + "/v1/completions", {"prompt": [65, 66], "max_tokens": 3, "ignore_eos": True})
    check(st == 200 and json.loads(b)["usage"]["completion_tokens"] == 3, "serves after the hang-ups")
    check(srvlib.http("GET", base + "/health")[0] == 200, "healthy after the hang-ups")


def queue_full():
    # --max-queued-requests: overflow is 503 with Retry-After, never a hang or a 500.
    import threading
    with srvlib.Server(["--max-queued-requests", "2", "--max-running-requests", "1"]) as s:
        res = []

        def go():
            res.append(srvlib.http("POST", s.base + "/v1/completions",
                                   {"prompt": [65] * 8, "max_tokens": 30, "ignore_eos": True}))
        ts = [threading.Thread(target=go) for _ in range(12)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        codes = sorted(r[0] for r in res)
        check(set(codes) <= {200, 503} and 200 in codes and 503 in codes, f"queue overflow statuses {codes}")
        check(all(r[1].get("Retry-After") == "1" and b'"queue_full"' in r[2] for r in res if r[0] == 503),
              "503 carries Retry-After and code queue_full")
        check(all(json.loads(r[2])["usage"]["completion_tokens"] == 30 for r in res if r[0] == 200), "admitted ones complete")


def main():
    if not os.path.exists(srvlib.BIN) and not os.environ.get("NIBBLE_SERVER_URL"):
        print("SKIP: nibble not built", file=sys.stderr)
        return 77
    with srvlib.Server() as s:
        disconnects(s.base)
        load(s.base, int(os.environ.get("NIBBLE_LOAD_CLIENTS", "1000")))
    if not os.environ.get("NIBBLE_SERVER_URL"):
        queue_full()
    print(f"load tests: {len(FAILS)} failure(s)")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
