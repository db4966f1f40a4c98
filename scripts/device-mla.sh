#!/usr/bin/env bash
# MLA / DSA checks and timings in one GPU-machine call (the `run` tool); logs to $OUT.
# Here: build test_cuda_vs_cpu, test_cuda_vs_cpu_mla_timing and nibble in build-M; build the
# "before" timing binary against an older build's libraries (-DNB_MLA_TIMING_OLD, see
# tests/cuda_ops/test_cuda_vs_cpu_mla_timing.c) as build-M/mla_timing_old; pack the four
# into build-M/devM.tar.xz (tar -cJf devM.tar.xz -C dev . after copying them to build-M/dev).
# Run: scripts/device-mla.sh with carry [build-M/devM.tar.xz, .devlibs-cuda].
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT" build-M/dev
tar -xJf build-M/devM.tar.xz -C build-M/dev
D=build-M/dev
L=$PWD/.devlibs-cuda
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
for t in mla dsa_select; do
  env LD_LIBRARY_PATH="$L" timeout 90 $D/test_cuda_vs_cpu $t >"$OUT/ops_$t.log" 2>&1 || rc=1
  grep -E "rel err|dsa_select|FAIL|passed|failed" "$OUT/ops_$t.log" | cut -c1-150
done
for b in test_cuda_vs_cpu_mla_timing mla_timing_old; do
  env LD_LIBRARY_PATH="$L" timeout 120 $D/$b ${MLA_CTX:-256} >"$OUT/$b.log" 2>&1 || rc=1
  echo "== $b"; grep -E "mla time|check|FAIL|ok$" "$OUT/$b.log" | cut -c1-160
done
if [ "${GOLDEN:-1}" = 1 ]; then
  env LD_LIBRARY_PATH="$L" NIBBLE_BIN=$D/nibble timeout 240 python3 tests/cuda_ops/cuda_golden_check.py \
    >"$OUT/golden.log" 2>&1 || rc=1
  tail -12 "$OUT/golden.log"
  # the same with every linear layer on the float32 GEMV: separates MLA's error from the
  # BF16 linear path's
  if [ "${GOLDEN_GEMV:-1}" = 1 ]; then
    echo "== golden, NIBBLE_CUDA_LINEAR=gemv"
    env LD_LIBRARY_PATH="$L" NIBBLE_CUDA_LINEAR=gemv NIBBLE_BIN=$D/nibble timeout 240 \
      python3 tests/cuda_ops/cuda_golden_check.py 2>&1 | grep glm_moe_dsa
  fi
fi
if [ "${TINY:-1}" = 1 ]; then
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
