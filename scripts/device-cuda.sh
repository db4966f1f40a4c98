#!/usr/bin/env bash
# The CUDA backend's checks and benchmarks in one GPU-machine call (the `run` tool); logs to $OUT.
# Build here first into build-cuda (-DNIBBLE_CUDA_ARCHS=90a is enough for the H200), gather
# the Debian libraries the binaries need into .devlibs-cuda (as scripts/device-libs.sh does),
# then: run: STEPS="ops golden tiny bench" scripts/device-cuda.sh   (carry build-cuda/nibble
# and build-cuda/tests/test_cuda_vs_cpu).
#   ops     tests/cuda_ops/test_cuda_vs_cpu (every CUDA op vs its CPU op)
#   golden  tests/cuda_ops/cuda_golden_check.py (fixtures vs HF, greedy vs the CPU backend)
#   tiny    synthetic:glm5-tiny: greedy ids on cpu and cuda
#   bench   nibble bench-offline --backend cuda on $BENCH_MODEL at $BENCH_PROMPTS requests
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devlibs-cuda:${LD_LIBRARY_PATH:-}"
STEPS=${STEPS:-ops golden tiny}
BIN=build-cuda/nibble
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv | tee "$OUT/gpu.txt"
rc=0
for s in $STEPS; do
  case $s in
    ops) timeout 200 build-cuda/tests/test_cuda_vs_cpu >"$OUT/ops.log" 2>&1 || rc=1; tail -3 "$OUT/ops.log" ;;
    golden) NIBBLE_BIN=$BIN timeout 300 python3 tests/cuda_ops/cuda_golden_check.py 2>&1 | tee "$OUT/golden.log"
            [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    tiny)
      for b in cpu cuda; do
        timeout 120 $BIN generate --model synthetic:glm5-tiny --ids 1,2,3,4,5,6,7,8 --max-tokens 24 --temperature 0 \
          --ignore-eos --print-ids --backend $b 2>"$OUT/tiny_$b.err" | tail -1 | tee "$OUT/tiny_$b.ids"
      done
      cmp -s "$OUT/tiny_cpu.ids" "$OUT/tiny_cuda.ids" && echo "glm5-tiny greedy: cpu == cuda" || { echo "glm5-tiny greedy differs"; tail -3 "$OUT/tiny_cuda.err"; rc=1; } ;;
    bench)
      for n in ${BENCH_PROMPTS:-1 2 10}; do
        timeout ${BENCH_TIMEOUT:-300} $BIN bench-offline --backend cuda --model "${BENCH_MODEL:-synthetic:glm5-tiny}" \
          --num-prompts $n --input-len ${BENCH_IN:-128} --output-len ${BENCH_OUT:-128} ${BENCH_ARGS:-} \
          >"$OUT/bench_$n.log" 2>&1 || rc=1
        grep -iE "throughput|step|tok/s|Backend|error" "$OUT/bench_$n.log" | head -20
      done ;;
  esac
done
exit $rc
