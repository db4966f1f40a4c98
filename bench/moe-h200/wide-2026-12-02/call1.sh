#!/bin/bash
# The wide form (NIBBLE_MOE_WG_WIDE): its tests, then bench-moe with the wide form off / forced,
# A B A B in one process, uniform and zipf routing.
B=build-moe/standalone
D=bench/moe-h200/wide-2026-12-02
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
( time timeout 200 $B/test_cuda_moe moe_wgmma_wide moe_small moe_glm5_shape ) > $OUT/call1-test.log 2>&1; echo "test rc=$?"
grep -E "FAIL|PASS|rel err [0-9.e-]+ >|^real" $OUT/call1-test.log | tail -8
grep -c "rel err" $OUT/call1-test.log
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_WIDE=0 NIBBLE_MOE_WG_WIDE=2 NIBBLE_MOE_WG_WIDE=0 NIBBLE_MOE_WG_WIDE=2" \
  timeout 150 $B/nibble bench-moe --tokens 256,512,1000,1024,1536,2048,4096,8192 --iters 30 > $OUT/call1-bench.log 2>&1; echo "bench rc=$?"
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_WIDE=0 NIBBLE_MOE_WG_WIDE=2" \
  timeout 60 $B/nibble bench-moe --tokens 1024,2048,4096 --iters 30 --routing zipf >> $OUT/call1-bench.log 2>&1; echo "bench rc=$?"
grep -E "^ +[0-9]|ceilings|copy|TFLOP" $OUT/call1-bench.log | head -60
( time timeout 120 $B/test_cuda_moe moe_wgmma_variants moe_big_t ) > $OUT/call1-test2.log 2>&1; echo "test2 rc=$?"
grep -E "FAIL|rel err [0-9.e-]+ >|^real" $OUT/call1-test2.log | tail -5
grep -c "rel err" $OUT/call1-test2.log
for v in 0 1; do NIBBLE_MOE_WG_WIDE=$v timeout 60 $B/nibble bench-gemm --iters 20 > $OUT/call1-gemm-wide$v.log 2>&1; echo "gemm wide=$v rc=$?"; done
paste <(grep -E "^ +[0-9]" $OUT/call1-gemm-wide0.log) <(grep -E "^ +[0-9]" $OUT/call1-gemm-wide1.log) | tail -8
