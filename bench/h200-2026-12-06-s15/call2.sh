#!/bin/bash
# Fifteenth session, call 2: the warp-scheduled small-step kernel (NIBBLE_MOE_SMALL=2,
# src/ops/cuda/moe_warp.cu). Standalone build (scripts/moe-standalone-build.sh) carried as
# .abin/s15a.tar.xz: its GPU tests (moe_stream_variants, moe_small, moe_glm5_shape), then
# bench-moe at 1-8 tokens with the block-item kernel (SMALL=1) and the warp kernel (SMALL=2)
# interleaved in one process (and the warp kernel at 4 and 16 units per warp), twice; zipf routing
# at 1 and 8 tokens.
set -u
T0=$(date +%s)
xz -dc .abin/s15a.tar.xz | tar -xf -
mkdir -p $OUT/x
for t in moe_stream_variants moe_small moe_glm5_shape shared; do
  timeout 200 ./test_cuda_moe $t > $OUT/x/test-$t.log 2>&1; echo "test $t rc=$?"; grep -E "FAIL|passed|failed" $OUT/x/test-$t.log | tail -3
done
echo "[$(($(date +%s) - T0)) s]"
for r in 1 2; do
  NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_WARP_UNITS=4 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_WARP_UNITS=16" timeout 150 ./nibble bench-moe --tokens 1,2,4,8 \
    --iters 40 > $OUT/x/ab$r.log 2>&1; echo "ab$r rc=$?"; grep -E "^ +[0-9]|ceilings|copy" $OUT/x/ab$r.log
done
echo "[$(($(date +%s) - T0)) s]"
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2" timeout 60 ./nibble bench-moe --tokens 1,8 --routing zipf \
  --iters 30 > $OUT/x/zipf.log 2>&1; echo "zipf rc=$?"; grep -E "^ +[0-9]" $OUT/x/zipf.log
echo "[$(($(date +%s) - T0)) s]"
cd $OUT && tar -cJf x.tar.xz x && rm -rf x
