#!/bin/bash
# Nineteenth session, call 6: Nsight Compute on the wg MLA kernel (k_mla_wg) at issue 9's
# batch-1000 shape (test_cuda_mla_decode time 192 1000: GLM-5 shapes, one decode token per
# sequence, context 192, the default one-term BF16-q form): speed of light, scheduler and warp
# states, per-SASS stall samples (scripts/ncu-stalls.py reads the CSV here); then the cluster
# residency probe on this machine. Carry .abin (mla.tar.xz: the test binary of a full build of
# db972b5; cluster_probe) and .devlibs.tar.xz.
#   run(command="bash bench/h200-2026-12-07-s19/call6.sh", carry=[".abin", ".devlibs.tar.xz"], timeout_s=300)
# (run twice: the first run's kernel filter matched nothing, since ncu matches demangled base
# names unless --kernel-name-base mangled; the second ran with TIME=0 PROBE=0.)
set -u
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
xz -dc .abin/mla.tar.xz | tar -xf -
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
[ "${TIME:-1}" = 1 ] && { timeout 60 build/tests/test_cuda_mla_decode time 192 1000 > $OUT/time.log 2>&1; echo "time rc=$?"; grep "mla time" $OUT/time.log | head -6; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SEC="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section SourceCounters --section InstructionStats --section MemoryWorkloadAnalysis"
timeout 150 $NCU --clock-control none --kernel-name-base mangled -k "regex:k_mla_wgILi4ELi120ELi192ELi1E" -s 2 -c 1 $SEC --import-source no \
  -o $OUT/wg -f build/tests/test_cuda_mla_decode time 192 1000 > $OUT/ncu-run.log 2>&1; echo "ncu rc=$?"
$NCU --import $OUT/wg.ncu-rep --page details > $OUT/wg-details.txt 2>&1
$NCU --import $OUT/wg.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -6 > $OUT/wg-sass.csv.xz
grep -E "k_mla_wg|Duration|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Memory Throughput|DRAM Throughput|Registers Per" $OUT/wg-details.txt | head -12
rm -f $OUT/wg.ncu-rep
[ "${PROBE:-1}" = 1 ] && { .abin/cluster_probe > $OUT/probe.log 2>&1; cat $OUT/probe.log; }
