#!/usr/bin/env bash
# Call 3: the k-group loops 0 / 1 / 2 of the stream kernel (NIBBLE_MOE_STREAM_LOOP) in one process,
# alternating, then the stream tests of the same binary (every loop at every variant).
#   run(command="bash bench/moe-h200/stream-ptr-2026-12-02/call3.sh", carry=["build-sl/new/nibble", "build-sl/new/test_cuda_moe"])
set -uo pipefail
B=build-sl/new
OUT=${OUT:-/tmp/call3}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
V="NIBBLE_MOE_STREAM_LOOP=0 NIBBLE_MOE_STREAM_LOOP=1 NIBBLE_MOE_STREAM_LOOP=2 NIBBLE_MOE_STREAM_LOOP=1 NIBBLE_MOE_STREAM_LOOP=2 NIBBLE_MOE_STREAM_LOOP=0"
NIBBLE_BENCH_MOE_VARIANTS="$V" $B/nibble bench-moe --tokens 1,2,10,64 --iters 100 >"$OUT/bench-uniform.log" 2>&1
NIBBLE_BENCH_MOE_VARIANTS="$V" $B/nibble bench-moe --tokens 1,2,10 --routing zipf --iters 100 >"$OUT/bench-zipf.log" 2>&1
grep -E "^ +[0-9]|variant|LOOP" "$OUT/bench-uniform.log" "$OUT/bench-zipf.log" | cut -c1-160
$B/test_cuda_moe moe_stream_variants >"$OUT/test-stream.log" 2>&1; echo "moe_stream_variants exit $?"
$B/test_cuda_moe moe_s >"$OUT/test-s.log" 2>&1; echo "moe_s exit $?"
tail -n 1 "$OUT/test-stream.log" "$OUT/test-s.log"
