#!/usr/bin/env bash
# Decode CUDA graphs (issue 9) in one GPU-machine call (the `run` tool): the graph-vs-eager
# test, glm5-tiny greedy ids (cpu vs cuda with graphs; 40 prompts with and without graphs,
# which replays the cuBLASLt-path graph of size 48), and bench-offline decode step times with
# and without graphs on each of $BENCH_MODELS at 1, 2 and 10 requests. Everything lands in
# $OUT/graph.tgz (the tool brings back at most 8 files) and a summary on stdout.
# Build here first: cmake --build build-g --target nibble test_cuda_graph; then
#   run: scripts/device-graph.sh   carry: build-g/nibble build-g/tests/test_cuda_graph .devlibs-cuda
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/graph-out}
B=${B:-build-g}
W=$(mktemp -d)
mkdir -p "$OUT"
# our Debian libraries for our binaries only (globally they break the machine's curl)
L=(env "LD_LIBRARY_PATH=$PWD/.devlibs-cuda")
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv | tee "$W/gpu.txt"
rc=0

"${L[@]}" timeout 120 "$B/tests/test_cuda_graph" >"$W/test_cuda_graph.log" 2>&1 || rc=1
echo "test_cuda_graph rc=$?"; grep -E "FAIL|steps bitwise|tests:" "$W/test_cuda_graph.log" | head -20

for b in cpu cuda; do
  "${L[@]}" timeout 60 "$B/nibble" generate --model synthetic:glm5-tiny --ids 1,2,3,4,5,6,7,8 --max-tokens 24 \
    --temperature 0 --ignore-eos --print-ids --backend $b 2>"$W/tiny_$b.err" | tail -1 >"$W/tiny_$b.ids"
done
cmp -s "$W/tiny_cpu.ids" "$W/tiny_cuda.ids" && echo "glm5-tiny greedy: cpu == cuda (graphs)" ||
  { echo "glm5-tiny greedy differs"; rc=1; }

for i in $(seq 1 40); do echo "{\"ids\": [$((i % 200 + 3)), $((i * 7 % 250 + 2)), 17, 42, $((i * 13 % 240 + 5))]}"; done >"$W/b40.jsonl"
for g in on off; do
  extra=(); [ $g = off ] && extra=(--disable-cuda-graph)
  "${L[@]}" timeout 60 "$B/nibble" generate --model synthetic:glm5-tiny --batch "$W/b40.jsonl" --max-tokens 16 \
    --temperature 0 --ignore-eos --print-ids --backend cuda "${extra[@]}" >"$W/b40_$g.ids" 2>"$W/b40_$g.err"
done
grep -h "CUDA graph" "$W/b40_on.err" | tail -4
cmp -s "$W/b40_on.ids" "$W/b40_off.ids" && echo "glm5-tiny 40 prompts greedy: graphs == eager" ||
  echo "glm5-tiny 40 prompts greedy: graphs != eager ($(diff "$W/b40_on.ids" "$W/b40_off.ids" | grep -c '^<') of 40 differ)"

k=0
for M in ${BENCH_MODELS:-synthetic:glm5:num_hidden_layers=4,n_routed_experts=8,vocab_size=16384,experts=nvfp4}; do
  k=$((k + 1))
  for n in ${BENCH_PROMPTS:-1 2 10}; do
    for g in on off; do
      extra=(); [ $g = off ] && extra=(--disable-cuda-graph)
      "${L[@]}" timeout ${BENCH_TIMEOUT:-90} "$B/nibble" bench-offline --backend cuda --model "$M" --num-prompts $n \
        --input-len ${BENCH_IN:-128} --output-len ${BENCH_OUT:-32} "${extra[@]}" >"$W/bench${k}_${n}_$g.log" 2>&1 || rc=1
      echo "== $M: $n requests, graphs $g"
      grep -iE "decode-only step|output token thr|CUDA graphs:|error|no CUDA graph" "$W/bench${k}_${n}_$g.log" | head -8
    done
  done
done
nvidia-smi --query-gpu=power.draw --format=csv,noheader >>"$W/gpu.txt"
tar -czf "$OUT/graph.tgz" -C "$W" .
exit $rc
