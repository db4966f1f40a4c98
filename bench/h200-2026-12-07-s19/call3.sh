#!/bin/bash
# Nineteenth session, call 3: the cluster kernel with 4-block clusters (units of 128 act columns,
# `nibble`) and 8-block clusters (256, `nibble8`, built with -DMOE_CL_BLOCKS=8) against the
# small-step kernel, at the cluster count the occupancy query gives (124 / 62 on an H100) and
# at one cluster per 4 / 8 block slots of all 132 SMs (NIBBLE_MOE_CL_CLUSTERS: are they
# resident?). Standalone build (.abin/s19.tar.xz).
#   run(command="bash bench/h200-2026-12-07-s19/call3.sh", carry=[".abin"], timeout_s=300)
set -u
T0=$(date +%s)
mkdir -p b && (cd b && xz -dc ../.abin/s19.tar.xz | tar -xf -)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 90 b/test_cuda_moe moe_cluster > $OUT/test-cl.log 2>&1
echo "test moe_cluster rc=$?"; tail -n1 $OUT/test-cl.log; grep "FAIL\|clusters of" $OUT/test-cl.log | head
NIBBLE_MOE_CL_CLUSTERS=132 timeout 90 b/test_cuda_moe moe_cluster > $OUT/test-cl132.log 2>&1
echo "test moe_cluster, 132 clusters rc=$?"; tail -n1 $OUT/test-cl132.log; grep "FAIL\|clusters of" $OUT/test-cl132.log | head
echo "[$(($(date +%s) - T0)) s]"
V="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2"
run() { # name binary env...
  local n=$1 bin=$2; shift 2
  env "$@" NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 60 b/$bin bench-moe --tokens 1,2,3,4,8 --iters 30 > $OUT/$n.log 2>&1
  echo "$n rc=$?"; grep -E "^ +[0-9]|clusters of" $OUT/$n.log | grep -v "SMALL=1$" | head -8
}
run cl4 nibble
run cl4-132 nibble NIBBLE_MOE_CL_CLUSTERS=132
run cl8 nibble8
run cl8-66 nibble8 NIBBLE_MOE_CL_CLUSTERS=66
echo "small-step kernel rows of the first run:"; grep -E "SMALL=1$" $OUT/cl4.log
echo "[$(($(date +%s) - T0)) s]"
