#!/bin/bash
# 16-token tiles: 1 x 16 warps (default) vs 4 x 4 warps vs 2 x 8 warps, interleaved three times,
# 200 timings each; then every wgmma variant's test.
B=build-sl/standalone
V="NIBBLE_MOE_WG_B=1 NIBBLE_MOE_WG_B=4 NIBBLE_MOE_WG_B=2"
NIBBLE_BENCH_MOE_VARIANTS="$V $V" $B/nibble bench-moe --tokens 128,256 --kernel wgmma --iters 200 > $OUT/call7-bench.log 2>&1; echo "bench rc=$?"
NIBBLE_BENCH_MOE_VARIANTS="$V" $B/nibble bench-moe --tokens 256 --kernel wgmma --iters 200 --routing zipf >> $OUT/call7-bench.log 2>&1; echo "bench rc=$?"
grep -E "^ +[0-9]|rror" $OUT/call7-bench.log
( time $B/test_cuda_moe moe_wgmma_variants ) > $OUT/call7-test.log 2>&1; echo "test rc=$?"; grep -c "FAIL" $OUT/call7-test.log; tail -2 $OUT/call7-test.log
