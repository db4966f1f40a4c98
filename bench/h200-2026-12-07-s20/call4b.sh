#!/bin/bash
# Twentieth session, call 4b (prepared, not run: no machine came): dsa_select's lanes form
# checked and timed against the warp form, the long-context decode step op by op, and call 2's
# long-prompt run with each form.
#   run(command="bash bench/h200-2026-12-07-s20/call4b.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=230)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 60 build/tests/test_cuda_vs_cpu dsa_select > $OUT/dsa-test.log 2>&1
echo "test_cuda_vs_cpu dsa_select rc=$?"; grep -E "dsa_select topk|tests:" $OUT/dsa-test.log | head -14
# set_rows into BF16 rows now goes through set_rows_n (after call 3): its byte-exact check
timeout 60 build/tests/test_cuda_vs_cpu rows_bf16 > $OUT/rows16-test.log 2>&1
echo "test_cuda_vs_cpu rows_bf16 rc=$?"; tail -n1 $OUT/rows16-test.log
for tc in "110 2112" "64 4096" "1 8192"; do
  timeout 30 build/tests/test_cuda_vs_cpu dsa-time $tc 2>&1 | grep "dsa_select time"
done
echo "[$(($(date +%s) - T0)) s]"
M=synthetic:glm5:num_hidden_layers=8
timeout 70 build/nibble bench-offline --backend cuda --model $M --num-prompts 64 --input-len 4096 --output-len 24 \
  --max-running-requests 64 --profile-ops 3 --profile-skip 8 > $OUT/profile-4096.log 2>&1
echo "profile 4096 rc=$?"; grep -E "^64 |Floor per step" $OUT/profile-4096.log | cut -c1-150
grep -A28 "Per-op profile" $OUT/profile-4096.log | cut -c1-150 | head -30
echo "[$(($(date +%s) - T0)) s]"
for form in warp lanes; do
  [ $(($(date +%s) - T0)) -gt 170 ] && { echo "deadline: skipping $form"; continue; }
  NIBBLE_CUDA_DSA=$form timeout 45 build/nibble bench-offline --backend cuda --model $M \
    --num-prompts 256 --input-len 2048 --output-len 64 --warmup 1 --max-running-requests 256 > $OUT/off256-$form.log 2>&1
  echo "256 x 2048 DSA $form rc=$?"; grep -hE "^256 |Output token throughput" $OUT/off256-$form.log | cut -c1-160
done
echo "[$(($(date +%s) - T0)) s]"
