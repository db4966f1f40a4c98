#!/bin/bash
# Sixteenth session, call 2: call1.sh cut to fit the device time the refused starts left (a 360 s
# call). The warp-scheduled small-step kernel (bench/lab/moe-warp.patch; NIBBLE_MOE_SMALL=2):
#  1. bench-moe at 1-8 tokens, SMALL=1 (the default) against SMALL=2 and SMALL=2 at 4 units per
#     warp, interleaved in one process (standalone build of the patched tree, .abin/s15a.tar.xz);
#  2. test_cuda_moe moe_stream_variants (the warp kernel's rows);
#  3. with NIBBLE_MOE_SMALL=2 exported: the GPU tests that run the MoE layer (test_cuda_moe,
#     test_cuda_vs_cpu, test_cuda_graph, test_synth_gpu), the golden fixtures through score
#     --backend cuda, glm5-tiny cpu == cuda (scripts/device-verify.sh on the packed full build);
#  4. bench-offline on the 8-layer GLM-5 slice at 1 / 2 / 10 requests, SMALL=1 then 2;
#  5. if time is left: Nsight Compute's memory tables at 256 tokens (docs/NEXT.md priority 2).
set -u
T0=$(date +%s)
DL=${DL:-350}  # seconds this call may take (the run timeout less ~10 s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
xz -dc .abin/s15a.tar.xz | tar -xf -
tar -xJf .devbin.tar.xz && mv .devbin.tar.xz /tmp/
echo "test_cuda_moe test_cuda_vs_cpu test_cuda_graph test_synth_gpu" > build/gpu-tests.txt
mkdir -p $OUT/x
V="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_WARP_UNITS=4"
NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 80 ./nibble bench-moe --tokens 1,2,4,8 --iters 40 > $OUT/x/ab1.log 2>&1
echo "ab1 rc=$?"; grep -E "^ +[0-9]|ceilings" $OUT/x/ab1.log
echo "[$(($(date +%s) - T0)) s]"
timeout 80 ./test_cuda_moe moe_stream_variants > $OUT/x/test-stream.log 2>&1; echo "test stream rc=$?"
grep -E "warp-scheduled|FAIL" $OUT/x/test-stream.log | head -5; tail -2 $OUT/x/test-stream.log
echo "[$(($(date +%s) - T0)) s]"
NIBBLE_MOE_SMALL=2 BUILD=build OUT=$OUT/x/v STEPS="tests golden tiny" TEST_TIMEOUT=80 timeout 170 scripts/device-verify.sh > $OUT/x/verify.log 2>&1
echo "verify rc=$?"; grep -vE "^\s*$" $OUT/x/verify.log | tail -20 | cut -c1-160
echo "[$(($(date +%s) - T0)) s]"
for s in 1 2; do
  [ $(($(date +%s) - T0)) -lt $((DL - 30)) ] || break
  NIBBLE_MOE_SMALL=$s LD_LIBRARY_PATH=$PWD/.devlibs-cuda timeout 40 build/nibble bench-offline --backend cuda \
    --model synthetic:glm5:num_hidden_layers=8 --num-prompts 1,2,10 --input-len 128 --output-len 64 > $OUT/x/off-s$s.log 2>&1
  echo "offline SMALL=$s rc=$?"; grep -E "^[0-9]+ +[0-9.]+ " $OUT/x/off-s$s.log | head -3
done
echo "[$(($(date +%s) - T0)) s]"
if [ $(($(date +%s) - T0)) -lt $((DL - 60)) ]; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  timeout $((DL - $(date +%s) + T0)) $NCU --clock-control none -k "regex:moe_ffn_kernel" -s 2 -c 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables -o $OUT/x/n256 -f ./nibble bench-moe --tokens 256 --iters 5 \
    > $OUT/x/n256-run.log 2>&1; echo "ncu rc=$?"
  $NCU --import $OUT/x/n256.ncu-rep --page raw --csv 2>&1 | xz -c > $OUT/x/n256-raw.csv.xz
  $NCU --import $OUT/x/n256.ncu-rep --page details --print-details all > $OUT/x/n256-details.txt 2>&1
  grep -E "Duration|DRAM Throughput|L2 Hit|L1/TEX Hit|L2 Cache Throughput" $OUT/x/n256-details.txt | head -8
  rm -f $OUT/x/n256.ncu-rep
fi
echo "[$(($(date +%s) - T0)) s]"
