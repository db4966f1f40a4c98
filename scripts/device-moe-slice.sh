#!/usr/bin/env bash
# One GPU-machine call (the `run` tool) for the slice kernel (moe_slice.cu, <= 8 tokens):
#   test   test_cuda_moe's moe_small, moe_stream_variants, moe_slice (substring "moe_s") and
#          moe_glm5_shape
#   bench  bench-moe at 1-10 tokens of a GLM-5 layer, slice kernel off / on in one process
#          (NIBBLE_BENCH_MOE_VARIANTS), uniform then zipf routing
#   probe  bench/lab/hopper_probe.sh run, when built (build-probe/hopper_probe)
# Build here first: scripts/moe-standalone-build.sh build-sl/standalone; carry build-sl (and
# build-probe). Then: run(command="STEPS='test bench' bash scripts/device-moe-slice.sh",
# carry=["build-sl"]). Logs and a summary under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/moe-slice-out}
mkdir -p "$OUT"
BIN=${MOE_BIN:-build-sl/standalone}
TOKENS=${TOKENS:-1,2,4,8,10}
VARIANTS=${VARIANTS:-NIBBLE_MOE_SLICE=0 NIBBLE_MOE_SLICE=1}
SUM="$OUT/summary.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv | tee "$SUM"
rc=0
for s in ${STEPS:-test bench}; do
  t0=$(date +%s)
  case $s in
    test)
      timeout 300 "$BIN/test_cuda_moe" moe_s >"$OUT/test.log" 2>&1 || rc=1
      timeout 200 "$BIN/test_cuda_moe" moe_glm5_shape >>"$OUT/test.log" 2>&1 || rc=1
      grep -E "^(ok|FAIL|not ok|PASS)|passed|failed|rel err [0-9.e-]+ >" "$OUT/test.log" | tail -12 >>"$SUM"
      awk '/rel err/ {for (i = 1; i <= NF; i++) if ($i == "err") { v = $(i + 1) + 0; if (v > m) m = v } } END { printf "max rel err %.3g\n", m }' "$OUT/test.log" >>"$SUM" ;;
    bench)
      for r in uniform zipf; do
        NIBBLE_BENCH_MOE_VARIANTS="$VARIANTS" timeout 240 "$BIN/nibble" bench-moe --tokens "$TOKENS" --routing $r \
          --iters 30 >"$OUT/bench_$r.log" 2>&1 || rc=1
        echo "--- bench-moe $r" >>"$SUM"
        grep -E "^ *[0-9]+ " "$OUT/bench_$r.log" >>"$SUM"
      done ;;
    probe)
      [ -x build-probe/hopper_probe ] && timeout 120 build-probe/hopper_probe >"$OUT/probe.log" 2>&1 || rc=1
      cat "$OUT/probe.log" >>"$SUM" ;;
  esac
  echo "step $s: $(($(date +%s) - t0)) s" >>"$SUM"
done
cat "$SUM"
exit $rc
