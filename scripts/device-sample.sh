#!/usr/bin/env bash
# GPU sampling checks in one GPU-machine call (the `run` tool); logs to $OUT.
# Build here first (build-smp, -DNIBBLE_CUDA_ARCHS=90a: targets test_cuda_sample and nibble),
# then: run: scripts/device-sample.sh  carrying build-smp/tests/test_cuda_sample,
# build-smp/nibble and .devlibs-cuda.
#   1. tests/cuda_ops/test_cuda_sample: the GPU op vs the CPU op (ids identical, logprobs
#      <= 1e-5), GPU draw frequencies, timing at vocab 154880 for 1, 10, 1000 rows
#   2. nibble generate --backend cuda on synthetic:glm5-tiny, a batch of requests with mixed
#      sampling parameters, sampled on the GPU and (NIBBLE_HOST_SAMPLING=1) on the host:
#      the ids must be identical
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/sample-out}
B=${BUILD:-build-smp}
mkdir -p "$OUT"
LIBS="$PWD/.devlibs-cuda"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$OUT/gpu.txt" 2>&1
rc=0
timeout ${TEST_TIMEOUT:-150} env LD_LIBRARY_PATH="$LIBS" $B/tests/test_cuda_sample \
  >"$OUT/test_cuda_sample.log" 2>&1 || rc=1
grep -E "FAIL|SKIP|OK|RUN|rows|chi2|tests:|host path" "$OUT/test_cuda_sample.log" | head -80
: >"$OUT/batch.jsonl"
for i in $(seq 0 23); do
  t=$(( i % 5 == 0 ? 0 : 1 )); temp=$([ $t = 0 ] && echo 0 || echo 0.$((6 + i % 4)))
  {
    printf '{"ids": [%d, %d, %d, %d, %d], "max_tokens": %d, "temperature": %s, ' \
      $((i + 1)) $((i * 7 % 50 + 3)) $((i * 13 % 97 + 5)) 11 $((i + 20)) $((8 + i % 17)) "$temp"
    printf '"top_p": %s, "top_k": %d, "min_p": %s, ' "$([ $((i % 3)) = 0 ] && echo 0.85 || echo 1.0)" \
      "$([ $((i % 4)) = 1 ] && echo 20 || echo -1)" "$([ $((i % 7)) = 3 ] && echo 0.05 || echo 0)"
    printf '"repetition_penalty": %s, "frequency_penalty": %s, "presence_penalty": %s, ' \
      "$([ $((i % 2)) = 1 ] && echo 1.3 || echo 1.0)" "$([ $((i % 3)) = 2 ] && echo 0.5 || echo 0)" \
      "$([ $((i % 4)) = 3 ] && echo 0.4 || echo 0)"
    printf '"seed": %d, "n": %d, "ignore_eos": true}\n' $((100 + i)) $([ $((i % 8)) = 4 ] && echo 2 || echo 1)
  } >>"$OUT/batch.jsonl"
done
for mode in gpu host; do
  hs=$([ $mode = host ] && echo 1 || echo 0)
  timeout 120 env LD_LIBRARY_PATH="$LIBS" NIBBLE_HOST_SAMPLING=$hs $B/nibble generate --backend cuda \
    --model synthetic:glm5-tiny --batch "$OUT/batch.jsonl" --print-ids \
    >"$OUT/gen_$mode.jsonl" 2>"$OUT/gen_$mode.err" || rc=1
  grep -E "sampling on|generate:|error" "$OUT/gen_$mode.err" | head -5
done
if cmp -s "$OUT/gen_gpu.jsonl" "$OUT/gen_host.jsonl" && [ -s "$OUT/gen_gpu.jsonl" ]; then
  echo "glm5-tiny batch of 24 mixed-sampling requests: GPU sampling == host sampling" \
    "($(wc -l <"$OUT/gen_gpu.jsonl") lines)"
else
  echo "glm5-tiny batch: GPU and host sampling differ"; diff "$OUT/gen_gpu.jsonl" "$OUT/gen_host.jsonl" | head -10; rc=1
fi
exit $rc
