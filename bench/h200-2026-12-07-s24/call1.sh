#!/bin/bash
# Twenty-fourth session, first call (the loans came back at 21:39 UTC): this session's new code
# first, in order of value. Pack: BUILD=build scripts/device-verify.sh pack; scripts/device-libs.sh build/nibble
#   run(command="bash bench/h200-2026-12-07-s24/call1.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"])
set -u
tar -xJf .devbin.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
T=build/tests
timeout 120 $T/test_cuda_vs_cpu dsa_select > $OUT/dsa_select.log 2>&1; echo "dsa_select rc=$?"
grep -E "prefill tiles|FAIL" $OUT/dsa_select.log | cut -c1-200 | head -16
timeout 150 $T/test_cuda_graph > $OUT/graph.log 2>&1; echo "test_cuda_graph rc=$?"; grep -E "MLA kernel|FAIL|steps bitwise|want" $OUT/graph.log | head -8
for tc in "2048 8192" "4096 32768" "1024 100000"; do
  timeout 60 $T/test_cuda_vs_cpu dsa-prefill $tc 2>&1 | grep -E "prefill T=|FAIL|rror|did not" | cut -c1-240
done
L="--backend cuda --model synthetic:glm5:num_hidden_layers=8 --input-len 1024 --output-len 64"
for n in 1 2; do for rep in 1; do for th in 512 1000000; do
  NIBBLE_MLA_LONG_CTX=$th timeout 60 build/nibble bench-offline $L --num-prompts $n --max-running-requests $n > /tmp/l.log 2>&1
  echo "long ctx n=$n th=$th rep $rep rc=$?: $(grep -E 'Decode-only step time' /tmp/l.log | cut -c1-110)"
done; done; done
P="--backend cuda --model synthetic:glm5:num_hidden_layers=8 --input-len 16384 --output-len 4 --num-prompts 1 --max-running-requests 1"
for rep in 1; do for tl in 0 1; do
  NIBBLE_CUDA_DSA_TILE=$tl timeout 120 build/nibble bench-offline $P > /tmp/t.log 2>&1
  echo "16k prompt tile=$tl rep $rep rc=$?: $(grep -E 'Prefill step time|Prefill throughput' /tmp/t.log | tr '\n' ' ' | cut -c1-200)"
done; done
