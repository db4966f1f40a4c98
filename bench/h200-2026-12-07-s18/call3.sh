#!/bin/bash
# Eighteenth session, call 3: the small-step kernel prefetching its down item's first k-groups
# into L2 before it waits for the item's gate_up items (NIBBLE_MOE_DN_PREFETCH=0/2/4/8),
# interleaved in one process at 1-8 tokens; the MoE tests with a prefetch on; the issue 8 row.
# Standalone build of the tree with bench/lab/moe-dn-prefetch.patch applied (.abin/s18b.tar.xz).
#   run(command="bash bench/h200-2026-12-07-s18/call3.sh", carry=[".abin/s18b.tar.xz"], timeout_s=240)
set -u
T0=$(date +%s)
mkdir -p b && (cd b && xz -dc ../.abin/s18b.tar.xz | tar -xf -)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
V="NIBBLE_MOE_DN_PREFETCH=0 NIBBLE_MOE_DN_PREFETCH=2 NIBBLE_MOE_DN_PREFETCH=4 NIBBLE_MOE_DN_PREFETCH=8"
for i in 1 2; do
  NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 60 b/nibble bench-moe --tokens 1,2,4,8 --iters 30 > $OUT/pf-$i.log 2>&1
  echo "pf $i rc=$?"; grep -E "^ +[0-9]|ceilings" $OUT/pf-$i.log
done
echo "[$(($(date +%s) - T0)) s]"
NIBBLE_MOE_DN_PREFETCH=4 timeout 100 b/test_cuda_moe moe_small > $OUT/test-small-pf4.log 2>&1
echo "test moe_small pf4 rc=$?"; tail -1 $OUT/test-small-pf4.log
NIBBLE_MOE_DN_PREFETCH=8 timeout 100 b/test_cuda_moe moe_glm5 > $OUT/test-glm5-pf8.log 2>&1
echo "test moe_glm5_shape pf8 rc=$?"; tail -1 $OUT/test-glm5-pf8.log
timeout 60 b/nibble bench-moe --tokens 1,2,10,64,256,1024,2048 --iters 30 > $OUT/row.log 2>&1
echo "row rc=$?"; grep -E "^ +[0-9]" $OUT/row.log
echo "[$(($(date +%s) - T0)) s]"
