#!/bin/bash
# For the twenty-third round's first call (~4 min): the DSA merge's code-size patch against the
# tree (bench/lab/dsa-merge-lean.patch), ncu on the merge, and test_cuda_moe in full (the
# twenty-second session's last call cut it off). Prepare here:
#   git apply bench/lab/dsa-merge-lean.patch && cmake --build build --target test_cuda_vs_cpu
#   cp build/tests/test_cuda_vs_cpu /tmp/vs_cpu_lean && git apply -R bench/lab/dsa-merge-lean.patch
#   cmake --build build --target test_cuda_vs_cpu && mkdir -p build/lab && cp /tmp/vs_cpu_lean build/lab/
#   tar -cf - build/tests/test_cuda_vs_cpu build/lab/vs_cpu_lean build/tests/test_cuda_moe | xz -4 -T2 -c > .devbin2.tar.xz
#   run(command="bash bench/h200-2026-12-07-s22/next-call.sh", carry=[".devbin2.tar.xz", ".devlibs.tar.xz"], timeout_s=330)
set -u
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin2.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 90 build/lab/vs_cpu_lean dsa_select > $OUT/dsa-test-lean.log 2>&1
echo "lean dsa_select rc=$?"; tail -n1 $OUT/dsa-test-lean.log
for tc in "1 2100" "1 100000" "16 100000"; do
  for b in build/tests/test_cuda_vs_cpu build/lab/vs_cpu_lean build/tests/test_cuda_vs_cpu build/lab/vs_cpu_lean; do
    echo "$(basename $b): $(timeout 40 $b dsa-time $tc 2>&1 | grep 'dsa_select time' | cut -c1-240)"
  done
done
timeout 90 ncu --clock-control none -k regex:k_dsa_merge --launch-skip 26 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section InstructionStats --section SchedulerStats \
  build/tests/test_cuda_vs_cpu dsa-time 1 2100 > $OUT/ncu-merge-2100.txt 2>&1
echo "ncu rc=$?"; grep -E "Duration|Elapsed Cycles|Executed Ipc|Warp Cycles Per Issued|No Instruction|Stall" $OUT/ncu-merge-2100.txt | head -20
timeout 160 build/tests/test_cuda_moe > $OUT/moe-test.log 2>&1
echo "test_cuda_moe rc=$?"; grep -ciE "fail" $OUT/moe-test.log; tail -n1 $OUT/moe-test.log
