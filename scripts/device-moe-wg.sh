#!/usr/bin/env bash
# One GPU-machine call (the `run` tool) for the wgmma MoE kernel (issue 8): its GPU tests,
# then nibble bench-moe with the second session's kernel (NIBBLE_MOE_WG=old) and the new
# one side by side, the stream/wgmma ladder points and the compiled variants. Logs to $OUT.
# Build here first (dependency-free binaries, only the CUDA toolkit's libraries):
#   scripts/moe-standalone-build.sh build-F/standalone
#   run: bash scripts/device-moe-wg.sh     carry: build-F/standalone/nibble build-F/standalone/test_cuda_moe
# STEPS (default "test bench ladder variants") picks the parts, in that order; VARIANTS lists
# "N,NS,D,C[,W]" tuples (NIBBLE_MOE_WG_N/_NS/_D/_C/_W) timed at VTOKENS.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/moe-wg-out}
mkdir -p "$OUT"
B=${MOE_BIN:-build-F/standalone}
STEPS=${STEPS:-test bench ladder variants}
TOKENS=${TOKENS:-64,256,512,1000,1024,2048}
VTOKENS=${VTOKENS:-512,1000,1024,2048}
VARIANTS=${VARIANTS:-16,0,2,1,16 32,0,2,1,16 48,0,2,1,16 32,16,2,1,16 48,32,2,1,16 48,0,4,2,8 64,16,2,1,8}
ITERS=${ITERS:-20}
L="env LD_LIBRARY_PATH=/usr/local/cuda/lib64"
t0=$(date +%s.%N)
stamp() { echo "[$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s] $*" | tee -a "$OUT/times.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
for s in $STEPS; do
  case $s in
    test)
      for t in ${TESTS:-moe_wgmma_variants moe_big_t}; do
        stamp "test $t"
        timeout ${TEST_TIMEOUT:-40} $L "$B/test_cuda_moe" "$t" >>"$OUT/test.log" 2>&1 || { rc=1; echo "FAILED: $t"; }
      done
      grep -E "FAIL|tests:" "$OUT/test.log" | tail -20
      awk '/rel err/{n++; v=$0; sub(/.*rel err /,"",v); sub(/ .*/,"",v); if (v+0>m) m=v+0} END{print n " cases, max rel err " m}' "$OUT/test.log" ;;
    bench)
      stamp "bench old"
      NIBBLE_MOE_WG=old timeout ${BENCH_TIMEOUT:-60} $L "$B/nibble" bench-moe --kernel wgmma --tokens "$TOKENS" --iters "$ITERS" \
        >"$OUT/bench_old.log" 2>&1 || rc=1
      stamp "bench new"
      timeout ${BENCH_TIMEOUT:-60} $L "$B/nibble" bench-moe --kernel wgmma --tokens "$TOKENS" --iters "$ITERS" \
        >"$OUT/bench_new.log" 2>&1 || rc=1
      grep -A20 "tokens  kernel" "$OUT/bench_old.log" | sed 's/^/old /'
      grep -A20 "tokens  kernel" "$OUT/bench_new.log" | sed 's/^/new /' ;;
    ladder)
      stamp "ladder stream"
      timeout ${BENCH_TIMEOUT:-60} $L "$B/nibble" bench-moe --kernel stream --tokens 64,256,512 --iters "$ITERS" >"$OUT/ladder.log" 2>&1 || rc=1
      grep -A6 "tokens  kernel" "$OUT/ladder.log" | sed 's/^/stream /' ;;
    variants)
      for v in $VARIANTS; do
        IFS=, read -r n ns d c w <<<"$v"
        w=${w:-8}
        stamp "variant $v"
        echo "== N $n NS $ns D $d C $c W $w" >>"$OUT/variants.log"
        NIBBLE_MOE_WG_N=$n NIBBLE_MOE_WG_NS=$ns NIBBLE_MOE_WG_D=$d NIBBLE_MOE_WG_C=$c NIBBLE_MOE_WG_W=$w timeout ${VAR_TIMEOUT:-40} $L "$B/nibble" \
          bench-moe --kernel wgmma --tokens "$VTOKENS" --iters "$ITERS" >>"$OUT/variants.log" 2>&1 || rc=1
      done
      awk '/^== /{v=$0} /^ +[0-9]+ +wgmma/{print v, $1, $3, $NF}' "$OUT/variants.log" | tee "$OUT/variants.txt" ;;
  esac
done
stamp "end rc=$rc"
exit $rc
