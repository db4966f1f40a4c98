#!/bin/bash
# Twenty-fifth session, call 3b (call3.sh trimmed to the budget left): the GPU checks that the
# default change touches (test_cuda_vs_cpu whole, test_cuda_graph, the golden fixtures), then a
# 16k prompt with the prefill form off / on (the default).
#   run(command="bash bench/h200-2026-12-08-s25/call3b.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"])
set -u
tar -xJf .devbin.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
for t in test_cuda_vs_cpu test_cuda_graph; do
  timeout 120 build/tests/$t > $OUT/$t.log 2>&1; echo "$t rc=$?"; grep -E "FAIL" $OUT/$t.log | cut -c1-200 | head -5
done
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LD_LIBRARY_PATH" "$PWD/build/nibble" > /tmp/nb && chmod +x /tmp/nb
NIBBLE_BIN=/tmp/nb timeout 150 python3 tests/cuda_ops/cuda_golden_check.py > $OUT/golden.log 2>&1
echo "golden (defaults) rc=$? ok lines $(grep -c ' ok' $OUT/golden.log)"; grep -v " ok" $OUT/golden.log | head -5
P="--backend cuda --model synthetic:glm5:num_hidden_layers=8 --input-len 16384 --output-len 4 --num-prompts 1 --max-running-requests 1"
for tl in 0 2; do
  NIBBLE_CUDA_DSA_TILE=$tl timeout 60 build/nibble bench-offline $P > /tmp/p.log 2>&1
  echo "16k prompt, NIBBLE_CUDA_DSA_TILE=$tl: rc=$? $(grep -E "Prefill step time|Prefill throughput" /tmp/p.log | head -2 | tr '\n' ' ' | tr -s ' ' | cut -c1-200)"
done
