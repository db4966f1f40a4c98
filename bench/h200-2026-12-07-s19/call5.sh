#!/bin/bash
# Nineteenth session, call 5: the cluster kernel on clusters of 2 blocks of 8 warps (units of 128
# act columns: 128 at 1 token for ~132 clusters; clusters of 2 get every SM, call 4's probe),
# with the later down codes prefetched into L2 (NIBBLE_MOE_CL_LAB=8: without), against the
# small-step kernel, interleaved in one process, twice; its test rows first. Standalone build.
#   run(command="bash bench/h200-2026-12-07-s19/call5.sh", carry=[".abin"], timeout_s=300)
set -u
T0=$(date +%s)
mkdir -p b && (cd b && xz -dc ../.abin/s19.tar.xz | tar -xf -)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 90 b/test_cuda_moe moe_cluster > $OUT/test-cl.log 2>&1
echo "test moe_cluster rc=$?"; tail -n1 $OUT/test-cl.log; grep "FAIL\|clusters of" $OUT/test-cl.log | head
NIBBLE_MOE_SMALL=3 timeout 90 b/test_cuda_moe moe_small > $OUT/test-small-cl.log 2>&1
echo "test moe_small, cluster kernel forced rc=$?"; tail -n1 $OUT/test-small-cl.log
timeout 90 b/test_cuda_moe moe_stream_variants > $OUT/test-variants.log 2>&1
echo "test moe_stream_variants rc=$?"; tail -n1 $OUT/test-variants.log
echo "[$(($(date +%s) - T0)) s]"
V="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_CL_LAB=8"
for i in 1 2; do
  NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 60 b/nibble bench-moe --tokens 1,2,3,4,6,8 --iters 30 > $OUT/ab$i.log 2>&1
  echo "ab $i rc=$?"; grep -E "^ +[0-9]|clusters of" $OUT/ab$i.log | head -20
done
echo "[$(($(date +%s) - T0)) s]"
