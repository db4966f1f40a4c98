#!/bin/bash
# Noise check: variants interleaved A B C A B C, 100 timings each.
B=build-sl/standalone
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_LEAN=0 NIBBLE_MOE_WG_LEAN=1 NIBBLE_MOE_WG_B=2 NIBBLE_MOE_WG_LEAN=0 NIBBLE_MOE_WG_LEAN=1 NIBBLE_MOE_WG_B=2" \
  $B/nibble bench-moe --tokens 256,1000,2048 --iters 100 > $OUT/call3-bench.log 2>&1; echo "bench rc=$?"
grep -E "^ +[0-9]" $OUT/call3-bench.log
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
