#!/bin/bash
# Thirteenth session, call 2: the stream kernel at 64-320 tokens (L2 at 83 % in call 1's ncu).
# Four standalone builds (scripts/moe-standalone-build.sh, moe_ffn.cu rebuilt with flags):
# nibble0 = HEAD; -l1 = act read through L1 (-DNB_MOE_ACT_L1=1); -b4 = the NT 2 kernel at 4
# blocks per SM (-DNB_MOE_NT2_BLOCKS=4, 128 registers); -l1b4 = both. Tests of the stream
# kernel on -l1b4 and -l1, then bench-moe alternating the four binaries three times, and ncu at
# 256 tokens on -l1, -l1b4, -st (NT 2 tokens staged in shared memory, -DNB_MOE_STAGE_NT2=1). -w80: the wide form's middle width n80 instead of n96
# (-DNB_MOE_WGW_MID=80, moe_wgmma.cu), its test and bench-moe at 1536-3072 tokens against HEAD.
set -u
T0=$(date +%s)
xz -dc .s13b.tar.xz | tar -xf -
mkdir -p $OUT/x
for t in l1b4 l1 st; do
  timeout 200 ./test-$t moe_s > $OUT/x/test-$t.log 2>&1; echo "test $t rc=$?"; tail -1 $OUT/x/test-$t.log
done
echo "[$(($(date +%s) - T0)) s]"
for r in 1 2 3; do
  for v in 0 -l1 -b4 -l1b4 -st; do
    timeout 100 ./nibble$v bench-moe --tokens 1,2,10,64,128,192,256,320 --iters 30 > $OUT/x/r$r$v.log 2>&1
    echo "== r$r nibble$v rc=$?"; grep -E "^ +[0-9]" $OUT/x/r$r$v.log | awk '{print $1, $3, $NF}' | tr '\n' ' '; echo
  done
done
timeout 200 ./test-w80 moe_wgmma_wide > $OUT/x/test-w80.log 2>&1; echo "test w80 rc=$?"; tail -1 $OUT/x/test-w80.log
for r in 1 2 3; do
  for v in 0 -w80; do
    timeout 100 ./nibble$v bench-moe --tokens 1536,2048,2560,3072 --iters 30 > $OUT/x/w$r$v.log 2>&1
    echo "== w$r nibble$v rc=$?"; grep -E "^ +[0-9]" $OUT/x/w$r$v.log | awk '{print $1, $3, $NF}' | tr '\n' ' '; echo
  done
done
echo "[$(($(date +%s) - T0)) s]"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy"
for v in -l1 -l1b4 -st; do
  timeout 120 $NCU --clock-control none -k "regex:moe_ffn_kernel" -s 2 -c 1 $SEC -o $OUT/x/n256$v -f ./nibble$v bench-moe --tokens 256 --iters 20 > $OUT/x/n256$v-run.log 2>&1; echo "ncu $v rc=$?"
  $NCU --import $OUT/x/n256$v.ncu-rep --page details > $OUT/x/n256$v-details.txt 2>&1
  grep -E "Duration|DRAM Throughput|L2 Hit|L1/TEX Hit|L2 Cache Throughput|No Eligible|Achieved Occupancy|Registers Per" $OUT/x/n256$v-details.txt | head -10
  rm -f $OUT/x/n256$v.ncu-rep
done
echo "[$(($(date +%s) - T0)) s]"
cd $OUT && tar -cJf x.tar.xz x && rm -rf x
