#!/bin/bash
# Issue 9, batch-1000 decode: where the MLA op's in-model time goes. (1) the step with graphs,
# (2) the eager per-op profile, (3) Nsight Compute's duration of every kernel of a short run
# (kernels measured one at a time), (4) the op alone (test_cuda_mla_decode time) at the same
# context. Input 128, so decode contexts are 129-160.
set -u
tar -xJf .devbin.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
L="env LD_LIBRARY_PATH=$PWD/.devlibs-cuda"
N="$L build-lead/nibble"
M=synthetic:glm5:num_hidden_layers=8
mkdir -p $OUT/m
timeout 120 $N bench-offline --backend cuda --model $M --num-prompts 1000 --input-len 128 --output-len 32 > $OUT/m/graph.log 2>&1; echo "graph rc=$?"
grep -E "^1000 " $OUT/m/graph.log
timeout 120 $N bench-offline --backend cuda --model $M --num-prompts 1000 --input-len 128 --output-len 32 --profile-ops 4 --profile-skip 8 > $OUT/m/eager.log 2>&1; echo "eager rc=$?"
grep -E "step wall|mla_attention|moe_experts" $OUT/m/eager.log | head -12
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 300 $L $NCU --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
  build-lead/nibble bench-offline --backend cuda --model $M --num-prompts 1000 --input-len 128 --output-len 6 --no-floor \
  > $OUT/m/ncu-all.csv 2> $OUT/m/ncu-all.err; echo "ncu rc=$?"; wc -l $OUT/m/ncu-all.csv; tail -3 $OUT/m/ncu-all.err
timeout 60 $L build-lead/tests/test_cuda_mla_decode time 144 1000 > $OUT/m/op-alone.log 2>&1; echo "op rc=$?"; tail -12 $OUT/m/op-alone.log
cd $OUT && xz -6 m/ncu-all.csv && tar -cJf mla-call6.tar.xz m && rm -rf m && ls -la
