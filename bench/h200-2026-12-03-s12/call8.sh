#!/bin/bash
# Twelfth session, call 8: Nsight Compute on the 1-token small-step kernel, k-group loop 2 (the
# default) against loop 3 (bench/lab/moe-kgwait.patch on 371f4eb, standalone build in
# .abin/nibble-kg.xz), to see why loop 3's down phase streams slower. Details pages as text and
# per-SASS source counters (xz).
set -u
xz -dkf .abin/nibble-kg.xz && chmod +x .abin/nibble-kg
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
mkdir -p $OUT/x
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section SourceCounters --section Occupancy --section InstructionStats --section LaunchStats"
for v in 2 3; do
  NIBBLE_MOE_STREAM_LOOP=$v timeout 150 $NCU --clock-control none -k "regex:moe_ffn_small" -s 3 -c 1 $SEC --import-source no \
    -o $OUT/x/loop$v -f .abin/nibble-kg bench-moe --tokens 1 --iters 20 > $OUT/x/loop$v-run.log 2>&1; echo "loop $v rc=$?"
  $NCU --import $OUT/x/loop$v.ncu-rep --page details > $OUT/x/loop$v-details.txt 2>&1
  $NCU --import $OUT/x/loop$v.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -6 > $OUT/x/loop$v-sass.csv.xz
  grep -E "Duration|Memory Throughput|DRAM Throughput|L2 Hit|L1/TEX Hit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc Active|Achieved Occupancy" $OUT/x/loop$v-details.txt | head -14
  rm -f $OUT/x/loop$v.ncu-rep
done
cd $OUT && tar -cJf x.tar.xz x && rm -rf x
