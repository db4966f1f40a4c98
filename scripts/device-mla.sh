#!/usr/bin/env bash
# MLA checks and timings in one GPU-machine call (the `run` tool); logs to $OUT.
# Here: build test_cuda_vs_cpu and test_cuda_vs_cpu_mla_timing (and, for GOLDEN=1 / TINY=1,
# nibble) in your build folder, copy them to <build>/devC/ and run
#   scripts/device-mla.sh   with carry [<build>/devC, .devlibs-cuda] and DEV=<build>/devC.
# The timing binary times the float32 and the tensor-core attention kernel (mla.h
# nb_cuda_mla_force_kernel) on the same inputs: before / after in one binary. An older
# build's timing binary (-DNB_MLA_TIMING_OLD) is run too when present as $DEV/mla_timing_old.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mla-out}
D=${DEV:-build-C2/devC}
mkdir -p "$OUT"
if [ -f "$D.tar.xz" ]; then mkdir -p "$D" && tar -xJf "$D.tar.xz" -C "$D"; fi
L=$PWD/.devlibs-cuda
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
for b in test_cuda_vs_cpu_mla_timing mla_timing_old; do
  [ -x "$D/$b" ] || continue
  env LD_LIBRARY_PATH="$L" timeout "${TIMING_S:-120}" $D/$b ${MLA_CTX:-256} >"$OUT/$b.log" 2>&1 || rc=1
  echo "== $b"; grep -E "mla time|check|FAIL|ok$" "$OUT/$b.log" | cut -c1-170
done
for t in ${MLA_TESTS:-mla dsa_select}; do
  env LD_LIBRARY_PATH="$L" timeout "${TESTS_S:-90}" $D/test_cuda_vs_cpu $t >"$OUT/ops_$t.log" 2>&1 || rc=1
  grep -E "rel err|dsa_select|FAIL|passed|failed" "$OUT/ops_$t.log" | cut -c1-150
done
if [ "${GOLDEN:-1}" = 1 ] && [ -x "$D/nibble" ]; then
  for k in mma f32; do
    echo "== golden, NIBBLE_CUDA_MLA=$k"
    env LD_LIBRARY_PATH="$L" NIBBLE_CUDA_MLA=$k NIBBLE_BIN=$D/nibble timeout 240 \
      python3 tests/cuda_ops/cuda_golden_check.py >"$OUT/golden_$k.log" 2>&1 || rc=1
    tail -12 "$OUT/golden_$k.log"
  done
fi
if [ "${TINY:-1}" = 1 ] && [ -x "$D/nibble" ]; then
  for b in cpu cuda; do
    env LD_LIBRARY_PATH="$L" timeout 120 $D/nibble generate --model synthetic:glm5-tiny --ids 1,2,3,4,5,6,7,8 \
      --max-tokens 24 --temperature 0 --ignore-eos --print-ids --backend $b 2>"$OUT/tiny_$b.err" | tail -1 \
      >"$OUT/tiny_$b.ids"
  done
  if cmp -s "$OUT/tiny_cpu.ids" "$OUT/tiny_cuda.ids"; then
    echo "glm5-tiny greedy: cpu == cuda"
  else
    echo "glm5-tiny greedy differs"; cat "$OUT"/tiny_*.ids; tail -3 "$OUT/tiny_cuda.err"; rc=1
  fi
fi
exit $rc
