#!/bin/bash
# (Never run: no device start came for it; call1b.sh, its short form, ran instead.)
# Twenty-third session, call 1 (~5 min): where the batch-1000 step's MLA time goes.
#  0. test_cuda_mla_decode wg (the wg kernel's checks, with the consumers sharing S: mla.h
#     nb_cuda_mla_wg_force_share);
#  1. the wg op at 1000 x 192 on both pools and its steps alone on the BF16 pool (isolated);
#  2. Nsight Compute on the BF16-row wg kernel in isolation (speed of light, scheduler, warp
#     states, per-SASS stall samples);
#  3. Nsight Compute on the same kernel inside bench-offline at 1000 requests (the model's
#     real layout; duration only) and the kernels around it;
#  4. the DSA merge code-size patch A/B (bench/lab/dsa-merge-lean.patch, built here as
#     build/lab/vs_cpu_lean; the twenty-second session's next-call.sh).
# Carry .devbin2.tar.xz (build/nibble, build/tests/test_cuda_mla_decode,
# build/tests/test_cuda_vs_cpu, build/lab/vs_cpu_lean) and .devlibs.tar.xz.
set -u
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin2.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
which nsys ncu
NB_TEST_MLA_ROWS16=only timeout 90 build/tests/test_cuda_mla_decode time 192 1000 > $OUT/time.log 2>&1
echo "time rc=$?"; grep -E "mla (time|steps)|BF16 rows|sharing" $OUT/time.log | cut -c1-220
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SEC="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis"
# in the model: every kernel of one steady decode step at batch 1000, each timed alone by ncu
NIBBLE_CUDA_PROFILER_RANGE=1 timeout 170 $NCU --profile-from-start off --cache-control none --clock-control none \
  --metrics gpu__time_duration.sum,launch__grid_size,dram__bytes.sum --csv --page raw \
  build/nibble bench-offline --backend cuda --model synthetic:glm5:num_hidden_layers=8 --num-prompts 1000 \
  --input-len 128 --output-len 24 --max-running-requests 1000 --profile-ops 1 --profile-skip 14 > $OUT/step1000.csv 2> /tmp/ncu-model.err
echo "ncu model rc=$?"; tail -n3 /tmp/ncu-model.err; grep -c '^"' $OUT/step1000.csv
NB_TEST_MLA_ROWS16=only timeout 120 $NCU --clock-control none --kernel-name-base mangled -k regex:k_mla_wgILi0ELi72ELi216ELi1ELi[01]E -c 2 $SEC --import-source no \
  -o $OUT/wg -f build/tests/test_cuda_mla_decode time 192 1000 > /tmp/ncu-iso.log 2>&1; echo "ncu iso rc=$?"; tail -n3 /tmp/ncu-iso.log
$NCU --import $OUT/wg.ncu-rep --page details > $OUT/wg-details.txt 2>&1
$NCU --import $OUT/wg.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -6 > $OUT/wg-sass.csv.xz
grep -E "k_mla_wg|Duration|DRAM Throughput|Issue Slots|No Eligible|Warp Cycles Per Issued|Eligible Warps" $OUT/wg-details.txt | head -12
rm -f $OUT/wg.ncu-rep
# the model at 1000 requests, the consumers sharing S or not (A B A B)
for sh in 0 1 0 1; do
  NIBBLE_CUDA_MLA_WG_SHARE=$sh timeout 90 build/nibble bench-offline --backend cuda --model synthetic:glm5:num_hidden_layers=8 \
    --num-prompts 1000 --input-len 128 --output-len 48 --max-running-requests 1000 > /tmp/off$sh.log 2>&1
  echo "share=$sh rc=$? $(grep -E '^1000 ' /tmp/off$sh.log | tail -n1)"
done
timeout 150 build/tests/test_cuda_mla_decode wg > $OUT/wg-test.log 2>&1
echo "wg test rc=$?"; grep -ciE "fail" $OUT/wg-test.log; grep -iE "fail|sharing" -A6 $OUT/wg-test.log | head -20; tail -n2 $OUT/wg-test.log
for tc in "1 2100" "1 100000" "16 100000"; do
  for b in build/tests/test_cuda_vs_cpu build/lab/vs_cpu_lean build/tests/test_cuda_vs_cpu build/lab/vs_cpu_lean; do
    echo "$(basename $b): $(timeout 40 $b dsa-time $tc 2>&1 | grep 'dsa_select time' | cut -c1-200)"
  done
done
timeout 60 build/lab/vs_cpu_lean dsa_select > $OUT/dsa-test-lean.log 2>&1
echo "lean dsa_select rc=$?"; tail -n1 $OUT/dsa-test-lean.log
