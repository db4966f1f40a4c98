#!/usr/bin/env bash
# Call 8: the wgmma lean loop's early copies of the next item's first codes (NIBBLE_MOE_WG_EARLY)
# and its new stage layout (codes first), against the tree's binary (05a78b9's wgmma kernel, the
# same as 79cb55b's): tests, then bench-moe 256-2048 tokens, three processes alternating twice.
#   run(command="bash bench/moe-h200/stream-ptr-2026-12-02/call8.sh",
#       carry=["build-sl/new/nibble", "build-sl/new/test_cuda_moe", "build-sl/tree/nibble"])
set -uo pipefail
OUT=${OUT:-/tmp/call8}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
build-sl/new/test_cuda_moe moe_w >"$OUT/test-w.log" 2>&1; echo "moe_w exit $?"; tail -n 1 "$OUT/test-w.log"
build-sl/new/test_cuda_moe moe_glm5 >"$OUT/test-glm5.log" 2>&1; echo "moe_glm5 exit $?"; tail -n 1 "$OUT/test-glm5.log"
NIBBLE_MOE_WG_EARLY=1 build-sl/new/test_cuda_moe moe_glm5 >"$OUT/test-glm5-early.log" 2>&1; echo "moe_glm5 early exit $?"
for r in 1 2; do
  for v in tree new0 new1; do
    case $v in tree) B=build-sl/tree; E=0 ;; new0) B=build-sl/new; E=0 ;; new1) B=build-sl/new; E=1 ;; esac
    NIBBLE_MOE_WG_EARLY=$E $B/nibble bench-moe --tokens 256,512,1000,2048 --iters 100 2>&1 | grep -E "^ +[0-9]" |
      sed "s/\$/  $v/" | tee -a "$OUT/bench.log"
  done
done
NIBBLE_MOE_WG_EARLY=0 build-sl/new/nibble bench-moe --tokens 256,1024,2048 --routing zipf --iters 100 2>&1 | grep -E "^ +[0-9]" | sed "s/\$/  new0 zipf/" | tee -a "$OUT/bench.log"
NIBBLE_MOE_WG_EARLY=1 build-sl/new/nibble bench-moe --tokens 256,1024,2048 --routing zipf --iters 100 2>&1 | grep -E "^ +[0-9]" | sed "s/\$/  new1 zipf/" | tee -a "$OUT/bench.log"
