#!/bin/bash
# Twenty-second session, call 3: the MLA kernel choice on BF16 pools (wg from 3 tokens, and at
# every count under a live DSA selection): the MLA tests (the new 2-token cases run the small
# path under every kernel), the automatic paths' checks, the graph test, the 64 x 4096 run
# (automatic vs wg forced), and issue 9's offline sweep.
#   tar -cf - build/nibble build/tests/test_cuda_{mla_decode,vs_cpu,graph} | xz -4 -T2 -c > .devbin2.tar.xz
#   run(command="bash bench/h200-2026-12-07-s22/call3.sh", carry=[".devbin2.tar.xz", ".devlibs.tar.xz"], timeout_s=420)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin2.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
el() { echo "[$(($(date +%s) - T0)) s]"; }
exec > >(tee $OUT/summary.txt) 2>&1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 150 build/tests/test_cuda_mla_decode > $OUT/mla-decode-test.log 2>&1
echo "test_cuda_mla_decode rc=$?"; grep -cE "FAIL" $OUT/mla-decode-test.log; grep -E "FAIL" $OUT/mla-decode-test.log | head -5; grep -E "T=2," $OUT/mla-decode-test.log | head -4; tail -n1 $OUT/mla-decode-test.log
timeout 90 build/tests/test_cuda_vs_cpu mla mla_bf16 > $OUT/vs-cpu-mla.log 2>&1
echo "test_cuda_vs_cpu mla mla_bf16 rc=$?"; tail -n1 $OUT/vs-cpu-mla.log
timeout 60 build/tests/test_cuda_graph > $OUT/graph-test.log 2>&1
echo "test_cuda_graph rc=$?"; tail -n1 $OUT/graph-test.log
el
M=synthetic:glm5:num_hidden_layers=8
for v in "auto" "wg NIBBLE_CUDA_MLA=wg" "f32 NIBBLE_CUDA_MLA=f32"; do
  set -- $v; name=$1; shift
  env "$@" timeout 50 build/nibble bench-offline --backend cuda --model $M --num-prompts 64 --input-len 4096 --output-len 32 \
    --warmup 1 --max-running-requests 64 > $OUT/off64-$name.log 2>&1
  echo "64 x 4096 MLA $name rc=$?"; grep -hE "Output token|Decode-only step|time / floor" $OUT/off64-$name.log | cut -c1-140
done
el
mkdir -p $OUT/i9
OUT=$OUT/i9 STEPS=offline BUILD=build OFFLINE_TIMEOUT=200 scripts/device-issue9.sh > /dev/null 2>&1
echo "issue 9 offline rc=$?"; grep -E "requests|time / floor|Decode-only step" $OUT/i9/offline.log | cut -c1-150 | head -24
el
