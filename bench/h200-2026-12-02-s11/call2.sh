#!/bin/bash
# Eleventh session, call 2 (bench-moe now interleaves its variants): the ladder between the
# stream kernel and the wgmma kernel's 16- / 32-token tiles at 192-384 tokens; K splits and
# the grid cap at 1-2 tokens; two identical variants at 10 and 64 tokens (the interleaving's
# own spread); the per-item timeline if the trace binary came along.
set -u
T0=$(date +%s)
tar -xJf .abin/call2.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
N=c2/nibble
mkdir -p $OUT/c
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
run() {  # name tokens variants
  NIBBLE_BENCH_MOE_VARIANTS="$3" timeout 150 $N bench-moe --tokens $2 --iters 40 > $OUT/c/$1.log 2>&1; echo "$1 rc=$?"
  grep -E "^ +[0-9]|ceilings" $OUT/c/$1.log; echo "[$(($(date +%s) - T0)) s]"
}
run same "10,64" "NIBBLE_MOE_BLOCKS=0 NIBBLE_MOE_BLOCKS=0 NIBBLE_MOE_BLOCKS=0"
run mid1 "192,256,320,384" "NIBBLE_MOE_KERNEL=auto NIBBLE_MOE_WG_N=32 NIBBLE_MOE_KERNEL=stream NIBBLE_MOE_WG_N=16 NIBBLE_MOE_KERNEL=stream,NIBBLE_MOE_NT=2"
run mid2 "256,384,512" "NIBBLE_MOE_WG_N=32 NIBBLE_MOE_KERNEL=stream NIBBLE_MOE_KERNEL=auto"
run small "1,2,4" "NIBBLE_MOE_BLOCKS=0 NIBBLE_MOE_KSPLIT_GU=2 NIBBLE_MOE_KSPLIT_DN=1 NIBBLE_MOE_KSPLIT_GU=2,NIBBLE_MOE_KSPLIT_DN=1 NIBBLE_MOE_KSPLIT_GU=4 NIBBLE_MOE_BLOCKS=513 NIBBLE_MOE_BLOCKS=512,NIBBLE_MOE_KSPLIT_GU=2,NIBBLE_MOE_KSPLIT_DN=4 NIBBLE_MOE_KSPLIT_GU=4,NIBBLE_MOE_KSPLIT_DN=1"
if [ -f .abin/nibble-trace.xz ] || [ -f .abin/nibble-trace ]; then
  [ -f .abin/nibble-trace ] || xz -dk .abin/nibble-trace.xz; chmod +x .abin/nibble-trace
  timeout 120 bash bench/lab/moe-trace.sh run $OUT/c/trace > $OUT/c/trace-run.log 2>&1; echo "trace rc=$?"
  head -100 $OUT/c/trace/trace.txt 2>/dev/null
fi
echo "[$(($(date +%s) - T0)) s]"
cd $OUT && tar -cJf c.tar.xz c && rm -rf c && ls -la
