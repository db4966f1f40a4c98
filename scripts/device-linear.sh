#!/usr/bin/env bash
# Issue 9's linear-layer checks and timings in one GPU-machine call (the `run` tool); logs to $OUT.
# Build here first (cmake -S . -B build-A -DCMAKE_BUILD_TYPE=Release -DNIBBLE_CUDA_ARCHS=90a;
# targets nibble test_cuda_vs_cpu [test_gemm_lt]), then:
#   run: BUILD=build-A STEPS="ops tiny bench" scripts/device-linear.sh
#   (carry $BUILD/nibble, $BUILD/tests/test_cuda_vs_cpu, [$BUILD/tests/test_gemm_lt], .devlibs-cuda).
#   ops     test_cuda_vs_cpu linear_* and mlp (and test_gemm_lt when carried)
#   tiny    synthetic:glm5-tiny greedy ids, cpu == cuda
#   golden  tests/cuda_ops/cuda_golden_check.py (fixtures vs HF; greedy vs CPU; ~100 s)
#   bench   nibble bench-linear $BENCH_ARGS (alone on the GPU, after the checks)
#   offline nibble bench-offline on the 8-layer GLM-5 slice at batch 1 and 10 (graph-mode step
#           p50 + per-op profile): NIBBLE_CUDA_LINEAR_SK=0 (the ladder before the stream-K kernel),
#           the default route, and =1 (every BF16 linear at 3-16 tokens on it) with SK_LADDER=1
#   cold    nibble bench-linear --lt-cold in two processes: NIBBLE_CUDA_GEMM_WARM=0 (before) and
#           default (after the per-shape warm-up); first-use cost per call of eager steps
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/linear-out}
BUILD=${BUILD:-build-A}
STEPS=${STEPS:-ops tiny bench}
mkdir -p "$OUT"
LIBS="LD_LIBRARY_PATH=$PWD/.devlibs-cuda"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv | tee "$OUT/gpu.txt"
rc=0
for s in $STEPS; do
  case $s in
    ops)
      for c in ${OPS_CASES:-linear mlp}; do
        timeout ${OPS_TIMEOUT:-40} env "$LIBS" $BUILD/tests/test_cuda_vs_cpu $c >>"$OUT/ops.log" 2>&1 || { echo "ops $c rc=$?"; rc=1; }
      done
      [ -x $BUILD/tests/test_gemm_lt ] && { timeout 30 env "$LIBS" $BUILD/tests/test_gemm_lt >>"$OUT/ops.log" 2>&1 || rc=1; }
      grep -cE "rel err" "$OUT/ops.log"; grep -E "FAIL|passed|failed|error" "$OUT/ops.log" | head -30 ;;
    tiny)
      for b in cpu cuda; do
        timeout ${TINY_TIMEOUT:-30} env "$LIBS" $BUILD/nibble generate --model synthetic:glm5-tiny --ids 1,2,3,4,5,6,7,8 --max-tokens 24 \
          --temperature 0 --ignore-eos --print-ids --backend $b 2>"$OUT/tiny_$b.err" | tail -1 >"$OUT/tiny_$b.ids"
      done
      cmp -s "$OUT/tiny_cpu.ids" "$OUT/tiny_cuda.ids" && echo "glm5-tiny greedy: cpu == cuda" ||
        { echo "glm5-tiny greedy differs"; cat "$OUT"/tiny_*.ids; tail -3 "$OUT/tiny_cuda.err"; rc=1; } ;;
    golden)
      printf '#!/bin/sh\nexec env LD_LIBRARY_PATH=%s/.devlibs-cuda %s/%s/nibble "$@"\n' "$PWD" "$PWD" "$BUILD" > nibble-wrap.sh
      chmod +x nibble-wrap.sh
      PYTHONUNBUFFERED=1 NIBBLE_BIN=$PWD/nibble-wrap.sh timeout ${GOLDEN_TIMEOUT:-100} python3 tests/cuda_ops/cuda_golden_check.py \
        >"$OUT/golden.log" 2>&1 || rc=1
      tail -5 "$OUT/golden.log" ;;
    cold)
      for v in 0 1; do
        timeout ${COLD_TIMEOUT:-30} env "$LIBS" NIBBLE_CUDA_GEMM_WARM=$v $BUILD/nibble bench-linear --lt-cold --tokens none \
          --lt-tokens none --format bf16 >"$OUT/cold_warm$v.log" 2>&1 || rc=1
        grep -E "^lt cold|failed|error" "$OUT/cold_warm$v.log"
      done ;;
    offline)
      for v in 0 default ${SK_LADDER:+1}; do
        timeout ${OFFLINE_TIMEOUT:-25} env "$LIBS" NIBBLE_CUDA_LINEAR_SK=${v#default} $BUILD/nibble bench-offline --backend cuda \
          --model "${MODEL:-synthetic:glm5:num_hidden_layers=8,experts=nvfp4}" --num-prompts ${LEVELS:-1,10} \
          --input-len 128 --output-len ${OUTLEN:-48} --profile-ops 4 >"$OUT/offline_sk$v.log" 2>&1 || rc=1
        grep -E "^bench-offline|Decode-only step time|Decode step time / floor|step wall|  linear|  mlp" "$OUT/offline_sk$v.log"
      done ;;
    bench)
      timeout ${BENCH_TIMEOUT:-60} env "$LIBS" $BUILD/nibble bench-linear ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1 || rc=1
      cat "$OUT/bench.log" ;;
  esac
done
exit $rc
