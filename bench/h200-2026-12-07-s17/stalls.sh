#!/bin/bash
# Nsight Compute stall samples of the wgmma kernel with the mbarrier ring (NIBBLE_MOE_WG_MBAR=1):
# the wide form at 2048 tokens, the lean loop at 1000 (batch-1000 decode's MoE). Details page as
# text, per-SASS source counters as CSV (xz; scripts/ncu-stalls.py reads them here).
xz -dc .abin/s17.tar.xz | tar -xf -
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SEC="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section SourceCounters --section InstructionStats"
for c in "w2048 2048" "l1000 1000"; do
  set -- $c
  NIBBLE_MOE_WG_MBAR=1 timeout 120 $NCU --clock-control none -k "regex:moe_wg_kernel" -s 2 -c 1 $SEC --import-source no \
    -o $OUT/$1 -f ./nibble bench-moe --tokens $2 --iters 20 > $OUT/$1-run.log 2>&1; echo "$1 rc=$?"
  $NCU --import $OUT/$1.ncu-rep --page details > $OUT/$1-details.txt 2>&1
  $NCU --import $OUT/$1.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -6 > $OUT/$1-sass.csv.xz
  grep -E "Duration|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" $OUT/$1-details.txt | head -6
  rm -f $OUT/$1.ncu-rep
done
