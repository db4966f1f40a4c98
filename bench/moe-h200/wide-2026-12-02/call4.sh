#!/bin/bash
# Lab: the wide form's n128 step as two n64 wgmmas on the two halves of the accumulators and
# tokens (-DMOE_WGW_SPLIT=1, build-moe/standalone-split) against the committed single n128
# (build-moe/standalone), alternating processes; its test; ncu's tensor-pipe figure for each.
A=build-moe/standalone; S=build-moe/standalone-split
timeout 60 $S/test_cuda_moe moe_wgmma_wide > $OUT/call4-test.log 2>&1; echo "test rc=$?"; grep -c "rel err" $OUT/call4-test.log
for bin in $A $S $A $S; do
  echo "== $bin" >> $OUT/call4-ab.log
  timeout 60 $bin/nibble bench-moe --tokens 2048,4096,8192 --iters 20 >> $OUT/call4-ab.log 2>&1
done
grep -E "^==|^ +[0-9]" $OUT/call4-ab.log
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for bin in $A $S; do
  timeout 60 $NCU --clock-control none -k "regex:moe_wg_kernel" -s 2 -c 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    $bin/nibble bench-moe --tokens 8192 --iters 20 > $OUT/call4-ncu-$(basename $bin).log 2>&1
  grep -E "Duration|highest-utilized|Issue Slots" $OUT/call4-ncu-$(basename $bin).log | head -3
done
