#!/bin/bash
# The call that judges the warp-scheduled small-step kernel (bench/lab/moe-warp.patch,
# NIBBLE_MOE_SMALL=2) and, if time is left, profiles the 256-token layer. Prepared in the fifteenth
# and sixteenth sessions; never run (every machine start was refused). Parts, in order (PARTS):
#   ab       bench-moe at 1-8 tokens, SMALL=1 (the default) against SMALL=2 and SMALL=2 at 4 units
#            per warp, interleaved in one process (standalone build of the patched tree,
#            .abin/s15a.tar.xz);
#   test     test_cuda_moe moe_stream_variants (the warp kernel's rows);
#   verify   with SMALL=2 exported: the GPU tests that run the MoE layer, the golden fixtures
#            through score --backend cuda, glm5-tiny cpu == cuda (scripts/device-verify.sh on the
#            packed full build of the patched tree, .devbin.tar.xz);
#   offline  bench-offline on the 8-layer GLM-5 slice at 1 / 2 / 10 requests, SMALL=1 then 2;
#   ncu      Nsight Compute's memory tables at 256 tokens (docs/NEXT.md, the L2 traffic by source).
# A part starts only while the deadline DL (seconds, the run timeout less ~10 s) leaves room.
#   run(command="PARTS='ab test' DL=140 bash bench/h200-2026-12-07-s16/judge-warp.sh", carry=[".abin"])
#   run(command="DL=430 bash bench/h200-2026-12-07-s16/judge-warp.sh",
#       carry=[".abin", ".devbin.tar.xz", ".devlibs.tar.xz"])
set -u
T0=$(date +%s)
DL=${DL:-430}
left() { echo $((DL - $(date +%s) + T0)); }
xz -dc .abin/s15a.tar.xz | tar -xf -
for part in ${PARTS:-ab test verify offline ncu}; do
  [ "$(left)" -gt 30 ] || { echo "$part: skipped, deadline"; continue; }
  case $part in
    ab)
      V="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_WARP_UNITS=4"
      NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 80 ./nibble bench-moe --tokens 1,2,4,8 --iters 40 > $OUT/ab.log 2>&1
      echo "ab rc=$?"; grep -E "^ +[0-9]|ceilings|^device" $OUT/ab.log ;;
    test)
      timeout 80 ./test_cuda_moe moe_stream_variants > $OUT/test-stream.log 2>&1; echo "test stream rc=$?"
      grep -E "warp-scheduled|FAIL" $OUT/test-stream.log | head -5; tail -2 $OUT/test-stream.log ;;
    verify)
      [ -d .devlibs-cuda ] || { tar -xJf .devlibs.tar.xz && mv .devlibs .devlibs-cuda; }
      [ -f .devbin.tar.xz ] && tar -xJf .devbin.tar.xz && mv .devbin.tar.xz /tmp/
      echo "test_cuda_moe test_cuda_vs_cpu test_cuda_graph test_synth_gpu" > build/gpu-tests.txt
      NIBBLE_MOE_SMALL=2 BUILD=build OUT=$OUT/verify STEPS="tests golden tiny" TEST_TIMEOUT=80 \
        timeout $(($(left) < 200 ? $(left) : 200)) scripts/device-verify.sh > $OUT/verify.log 2>&1
      echo "verify rc=$?"; grep -vE "^\s*$" $OUT/verify.log | tail -20 | cut -c1-160 ;;
    offline)
      for s in 1 2; do
        NIBBLE_MOE_SMALL=$s LD_LIBRARY_PATH=$PWD/.devlibs-cuda timeout 40 build/nibble bench-offline --backend cuda \
          --model synthetic:glm5:num_hidden_layers=8 --num-prompts 1,2,10 --input-len 128 --output-len 64 > $OUT/off-s$s.log 2>&1
        echo "offline SMALL=$s rc=$?"; grep -E "^[0-9]+ +[0-9.]+ " $OUT/off-s$s.log | head -3
      done ;;
    ncu)
      NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      timeout "$(left)" $NCU --clock-control none -k "regex:moe_ffn_kernel" -s 2 -c 1 --section SpeedOfLight \
        --section MemoryWorkloadAnalysis_Tables -o $OUT/n256 -f ./nibble bench-moe --tokens 256 --iters 5 \
        > $OUT/n256-run.log 2>&1; echo "ncu rc=$?"
      $NCU --import $OUT/n256.ncu-rep --page raw --csv 2>&1 | xz -c > $OUT/n256-raw.csv.xz
      $NCU --import $OUT/n256.ncu-rep --page details --print-details all > $OUT/n256-details.txt 2>&1
      grep -E "Duration|DRAM Throughput|L2 Hit|L1/TEX Hit|L2 Cache Throughput" $OUT/n256-details.txt | head -8
      rm -f $OUT/n256.ncu-rep ;;
  esac
  echo "[$part done at $(($(date +%s) - T0)) s]"
done
