#!/bin/bash
# Twentieth session, call 4: why call 2's long-prompt decode steps (256 x 2048 in, 64 out: ~36 ms
# at a batch of ~110, 3.1-3.35x the floor) are slow. The steady decode step op by op (eager
# steps with CUDA events) at a batch of 64, context ~1560 (DSA selection not live: every
# position attended) and context ~4120 (live: 2048 selected per token, the indexer scoring all).
# Full build of the tree (.devbin.tar.xz) and .devlibs.tar.xz.
#   run(command="bash bench/h200-2026-12-07-s20/call4.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=300)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
nvidia-smi --query-gpu=name --format=csv,noheader
M=synthetic:glm5:num_hidden_layers=8
for inl in 1536 4096; do
  timeout 120 build/nibble bench-offline --backend cuda --model $M --num-prompts 64 --input-len $inl --output-len 40 \
    --max-running-requests 64 --profile-ops 4 --profile-skip 12 > $OUT/profile-$inl.log 2>&1
  echo "input $inl rc=$?"; grep -E "^64 |Floor per step" $OUT/profile-$inl.log | cut -c1-150
  grep -A30 "Per-op profile" $OUT/profile-$inl.log | cut -c1-150 | head -32
  echo "[$(($(date +%s) - T0)) s]"
done
