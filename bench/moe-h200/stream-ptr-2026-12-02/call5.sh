#!/usr/bin/env bash
# Call 5: NIBBLE_MOE_DN_PREFETCH=0|1 (down items prefetch their weights into L2 while they wait
# for their tile) A/B in one process, the stream tests (prefetch path included), then issue 8's
# whole row on the default build in one process.
#   run(command="bash bench/moe-h200/stream-ptr-2026-12-02/call5.sh", carry=["build-sl/new/nibble", "build-sl/new/test_cuda_moe"])
# The switch was removed after this call (no gain; bench/RESULTS.md, issue 8, seventh session),
# so on later trees both variants run the same code.
set -uo pipefail
B=build-sl/new
OUT=${OUT:-/tmp/call5}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
V="NIBBLE_MOE_DN_PREFETCH=0 NIBBLE_MOE_DN_PREFETCH=1 NIBBLE_MOE_DN_PREFETCH=0 NIBBLE_MOE_DN_PREFETCH=1"
NIBBLE_BENCH_MOE_VARIANTS="$V" $B/nibble bench-moe --tokens 1,2,10,64 --iters 100 >"$OUT/bench-uniform.log" 2>&1
NIBBLE_BENCH_MOE_VARIANTS="$V" $B/nibble bench-moe --tokens 1,2,10 --routing zipf --iters 100 >"$OUT/bench-zipf.log" 2>&1
grep -E "^ +[0-9]" "$OUT/bench-uniform.log" "$OUT/bench-zipf.log" | sed 's/^.*bench-//' | cut -c1-150
$B/test_cuda_moe moe_stream_variants >"$OUT/test-stream.log" 2>&1; echo "moe_stream_variants exit $?"
$B/nibble bench-moe --iters 100 >"$OUT/bench-row.log" 2>&1; echo "bench-moe row exit $?"
grep -E "^ +[0-9]|ceiling|copy" "$OUT/bench-row.log" | cut -c1-150
