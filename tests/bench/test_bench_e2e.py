#!/usr/bin/env python3
"""`nibble bench` end to end: a small sweep (concurrency 1 and 4, tiny lengths) against the
fake OpenAI server (tests/bench/fake_openai.py) and against the real `nibble serve` on
synthetic:glm5-tiny. Completed requests and total output tokens must be exactly what was
asked, the JSON lines must parse, the HTML report must be produced.
  NIBBLE_BIN=build-srv/nibble python3 tests/bench/test_bench_e2e.py"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "server"))
import srvlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LEVELS = [(1, 3), (4, 8)]  # (concurrency, prompts)
OUT_LEN = 5


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def sweep(base, tmp, tag, extra=()):
    jsonl, html = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".html")
    cmd = [srvlib.BIN, "bench", "--base-url", base, "--concurrency", ",".join(str(c) for c, _ in LEVELS),
           "--num-prompts", ",".join(str(n) for _, n in LEVELS), "--input-len", "12", "--output-len", str(OUT_LEN),
           "--seed", "3", "--output-file", jsonl, "--report", html] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    print(r.stdout)
    assert r.returncode == 0, f"nibble bench exited {r.returncode}: {r.stderr[-2000:]}"
    rows = [json.loads(line) for line in open(jsonl)]
    assert len(rows) == len(LEVELS), rows
    for row, (conc, n) in zip(rows, LEVELS):
        assert row["max_concurrency"] == conc
        assert row["completed"] == n and row["failed"] == 0, row
        assert row["total_output_tokens"] == n * OUT_LEN, row
        assert row["peak_concurrency"] == min(conc, n), row
        assert row["mean_ttft_ms"] > 0 and row["mean_e2e_latency_ms"] >= row["mean_ttft_ms"], row
        assert row["median_tpot_ms"] >= 0 and row["p99_itl_ms"] >= row["median_itl_ms"], row
    page = open(html).read()
    assert page.count("<svg") >= 4 and "<script" not in page, "HTML report incomplete"
    return rows


def main():
    if not os.path.exists(srvlib.BIN):
        print("SKIP: nibble not built", file=sys.stderr)
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        fake = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_openai.py"), str(port), "0.001"])
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(200):
                try:
                    if srvlib.http("GET", base + "/v1/models")[0] == 200:
                        break
                except OSError:
                    time.sleep(0.05)
            rows = sweep(base, tmp, "fake")
            # The fake server counts tokens like a real one: the scraper saw them.
            for row, (_, n) in zip(rows, LEVELS):
                sm = row["server_metrics"]
                assert sm["available"] and sm["generation_tokens"] == n * OUT_LEN, sm
            sweep(base, tmp, "fake-chat", ["--backend", "chat"])
            # --extra-request-body: its keys go into every body over the bench's own (temperature
            # 0 becomes 0.7), the rest of the body stays, and the JSON lines record it
            extra = {"temperature": 0.7, "top_p": 0.9, "top_k": 20}
            rows = sweep(base, tmp, "fake-extra", ["--extra-request-body", json.dumps(extra)])
            last = json.loads(srvlib.http("GET", base + "/debug/last_body")[2])
            for k, v in extra.items():
                assert last[k] == v, last
            assert last["stream"] is True and last["max_tokens"] == OUT_LEN and last["ignore_eos"] is True, last
            assert all(row["extra_request_body"] == extra for row in rows), rows[0]
            for bad in ("[1, 2]", "{not json", '"x"'):
                r = subprocess.run([srvlib.BIN, "bench", "--base-url", base, "--concurrency", "1", "--num-prompts", "1",
                                    "--extra-request-body", bad], capture_output=True, text=True, timeout=60)
                assert r.returncode == 2 and "--extra-request-body" in r.stderr, (bad, r.returncode, r.stderr)
            # Poisson arrivals and SGLang-style length ranges: every request still completes and
            # the drawn output lengths stay within [R*L, L].
            jsonl = os.path.join(tmp, "rate.jsonl")
            r = subprocess.run([srvlib.BIN, "bench", "--base-url", base, "--concurrency", "4", "--num-prompts", "20",
                                "--input-len", "16", "--output-len", "8", "--range-ratio", "0.5", "--request-rate",
                                "200", "--output-file", jsonl], capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr[-1000:]
            row = json.loads(open(jsonl).read())
            assert row["completed"] == 20 and 20 * 4 <= row["total_output_tokens"] <= 20 * 8, row
            assert row["total_output_tokens"] < 20 * 8 and row["request_rate"] == 200, row
        finally:
            fake.terminate()
            fake.wait()
        with srvlib.Server() as s:
            rows = sweep(s.base, tmp, "real")
            for row, (_, n) in zip(rows, LEVELS):
                sm = row["server_metrics"]
                assert sm["available"] and sm["generation_tokens"] == n * OUT_LEN, sm
                assert sm["prompt_tokens"] == n * 12, sm
                assert row["total_input_tokens"] == n * 12, row
            sweep(s.base, tmp, "real-chat", ["--backend", "chat"])
            # sampled requests through the real server: every one completes with its exact
            # length (ignore_eos); a value the server refuses fails the requests, with its message
            sweep(s.base, tmp, "real-sampled", ["--extra-request-body",
                                               '{"temperature": 0.8, "top_p": 0.95, "top_k": 40, "seed": 7}'])
            jsonl = os.path.join(tmp, "refused.jsonl")
            r = subprocess.run([srvlib.BIN, "bench", "--base-url", s.base, "--concurrency", "1", "--num-prompts", "2",
                                "--warmup", "0", "--input-len", "8", "--output-len", "4", "--output-file", jsonl,
                                "--extra-request-body", '{"temperature": -1}'], capture_output=True, text=True,
                               timeout=120)
            assert r.returncode == 1, (r.returncode, r.stderr[-500:])
            row = json.loads(open(jsonl).read())
            assert row["failed"] == 2 and "temperature" in row.get("first_error", ""), row
    print("bench e2e: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
