#!/bin/bash
# The lean loop split: multiplying warps alone (LAB=1), copies alone (LAB=2), neither (3).
B=build-sl/standalone
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_LEAN=0 NIBBLE_MOE_WG_LEAN=1 NIBBLE_MOE_WG_LAB=1 NIBBLE_MOE_WG_LAB=2 NIBBLE_MOE_WG_LAB=3 NIBBLE_MOE_WG_B=2 NIBBLE_MOE_WG_B=2,NIBBLE_MOE_WG_LAB=1 NIBBLE_MOE_WG_B=2,NIBBLE_MOE_WG_LAB=2" \
  $B/nibble bench-moe --tokens 256,1000 --iters 100 > $OUT/call4-bench.log 2>&1; echo "bench rc=$?"
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_LEAN=0 NIBBLE_MOE_WG_LEAN=1 NIBBLE_MOE_WG_LAB=1 NIBBLE_MOE_WG_LAB=2" \
  $B/nibble bench-moe --tokens 2048 --iters 100 >> $OUT/call4-bench.log 2>&1; echo "bench rc=$?"
grep -E "^ +[0-9]" $OUT/call4-bench.log
