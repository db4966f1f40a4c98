#!/bin/bash
# Twenty-second session, call 2: test_cuda_graph with a live selection (expectations fixed),
# the MLA kernels at small batches and long contexts (f32 / mma / wg forced on a BF16 pool),
# and the 64 x 4096 long-context run with the wg kernel forced against the automatic choice.
#   tar -cf - build/nibble build/tests/test_cuda_mla_decode build/tests/test_cuda_graph | xz -4 -T2 -c > .devbin2.tar.xz
#   run(command="bash bench/h200-2026-12-07-s22/call2.sh", carry=[".devbin2.tar.xz", ".devlibs.tar.xz"], timeout_s=240)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin2.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
el() { echo "[$(($(date +%s) - T0)) s]"; }
exec > >(tee $OUT/summary.txt) 2>&1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 60 build/tests/test_cuda_graph > $OUT/graph-test.log 2>&1
echo "test_cuda_graph rc=$?"; grep -E "FAIL|steps bitwise" $OUT/graph-test.log; tail -n1 $OUT/graph-test.log
el
timeout 80 build/tests/test_cuda_mla_decode pick 2048 1,2,4,8,16,32,64 2>&1 | grep -E "mla pick|FAIL" | tee $OUT/pick.log
timeout 30 build/tests/test_cuda_mla_decode pick 256 8,32 2>&1 | grep -E "mla pick|FAIL" | tee -a $OUT/pick.log
el
M=synthetic:glm5:num_hidden_layers=8
for v in "auto" "wg NIBBLE_CUDA_MLA=wg" "auto" "wg NIBBLE_CUDA_MLA=wg"; do
  set -- $v; name=$1; shift
  env "$@" timeout 50 build/nibble bench-offline --backend cuda --model $M --num-prompts 64 --input-len 4096 --output-len 32 \
    --warmup 1 --max-running-requests 64 > $OUT/off64-$name-$(date +%s).log 2>&1
  echo "64 x 4096 MLA $name rc=$?"; grep -hE "Output token|Decode-only step|Mean decode batch|time / floor" $(ls -t $OUT/off64-$name-*.log | head -1) | cut -c1-140
done
el
