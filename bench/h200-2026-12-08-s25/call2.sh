#!/bin/bash
# Twenty-fifth session, call 2 (build of a332f52, .devbin.tar.xz): the twenty-fourth round's
# next-call.sh items 4-6: the MLA threshold at 1-2 tokens (64 and 128 heads), sampling's share
# of a 1000-request step, the batch-1000 step kernel by kernel beside the eager per-op profile.
#   run(command="bash bench/h200-2026-12-08-s25/call2.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"])
set -u
tar -xJf .devbin.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
OUT0=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
# 4. f32 / wg at 1-2 tokens around the MLA threshold, both head counts
for h in 64 128; do
  NB_TEST_MLA_HEADS=$h timeout 100 build/tests/test_cuda_mla_decode pick 256 1,2 > $OUT0/pick-$h.log 2>&1
  for c in 384 512 640 768 1024; do NB_TEST_MLA_HEADS=$h timeout 60 build/tests/test_cuda_mla_decode pick $c 1,2 >> $OUT0/pick-$h.log 2>&1; done
  echo "pick heads $h:"; grep "mla pick" $OUT0/pick-$h.log | cut -c1-170
done
# 5. sampling's share of a 1000-request step
S="--backend cuda --model synthetic:glm5:num_hidden_layers=8 --num-prompts 1000 --input-len 128 --output-len 48 --max-running-requests 1000"
for ex in '{"temperature": 0}' '{"temperature": 0.7, "top_p": 0.9, "top_k": 50}'; do
  timeout 100 build/nibble bench-offline $S --extra-request-body "$ex" > /tmp/smp.log 2>&1
  echo "1000 requests, $ex: rc=$? $(grep -E "Decode-only step time" /tmp/smp.log | cut -c1-120)"
done
# 6. the twenty-third round's profiles
M="--backend cuda --model synthetic:glm5:num_hidden_layers=8 --num-prompts 1000 --input-len 128 --output-len 48 --max-running-requests 1000"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
NIBBLE_CUDA_PROFILER_RANGE=1 timeout 150 $NCU --profile-from-start off --cache-control none --clock-control none \
  --metrics gpu__time_duration.sum,launch__grid_size,dram__bytes.sum --csv --page raw \
  build/nibble bench-offline $M --profile-ops 1 --profile-skip 24 > $OUT0/step1000.csv 2> /tmp/ncu-model.err
echo "ncu model rc=$?"; tail -n2 /tmp/ncu-model.err
timeout 100 build/nibble bench-offline $M --profile-ops 4 --profile-skip 24 > /tmp/prof.log 2>&1
echo "profile rc=$?"; grep -E "Per-op|step wall|moe_experts|mla_attention|lm_head|o_proj|^1000 " /tmp/prof.log | cut -c1-150
NB_TEST_MLA_ROWS16=only timeout 90 build/tests/test_cuda_mla_decode time 192 64,256,1000 > $OUT0/mla-time.log 2>&1
echo "mla time rc=$?"; grep -E "BF16 rows|mla steps" $OUT0/mla-time.log | cut -c1-200
