#!/bin/bash
# Lean loop + two 8-warp blocks per SM (NIBBLE_MOE_WG_B=2): tests, then bench-moe A/B.
B=build-sl/standalone
( time $B/test_cuda_moe ) > $OUT/call2-test.log 2>&1; echo "test rc=$?" | tee -a $OUT/call2-test.log
grep -E "FAIL|fail|B 2" $OUT/call2-test.log | head; tail -3 $OUT/call2-test.log
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_LEAN=0 NIBBLE_MOE_WG_LEAN=1 NIBBLE_MOE_WG_B=2" \
  $B/nibble bench-moe --tokens 128,256,384 --iters 20 > $OUT/call2-bench.log 2>&1; echo "bench rc=$?"
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_LEAN=0 NIBBLE_MOE_WG_LEAN=1" \
  $B/nibble bench-moe --tokens 512,1000,2048 --iters 20 >> $OUT/call2-bench.log 2>&1; echo "bench rc=$?"
grep -E "^ +[0-9]" $OUT/call2-bench.log
