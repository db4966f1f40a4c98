#!/usr/bin/env python3
"""`nibble serve` on a model without a tokenizer (a synthetic GLM-5 shape with no built-in
tokenizer, as issue 9's benchmark serves): prompts are token ids, and every generated token
is spelled "token_id:N" in the text, so a streamed chunk carries the token and a client
sees it arrive (nibble bench's TTFT/ITL read the chunks' text, as SGLang's bench_serving
does). Checks: each streamed chunk's text is "token_id:<id>" of one id in the vocabulary,
the non-streamed text of the same greedy request is the chunks' concatenation and equals
the concatenation of logprobs.tokens (text_offset consistent), and a text prompt is
refused with a clear 400.
  NIBBLE_BIN=build/nibble python3 tests/server/test_server_no_tokenizer.py"""
import json
import re
import sys
import urllib.request

from srvlib import Server, http

MODEL = ("synthetic:glm5:hidden_size=256,num_hidden_layers=2,first_k_dense_replace=1,intermediate_size=512,"
         "n_routed_experts=8,moe_intermediate_size=256,num_attention_heads=4,num_key_value_heads=4,q_lora_rank=128,"
         "kv_lora_rank=64,qk_nope_head_dim=32,qk_rope_head_dim=32,v_head_dim=32,index_n_heads=2,index_head_dim=64,"
         "index_topk=64,vocab_size=4096,max_position_embeddings=4096")
VOCAB = 4096


def post(base, body):
    st, _, data = http("POST", base + "/v1/completions", body)
    return st, json.loads(data) if data else None


def stream(base, body):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={"content-type": "application/json"})
    texts = []
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ch = json.loads(line[6:])["choices"][0]
            if ch["text"]:
                texts.append(ch["text"])
    return texts


def main():
    fails = 0

    def check(cond, what):
        nonlocal fails
        print(("ok   " if cond else "FAIL ") + what)
        fails += 0 if cond else 1

    body = {"prompt": [11, 22, 33, 44], "max_tokens": 6, "temperature": 0, "ignore_eos": True}
    with Server(model=MODEL) as s:
        chunks = stream(s.base, body)
        check(len(chunks) == 6, f"6 streamed chunks with text (got {len(chunks)})")
        pat = re.compile(r"^token_id:(\d+)$")
        ids = [int(m.group(1)) for m in (pat.match(c) for c in chunks) if m]
        check(len(ids) == len(chunks) and all(0 <= i < VOCAB for i in ids),
              f"each chunk is token_id:<id in vocab> ({chunks[:2]}...)")
        st, full = post(s.base, dict(body, logprobs=1))
        check(st == 200, f"non-streamed request: {st}")
        ch = full["choices"][0]
        check(ch["text"] == "".join(chunks), "non-streamed text == streamed chunks, greedy")
        lp = ch["logprobs"]
        check("".join(lp["tokens"]) == ch["text"], "text == concatenation of logprobs.tokens")
        offs, o = [], 0
        for t in lp["tokens"]:
            offs.append(o)
            o += len(t)
        check(lp["text_offset"] == offs, "text_offset matches the token spellings")
        check(full["usage"]["completion_tokens"] == 6, "usage.completion_tokens == 6")
        st, err = post(s.base, {"prompt": "hello", "max_tokens": 2})
        check(st == 400 and "tokenizer" in json.dumps(err), f"a text prompt is refused: {st} {err}")
    print(f"{'FAILED' if fails else 'passed'}: {fails} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
