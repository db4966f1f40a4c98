#!/bin/bash
# Skeleton split: proxy fence off (LAB bit 2, value 4), 5-stage ring at 16 warps (B=-5).
B=build-sl/standalone
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_LEAN=1 NIBBLE_MOE_WG_LAB=3 NIBBLE_MOE_WG_LAB=7 NIBBLE_MOE_WG_LAB=4 NIBBLE_MOE_WG_LAB=5 NIBBLE_MOE_WG_LAB=6 NIBBLE_MOE_WG_B=-5 NIBBLE_MOE_WG_B=-5,NIBBLE_MOE_WG_LAB=3" \
  $B/nibble bench-moe --tokens 256 --iters 100 > $OUT/call5-bench.log 2>&1; echo "bench rc=$?"
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_LEAN=1 NIBBLE_MOE_WG_LAB=3 NIBBLE_MOE_WG_LAB=7 NIBBLE_MOE_WG_LAB=4 NIBBLE_MOE_WG_B=2 NIBBLE_MOE_WG_B=2,NIBBLE_MOE_WG_LAB=4" \
  $B/nibble bench-moe --tokens 256,1000 --iters 100 >> $OUT/call5-bench.log 2>&1; echo "bench rc=$?"
grep -E "^ +[0-9]" $OUT/call5-bench.log
