#!/bin/bash
# Tenth session, call 4: bench-offline's new per-level GPU line (NVML power, SM clock, share of
# samples with the software power cap active) at 1, 10 and 1000 requests.
set -u
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
xz -d .abin/nibble-D.xz && chmod +x .abin/nibble-D
LD_LIBRARY_PATH=$PWD/.devlibs-cuda timeout 120 .abin/nibble-D bench-offline --backend cuda --model synthetic:glm5:num_hidden_layers=8 \
  --num-prompts 1,10,1000 --input-len 128 --output-len 128 --json $OUT/off.json > $OUT/off.log 2>&1; echo "rc=$?"
grep -E "GPU 0|^[0-9]+ +[0-9.]+ |ceilings" $OUT/off.log
