#!/bin/bash
# Twenty-second session, call 1: dsa_select's merge with the first digit's bin in shared memory
# and the mma scoring form (checks, then part / merge timings per form), test_cuda_graph with a
# live selection, the long-prompt run (lanes, mma, the old DSA path), rows_bf16, golden
# fixtures, the 64 x 4096 per-op profile.
#   BUILD=build scripts/device-verify.sh pack
#   run(command="bash bench/h200-2026-12-07-s22/call1.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=300)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
el() { echo "[$(($(date +%s) - T0)) s]"; }
exec > >(tee $OUT/summary.txt) 2>&1 # the summary comes back even if the call is cut off
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 90 build/tests/test_cuda_vs_cpu dsa_select > $OUT/dsa-test.log 2>&1
echo "test_cuda_vs_cpu dsa_select rc=$?"; grep -ciE "mismatch|fail" $OUT/dsa-test.log; grep -E "FAIL|unlike" $OUT/dsa-test.log | head -5; tail -n2 $OUT/dsa-test.log
timeout 60 build/tests/test_cuda_graph > $OUT/graph-test.log 2>&1
echo "test_cuda_graph rc=$?"; tail -n2 $OUT/graph-test.log
el
for tc in "1 100000" "16 100000" "64 30000" "110 2112" "4 100000" "1 2100"; do
  for f in lanes mma; do
    NB_TEST_DSA_FORM=$f timeout 40 build/tests/test_cuda_vs_cpu dsa-time $tc 2>&1 | grep "dsa_select time" | cut -c1-240
  done
done
el
M=synthetic:glm5:num_hidden_layers=8
for v in "lanes" "mma NIBBLE_CUDA_DSA=mma" "old NIBBLE_CUDA_DSA=warp NIBBLE_CUDA_DSA_SPLIT=0"; do
  set -- $v; name=$1; shift
  env "$@" timeout 45 build/nibble bench-offline --backend cuda --model $M \
    --num-prompts 256 --input-len 2048 --output-len 64 --warmup 1 --max-running-requests 256 > $OUT/off256-$name.log 2>&1
  echo "256 x 2048 DSA $name rc=$?"; grep -hE "Output token|Decode-only step|Mean decode batch|time / floor" $OUT/off256-$name.log | cut -c1-140
done
el
timeout 40 build/tests/test_cuda_vs_cpu rows_bf16 > $OUT/rows16-test.log 2>&1
echo "test_cuda_vs_cpu rows_bf16 rc=$?"; tail -n1 $OUT/rows16-test.log
NIBBLE_BIN=build/nibble timeout 100 python3 tests/cuda_ops/cuda_golden_check.py > $OUT/golden.log 2>&1
echo "golden rc=$?"; tail -12 $OUT/golden.log
el
timeout 60 build/nibble bench-offline --backend cuda --model $M --num-prompts 64 --input-len 4096 --output-len 24 \
  --max-running-requests 64 --profile-ops 3 --profile-skip 8 > $OUT/profile-4096.log 2>&1
echo "profile 4096 rc=$?"; grep -E "Decode-only step|time / floor|Floor per step" $OUT/profile-4096.log | cut -c1-150
grep -A24 "Per-op profile" $OUT/profile-4096.log | cut -c1-150 | head -26
el
