#!/bin/bash
# Thirteenth session, call 1 (build-lead at the SM-grouped small-step kernel, uncommitted):
# the stream kernel's GPU tests; bench-moe at 1-8 tokens, NIBBLE_MOE_SMALL=2 (one block per SM,
# items by SM) against 1 (blocks of 4 warps, items by block), interleaved, two processes;
# Nsight Compute on the 256-token stream kernel at 16- and 8-token tiles (is it L2- or
# issue-bound?); bench-offline at 1 / 2 / 10 requests with each small-step layout.
set -u
T0=$(date +%s)
tar -xJf .devbin.tar.xz
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
B=build-lead
mkdir -p $OUT/x
timeout 240 $B/tests/test_cuda_moe moe_s > $OUT/x/test-s.log 2>&1; echo "test moe_s* rc=$?"; tail -3 $OUT/x/test-s.log
timeout 120 $B/tests/test_cuda_moe moe_glm5 > $OUT/x/test-glm5.log 2>&1; echo "test moe_glm5 rc=$?"; tail -2 $OUT/x/test-glm5.log
echo "[$(($(date +%s) - T0)) s]"
for i in 1 2; do
  NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_SMALL=2 NIBBLE_MOE_SMALL=1" timeout 100 $B/nibble bench-moe --tokens 1,2,4,8 --iters 40 \
    > $OUT/x/ab$i.log 2>&1; echo "ab$i rc=$?"; grep -E "^ +[0-9]|ceilings|variant" $OUT/x/ab$i.log
done
echo "[$(($(date +%s) - T0)) s]"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats"
for nt in 0 1; do
  NIBBLE_MOE_NT=$nt timeout 120 $NCU --clock-control none -k "regex:moe_ffn_kernel" -s 2 -c 1 $SEC \
    -o $OUT/x/n256-nt$nt -f $B/nibble bench-moe --tokens 256 --iters 20 > $OUT/x/n256-nt$nt-run.log 2>&1; echo "ncu nt$nt rc=$?"
  $NCU --import $OUT/x/n256-nt$nt.ncu-rep --page details > $OUT/x/n256-nt$nt-details.txt 2>&1
  grep -E "Duration|Memory Throughput|DRAM Throughput|L2 Hit|L1/TEX Hit|L2 Cache Throughput|L1/TEX Cache Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Registers Per" $OUT/x/n256-nt$nt-details.txt | head -16
  rm -f $OUT/x/n256-nt$nt.ncu-rep
done
echo "[$(($(date +%s) - T0)) s]"
PARTS=ab AB="NIBBLE_MOE_SMALL=1" OUT=$OUT/x scripts/device-final.sh > $OUT/x/final.log 2>&1; echo "ab rc=$?"
cat $OUT/x/summary.txt
echo "[$(($(date +%s) - T0)) s]"
cd $OUT && tar -cJf x.tar.xz x && rm -rf x
