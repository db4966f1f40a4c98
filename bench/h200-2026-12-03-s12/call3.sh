#!/bin/bash
# Twelfth session, call 3: k-group loop 3 (the small-step kernel's down items wait per act
# k-group instead of for the tile's whole gate_up) against loop 2: test_cuda_moe whole, bench-moe
# interleaved at 1-8 tokens, bench-offline at 1 / 2 / 10 requests in alternating processes.
set -u
T0=$(date +%s)
tar -xJf .abin/call3.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
N=c3/nibble
mkdir -p $OUT/x
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
timeout 300 c3/test_cuda_moe > $OUT/x/test.log 2>&1; echo "test_cuda_moe rc=$?"
grep -E "stream variant|FAIL|tests:|max rel" $OUT/x/test.log | tail -30
echo "[$(($(date +%s) - T0)) s]"
L2=NIBBLE_MOE_STREAM_LOOP=2 L3=NIBBLE_MOE_STREAM_LOOP=3
for i in 1 2; do
  NIBBLE_BENCH_MOE_VARIANTS="$L2 $L3 $L2 $L3" timeout 150 $N bench-moe --tokens 1,2,4,8 --iters 40 > $OUT/x/ab$i.log 2>&1; echo "ab$i rc=$?"
  grep -E "^ +[0-9]|ceilings" $OUT/x/ab$i.log; echo "[$(($(date +%s) - T0)) s]"
done
for i in 1 2; do for v in 2 3; do
  NIBBLE_MOE_STREAM_LOOP=$v timeout 120 $N bench-offline --backend cuda --model synthetic:glm5:num_hidden_layers=8 \
    --num-prompts 1,2,10 --input-len 128 --output-len 128 > $OUT/x/off-$v-$i.log 2>&1; echo "offline loop $v run $i rc=$?"
  grep -E "^[0-9]+ +[0-9.]+ " $OUT/x/off-$v-$i.log | tail -3
done; done
cd $OUT && tar -cJf x.tar.xz x && rm -rf x && ls -la
echo "[$(($(date +%s) - T0)) s]"
