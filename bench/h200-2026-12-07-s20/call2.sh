#!/bin/bash
# Twentieth session, call 2: the BF16 latent KV cache (--kv-cache-dtype bfloat16) on the GPU.
#   1. every GPU test binary, the golden fixtures through score/generate --backend cuda (the MLA
#      fixtures also with the BF16 cache), glm5-tiny cpu == cuda (device-verify.sh steps);
#   2. the MLA op on BF16 against F32 pools (test_cuda_mla_decode time, A B A B in one process);
#   3. bench-offline on the 8-layer GLM-5 slice, float32 / bfloat16 cache alternating: issue 9's
#      1000 requests (input 128, output 128), then 256 requests of input 2048 (output 64).
# Full build of the tree (.devbin.tar.xz from scripts/device-verify.sh pack) and .devlibs.tar.xz.
#   run(command="bash bench/h200-2026-12-07-s20/call2.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=600)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
OUT=$OUT/verify STEPS="tests golden tiny" BUILD=build TEST_TIMEOUT=170 scripts/device-verify.sh 2>&1 | tail -40
echo "[$(($(date +%s) - T0)) s]"
for c in 192 2048; do
  NB_TEST_MLA_ROWS16=only timeout 90 build/tests/test_cuda_mla_decode time $c 64,256,1000 > $OUT/time-$c.log 2>&1
  echo "time $c rc=$?"; grep -E "BF16 rows|F32 rows" $OUT/time-$c.log | head -6
done
echo "[$(($(date +%s) - T0)) s]"
M=synthetic:glm5:num_hidden_layers=8
for kv in float32 bfloat16 float32 bfloat16; do
  [ $(($(date +%s) - T0)) -gt 470 ] && { echo "deadline: skipping $kv"; continue; }
  timeout 60 build/nibble bench-offline --backend cuda --model $M --kv-cache-dtype $kv \
    --num-prompts 1000 --input-len 128 --output-len 128 --warmup 1 --max-running-requests 1000 > $OUT/off1000-$kv-$(date +%s).log 2>&1
  echo "1000 x 128 $kv rc=$?"; grep -hE "^1000 |KV cache:" $(ls -t $OUT/off1000-$kv-*.log | head -1) | cut -c1-160
done
for kv in float32 bfloat16 float32 bfloat16; do
  [ $(($(date +%s) - T0)) -gt 530 ] && { echo "deadline: skipping long $kv"; continue; }
  timeout 60 build/nibble bench-offline --backend cuda --model $M --kv-cache-dtype $kv \
    --num-prompts 256 --input-len 2048 --output-len 64 --warmup 1 --max-running-requests 256 > $OUT/off256-$kv-$(date +%s).log 2>&1
  echo "256 x 2048 $kv rc=$?"; grep -hE "^256 |KV cache:|Output token throughput" $(ls -t $OUT/off256-$kv-*.log | head -1) | cut -c1-160
done
echo "[$(($(date +%s) - T0)) s]"
