#!/bin/bash
# Tenth session, call 5: one steady batch-1000 decode step of HEAD's kernels (c8028a8), kernel by
# kernel under ncu (each kernel alone), to set against call 1's (5bf1c4c + expand7 + the q fold).
set -u
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
xz -d .abin/nibble-D.xz && chmod +x .abin/nibble-D
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
NIBBLE_CUDA_PROFILER_RANGE=1 timeout 200 $NCU --profile-from-start off --cache-control none --clock-control none \
  --metrics gpu__time_duration.sum,launch__grid_size --csv --page raw \
  .abin/nibble-D bench-offline --backend cuda --model synthetic:glm5:num_hidden_layers=8 --num-prompts 1000 \
  --input-len 128 --output-len 24 --profile-ops 1 --profile-skip 8 > $OUT/ncu-step.csv 2> $OUT/ncu-step.err
echo "ncu rc=$?"
python3 scripts/ncu-step.py $OUT/ncu-step.csv | head -30
xz -6 $OUT/ncu-step.csv
