#!/usr/bin/env python3
"""`nibble serve` renders chat prompts from the request's own JSON text: numbers keep their
spelling (1.0 stays a float, 1e100 prints 1e+100, 2^53+1 stays exact) in `tools`, in message
fields and in `chat_template_kwargs`, as transformers renders them (Python json -> jinja2).

The server runs synthetic:glm5-tiny with --tokenizer pointing at a folder made here: a
byte-level BPE tokenizer without merges (one token per byte, so usage.prompt_tokens is the
byte length of the rendered prompt) and a chat template that prints numbers with str,
tojson and string concatenation. The reference prompt is rendered by Python jinja2
configured as transformers configures it. Checks per request: prompt_tokens equals the
reference's byte length, and the greedy completion of the chat request equals the greedy
/v1/completions continuation of the reference text (same prompt tokens, same output).
  NIBBLE_BIN=build-srv2/nibble python3 tests/server/test_server_chat_json.py
Needs jinja2 (else re-runs inside scripts/pyenv.sh's cached venv; exit 77 when that cannot
be made)."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def ensure_jinja2():
    try:
        import jinja2  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("NIBBLE_CHATJSON_VENV"):
        sys.exit("jinja2 missing from the venv")
    try:
        venv = subprocess.check_output([os.path.join(ROOT, "scripts", "pyenv.sh"), "tpl", "jinja2==3.1.6",
                                        "markupsafe==3.0.2"], text=True).strip()
    except (subprocess.CalledProcessError, OSError):
        print("SKIP: jinja2 unavailable", file=sys.stderr)
        sys.exit(77)
    py = os.path.join(venv, "bin", "python")
    os.execve(py, [py] + sys.argv, dict(os.environ, NIBBLE_CHATJSON_VENV="1"))


ensure_jinja2()
sys.path.insert(0, HERE)
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402
import srvlib  # noqa: E402

TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% if m.weight is defined %} w={{ m.weight }} {{ m.weight | tojson }}{% endif %}"
    "{% if m.meta is defined %} meta={{ m.meta }} {{ m.meta | tojson }}{% endif %}\n"
    "{% endfor %}"
    "{% if tools %}{% for t in tools %}TOOL {{ t | tojson }}\n"
    "{% for k, v in t.function.parameters.properties.items() %}{{ k }}={{ v.default }} "
    "{{ v.default ~ '' }} {{ v }}\n{% endfor %}{% endfor %}{% endif %}"
    "{% if scale is defined %}scale={{ scale }} {{ scale * 2 }} {{ limits | tojson }} {{ limits }}\n{% endif %}"
    "{% if enable_thinking is defined %}think={{ enable_thinking }}\n{% endif %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("  FAIL:", what, file=sys.stderr)


def byte_vocab():
    """GPT-2's byte -> printable character table: the vocabulary of a byte-level BPE."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): i for i, c in enumerate(cs)}


def make_tokenizer(d):
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                     "vocab": byte_vocab(), "merges": []}}
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"chat_template": TEMPLATE}, f)


def as_double(text):
    """A JSON number as the cJSON path saw it: a double, an int when integral and in int64."""
    x = float(text)
    return int(x) if x.is_integer() and -2.0**63 <= x < 2.0**63 else x


def reference(body, lossy=False):
    """The prompt transformers would render for this request body (JSON text); lossy: the
    prompt the server rendered before it kept the JSON text (numbers through doubles)."""
    req = json.loads(body, parse_float=as_double, parse_int=as_double) if lossy else json.loads(body)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    msgs = []
    for m in req["messages"]:
        m = dict(m)
        if isinstance(m.get("content"), list):  # text parts join with newlines, as the server documents
            m["content"] = "\n".join(p["text"] for p in m["content"])
        msgs.append(m)
    kw = dict(req.get("chat_template_kwargs") or {})
    if "enable_thinking" in req and "enable_thinking" not in kw:
        kw["enable_thinking"] = req["enable_thinking"]
    return env.from_string(TEMPLATE).render(messages=msgs, tools=req.get("tools"), add_generation_prompt=True, **kw)


BODIES = [
    # the brief's case: floats, exponents, 2^53+1, nested floats in tools
    """{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0, "ignore_eos": true,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
          "a": {"type": "number", "default": 1.0},
          "b": {"type": "number", "default": 1e100},
          "c": {"type": "integer", "default": 9007199254740993},
          "d": {"type": "number", "default": -0.0},
          "e": {"type": "number", "default": 2.50, "range": [0.0, 1E5, -1.5e-7, {"deep": [3.0, 100]}]},
          "f": {"type": "integer", "default": -9223372036854775808}}}}}]}""",
    # floats in message fields next to content parts, and in chat_template_kwargs
    """{"messages": [{"role": "system", "content": "s", "weight": 1.0},
                     {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b\\u00e9"}],
                      "meta": {"x": 2.0, "y": [1.0, 1e-3, 12.0e1], "z": 7}}],
        "chat_template_kwargs": {"scale": 1.0, "limits": {"lo": 0.0, "hi": 1e20}},
        "enable_thinking": false, "max_tokens": 6, "temperature": 0, "ignore_eos": true}""",
]


def main():
    with tempfile.TemporaryDirectory() as d:
        make_tokenizer(d)
        with srvlib.Server(["--tokenizer", d]) as s:
            for i, body in enumerate(BODIES):
                want = reference(body)
                st, _, raw = srvlib.http("POST", s.base + "/v1/chat/completions", body.encode())
                check(st == 200, f"body {i}: status {st} {raw[:300]!r}")
                if st != 200:
                    continue
                r = json.loads(raw)
                n_want = len(want.encode())
                check(r["usage"]["prompt_tokens"] == n_want,
                      f"body {i}: prompt_tokens {r['usage']['prompt_tokens']} != {n_want} for {want!r}")
                # The same prompt through /v1/completions must continue identically at temperature 0.
                st, _, craw = srvlib.http("POST", s.base + "/v1/completions",
                                          {"prompt": want, "max_tokens": 6, "temperature": 0, "ignore_eos": True})
                check(st == 200, f"body {i}: completions status {st}")
                if st == 200:
                    c = json.loads(craw)
                    check(c["usage"]["prompt_tokens"] == n_want, f"body {i}: completions prompt_tokens")
                    got, ref = r["choices"][0]["message"]["content"], c["choices"][0]["text"]
                    check(got == ref, f"body {i}: chat output {got!r} != completions output {ref!r}")
                # The test can see the old behaviour: through doubles the prompt has another length.
                check(len(reference(body, lossy=True).encode()) != n_want, f"body {i}: cannot tell lossy from exact")
    if FAILS:
        print(f"{len(FAILS)} failure(s)", file=sys.stderr)
        return 1
    print("test_server_chat_json: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
