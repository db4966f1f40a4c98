#!/bin/bash
# Rings of several blocks per SM (lean loop): 16 x1 (default), 8 x2, 4 x4 (3 stages), 4 x3 (4 stages),
# 16 x1 with 5 stages; 512 and 1000 tokens at 8 x2 with 3 stages. Then the wgmma tests.
B=build-sl/standalone
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_LEAN=0 NIBBLE_MOE_WG_LEAN=1 NIBBLE_MOE_WG_B=2 NIBBLE_MOE_WG_B=4 NIBBLE_MOE_WG_B=3,NIBBLE_MOE_WG_S=4 NIBBLE_MOE_WG_S=5 NIBBLE_MOE_WG_B=2,NIBBLE_MOE_WG_LAB=1 NIBBLE_MOE_WG_B=4,NIBBLE_MOE_WG_LAB=1" \
  $B/nibble bench-moe --tokens 128,256 --kernel wgmma --iters 100 > $OUT/call6-bench.log 2>&1; echo "bench rc=$?"
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_LEAN=0 NIBBLE_MOE_WG_LEAN=1 NIBBLE_MOE_WG_B=2,NIBBLE_MOE_WG_S=3" \
  $B/nibble bench-moe --tokens 512,1000 --iters 100 >> $OUT/call6-bench.log 2>&1; echo "bench rc=$?"
grep -E "^ +[0-9]|rror" $OUT/call6-bench.log
( time $B/test_cuda_moe moe_wgmma_variants ) > $OUT/call6-test.log 2>&1; echo "test rc=$?"; tail -3 $OUT/call6-test.log
