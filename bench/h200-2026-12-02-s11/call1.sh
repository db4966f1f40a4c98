#!/bin/bash
# Eleventh session, call 1: the stream kernel's loop 3 (software prefetch) and K-split switches
# at 1-64 tokens, the ladder's candidates at 128-512 tokens, loop 3's tests, the per-item
# timeline (bench/lab/moe-trace.sh), and bench-offline at 1 / 10 requests, loop 2 against 3.
set -u
T0=$(date +%s)
tar -xJf .abin/call1.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
N=c1/nibble; M=synthetic:glm5:num_hidden_layers=8
mkdir -p $OUT/c
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
V1="NIBBLE_MOE_STREAM_LOOP=2 NIBBLE_MOE_STREAM_LOOP=3,NIBBLE_MOE_STREAM_PF=1 NIBBLE_MOE_STREAM_LOOP=3,NIBBLE_MOE_STREAM_PF=2 NIBBLE_MOE_STREAM_LOOP=3,NIBBLE_MOE_STREAM_PF=4 NIBBLE_MOE_STREAM_LOOP=3,NIBBLE_MOE_STREAM_PF=2,NIBBLE_MOE_STREAM_PFB=1 NIBBLE_MOE_STREAM_LOOP=3,NIBBLE_MOE_STREAM_PF=0,NIBBLE_MOE_STREAM_PFB=1 NIBBLE_MOE_STREAM_LOOP=2 NIBBLE_MOE_STREAM_LOOP=3,NIBBLE_MOE_STREAM_PF=3"
for i in 1 2; do
  NIBBLE_BENCH_MOE_VARIANTS="$V1" timeout 120 $N bench-moe --tokens 1,2,10,64 --iters 30 > $OUT/c/pf$i.log 2>&1; echo "pf$i rc=$?"
  grep -E "^ +[0-9]|ceilings" $OUT/c/pf$i.log
done
echo "[$(($(date +%s) - T0)) s]"
V2="NIBBLE_MOE_KSPLIT_GU=4 NIBBLE_MOE_KSPLIT_DN=4 NIBBLE_MOE_KSPLIT_GU=2 NIBBLE_MOE_KSPLIT_DN=1 NIBBLE_MOE_KSPLIT_GU=2,NIBBLE_MOE_KSPLIT_DN=4 NIBBLE_MOE_KSPLIT_DN=4,NIBBLE_MOE_STREAM_LOOP=3 NIBBLE_MOE_KSPLIT_GU=4"
NIBBLE_BENCH_MOE_VARIANTS="$V2" timeout 100 $N bench-moe --tokens 1,2 --iters 30 > $OUT/c/ks.log 2>&1; echo "ks rc=$?"
grep -E "^ +[0-9]|ceilings" $OUT/c/ks.log
echo "[$(($(date +%s) - T0)) s]"
V3="NIBBLE_MOE_KERNEL=auto NIBBLE_MOE_KERNEL=stream NIBBLE_MOE_KERNEL=stream,NIBBLE_MOE_STREAM_LOOP=3 NIBBLE_MOE_WG_N=32 NIBBLE_MOE_WG=pc NIBBLE_MOE_KERNEL=mma NIBBLE_MOE_KERNEL=auto"
NIBBLE_BENCH_MOE_VARIANTS="$V3" timeout 150 $N bench-moe --tokens 128,256,512 --iters 30 > $OUT/c/mid.log 2>&1; echo "mid rc=$?"
grep -E "^ +[0-9]|ceilings" $OUT/c/mid.log
echo "[$(($(date +%s) - T0)) s]"
timeout 120 c1/test_cuda_moe moe_stream_variants > $OUT/c/test-variants.log 2>&1; echo "test moe_stream_variants rc=$?"
grep -E "stream variant|FAIL|pass|max" $OUT/c/test-variants.log | tail -30
timeout 60 c1/test_cuda_moe moe_small > $OUT/c/test-small.log 2>&1; echo "test moe_small rc=$?"; tail -3 $OUT/c/test-small.log
echo "[$(($(date +%s) - T0)) s]"
if [ -f .abin/nibble-trace.xz ] || [ -f .abin/nibble-trace ]; then
  [ -f .abin/nibble-trace ] || xz -dk .abin/nibble-trace.xz; chmod +x .abin/nibble-trace
  timeout 120 bash bench/lab/moe-trace.sh run $OUT/c/trace > $OUT/c/trace-run.log 2>&1; echo "trace rc=$?"
  head -80 $OUT/c/trace/trace.txt 2>/dev/null
fi
echo "[$(($(date +%s) - T0)) s]"
for s in "A" "B" "A" "B"; do
  if [ $s = B ]; then e="NIBBLE_MOE_STREAM_LOOP=3"; else e="NIBBLE_MOE_STREAM_LOOP=2"; fi
  env $e timeout 100 $N bench-offline --backend cuda --model $M --num-prompts 1,10 --input-len 128 --output-len 128 > $OUT/c/off-$s.log 2>&1
  echo "offline $s ($e) rc=$?"; grep -E "^[0-9]+ +[0-9.]+ " $OUT/c/off-$s.log
done
echo "[$(($(date +%s) - T0)) s]"
cd $OUT && tar -cJf c.tar.xz c && rm -rf c && ls -la
