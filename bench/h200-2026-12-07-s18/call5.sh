#!/bin/bash
# Eighteenth session, call 5: the steady batch-1000 decode step op by op (eager steps with CUDA
# events after 24 steps at that batch), on the full build of a5faee3 (.devbin.tar.xz).
#   run(command="bash bench/h200-2026-12-07-s18/call5.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=150)
set -u
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin.tar.xz
nvidia-smi --query-gpu=name --format=csv,noheader
LD_LIBRARY_PATH=$PWD/.devlibs-cuda timeout 120 build/nibble bench-offline --backend cuda \
  --model synthetic:glm5:num_hidden_layers=8 --num-prompts 1000 --input-len 128 --output-len 48 \
  --max-running-requests 1000 --profile-ops 4 --profile-skip 24 > $OUT/profile1000.log 2>&1
echo "rc=$?"; grep -A40 "Per-op profile" $OUT/profile1000.log | cut -c1-150 | head -45
