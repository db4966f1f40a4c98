#!/bin/bash
# Twenty-third session, the short form of call1.sh for what was left of the device budget
# (~3 min): the wg op at 1000 x 192 on the BF16 pool with the consumers sharing S or not (A B A B)
# and its steps; every kernel of one steady batch-1000 decode step in the model timed alone by
# ncu; the wg kernel's checks with the sharing form. Carry .devbin2.tar.xz (build/nibble,
# build/tests/test_cuda_mla_decode) and .devlibs.tar.xz.
set -u
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin2.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
NB_TEST_MLA_ROWS16=only timeout 60 build/tests/test_cuda_mla_decode time 192 1000 > $OUT/time.log 2>&1
echo "time rc=$?"; grep -E "mla (time|steps)|BF16 rows|sharing" $OUT/time.log | cut -c1-220
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
NIBBLE_CUDA_PROFILER_RANGE=1 timeout 130 $NCU --profile-from-start off --cache-control none --clock-control none \
  --metrics gpu__time_duration.sum,launch__grid_size,dram__bytes.sum --csv --page raw \
  build/nibble bench-offline --backend cuda --model synthetic:glm5:num_hidden_layers=8 --num-prompts 1000 \
  --input-len 128 --output-len 20 --max-running-requests 1000 --profile-ops 1 --profile-skip 12 > $OUT/step1000.csv 2> /tmp/ncu-model.err
echo "ncu model rc=$?"; tail -n3 /tmp/ncu-model.err; grep -c '^"' $OUT/step1000.csv
timeout 100 build/tests/test_cuda_mla_decode wg > $OUT/wg-test.log 2>&1
echo "wg test rc=$?"; grep -ciE "fail" $OUT/wg-test.log; grep -iE "fail|sharing" -A6 $OUT/wg-test.log | head -20; tail -n2 $OUT/wg-test.log
