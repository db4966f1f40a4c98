#!/bin/bash
# Nineteenth session, call 1: the cluster kernel for small MoE steps (src/ops/cuda/moe_cluster.cu,
# NIBBLE_MOE_SMALL=2; =3 forces it) against the small-step kernel (=1, the default): its GPU
# test rows first (moe_stream_variants, moe_small, moe_glm5_shape), then the two interleaved in
# one process at 1-8 tokens, twice, then the issue 8 row. Standalone build (.abin/s19.tar.xz).
#   run(command="bash bench/h200-2026-12-07-s19/call1.sh", carry=[".abin"], timeout_s=300)
set -u
T0=$(date +%s)
mkdir -p b && (cd b && xz -dc ../.abin/s19.tar.xz | tar -xf -)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for t in moe_cluster moe_stream_variants moe_small moe_glm5_shape; do
  timeout 90 b/test_cuda_moe $t > $OUT/test-$t.log 2>&1
  echo "test $t rc=$?"; tail -1 $OUT/test-$t.log; grep -B3 -A3 "FAIL\|error" $OUT/test-$t.log | head -20
done
NIBBLE_MOE_SMALL=3 timeout 90 b/test_cuda_moe moe_small > $OUT/test-small-cl.log 2>&1
echo "test moe_small with NIBBLE_MOE_SMALL=3 rc=$?"; tail -1 $OUT/test-small-cl.log; grep -B3 -A3 "FAIL\|error" $OUT/test-small-cl.log | head -20
echo "[$(($(date +%s) - T0)) s]"
V="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2"
for i in 1 2; do
  NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 60 b/nibble bench-moe --tokens 1,2,3,4,6,8 --iters 30 > $OUT/ab$i.log 2>&1
  echo "ab $i rc=$?"; grep -E "^ +[0-9]|ceilings|variant" $OUT/ab$i.log | head -30
done
echo "[$(($(date +%s) - T0)) s]"
NIBBLE_MOE_SMALL=2 timeout 60 b/nibble bench-moe --tokens 1,2,10,64,256,1024,2048 --iters 30 > $OUT/row.log 2>&1
echo "row rc=$?"; grep -E "^ +[0-9]" $OUT/row.log
echo "[$(($(date +%s) - T0)) s]"
