#!/bin/bash
# For the twenty-fourth round's first call (~7-9 min; never run). In order of value:
#  1. every GPU check on the tree (this round's automatic sharing rule and the test's share-off
#     block have not run);
#  2. every kernel of one steady batch-1000 decode step timed alone by ncu (skip 24, output 48:
#     the twenty-second round's call 4 caught batch 1000 with these; skip 12 caught 424), and the
#     eager per-op profile of the same settings beside it (is `mla_attention`'s 0.64 ms per layer
#     launch gaps inside its event window, or the kernels themselves in the model?);
#  3. the wg op on BF16 rows at context 192 (64, 256, 1000 tokens): sharing S or not, outputs
#     direct or staged (never timed on BF16 rows), the steps alone; then ncu stall sampling on
#     the BF16-row wg kernel at 1000 x 192, both sharing forms.
# Prepare here:
#   cmake --build build -j2 && BUILD=build scripts/device-verify.sh pack     (~4 min, .devbin.tar.xz)
#   run(command="bash bench/h200-2026-12-07-s23/next-call.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=600)
set -u
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
OUT0=$OUT
OUT=/tmp/verify STEPS="tests golden" BUILD=build scripts/device-verify.sh; echo "verify rc=$?"
rm -f /tmp/verify/nibble; tar -cJf $OUT0/verify-logs.tar.xz -C /tmp verify   # one file back, not ~14
M="--backend cuda --model synthetic:glm5:num_hidden_layers=8 --num-prompts 1000 --input-len 128 --output-len 48 --max-running-requests 1000"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
NIBBLE_CUDA_PROFILER_RANGE=1 timeout 200 $NCU --profile-from-start off --cache-control none --clock-control none \
  --metrics gpu__time_duration.sum,launch__grid_size,dram__bytes.sum --csv --page raw \
  build/nibble bench-offline $M --profile-ops 1 --profile-skip 24 > $OUT0/step1000.csv 2> /tmp/ncu-model.err
echo "ncu model rc=$?"; tail -n2 /tmp/ncu-model.err
timeout 120 build/nibble bench-offline $M --profile-ops 4 --profile-skip 24 > /tmp/prof.log 2>&1
echo "profile rc=$?"; grep -E "Per-op|step wall|moe_experts|mla_attention|lm_head|o_proj|^1000 " /tmp/prof.log | cut -c1-150
NB_TEST_MLA_ROWS16=only timeout 120 build/tests/test_cuda_mla_decode time 192 64,256,1000 > $OUT0/mla-time.log 2>&1
echo "mla time rc=$?"; grep -E "BF16 rows|mla steps" $OUT0/mla-time.log | cut -c1-200
SEC="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis"
NB_TEST_MLA_ROWS16=only timeout 150 $NCU --clock-control none --kernel-name-base mangled -k regex:'k_mla_wgILi0ELi72ELi216ELi1ELi[01]E' -c 2 $SEC \
  --import-source no -o $OUT0/wg -f build/tests/test_cuda_mla_decode time 192 1000 > /tmp/ncu-iso.log 2>&1; echo "ncu iso rc=$?"
$NCU --import $OUT0/wg.ncu-rep --page details > $OUT0/wg-details.txt 2>&1
$NCU --import $OUT0/wg.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -6 > $OUT0/wg-sass.csv.xz
grep -E "k_mla_wg|Duration|DRAM Throughput|No Eligible|Warp Cycles Per Issued" $OUT0/wg-details.txt | head -12
rm -f $OUT0/wg.ncu-rep
