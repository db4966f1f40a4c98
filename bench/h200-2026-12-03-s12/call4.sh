#!/bin/bash
# Twelfth session, call 4: the stream kernels' dependency waits by relaxed polls plus one acquire
# (c4) against acquire polls (c3 = call 3's build: an acquire load is LDG.STRONG + CCTL.IVALL, an L1
# invalidation per poll); in c4 also loop 3 (down waits per act k-group) against loop 2.
# test_cuda_moe whole on c4; bench-moe in alternating processes c3 / c4 (loops 2 and 3
# interleaved inside each); bench-offline at 1 / 2 / 10 requests alternating c3 / c4.
set -u
T0=$(date +%s)
tar -xJf .abin/call3.tar.xz && tar -xJf .abin/call4.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
mkdir -p $OUT/x
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
timeout 300 c4/test_cuda_moe > $OUT/x/test.log 2>&1; echo "test_cuda_moe (c4) rc=$?"
grep -E "FAIL|tests:|max rel" $OUT/x/test.log | tail -12
echo "[$(($(date +%s) - T0)) s]"
L2=NIBBLE_MOE_STREAM_LOOP=2 L3=NIBBLE_MOE_STREAM_LOOP=3
for i in 1 2; do for b in c3 c4; do
  NIBBLE_BENCH_MOE_VARIANTS="$L2 $L3" timeout 150 $b/nibble bench-moe --tokens 1,2,4,8,10,16,32,64 --iters 40 > $OUT/x/ab-$b-$i.log 2>&1; echo "bench-moe $b run $i rc=$?"
  grep -E "^ +[0-9]" $OUT/x/ab-$b-$i.log | awk -v b=$b '{print b, $1, $3, $NF}'
done; done
echo "[$(($(date +%s) - T0)) s]"
for i in 1 2; do for b in c3 c4; do
  timeout 120 $b/nibble bench-offline --backend cuda --model synthetic:glm5:num_hidden_layers=8 \
    --num-prompts 1,2,10 --input-len 128 --output-len 128 > $OUT/x/off-$b-$i.log 2>&1; echo "offline $b run $i rc=$?"
  grep -E "^[0-9]+ +[0-9.]+ " $OUT/x/off-$b-$i.log | tail -3
done; done
cd $OUT && tar -cJf x.tar.xz x && rm -rf x && ls -la
echo "[$(($(date +%s) - T0)) s]"
