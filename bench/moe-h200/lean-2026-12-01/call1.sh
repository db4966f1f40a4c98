#!/bin/bash
# Lean wgmma loop: correctness (test_cuda_moe) and bench-moe A/B against the previous loop.
B=build-sl/standalone
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
( time $B/test_cuda_moe ) > $OUT/call1-test.log 2>&1; echo "test rc=$?" | tee -a $OUT/call1-test.log
tail -5 $OUT/call1-test.log
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_LEAN=0 NIBBLE_MOE_WG_LEAN=1" \
  $B/nibble bench-moe --tokens 256,512,1000,1024,2048 --iters 20 > $OUT/call1-bench.log 2>&1; echo "bench rc=$?"
cat $OUT/call1-bench.log | tail -40
