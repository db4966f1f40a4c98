#!/bin/bash
# Twelfth session, call 6: loop 3 with its waits in a prefix loop (one k-group per trip until every
# remaining k-group is ready, then loop 2's body unchanged): test_cuda_moe whole, bench-moe loop 2 / 3
# interleaved (two processes), bench-offline at 1 / 2 / 10 requests alternating loop 2 / 3, and the
# per-item trace of both (.abin/nibble-trace3.xz, the trace build of the same source).
set -u
T0=$(date +%s)
tar -xJf .abin/call6.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
N=c6/nibble
mkdir -p $OUT/x
timeout 300 c6/test_cuda_moe > $OUT/x/test.log 2>&1; echo "test_cuda_moe rc=$?"
grep -E "FAIL|tests:" $OUT/x/test.log | tail -5
echo "[$(($(date +%s) - T0)) s]"
L2=NIBBLE_MOE_STREAM_LOOP=2 L3=NIBBLE_MOE_STREAM_LOOP=3
for i in 1 2; do
  NIBBLE_BENCH_MOE_VARIANTS="$L2 $L3 $L2 $L3" timeout 150 $N bench-moe --tokens 1,2,4,8 --iters 40 > $OUT/x/ab$i.log 2>&1; echo "ab$i rc=$?"
  grep -E "^ +[0-9]" $OUT/x/ab$i.log | awk '{print $1, $3, $NF}'
done
for i in 1 2; do for v in 2 3; do
  NIBBLE_MOE_STREAM_LOOP=$v timeout 120 $N bench-offline --backend cuda --model synthetic:glm5:num_hidden_layers=8 \
    --num-prompts 1,2,10 --input-len 128 --output-len 128 > $OUT/x/off-$v-$i.log 2>&1; echo "offline loop $v run $i rc=$?"
  grep -E "^[0-9]+ +[0-9.]+ " $OUT/x/off-$v-$i.log | tail -3
done; done
echo "[$(($(date +%s) - T0)) s]"
cp .abin/nibble-trace3.xz .abin/nibble-trace.xz && xz -dkf .abin/nibble-trace.xz && chmod +x .abin/nibble-trace
NIBBLE_BENCH_MOE_VARIANTS="$L2 $L3" timeout 150 bash bench/lab/moe-trace.sh run $OUT/x/trace --tokens 1,2 --iters 20 > $OUT/x/trace-run.log 2>&1; echo "trace rc=$?"
grep -E "^===|kernel span|  down  |down: first|gate_up: first" $OUT/x/trace/trace.txt
cd $OUT && tar -cJf x.tar.xz x && rm -rf x
echo "[$(($(date +%s) - T0)) s]"
