#!/bin/bash
# Nineteenth session, call 2: the cluster kernel after its fix (the unit's out rows were
# rewritten while other warps of the block still read them: wrong at 2+ units per cluster),
# its test rows, and where its time goes at 1-8 tokens: lab switches NIBBLE_MOE_CL_LAB (1: no
# atomics, 2: no down products, 4: no gate_up products; wrong results), interleaved with the
# small-step kernel in one process. Standalone build (.abin/s19.tar.xz).
#   run(command="bash bench/h200-2026-12-07-s19/call2.sh", carry=[".abin"], timeout_s=300)
set -u
T0=$(date +%s)
mkdir -p b && (cd b && xz -dc ../.abin/s19.tar.xz | tar -xf -)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 90 b/test_cuda_moe moe_cluster > $OUT/test-moe_cluster.log 2>&1
echo "test moe_cluster rc=$?"; tail -1 $OUT/test-moe_cluster.log; grep "rel err\|FAIL\|cluster" $OUT/test-moe_cluster.log | head -24
timeout 90 b/test_cuda_moe moe_stream_variants > $OUT/test-variants.log 2>&1
echo "test moe_stream_variants rc=$?"; tail -1 $OUT/test-variants.log
NIBBLE_MOE_SMALL=3 timeout 90 b/test_cuda_moe moe_small > $OUT/test-small-cl.log 2>&1
echo "test moe_small with NIBBLE_MOE_SMALL=3 rc=$?"; tail -1 $OUT/test-small-cl.log
echo "[$(($(date +%s) - T0)) s]"
V="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_CL_LAB=1 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_CL_LAB=2 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_CL_LAB=4"
NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 90 b/nibble bench-moe --tokens 1,2,3,4,6,8 --iters 30 > $OUT/lab.log 2>&1
echo "lab rc=$?"; grep -E "^ +[0-9]|ceilings|clusters of" $OUT/lab.log | head -40
echo "[$(($(date +%s) - T0)) s]"
