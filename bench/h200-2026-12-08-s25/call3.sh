#!/bin/bash
# Twenty-fifth session, call 3: every GPU check on the tree with the wgmma prefill form as the
# default (5d280e2's code; test_cuda_moe left out), then a 16k prompt with the prefill form off /
# on, A B A B, and a 32k prompt A B.
#   pack: cmake --build build -j2 && BUILD=build scripts/device-verify.sh pack
#   run(command="bash bench/h200-2026-12-08-s25/call3.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"])
set -u
tar -xJf .devbin.tar.xz && mv .devbin.tar.xz /tmp/ && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
sed -i 's/test_cuda_moe //' build/gpu-tests.txt   # MoE code unchanged since its last full pass (~150 s)
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
OUT0=$OUT
OUT=/tmp/verify STEPS="tests golden" BUILD=build scripts/device-verify.sh; echo "verify rc=$?"
rm -f /tmp/verify/nibble; tar -cJf $OUT0/verify-logs.tar.xz -C /tmp verify
grep -h -E "FAIL|prefill wgmma" /tmp/verify/*.log 2>/dev/null | cut -c1-200 | head -8
for run in "16384 1" "16384 2" "32768 1"; do set -- $run; len=$1; rep=$2; for tl in 0 2; do
  P="--backend cuda --model synthetic:glm5:num_hidden_layers=8 --input-len $len --output-len 4 --num-prompts 1 --max-running-requests 1"
  NIBBLE_CUDA_DSA_TILE=$tl timeout 100 build/nibble bench-offline $P > /tmp/p.log 2>&1
  echo "prompt $len, NIBBLE_CUDA_DSA_TILE=$tl rep $rep: rc=$? $(grep -E "Prefill step time|Prefill throughput" /tmp/p.log | head -2 | tr '\n' ' ' | tr -s ' ' | cut -c1-200)"
done; done
