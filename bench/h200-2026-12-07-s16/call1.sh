#!/bin/bash
# Sixteenth session, call 1: the fifteenth session's call3.sh with its timeouts cut to fit one 450 s call: the
# warp-scheduled small-step kernel (NIBBLE_MOE_SMALL=2, bench/lab/moe-warp.patch applied) judged
# and checked in one call.
#  1. bench-moe at 1-8 tokens: the block-item kernel (SMALL=1, the default) against the warp
#     kernel (SMALL=2, and at 4 / 16 units per warp), interleaved in one process; standalone build
#     (.abin/s15a.tar.xz, scripts/moe-standalone-build.sh, the same kernels as build/).
#  2. test_cuda_moe moe_stream_variants (the warp kernel's rows, GLM-5 shapes at 1 and 8 tokens).
#  3. every GPU test binary, the golden fixtures through score --backend cuda and glm5-tiny cpu ==
#     cuda, with NIBBLE_MOE_SMALL=2 exported (scripts/device-verify.sh on build/, packed by
#     `BUILD=build scripts/device-verify.sh pack`).
#  4. bench-offline on the 8-layer GLM-5 slice at 1 / 2 / 10 requests, SMALL=1 then 2.
#  5. bench-moe with zipf routing at 1 and 8 tokens.
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
xz -dc .abin/s15a.tar.xz | tar -xf -
mkdir -p $OUT/x
V="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_WARP_UNITS=4 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_WARP_UNITS=16"
NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 100 ./nibble bench-moe --tokens 1,2,4,8 --iters 40 > $OUT/x/ab1.log 2>&1
echo "ab1 rc=$?"; grep -E "^ +[0-9]|ceilings" $OUT/x/ab1.log
echo "[$(($(date +%s) - T0)) s]"
timeout 100 ./test_cuda_moe moe_stream_variants > $OUT/x/test-stream.log 2>&1; echo "test stream rc=$?"
grep -E "warp-scheduled|FAIL" $OUT/x/test-stream.log | head -5; grep -E "E=4 H=6144.*T=(1|8) " $OUT/x/test-stream.log | tail -4
echo "[$(($(date +%s) - T0)) s]"
NIBBLE_MOE_SMALL=2 BUILD=build OUT=/tmp/v STEPS="tests golden tiny" TEST_TIMEOUT=100 timeout 220 scripts/device-verify.sh > $OUT/x/verify.log 2>&1
echo "verify rc=$?"; grep -vE "^\s*$" $OUT/x/verify.log | tail -24 | cut -c1-160
cp /tmp/v/test_cuda_moe.log $OUT/x/verify-test_cuda_moe.log 2>/dev/null
echo "[$(($(date +%s) - T0)) s]"
for r in 1; do for s in 1 2; do
  NIBBLE_MOE_SMALL=$s LD_LIBRARY_PATH=$PWD/.devlibs-cuda timeout 70 build/nibble bench-offline --backend cuda \
    --model synthetic:glm5:num_hidden_layers=8 --num-prompts 1,2,10 --input-len 128 --output-len 64 > $OUT/x/off-r$r-s$s.log 2>&1
  echo "offline r$r SMALL=$s rc=$?"; grep -E "^[0-9]+ +[0-9.]+ " $OUT/x/off-r$r-s$s.log | head -3
done; done
echo "[$(($(date +%s) - T0)) s]"
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2" timeout 30 ./nibble bench-moe --tokens 1,8 --routing zipf \
  --iters 20 > $OUT/x/zipf.log 2>&1; echo "zipf rc=$?"; grep -E "^ +[0-9]" $OUT/x/zipf.log
echo "[$(($(date +%s) - T0)) s]"
# 6. if time is left: the 256-token layer's L1 / L2 traffic by source (Nsight Compute's memory
#    tables, raw metrics as CSV): what is left in L2 besides the weights (priority 2 of docs/NEXT.md)
if [ $(($(date +%s) - T0)) -lt 360 ]; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  timeout $((435 - $(date +%s) + T0)) $NCU --clock-control none -k "regex:moe_ffn_kernel" -s 2 -c 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables -o $OUT/x/n256 -f ./nibble bench-moe --tokens 256 --iters 5 \
    > $OUT/x/n256-run.log 2>&1; echo "ncu rc=$?"
  $NCU --import $OUT/x/n256.ncu-rep --page raw --csv 2>&1 | xz -c > $OUT/x/n256-raw.csv.xz
  $NCU --import $OUT/x/n256.ncu-rep --page details --print-details all > $OUT/x/n256-details.txt 2>&1
  grep -E "Duration|DRAM Throughput|L2 Hit|L1/TEX Hit|L2 Cache Throughput" $OUT/x/n256-details.txt | head -8
  rm -f $OUT/x/n256.ncu-rep
fi
echo "[$(($(date +%s) - T0)) s]"
ls -la $OUT/x
