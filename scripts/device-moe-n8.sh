#!/usr/bin/env bash
# One part of a GPU-machine call (the `run` tool) for the wgmma MoE kernel's instruction widths
# in steps of 8 (issue 8 / 9, engineer N, NIBBLE_MOE_WG_N8=1; ops/cuda/moe_wgmma.cu): its
# correctness checks with the switch FORCED ON, then A/B timings off vs on in the same binary:
#   1. test_cuda_moe moe_wgmma_n8 (sets NIBBLE_MOE_WG_N8=1 itself: every compiled tile width /
#      warp count, one expert with 1..NW+8 tokens so that every width n8..n64 runs, poisoned
#      workspace, float64 reference <= 1e-2)
#   2. nibble bench-moe --tokens 256,512,1000,1024,2048, both settings in one process
#      (NIBBLE_BENCH_MOE_VARIANTS, same weights and routings)
#   3. bench-offline --backend cuda --model synthetic:glm5:num_hidden_layers=8, 1000 prompts,
#      input 128, output 32, with NIBBLE_MOE_WG_N8=0 then =1 (decode step p50, time / floor)
#   4. (if time is left) test_cuda_moe moe_small with NIBBLE_MOE_WG_N8=1 in the environment:
#      the ladder's own wgmma choices under the switch
# Binaries from build-lead (scripts/device-verify.sh pack); here:
#   run(command="scripts/device-moe-n8.sh", carry=[".devbin.tar.xz", ".devlibs-cuda"])
# <= 70 s in all (each step's timeout is cut to what is left of BUDGET). Prints PASS/FAIL lines
# and the timing rows; logs under $OUT (n8-test.log, n8-bench.log, n8-offline.log, n8-summary.txt).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/moe-n8-out}
mkdir -p "$OUT"
B=${BUILD:-build-lead}
[ -f .devbin.tar.xz ] && [ ! -x "$B/nibble" ] && tar -xJf .devbin.tar.xz
L="env LD_LIBRARY_PATH=$PWD/.devlibs-cuda"
MODEL=${MODEL:-synthetic:glm5:num_hidden_layers=8}
TOKENS=${TOKENS:-256,512,1000,1024,2048}
BUDGET=${BUDGET:-68}
SUM="$OUT/n8-summary.txt"
: >"$SUM"
t0=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - t0))); }
cap() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
say() { echo "$*" | tee -a "$SUM"; }
rc=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader | tee -a "$SUM"

# 1. correctness, switch on
say "[$(( $(date +%s) - t0 )) s] test moe_wgmma_n8"
$L timeout "$(cap 30)" "$B/tests/test_cuda_moe" moe_wgmma_n8 >"$OUT/n8-test.log" 2>&1
trc=$?
cases=$(grep -c "rel err" "$OUT/n8-test.log")
maxerr=$(awk '/rel err/{v=$0; sub(/.*rel err /,"",v); sub(/ .*/,"",v); if (v+0>m) m=v+0} END{print m+0}' "$OUT/n8-test.log")
if [ $trc -eq 0 ] && [ "$cases" -gt 0 ]; then
  say "PASS moe_wgmma_n8: $cases cases, max rel err $maxerr"
else
  rc=1
  say "FAIL moe_wgmma_n8: exit $trc, $cases cases, max rel err $maxerr"
  grep -E "FAIL|error|wgmma n8" "$OUT/n8-test.log" | tail -20 | tee -a "$SUM"
fi

# 2. bench-moe, off vs on in one process
say "[$(( $(date +%s) - t0 )) s] bench-moe"
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_N8=0 NIBBLE_MOE_WG_N8=1" $L timeout "$(cap 20)" "$B/nibble" bench-moe \
  --tokens "$TOKENS" --iters "${ITERS:-20}" --json "$OUT/n8-bench.json" >"$OUT/n8-bench.log" 2>&1 || { rc=1; say "FAIL bench-moe"; }
grep -E "tokens +kernel|NIBBLE_MOE_WG_N8" "$OUT/n8-bench.log" | tee -a "$SUM"

# 3. bench-offline, off then on
for v in 0 1; do
  l=$(left)
  if [ "$l" -lt 8 ]; then say "offline N8=$v skipped: ${l} s left"; continue; fi
  say "[$(( $(date +%s) - t0 )) s] bench-offline NIBBLE_MOE_WG_N8=$v"
  echo "=== NIBBLE_MOE_WG_N8=$v" >>"$OUT/n8-offline.log"
  NIBBLE_MOE_WG_N8=$v $L timeout "$(cap 25)" "$B/nibble" bench-offline --backend cuda --model "$MODEL" \
    --num-prompts 1000 --input-len 128 --output-len 32 --max-running-requests 1000 >>"$OUT/n8-offline.log" 2>&1 ||
    { rc=1; say "FAIL bench-offline NIBBLE_MOE_WG_N8=$v"; }
  awk -v v="$v" '/^=== /{cur = ($0 == "=== NIBBLE_MOE_WG_N8=" v); next}
    cur && /Decode-only step time|Decode step time \/ floor|Mean decode batch/' "$OUT/n8-offline.log" |
    sed "s/^/N8=$v: /" | tee -a "$SUM"
done

# 4. the ladder under the switch (other kernels' cases of moe_small run too)
l=$(left)
if [ "$l" -ge 12 ]; then
  say "[$(( $(date +%s) - t0 )) s] test moe_small with NIBBLE_MOE_WG_N8=1"
  NIBBLE_MOE_WG_N8=1 $L timeout "$(cap 20)" "$B/tests/test_cuda_moe" moe_small >"$OUT/n8-test-small.log" 2>&1
  src=$?
  if [ $src -eq 0 ]; then say "PASS moe_small (N8=1): $(grep -c 'rel err' "$OUT/n8-test-small.log") cases"
  elif [ $src -eq 124 ]; then say "CUT moe_small (N8=1): timeout, $(grep -c 'rel err' "$OUT/n8-test-small.log") cases ran"
  else rc=1; say "FAIL moe_small (N8=1): exit $src"; grep -E "FAIL|error" "$OUT/n8-test-small.log" | tail -10 | tee -a "$SUM"; fi
else
  say "moe_small (N8=1) skipped: ${l} s left"
fi
say "[$(( $(date +%s) - t0 )) s] end rc=$rc"
exit $rc
