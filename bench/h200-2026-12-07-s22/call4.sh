#!/bin/bash
# Twenty-second session, call 4: dsa_select timed as a graph (device time: part and merge apart),
# its checks after the shared-memory attribute memo, the 64 x 4096 profile on the new MLA
# choice, 256 x 2048 long prompts on it, and the steady batch-1000 step op by op.
#   tar -cf - build/nibble build/tests/test_cuda_{vs_cpu,graph} | xz -4 -T2 -c > .devbin2.tar.xz
#   run(command="bash bench/h200-2026-12-07-s22/call4.sh", carry=[".devbin2.tar.xz", ".devlibs.tar.xz"], timeout_s=300)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin2.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
el() { echo "[$(($(date +%s) - T0)) s]"; }
exec > >(tee $OUT/summary.txt) 2>&1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for tc in "1 100000" "16 100000" "1 2100" "110 2112"; do
  for f in lanes mma; do
    NB_TEST_DSA_FORM=$f timeout 40 build/tests/test_cuda_vs_cpu dsa-time $tc 2>&1 | grep "dsa_select time" | cut -c1-240
  done
done
timeout 90 build/tests/test_cuda_vs_cpu dsa_select > $OUT/dsa-test.log 2>&1
echo "test_cuda_vs_cpu dsa_select rc=$?"; grep -c "FAIL" $OUT/dsa-test.log; tail -n1 $OUT/dsa-test.log
timeout 60 build/tests/test_cuda_graph > $OUT/graph-test.log 2>&1
echo "test_cuda_graph rc=$?"; tail -n1 $OUT/graph-test.log
el
M=synthetic:glm5:num_hidden_layers=8
timeout 60 build/nibble bench-offline --backend cuda --model $M --num-prompts 64 --input-len 4096 --output-len 24 \
  --max-running-requests 64 --profile-ops 3 --profile-skip 8 > $OUT/profile-4096.log 2>&1
echo "profile 4096 rc=$?"; grep -E "Decode-only step|time / floor|Floor per step" $OUT/profile-4096.log | cut -c1-150
grep -A30 "Per-op profile" $OUT/profile-4096.log | cut -c1-150 | head -32
el
timeout 50 build/nibble bench-offline --backend cuda --model $M --num-prompts 256 --input-len 2048 --output-len 64 \
  --warmup 1 --max-running-requests 256 > $OUT/off256.log 2>&1
echo "256 x 2048 rc=$?"; grep -hE "Output token|Decode-only step|Mean decode batch|time / floor" $OUT/off256.log | cut -c1-140
el
timeout 120 build/nibble bench-offline --backend cuda --model $M --num-prompts 1000 --input-len 128 --output-len 48 \
  --max-running-requests 1000 --profile-ops 4 --profile-skip 24 > $OUT/profile1000.log 2>&1
echo "profile 1000 rc=$?"; grep -A40 "Per-op profile" $OUT/profile1000.log | cut -c1-150 | head -42
el
