#!/bin/bash
# Twenty-second session, call 5: Nsight Compute on dsa_select's merge kernel (T 1 at context
# 100k and 2100, lanes form, the automatic room: its 27th launch), to find where its ~150 / ~33 us go (dsa-time as a graph: the
# merge costs that much on the device, and not in its passes over the global candidates).
# Not run in the twenty-second session (no budget left). Since call 6 the default merge has no
# warp collectives (NIBBLE_CUDA_DSA_HIST=atomic): what is left to find is its ~30 us floor.
#   tar -cf - build/tests/test_cuda_vs_cpu | xz -4 -T2 -c > .devbin2.tar.xz
#   run(command="bash bench/h200-2026-12-07-s22/call5.sh", carry=[".devbin2.tar.xz", ".devlibs.tar.xz"], timeout_s=200)
set -u
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin2.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
for tc in "1 100000" "1 2100"; do
  set -- $tc
  timeout 90 ncu --clock-control none -k regex:k_dsa_merge --launch-skip 26 --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --section SourceCounters \
    -o $OUT/merge-$1-$2 build/tests/test_cuda_vs_cpu dsa-time $1 $2 > $OUT/ncu-run-$2.log 2>&1
  echo "ncu $tc rc=$?"; tail -n3 $OUT/ncu-run-$2.log
  ncu -i $OUT/merge-$1-$2.ncu-rep --page details > $OUT/merge-$2-details.txt 2>&1
  grep -E "Duration|Elapsed Cycles|Executed Ipc|Issue Slots|Warp Cycles Per Issued|Stall|Registers|Achieved Occ|Executed Instructions " $OUT/merge-$2-details.txt | head -30
  ncu -i $OUT/merge-$1-$2.ncu-rep --page source --csv --print-source cuda > $OUT/merge-$2-source.csv 2>&1
  echo "source page rc=$? lines $(wc -l < $OUT/merge-$2-source.csv)"
  rm -f $OUT/merge-$1-$2.ncu-rep
done
