#!/usr/bin/env bash
# `nibble serve` driven by curl: health, models, completions (JSON and SSE), chat, errors,
# /metrics, then SIGINT → exit 0.   NIBBLE_BIN=build/nibble bash tests/server/test_server_curl.sh
set -euo pipefail
bin=${NIBBLE_BIN:-build/nibble}
[ -x "$bin" ] || { echo "SKIP: $bin not built" >&2; exit 77; }
log=$(mktemp); out=$(mktemp)
"$bin" serve --model synthetic:glm5-tiny --port 0 --max-total-tokens 65536 >"$out" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log" "$out"' EXIT
for _ in $(seq 100); do grep -q "listening on" "$out" && break; sleep 0.05; done
base=$(sed -n 's/.*listening on //p' "$out" | head -1)
for _ in $(seq 200); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/health")" = 200 ] && break; sleep 0.05; done
fail() { echo "FAIL: $*" >&2; cat "$log" >&2; exit 1; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

[ "$(curl -s "$base/health" | json 'd["status"]')" = ok ] || fail health
[ "$(curl -s "$base/v1/models" | json 'd["data"][0]["id"]')" = synthetic:glm5-tiny ] || fail models
r=$(curl -s "$base/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt":"Hi there","max_tokens":5,"temperature":0,"ignore_eos":true}')
[ "$(echo "$r" | json 'd["usage"]["completion_tokens"], d["usage"]["prompt_tokens"], d["choices"][0]["finish_reason"]')" = "5 8 length" ] || fail "completion: $r"
s=$(curl -sN "$base/v1/completions" -d '{"prompt":"Hi there","max_tokens":5,"temperature":0,"ignore_eos":true,"stream":true}')
[ "$(echo "$s" | grep -c '^data: ')" -ge 3 ] || fail "stream: $s"
[ "$(echo "$s" | grep '^data: ' | tail -1)" = "data: [DONE]" ] || fail "stream does not end with [DONE]"
joined=$(echo "$s" | grep '^data: {' | sed 's/^data: //' | python3 -c "import json,sys; print(json.dumps(''.join(json.loads(l)['choices'][0]['text'] for l in sys.stdin)))")
[ "$joined" = "$(echo "$r" | json 'json.dumps(d["choices"][0]["text"])')" ] || fail "stream text differs from non-stream"
c=$(curl -s "$base/v1/chat/completions" -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}')
[ "$(echo "$c" | json 'd["object"], d["choices"][0]["message"]["role"]')" = "chat.completion assistant" ] || fail "chat: $c"
code=$(curl -s -o "$out" -w '%{http_code}' "$base/v1/completions" -d '{"prompt":"x","top_p":7}')
[ "$code" = 400 ] && [ "$(json 'd["error"]["param"], d["error"]["type"]' < "$out")" = "top_p invalid_request_error" ] || fail "400: $code $(cat "$out")"
code=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/completions" -d '{"model":"gpt-9","prompt":"x"}')
[ "$code" = 404 ] || fail "unknown model: $code"
m=$(curl -s "$base/metrics")
for name in 'nibble:prompt_tokens_total' 'nibble:generation_tokens_total' 'nibble:num_requests_running' \
            'nibble:num_requests_waiting' 'nibble:kv_cache_usage_perc' 'nibble:time_to_first_token_seconds_bucket' \
            'nibble:inter_token_latency_seconds_count' 'nibble:e2e_request_latency_seconds_sum'; do
  echo "$m" | grep -q "^$name" || fail "/metrics lacks $name"
done
[ "$(echo "$m" | sed -n 's/^nibble:generation_tokens_total //p')" -ge 13 ] || fail "generation counter"
kill -INT $pid
wait $pid || fail "exit status $? after SIGINT"
echo "curl tests: OK"
