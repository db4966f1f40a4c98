#!/bin/bash
# Eleventh session, call 3: the stream kernel's 16-token tiles at 4 blocks per SM (128 registers)
# against 3, the wgmma kernel and 8-token tiles at 128-448 tokens; the new K split at 1-10
# tokens against the old one; test_cuda_moe whole on this build.
set -u
T0=$(date +%s)
tar -xJf .abin/call3.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
N=c3/nibble
mkdir -p $OUT/c
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
run() {  # name tokens variants
  NIBBLE_BENCH_MOE_VARIANTS="$3" timeout 200 $N bench-moe --tokens $2 --iters 40 > $OUT/c/$1.log 2>&1; echo "$1 rc=$?"
  grep -E "^ +[0-9]|ceilings" $OUT/c/$1.log; echo "[$(($(date +%s) - T0)) s]"
}
run mid "128,192,256,320,384,448" "NIBBLE_MOE_NT2_BLOCKS=4 NIBBLE_MOE_NT2_BLOCKS=3 NIBBLE_MOE_KERNEL=wgmma NIBBLE_MOE_KERNEL=stream,NIBBLE_MOE_NT=1 NIBBLE_MOE_KERNEL=stream,NIBBLE_MOE_NT2_BLOCKS=4"
run small "1,2,4,8,10" "NIBBLE_MOE_KSPLIT_GU= NIBBLE_MOE_KSPLIT_GU=4,NIBBLE_MOE_KSPLIT_DN=2 NIBBLE_MOE_KSPLIT_GU=,NIBBLE_MOE_KSPLIT_DN="
timeout 300 c3/test_cuda_moe > $OUT/c/test.log 2>&1; echo "test_cuda_moe rc=$?"
grep -E "stream variant|FAIL|tests:|\[ +OK|max rel" $OUT/c/test.log | tail -40
echo "[$(($(date +%s) - T0)) s]"
if [ -f .abin/nibble-trace.xz ] || [ -f .abin/nibble-trace ]; then
  [ -f .abin/nibble-trace ] || xz -dk .abin/nibble-trace.xz; chmod +x .abin/nibble-trace
  timeout 120 bash bench/lab/moe-trace.sh run $OUT/c/trace > $OUT/c/trace-run.log 2>&1; echo "trace rc=$?"
  head -100 $OUT/c/trace/trace.txt 2>/dev/null
fi
cd $OUT && tar -cJf c.tar.xz c && rm -rf c && ls -la
