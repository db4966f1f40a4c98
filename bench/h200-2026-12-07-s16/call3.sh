#!/bin/bash
# Sixteenth session, call 3: the last start the device budget allows (~330 s left after ten refused
# starts), so only the decisive part: bench-moe at 1-8 tokens, NIBBLE_MOE_SMALL=1 (default) against
# the warp-scheduled kernel (=2, bench/lab/moe-warp.patch) and =2 at 4 units per warp, interleaved
# in one process, then test_cuda_moe moe_stream_variants (the warp kernel's rows). Standalone
# build of the patched tree (.abin/s15a.tar.xz).
set -u
T0=$(date +%s)
xz -dc .abin/s15a.tar.xz | tar -xf -
V="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_WARP_UNITS=4"
NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 70 ./nibble bench-moe --tokens 1,2,4,8 --iters 40 > $OUT/ab1.log 2>&1
echo "ab1 rc=$?"; grep -E "^ +[0-9]|ceilings|^device" $OUT/ab1.log
echo "[$(($(date +%s) - T0)) s]"
timeout 60 ./test_cuda_moe moe_stream_variants > $OUT/test-stream.log 2>&1; echo "test stream rc=$?"
grep -E "warp-scheduled|FAIL" $OUT/test-stream.log | head -5; tail -2 $OUT/test-stream.log
echo "[$(($(date +%s) - T0)) s]"
