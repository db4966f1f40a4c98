#!/bin/bash
# Twentieth session, call 3: --kv-cache-dtype auto is bfloat16 on the GPU for MLA models now.
#   1. every GPU test binary, the golden fixtures (MLA: float32 and bfloat16 caches on both
#      backends), glm5-tiny cpu == cuda, on the new default;
#   2. bench-offline at 1 / 2 / 10 requests, float32 / bfloat16 cache alternating (the float32
#      MLA kernel serves these batches: its BF16-row path is new);
#   3. issue 9's sweep (device-issue9.sh offline: 1, 2, 10, 1000 requests) on the new default.
#   run(command="bash bench/h200-2026-12-07-s20/call3.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=600)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
OUT=$OUT/verify STEPS="tests golden tiny" BUILD=build TEST_TIMEOUT=170 scripts/device-verify.sh 2>&1 | tail -32
echo "[$(($(date +%s) - T0)) s]"
M=synthetic:glm5:num_hidden_layers=8
for kv in float32 bfloat16 float32 bfloat16; do
  timeout 60 build/nibble bench-offline --backend cuda --model $M --kv-cache-dtype $kv \
    --num-prompts 1,2,10 --input-len 128 --output-len 128 --warmup 1 > $OUT/small-$kv-$(date +%s).log 2>&1
  echo "1,2,10 $kv rc=$?"; grep -hE "^(1|2|10) " $(ls -t $OUT/small-$kv-*.log | head -1) | cut -c1-160
done
echo "[$(($(date +%s) - T0)) s]"
OUT=$OUT/i9 STEPS=offline BUILD=build scripts/device-issue9.sh 2>&1 | tail -9
echo "[$(($(date +%s) - T0)) s]"
