#!/usr/bin/env python3
"""`nibble serve` through the official `openai` SDK, on synthetic:glm5-tiny (CPU): completions
and chat, streaming and not, identical text at temperature 0, n, stop, logprobs, exact usage,
errors, API key, reasoning split, graceful shutdown.
  VENV=$(scripts/pyenv.sh server openai==3.51.0)
  NIBBLE_BIN=build/nibble $VENV/bin/python tests/server/test_server_openai.py
NIBBLE_SERVER_URL=http://host:port attaches the default-server tests to a running server."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import openai  # noqa: E402
import srvlib  # noqa: E402

IDS = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]  # "Hello, world" as byte ids
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("  FAIL:", what, file=sys.stderr)


def client(base, key="none"):
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=60)


def stream_text(stream, chat=False):
    text, finish, usage, indices = {}, {}, None, set()
    for ch in stream:
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            indices.add(c.index)
            piece = (c.delta.content or "") if chat else c.text
            text[c.index] = text.get(c.index, "") + (piece or "")
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    return text, finish, usage, indices


def test_completions(c, model):
    r = c.completions.create(model=model, prompt=IDS, max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    check(r.usage.prompt_tokens == len(IDS), f"prompt_tokens {r.usage.prompt_tokens} != {len(IDS)}")
    check(r.usage.completion_tokens == 12, f"completion_tokens {r.usage.completion_tokens} != 12")
    check(r.usage.total_tokens == len(IDS) + 12, "total_tokens")
    check(r.choices[0].finish_reason == "length", f"finish_reason {r.choices[0].finish_reason}")
    s = c.completions.create(model=model, prompt=IDS, max_tokens=12, temperature=0, stream=True,
                             stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    text, finish, usage, _ = stream_text(s)
    check(text.get(0) == r.choices[0].text, f"stream text {text.get(0)!r} != {r.choices[0].text!r}")
    check(finish.get(0) == "length", "stream finish_reason")
    check(usage is not None and usage.completion_tokens == 12 and usage.prompt_tokens == len(IDS), f"stream usage {usage}")
    # Text prompt: the byte-level tokenizer makes one token per byte.
    r2 = c.completions.create(model=model, prompt="Hello, world", max_tokens=12, temperature=0,
                              extra_body={"ignore_eos": True})
    check(r2.usage.prompt_tokens == 12 and r2.choices[0].text == r.choices[0].text, "text prompt == id prompt")
    e = c.completions.create(model=model, prompt="Hello, world", max_tokens=12, temperature=0, echo=True,
                             extra_body={"ignore_eos": True})
    check(e.choices[0].text == "Hello, world" + r.choices[0].text, "echo prepends the prompt")
    cu = c.completions.create(model=model, prompt=IDS, max_tokens=5, temperature=0, stream=True,
                              stream_options={"include_usage": True, "continuous_usage_stats": True},
                              extra_body={"ignore_eos": True})
    seen = [ch.usage.completion_tokens for ch in cu if ch.usage]
    check(seen == sorted(seen) and seen[-1] == 5, f"continuous usage {seen}")
    # Default max_tokens is 16 (OpenAI's completions default).
    r3 = c.completions.create(model=model, prompt=IDS, temperature=0, extra_body={"ignore_eos": True})
    check(r3.usage.completion_tokens == 16, f"default max_tokens gave {r3.usage.completion_tokens}")
    return r.choices[0].text


def test_n_seed_batch(c, model):
    r = c.completions.create(model=model, prompt=IDS, max_tokens=8, temperature=1.0, n=3, seed=11,
                             extra_body={"ignore_eos": True})
    check(sorted(ch.index for ch in r.choices) == [0, 1, 2], "n=3 indices")
    check(r.usage.completion_tokens == 24 and r.usage.prompt_tokens == len(IDS), f"n=3 usage {r.usage}")
    again = c.completions.create(model=model, prompt=IDS, max_tokens=8, temperature=1.0, n=3, seed=11,
                                 extra_body={"ignore_eos": True})
    check([x.text for x in r.choices] == [x.text for x in again.choices], "same seed, same texts")
    s = c.completions.create(model=model, prompt=IDS, max_tokens=8, temperature=1.0, n=3, seed=11, stream=True,
                             extra_body={"ignore_eos": True})
    text, finish, _, idx = stream_text(s)
    check(idx == {0, 1, 2} and [text[i] for i in range(3)] == [x.text for x in r.choices], "n=3 stream == non-stream")
    b = c.completions.create(model=model, prompt=["ab", "cd"], max_tokens=4, temperature=0, n=2,
                             extra_body={"ignore_eos": True})
    check(len(b.choices) == 4 and b.usage.prompt_tokens == 4 and b.usage.completion_tokens == 16, f"batch {b.usage}")
    check(b.choices[0].text == b.choices[1].text and b.choices[2].text == b.choices[3].text, "batch greedy pairs")


def test_stop(c, model, greedy):
    # Pick a stop string from the greedy text; the output must end right before it.
    for start in range(1, len(greedy) - 1):
        stop = greedy[start:start + 2]
        if stop.strip() and "\ufffd" not in stop and "\x00" not in stop and greedy.find(stop) == start:
            break
    else:
        check(False, f"no usable stop string in {greedy!r}")
        return
    r = c.completions.create(model=model, prompt=IDS, max_tokens=12, temperature=0, stop=[stop],
                             extra_body={"ignore_eos": True})
    check(r.choices[0].text == greedy[:start], f"stop {stop!r}: {r.choices[0].text!r} != {greedy[:start]!r}")
    check(r.choices[0].finish_reason == "stop", "stop finish_reason")
    s = c.completions.create(model=model, prompt=IDS, max_tokens=12, temperature=0, stop=stop, stream=True,
                             extra_body={"ignore_eos": True})
    text, finish, _, _ = stream_text(s)
    check(text.get(0) == greedy[:start] and finish.get(0) == "stop", "stop in stream")


def test_logprobs(c, model):
    r = c.completions.create(model=model, prompt=IDS, max_tokens=6, temperature=0, logprobs=3,
                             extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    check(len(lp.tokens) == 6 and len(lp.token_logprobs) == 6 and len(lp.top_logprobs) == 6, "completions logprobs")
    check(all(x <= 0 for x in lp.token_logprobs), "logprobs <= 0")
    check(all(1 <= len(t) <= 3 for t in lp.top_logprobs), "top_logprobs sizes")
    # Greedy: the sampled token is the most likely one.
    check(all(abs(max(t.values()) - x) < 1e-4 for t, x in zip(lp.top_logprobs, lp.token_logprobs)), "greedy = top-1")
    ch = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                   temperature=0, logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    content = ch.choices[0].logprobs.content
    check(len(content) == 5 and all(len(x.top_logprobs) == 2 for x in content), "chat logprobs")


def test_chat(c, model):
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi"}]
    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=10, temperature=0,
                                  extra_body={"ignore_eos": True})
    check(r.choices[0].message.role == "assistant" and r.usage.completion_tokens == 10, f"chat usage {r.usage}")
    # synthetic:glm5-tiny's template renders "[gMASK]<sop><|system|>\n...<|user|>\n...<|assistant|>\n";
    # specials are one token each, other text one token per byte.
    want_prompt = 2 + 1 + 1 + len("You are terse.") + 1 + 1 + len("Say hi") + 1 + 1
    check(r.usage.prompt_tokens == want_prompt, f"chat prompt_tokens {r.usage.prompt_tokens} != {want_prompt}")
    s = c.chat.completions.create(model=model, messages=msgs, max_tokens=10, temperature=0, stream=True,
                                  stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    text, finish, usage, _ = stream_text(s, chat=True)
    check(text.get(0) == r.choices[0].message.content, f"chat stream {text.get(0)!r} != {r.choices[0].message.content!r}")
    check(usage and usage.prompt_tokens == want_prompt and usage.completion_tokens == 10, "chat stream usage")
    # Content parts, template kwargs and tools pass through.
    parts = [{"role": "user", "content": [{"type": "text", "text": "Say"}, {"type": "text", "text": "hi"}]}]
    r2 = c.chat.completions.create(model=model, messages=parts, max_tokens=3, temperature=0,
                                   extra_body={"chat_template_kwargs": {"enable_thinking": False}, "ignore_eos": True},
                                   tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    # Parts join with "\n" ("Say\nhi": 6 bytes); enable_thinking=False appends "<think></think>\n" (3 tokens).
    check(r2.usage.prompt_tokens == 2 + 1 + 1 + 6 + 1 + 1 + 3, f"kwargs/parts prompt_tokens {r2.usage.prompt_tokens}")


def raw_status(base, data):
    """Send raw bytes, return the status code of the reply (0 when none)."""
    import socket
    host, port = base.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sk:
        try:
            sk.sendall(data)
        except OSError:
            pass
        buf = b""
        while b"\r\n" not in buf:
            got = sk.recv(4096)
            if not got:
                break
            buf += got
    parts = buf.split(b" ")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def test_errors(c, base, model):
    def expect(fn, cls, status, param=None, code=None):
        try:
            fn()
            check(False, f"expected {cls.__name__}")
        except cls as e:
            check(e.status_code == status, f"{cls.__name__}: status {e.status_code} != {status}")
            body = e.body if isinstance(e.body, dict) else {}
            err = body.get("error", body)
            if param:
                check(err.get("param") == param, f"param {err.get('param')!r} != {param!r}")
            if code:
                check(err.get("code") == code, f"code {err.get('code')!r} != {code!r}")
    expect(lambda: c.completions.create(model=model, prompt="x", temperature=-1), openai.BadRequestError, 400, "temperature")
    expect(lambda: c.completions.create(model=model, prompt="x", max_tokens=0), openai.BadRequestError, 400, "max_tokens")
    expect(lambda: c.completions.create(model="nope", prompt="x"), openai.NotFoundError, 404, "model", "model_not_found")
    expect(lambda: c.completions.create(model=model, prompt=[1] * 8000, max_tokens=500), openai.BadRequestError, 400,
           None, "context_length_exceeded")
    expect(lambda: c.chat.completions.create(model=model, messages=[]), openai.BadRequestError, 400, "messages")
    expect(lambda: c.completions.create(model=model, prompt=[999999]), openai.BadRequestError, 400, "prompt")
    st, _, body = srvlib.http("POST", base + "/v1/completions", b"{not json")
    check(st == 400 and b'"invalid_json"' in body, f"malformed JSON -> {st} {body[:100]}")
    check(raw_status(base, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 34603008\r\n\r\n") == 413,
          "Content-Length over 32 MiB -> 413")
    # A chunked body has no length up front: it is read, dropped past the limit, then refused.
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
    req = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 33 + b"0\r\n\r\n"
    check(raw_status(base, req) == 413, "chunked body over 32 MiB -> 413")
    st, _, _ = srvlib.http("GET", base + "/v1/nothing")
    check(st == 404, "unknown path 404")


def test_api_key():
    with srvlib.Server(["--api-key", "sekrit"]) as s:
        try:
            client(s.base, "wrong").models.list()
            check(False, "wrong key accepted")
        except openai.AuthenticationError as e:
            check(e.status_code == 401, "401")
        st, _, _ = srvlib.http("POST", s.base + "/v1/completions", {"prompt": "x"})
        check(st == 401, f"missing key -> {st}")
        m = client(s.base, "sekrit").models.list()
        check(len(m.data) == 1, "right key lists the model")
        check(srvlib.http("GET", s.base + "/health")[0] == 200, "/health needs no key")


def test_reasoning(plain_text):
    # deepseek-r1: the output starts inside <think>; with no </think> it is all reasoning.
    with srvlib.Server(["--reasoning-parser", "deepseek-r1"]) as s:
        c = client(s.base)
        msgs = [{"role": "user", "content": "Say hi"}]
        r = c.chat.completions.create(model=c.models.list().data[0].id, messages=msgs, max_tokens=10, temperature=0,
                                      extra_body={"ignore_eos": True})
        m = r.choices[0].message
        rc = getattr(m, "reasoning_content", None) or (m.model_extra or {}).get("reasoning_content")
        check(rc == plain_text and not m.content, f"deepseek-r1 split: reasoning {rc!r} content {m.content!r}")
        st = c.chat.completions.create(model=c.models.list().data[0].id, messages=msgs, max_tokens=10,
                                       temperature=0, stream=True, extra_body={"ignore_eos": True})
        got = ""
        for ch in st:
            for x in ch.choices:
                got += (x.delta.model_extra or {}).get("reasoning_content") or ""
                check(not x.delta.content, "no content in reasoning stream")
        check(got == plain_text, f"deepseek-r1 stream reasoning {got!r}")


def test_shutdown_grace():
    # SIGTERM while a long stream runs: within the grace period it finishes normally.
    s = srvlib.Server(["--shutdown-timeout", "20"]).__enter__()
    c = client(s.base)
    out = {}

    def run():
        st = c.completions.create(model=c.models.list().data[0].id, prompt=IDS, max_tokens=64, temperature=0,
                                  stream=True, extra_body={"ignore_eos": True})
        out["text"], out["finish"], _, _ = stream_text(st)
    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    rc = s.stop()
    t.join(30)
    check(rc == 0, f"exit code {rc} after SIGTERM")
    check(out.get("finish", {}).get(0) == "length", f"stream finished within the grace period: {out}")


def test_shutdown_abort():
    # SIGTERM with requests that outlast the grace period: the stream ends with
    # finish_reason "abort" and [DONE], the non-streaming request gets 503, exit code 0.
    s = srvlib.Server(["--shutdown-timeout", "0.5"]).__enter__()
    c = client(s.base)
    model = c.models.list().data[0].id
    out = {}

    def stream():
        st = c.completions.create(model=model, prompt=IDS, max_tokens=4000, temperature=0, stream=True,
                                  extra_body={"ignore_eos": True})
        out["text"], out["finish"], _, _ = stream_text(st)

    def plain():
        out["status"] = srvlib.http("POST", s.base + "/v1/completions",
                                    {"prompt": IDS, "max_tokens": 4000, "ignore_eos": True}, timeout=60)[0]
    ts = [threading.Thread(target=stream), threading.Thread(target=plain)]
    for t in ts:
        t.start()
    time.sleep(0.5)
    rc = s.stop()
    for t in ts:
        t.join(30)
    check(rc == 0, f"exit code {rc} after SIGTERM with running requests")
    check(out.get("finish", {}).get(0) == "abort", f"stream ended with {out.get('finish')}")
    check(out.get("status") == 503, f"non-streaming request got {out.get('status')}")


def main():
    if not os.path.exists(srvlib.BIN) and not os.environ.get("NIBBLE_SERVER_URL"):
        print("SKIP: nibble not built", file=sys.stderr)
        return 77
    with srvlib.Server() as s:
        c = client(s.base)
        models = c.models.list()
        model = models.data[0].id
        print("model:", model)
        check(c.models.retrieve(model).id == model, "GET /v1/models/ID")
        greedy = test_completions(c, model)
        test_n_seed_batch(c, model)
        test_stop(c, model, greedy)
        test_logprobs(c, model)
        test_chat(c, model)
        test_errors(c, s.base, model)
        plain = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hi"}], max_tokens=10,
                                          temperature=0, extra_body={"ignore_eos": True}).choices[0].message.content
        check(srvlib.http("GET", s.base + "/health")[0] == 200, "health 200 after the suite")
    if not os.environ.get("NIBBLE_SERVER_URL"):
        test_api_key()
        test_reasoning(plain)
        test_shutdown_grace()
        test_shutdown_abort()
    print(f"openai SDK tests: {len(FAILS)} failure(s)")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
