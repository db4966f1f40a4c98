#!/bin/bash
# Issue 9: Nsight Compute's duration of each MLA kernel (k_mla_*, measured one at a time) through
# prefill and the first batch-1000 decode steps; the op alone at context 128 (test_cuda_mla_decode).
set -u
tar -xJf .devbin.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
L="env LD_LIBRARY_PATH=$PWD/.devlibs-cuda"
M=synthetic:glm5:num_hidden_layers=8
mkdir -p $OUT/m
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 140 $L $NCU --clock-control none -k regex:k_mla --metrics gpu__time_duration.sum --csv --page raw \
  build-lead/nibble bench-offline --backend cuda --model $M --num-prompts 1000 --input-len 128 --output-len 4 --no-floor \
  > $OUT/m/ncu-mla.csv 2> $OUT/m/ncu-mla.err; echo "ncu rc=$?"; wc -l $OUT/m/ncu-mla.csv; grep -E "^1000 " $OUT/m/ncu-mla.csv | head -2
timeout 30 $L build-lead/tests/test_cuda_mla_decode time 128 1000 > $OUT/m/op-alone.log 2>&1; echo "op rc=$?"; tail -14 $OUT/m/op-alone.log
cd $OUT && xz -6 m/ncu-mla.csv && tar -cJf mla-call7.tar.xz m && rm -rf m && ls -la
