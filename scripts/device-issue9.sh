#!/usr/bin/env bash
# Issue 9's benchmark in one GPU-machine call (the `run` tool), logs and JSON into $OUT:
#   offline  nibble bench-offline --backend cuda on an 8-layer GLM-5 slice (NVFP4 experts,
#            generated on the GPU) at 1, 2, 10 and 1000 requests, input 128, output 128, one
#            process (the model loads once); per decode step: p50 / mean, tokens/s, the floor
#            (ceilings measured in the same process) and time / floor  -> offline.log, offline.json
#   serve    nibble serve --backend cuda on the same model + nibble bench at concurrency
#            1, 2, 10 and 1000 with NVML power  -> serve.log, bench.log, bench.jsonl, report.html
#   check    tests/model/test_synth_gpu (GPU generation == host generator; not in the default)
# summary.txt: the GPU, each part's wall time and its process's peak host RSS. Seven files in
# all (a call brings back at most 8).
# Build here first (cmake -S . -B build-y -DCMAKE_BUILD_TYPE=Release -DNIBBLE_CUDA_ARCHS=90a;
# cmake --build build-y --target nibble [test_synth_gpu]) and carry the build's nibble (and
# tests/test_synth_gpu for check) plus .devlibs-cuda (our Debian .so files, see
# scripts/device-libs.sh). The run:
#   run(command="BUILD=build-y scripts/device-issue9.sh", carry=["build-y/nibble", ".devlibs-cuda"],
#       timeout_s=570)
# Environment: STEPS ("offline serve"), BUILD (build-y), MODEL, LEVELS (1,2,10,1000),
# INPUT / OUTPUT (128), PROMPTS (the serve bench's requests per level: 16,32,160,1000),
# OFFLINE_TIMEOUT / SERVE_TIMEOUT (seconds per part), EXTRA (more bench-offline / serve flags).
# Expected times on one H200 are in docs/bench.md ("issue 9 on the GPU machine").
# Memory: 8 GLM-5 layers (3 dense, 5 MoE of 256 NVFP4 experts) are 33.1 GiB of weights, plus the
# experts' repacked copy (25.3 GiB), plus a KV pool of ~22.5 KB per token (F32 rows: 8 x
# (512 + 64 + 128) floats): 1000 x 256 tokens = 5.8 GB; the engine sizes its pool from what
# is free (--mem-fraction-static), far above that.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/issue9-out}
mkdir -p "$OUT"
B=${BUILD:-build-y}
MODEL=${MODEL:-synthetic:glm5:num_hidden_layers=8}  # NVFP4 experts: glm5's default
LEVELS=${LEVELS:-1,2,10,1000}
IN=${INPUT:-128}
OUTLEN=${OUTPUT:-128}
STEPS=${STEPS:-offline serve}
# Our Debian libraries only for our binaries: the machine's own curl breaks on our libcurl.
LIBS="$PWD/.devlibs-cuda"
wrap=/tmp/issue9-nibble  # outside $OUT: at most 8 files come back from a call
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LIBS" "$PWD/$B/nibble" >"$wrap"
chmod +x "$wrap"
SUM="$OUT/summary.txt"  # GPU, peak host RSS and wall time of each part
nvidia-smi --query-gpu=name,driver_version,power.draw,power.limit,clocks.sm,memory.total --format=csv | tee "$SUM"
rc=0

# Peak resident host memory of a process (VmHWM), sampled until it exits: the proof that the
# model never sits in host memory.
# $1 is the wrapper's pid; the wrapper execs nibble, so it is nibble's too.
watch_rss() { # pid file
  local peak=0 v
  while kill -0 "$1" 2>/dev/null; do
    v=$(awk '/^VmHWM:/ {print $2}' /proc/"$1"/status 2>/dev/null)
    [ -n "$v" ] && [ "$v" -gt "$peak" ] && peak=$v
    sleep 0.2
  done
  echo "$2: peak host RSS of nibble (VmHWM): $((peak / 1024)) MiB" >>"$SUM"
}
# Kill $1 after $2 seconds unless it ended (timeout(1) would hide nibble's pid from watch_rss).
# The watcher holds none of the script's output (a caller piping this script into tail would
# otherwise wait for its sleep), and undeadline stops its sleep too.
deadline() { ( sleep "$2"; kill -TERM "$1" 2>/dev/null ) </dev/null >/dev/null 2>&1 & dl=$!; }
undeadline() { pkill -P "$dl" 2>/dev/null; kill "$dl" 2>/dev/null; }

for s in $STEPS; do
  t0=$(date +%s)
  case $s in
    check)
      LD_LIBRARY_PATH="$LIBS" timeout 120 "$B/tests/test_synth_gpu" >/tmp/issue9-check.log 2>&1 || rc=1
      grep -E "OK|FAIL|differ|logits|tests:" /tmp/issue9-check.log | tail -12 | tee -a "$SUM" ;;
    offline)
      "$wrap" bench-offline --backend cuda --model "$MODEL" --num-prompts "$LEVELS" \
        --input-len "$IN" --output-len "$OUTLEN" --warmup 1 --max-running-requests 1000 --json "$OUT/offline.json" \
        ${EXTRA:-} >"$OUT/offline.log" 2>&1 &
      p=$!
      deadline $p "${OFFLINE_TIMEOUT:-330}"
      watch_rss $p bench-offline &
      w=$!
      wait $p || { echo "bench-offline: exit $?"; rc=1; }
      undeadline
      wait $w
      grep -E "ceilings|floor:|synthetic|weights:|routed experts|KV cache|prompts +batch|^[0-9]+ +[0-9]|rror" \
        "$OUT/offline.log" | cut -c1-220
      tail -1 "$SUM" ;;
    serve)
      "$wrap" serve --backend cuda --model "$MODEL" --port 0 --shutdown-timeout 10 --max-running-requests 1000 \
        ${EXTRA:-} >/tmp/issue9-serve.out 2>"$OUT/serve.log" &
      pid=$!
      watch_rss $pid serve &
      w=$!
      base=""
      for _ in $(seq 1800); do # up to 180 s for the load
        base=$(sed -n 's/^nibble serve: listening on //p' /tmp/issue9-serve.out | head -1)
        [ -n "$base" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/health")" = 200 ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
      done
      if [ -z "$base" ] || ! kill -0 $pid 2>/dev/null; then
        echo "nibble serve did not start:"; tail -5 "$OUT/serve.log"; rc=1
      else
        echo "serving $MODEL at $base (up after $(( $(date +%s) - t0 )) s)"
        timeout "${SERVE_TIMEOUT:-240}" "$wrap" bench --base-url "$base" --concurrency 1,2,10,1000 \
          --num-prompts "${PROMPTS:-16,32,160,1000}" --input-len "$IN" --output-len "$OUTLEN" \
          --output-file "$OUT/bench.jsonl" --report "$OUT/report.html" >"$OUT/bench.log" 2>&1 || rc=1
        grep -vE "^\s*$" "$OUT/bench.log" | tail -40 | cut -c1-200
      fi
      kill -TERM $pid 2>/dev/null
      wait $pid 2>/dev/null
      wait $w
      tail -1 "$SUM" ;;
  esac
  echo "== $s: $(( $(date +%s) - t0 )) s" | tee -a "$SUM"
done
exit $rc
