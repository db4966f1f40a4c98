#!/usr/bin/env bash
# MLA checks and timings in one GPU-machine call (the `run` tool); logs to $OUT.
# Here: build test_cuda_vs_cpu, test_cuda_vs_cpu_mla_timing and (for BENCH=1, GOLDEN=1,
# TINY=1) nibble in your build folder, pack them and run:
#   mkdir -p build-A/devA && cp build-A/nibble build-A/tests/test_cuda_vs_cpu \
#     build-A/tests/test_cuda_vs_cpu_mla_timing build-A/devA/ &&
#   tar -cJf build-A/devA.tar.xz -C build-A/devA .
#   run(command="DEV=build-A/devA scripts/device-mla.sh", carry=["build-A/devA.tar.xz", ".devlibs-cuda"])
# Steps, each under its own timeout so that one call stays within its limit:
#   timing  the timing binary at each context of MLA_CTX (default 256) and batches
#           MLA_BATCHES (default 1,10,1000): up to 32 tokens the batched-GEMM path, the
#           small path and the small path with its merge kernel (mla.h
#           nb_cuda_mla_force_small); above, the float32 and the tensor-core attention
#           kernel: before / after in one binary. An older build's timing binary
#           (-DNB_MLA_TIMING_OLD) is run too when present as $DEV/mla_timing_old.
#   tests   test_cuda_vs_cpu for each name in MLA_TESTS (default "mla dsa_select")
#   bench   BENCH=1: bench-offline on the 8-layer GLM-5 slice at BENCH_LEVELS (1,10), input
#           128, output 16, --profile-ops 4, CUDA graphs on, once per entry of BENCH_ENVS
#           (VAR=value[,VAR=value...] or default; default "NIBBLE_CUDA_MLA_SMALL=0 default":
#           the GEMM path, then the automatic one)
#   golden  GOLDEN=1: tests/cuda_ops/cuda_golden_check.py per NIBBLE_CUDA_MLA of GOLDEN_MLA
#   tiny    TINY=1: synthetic:glm5-tiny greedy ids, cpu vs cuda
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mla-out}
D=${DEV:-build-A/devA}
mkdir -p "$OUT" "$OUT/more"
if [ -f "$D.tar.xz" ]; then mkdir -p "$D" && tar -xJf "$D.tar.xz" -C "$D"; fi
L=$PWD/.devlibs-cuda
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
for b in test_cuda_vs_cpu_mla_timing mla_timing_old; do
  [ -x "$D/$b" ] || continue
  for c in ${MLA_CTX:-256}; do
    env LD_LIBRARY_PATH="$L" timeout "${TIMING_S:-120}" $D/$b "$c" "${MLA_BATCHES:-1,10,1000}" \
      >"$OUT/more/${b}_$c.log" 2>&1 || rc=1
    echo "== $b ctx $c"; grep -E "mla time|check|FAIL|ok$" "$OUT/more/${b}_$c.log" | cut -c1-170
  done
done
for t in ${MLA_TESTS:-mla dsa_select}; do
  env LD_LIBRARY_PATH="$L" timeout "${TESTS_S:-90}" $D/test_cuda_vs_cpu $t >"$OUT/more/ops_$t.log" 2>&1 || rc=1
  grep -E "rel err|dsa_select|FAIL|passed|failed" "$OUT/more/ops_$t.log" | cut -c1-150
done
if [ "${BENCH:-0}" = 1 ] && [ -x "$D/nibble" ]; then
  for s in ${BENCH_ENVS:-NIBBLE_CUDA_MLA_SMALL=0 default}; do
    # shellcheck disable=SC2046 # an entry is VAR=value[,VAR=value...]
    if [ "$s" = default ]; then set -- env; else set -- env $(echo "$s" | tr ',' ' '); fi
    log="$OUT/bench_$(echo "$s" | sed 's/NIBBLE_CUDA_//g; s/[^A-Za-z0-9_.-]/_/g').log"
    "$@" LD_LIBRARY_PATH="$L" timeout "${BENCH_S:-40}" $D/nibble bench-offline --backend cuda \
      --model synthetic:glm5:num_hidden_layers=8,experts=nvfp4 --num-prompts "${BENCH_LEVELS:-1,10}" \
      --input-len 128 --output-len 16 --profile-ops 4 >"$log" 2>&1 || rc=1
    echo "== bench-offline, $s"
    grep -E "Decode-only step|time / floor|mla_attention|step wall" "$log" | cut -c1-150
  done
fi
if [ "${GOLDEN:-0}" = 1 ] && [ -x "$D/nibble" ]; then
  for k in ${GOLDEN_MLA:-auto}; do
    echo "== golden, NIBBLE_CUDA_MLA=$k"
    env LD_LIBRARY_PATH="$L" NIBBLE_CUDA_MLA=$k NIBBLE_BIN=$D/nibble PYTHONUNBUFFERED=1 timeout "${GOLDEN_S:-240}" \
      python3 tests/cuda_ops/cuda_golden_check.py >"$OUT/golden_$k.log" 2>&1 || rc=1
    tail -12 "$OUT/golden_$k.log"
  done
fi
if [ "${TINY:-0}" = 1 ] && [ -x "$D/nibble" ]; then
  for b in cpu cuda; do
    env LD_LIBRARY_PATH="$L" timeout 120 $D/nibble generate --model synthetic:glm5-tiny --ids 1,2,3,4,5,6,7,8 \
      --max-tokens 24 --temperature 0 --ignore-eos --print-ids --backend $b 2>"$OUT/more/tiny_$b.err" | tail -1 \
      >"$OUT/more/tiny_$b.ids"
  done
  if cmp -s "$OUT/more/tiny_cpu.ids" "$OUT/more/tiny_cuda.ids"; then
    echo "glm5-tiny greedy: cpu == cuda"
  else
    echo "glm5-tiny greedy differs"; cat "$OUT"/more/tiny_*.ids; tail -3 "$OUT/more/tiny_cuda.err"; rc=1
  fi
fi
# at most 8 files come back: the per-step logs travel as one archive
tar -cJf "$OUT/more.tar.xz" -C "$OUT" more && rm -rf "$OUT/more"
exit $rc
