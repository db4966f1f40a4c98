#!/bin/bash
# The committed state (lean loop default, rings and lab branches removed): every MoE GPU test,
# then issue 8's points, the previous loop and the lean one side by side (each point A B A B).
B=build-sl/standalone
( time $B/test_cuda_moe ) > $OUT/call8-test.log 2>&1; echo "test rc=$?"; tail -2 $OUT/call8-test.log
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_LEAN=0 NIBBLE_MOE_WG_LEAN=1 NIBBLE_MOE_WG_LEAN=0 NIBBLE_MOE_WG_LEAN=1" \
  $B/nibble bench-moe --tokens 1,2,10,64,256,512,1000,1024,2048 --iters 100 > $OUT/call8-bench.log 2>&1; echo "bench rc=$?"
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_LEAN=0 NIBBLE_MOE_WG_LEAN=1" \
  $B/nibble bench-moe --tokens 256,1024,2048 --iters 100 --routing zipf >> $OUT/call8-bench.log 2>&1; echo "bench rc=$?"
grep -E "^ +[0-9]|ceilings" $OUT/call8-bench.log
