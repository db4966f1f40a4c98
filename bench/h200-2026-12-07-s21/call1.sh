#!/bin/bash
# Twenty-first session, call 1: dsa_select's split form and the lanes default checked on the
# final build, the long-prompt run against the old DSA path, timings, the long-context profile,
# golden fixtures last (glm_moe_dsa's index_topk 16 puts the selection in them).
#   run(command="bash bench/h200-2026-12-07-s21/call1.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=280)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
nvidia-smi --query-gpu=name --format=csv,noheader
el() { echo "[$(($(date +%s) - T0)) s]"; }
exec > >(tee $OUT/summary.txt) 2>&1 # the summary comes back even if the call is cut off
timeout 90 build/tests/test_cuda_vs_cpu dsa_select > $OUT/dsa-test.log 2>&1
echo "test_cuda_vs_cpu dsa_select rc=$?"; grep -ciE "mismatch|fail" $OUT/dsa-test.log; tail -n2 $OUT/dsa-test.log
el
M=synthetic:glm5:num_hidden_layers=8
for v in "new" "old NIBBLE_CUDA_DSA=warp NIBBLE_CUDA_DSA_SPLIT=0" "new"; do
  set -- $v; name=$1; shift
  [ $(($(date +%s) - T0)) -gt 90 ] && { echo "deadline: skipping a $name run"; continue; }
  env "$@" timeout 45 build/nibble bench-offline --backend cuda --model $M \
    --num-prompts 256 --input-len 2048 --output-len 64 --warmup 1 --max-running-requests 256 > $OUT/off256-$name-$(date +%s).log 2>&1
  echo "256 x 2048 DSA $name rc=$?"; grep -hE "Output token|Decode-only step|Mean decode batch|time / floor" $(ls -t $OUT/off256-$name-*.log | head -1) | cut -c1-140
done
el
timeout 40 build/tests/test_cuda_vs_cpu rows_bf16 > $OUT/rows16-test.log 2>&1
echo "test_cuda_vs_cpu rows_bf16 rc=$?"; tail -n1 $OUT/rows16-test.log
timeout 60 build/tests/test_cuda_graph > $OUT/graph-test.log 2>&1
echo "test_cuda_graph rc=$?"; tail -n1 $OUT/graph-test.log
el
NIBBLE_BIN=build/nibble timeout 100 python3 tests/cuda_ops/cuda_golden_check.py > $OUT/golden.log 2>&1
echo "golden rc=$?"; tail -12 $OUT/golden.log
el
for tc in "110 2112" "1 100000" "64 4096"; do
  timeout 30 build/tests/test_cuda_vs_cpu dsa-time $tc 2>&1 | grep "dsa_select time"
done
el
timeout 60 build/nibble bench-offline --backend cuda --model $M --num-prompts 64 --input-len 4096 --output-len 24 \
  --max-running-requests 64 --profile-ops 3 --profile-skip 8 > $OUT/profile-4096.log 2>&1
echo "profile 4096 rc=$?"; grep -E "Decode-only step|time / floor|Floor per step" $OUT/profile-4096.log | cut -c1-150
grep -A24 "Per-op profile" $OUT/profile-4096.log | cut -c1-150 | head -26
el
