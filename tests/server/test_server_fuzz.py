#!/usr/bin/env python3
"""Fuzz the request bodies of a live `nibble serve` (synthetic:glm5-tiny): malformed JSON,
wrong types, huge numbers, deep nesting, invalid UTF-8, empty messages, giant stop lists,
and random mutations of valid bodies. Every response must be a well-formed 4xx error
({"error": {"message", "type", "param", "code"}}) or a valid completion (JSON, or SSE
ending in [DONE]); /health must stay 200 throughout. Stdlib only.
  NIBBLE_BIN=build/nibble python3 tests/server/test_server_fuzz.py [N_MUTATIONS]"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(__file__))
import srvlib  # noqa: E402

FAILS = []

VALID_C = {"prompt": "Hello", "max_tokens": 2, "temperature": 0.5, "top_p": 0.9, "n": 2, "stop": ["x"],
           "logprobs": 2, "seed": 5, "stream": False, "ignore_eos": True, "stop_token_ids": [7]}
VALID_H = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "t"}]}],
           "max_tokens": 2, "temperature": 0, "logprobs": True, "top_logprobs": 1, "stream": True,
           "stream_options": {"include_usage": True}, "chat_template_kwargs": {"enable_thinking": False},
           "tools": [{"type": "function", "function": {"name": "f"}}]}

WEIRD = [None, True, False, 0, -1, 1.5, 1e308, -1e308, 2 ** 64, -(2 ** 63), "", "x" * 2000, "\u0000", [], {},
         [1, 2], {"a": 1}, [[[]]], "\ud7ff\ue000", 12345678901234567890]


def case_bodies(rng):
    out = [b"", b"{", b"}", b"[]", b"null", b"42", b'"str"', b"{\"prompt\":}", b"{'prompt': 'x'}",
           b"{\"prompt\":\"x\",}", b"\xff\xfe{}", b"{\"prompt\":\"\xc3\x28\"}", b"{\"prompt\":\"\xed\xa0\x80\"}",
           b"{\"prompt\":\"\\ud800\"}", b"{\"prompt\":\"x\",\"max_tokens\":1e999}", b"{\"prompt\":\"x\",\"n\":-0}",
           b"{\"prompt\":\"x\",\"temperature\":NaN}", b"{\"prompt\":\"x\",\"temperature\":Infinity}",
           b"[" * 100000 + b"]" * 100000, b"{\"a\":" * 3000 + b"1" + b"}" * 3000,
           json.dumps({"prompt": "x", "stop": ["s%d" % i for i in range(100000)]}).encode(),
           json.dumps({"prompt": "x", "stop": ["y" * 100000]}).encode(),
           json.dumps({"prompt": [1] * 100000, "max_tokens": 1}).encode(),
           json.dumps({"prompt": [[1]] * 5000}).encode(),
           json.dumps({"messages": []}).encode(), json.dumps({"messages": [{}]}).encode(),
           json.dumps({"messages": [{"role": "user", "content": ""}], "max_tokens": 1}).encode(),
           json.dumps({"messages": [{"role": "user", "content": None}]}).encode(),
           json.dumps({"messages": [{"role": "user", "content": "x"}] * 2000, "max_tokens": 1}).encode()]
    for valid in (VALID_C, VALID_H):
        for key in valid:
            for w in WEIRD:
                b = dict(valid)
                b[key] = w
                out.append(json.dumps(b).encode())
    return out


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        i = rng.randrange(len(data)) if data else 0
        if op == 0 and data:
            data[i] = rng.randrange(256)
        elif op == 1:
            data[i:i] = bytes([rng.choice(b'{}[]",:0123456789e-.\\ntu\x80\xff')])
        elif op == 2 and data:
            del data[i:i + rng.randint(1, 8)]
        else:
            j = rng.randrange(len(data)) if data else 0
            data[i:i] = data[j:j + rng.randint(1, 16)]
    return bytes(data)


def check_response(st, headers, body, what):
    if st == 200:
        ctype = headers.get("Content-Type", "")
        if "event-stream" in ctype:
            lines = [line for line in body.decode().split("\n") if line.startswith("data: ")]
            if not lines or lines[-1] != "data: [DONE]":
                return f"{what}: SSE without [DONE]"
            for line in lines[:-1]:
                obj = json.loads(line[6:])
                if "choices" not in obj:
                    return f"{what}: SSE chunk without choices"
            return None
        obj = json.loads(body)
        if not obj.get("choices") or "usage" not in obj:
            return f"{what}: 200 without choices/usage: {body[:200]!r}"
        return None
    if not 400 <= st < 500:
        return f"{what}: status {st}: {body[:200]!r}"
    try:
        err = json.loads(body)["error"]
        assert isinstance(err["message"], str) and err["message"]
        assert isinstance(err["type"], str) and "param" in err and "code" in err
    except Exception as e:  # noqa: BLE001
        return f"{what}: malformed {st} body ({e}): {body[:200]!r}"
    return None


def main():
    if not os.path.exists(srvlib.BIN) and not os.environ.get("NIBBLE_SERVER_URL"):
        print("SKIP: nibble not built", file=sys.stderr)
        return 77
    rng = random.Random(1234)
    n_mut = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    with srvlib.Server() as s:
        bodies = case_bodies(rng)
        seeds = [json.dumps(VALID_C).encode(), json.dumps(VALID_H).encode()]
        bodies += [mutate(rng, rng.choice(seeds)) for _ in range(n_mut)]
        counts = {}
        for i, body in enumerate(bodies):
            path = "/v1/chat/completions" if (b"messages" in body) ^ (i % 7 == 0) else "/v1/completions"
            try:
                st, hdr, resp = srvlib.http("POST", s.base + path, body, timeout=120)
            except Exception as e:  # noqa: BLE001
                FAILS.append(f"case {i}: no response: {e}")
                continue
            counts[st] = counts.get(st, 0) + 1
            problem = check_response(st, hdr, resp, f"case {i} ({body[:60]!r})")
            if problem:
                FAILS.append(problem)
            if i % 25 == 0 and srvlib.http("GET", s.base + "/health")[0] != 200:
                FAILS.append(f"/health not 200 after case {i}")
        if srvlib.http("GET", s.base + "/health")[0] != 200:
            FAILS.append("/health not 200 at the end")
        print(f"{len(bodies)} bodies, statuses {dict(sorted(counts.items()))}")
    for f in FAILS[:20]:
        print("  FAIL:", f, file=sys.stderr)
    print(f"fuzz: {len(FAILS)} failure(s)")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
