#!/bin/bash
# Nsight Compute on the MoE kernels (first use of ncu in this project): the wide form at 8192
# and 2048 tokens, the lean 16-warp form at 1000 tokens (batch-1000 decode's MoE), the stream
# kernel at 1 token. Details pages as text, per-SASS source counters as CSV (xz).
B=build-moe/standalone
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"; $NCU --version | tail -1
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section SourceCounters --section Occupancy --section InstructionStats --section LaunchStats"
prof() {  # name env tokens kernel-regex
  local name=$1 envs=$2 tok=$3 kre=$4
  env $envs timeout 150 $NCU --clock-control none -k "regex:$kre" -s 2 -c 1 $SEC --import-source no -o $OUT/$name -f \
    $B/nibble bench-moe --tokens $tok --iters 20 > $OUT/$name-run.log 2>&1; echo "$name rc=$?"
  $NCU --import $OUT/$name.ncu-rep --page details > $OUT/$name-details.txt 2>&1
  $NCU --import $OUT/$name.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -6 > $OUT/$name-sass.csv.xz
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc Active|L2 Hit|DRAM Throughput|L1/TEX Hit" $OUT/$name-details.txt | head -14
  rm -f $OUT/$name.ncu-rep.tmp
}
prof wide8192 NIBBLE_MOE_WG_WIDE=2 8192 moe_wg_kernel
prof lean1000 NIBBLE_MOE_WG_WIDE=0 1000 moe_wg_kernel
prof wide2048 NIBBLE_MOE_WG_WIDE=2 2048 moe_wg_kernel
prof stream1 NIBBLE_MOE_WG_WIDE=0 1 moe_ffn
cd $OUT && tar -cJf ncu-call2.tar.xz *-details.txt *-run.log *-sass.csv.xz && rm -f *-details.txt *-run.log *-sass.csv.xz && rm -f *.ncu-rep && ls -la
