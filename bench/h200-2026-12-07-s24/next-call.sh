#!/bin/bash
# For the twenty-fifth round's first call (~8-9 min; never run). The twenty-fourth round had no
# device (loans paused), so everything of it is compiled only. In order of value:
#  1. every GPU check on the tree: test_cuda_graph's new long_ctx_class (one graph per attention
#     class, the MLA kernel per class, bitwise equal to eager) and the twenty-third round's
#     sharing rule and share-off block have never run;
#  2. the long-context hint end to end: batch 1 and 2 of the 8-layer GLM-5 slice with a
#     1024-token prompt (dense: below index_topk), NIBBLE_MLA_LONG_CTX=512 (wg at 1-2 tokens from
#     512 positions) against 1000000 (never long: f32 as before), A B A B;
#  3. dsa_select's prefill form (k_dsa_tile, never run; its checks are in item 1's
#     test_cuda_vs_cpu dsa_select): its time against one block per token at 2048 x 8192,
#     4096 x 32768 and 1024 x 100000, then a 16k-token prompt's TTFT with NIBBLE_CUDA_DSA_TILE=0|1;
#  4. where the MLA threshold belongs: the op at 1-2 tokens from 256 to 1024 positions, f32 / wg,
#     GLM-5's 64 heads and DeepSeek-V3's 128 (NB_TEST_MLA_HEADS=128);
#  5. sampled requests at 1000 (--extra-request-body, new): greedy against T 0.7 / top-p 0.9 /
#     top-k 50, the share of the step sampling takes (GPU sampling: ~2.8 ms at 1000 rows alone);
#  6. the twenty-third round's items: the batch-1000 step kernel by kernel under ncu (skip 24,
#     output 48) beside the eager per-op profile; the wg op on BF16 rows (share / staged A/Bs).
# Prepare here:
#   cmake --build build -j2 && BUILD=build scripts/device-verify.sh pack     (~4 min, .devbin.tar.xz)
#   run(command="bash bench/h200-2026-12-07-s24/next-call.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=600)
set -u
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
OUT0=$OUT
OUT=/tmp/verify STEPS="tests golden" BUILD=build scripts/device-verify.sh; echo "verify rc=$?"
rm -f /tmp/verify/nibble; tar -cJf $OUT0/verify-logs.tar.xz -C /tmp verify   # one file back, not ~14
grep -h -E "long_ctx_class|MLA kernel .* over short|graphs held|FAIL" /tmp/verify/*.log 2>/dev/null | head -8
# 2. the hint in the model: 1-2 requests, prompt 1024, output 64, A B A B
L="--backend cuda --model synthetic:glm5:num_hidden_layers=8 --input-len 1024 --output-len 64"
for n in 1 2; do for rep in 1 2; do for th in 512 1000000; do
  NIBBLE_MLA_LONG_CTX=$th timeout 60 build/nibble bench-offline $L --num-prompts $n --max-running-requests $n \
    > /tmp/long-$n-$th-$rep.log 2>&1
  echo "long ctx: requests $n threshold $th rep $rep: $(grep -E '^ *'$n' ' /tmp/long-$n-$th-$rep.log | tail -1 | cut -c1-140)"
done; done; done
tar -cJf $OUT0/long-logs.tar.xz -C /tmp $(cd /tmp && ls long-*.log)
# 3. the prefill form: the op, then TTFT of one 16k prompt (8-layer slice), A B A B
grep -h -E "prefill tiles|dsa_select topk.*FAIL" /tmp/verify/*.log 2>/dev/null | head -12
for tc in "2048 8192" "4096 32768" "1024 100000"; do
  timeout 60 build/tests/test_cuda_vs_cpu dsa-prefill $tc 2>&1 | grep -E "prefill T=|FAIL|rror" | cut -c1-230
done
P="--backend cuda --model synthetic:glm5:num_hidden_layers=8 --input-len 16384 --output-len 4 --num-prompts 1 --max-running-requests 1"
for rep in 1 2; do for tl in 0 1; do
  NIBBLE_CUDA_DSA_TILE=$tl timeout 100 build/nibble bench-offline $P > /tmp/tile-$tl-$rep.log 2>&1
  echo "16k prompt, NIBBLE_CUDA_DSA_TILE=$tl rep $rep: rc=$? $(grep -E "Prefill step time|Prefill throughput" /tmp/tile-$tl-$rep.log | head -2 | tr '\n' ' ' | cut -c1-200)"
done; done
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
