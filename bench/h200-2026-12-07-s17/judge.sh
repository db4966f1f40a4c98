#!/bin/bash
# The seventeenth session's call: judges the warp-scheduled small-step kernel
# (bench/lab/moe-warp.patch, NIBBLE_MOE_SMALL=2) and the wgmma kernels' mbarrier ring
# (NIBBLE_MOE_WG_MBAR=1) in one standalone build of the tree with both (.abin/s17.tar.xz:
# nibble with the kernel commands, test_cuda_moe). Parts, in order (PARTS), each only while the
# deadline DL (seconds) leaves room:
#   ab       bench-moe at 1-8 tokens, SMALL=1 (the default) against SMALL=2 and SMALL=2 at 4 units
#            per warp, interleaved in one process;
#   abw      bench-moe at 512-4096 tokens: the ring's block barrier per slice (the default)
#            against its mbarriers (NIBBLE_MOE_WG_MBAR=1: the lean loop at 512-1024, the wide
#            form from 2048);
#   test     test_cuda_moe moe_stream_variants, moe_wgmma_wide, moe_wgmma_variants (the new rows);
#   verify   with SMALL=2 exported: the GPU tests that run the MoE layer, the golden fixtures,
#            glm5-tiny cpu == cuda (scripts/device-verify.sh on .devbin.tar.xz, a full build of
#            the tree with the warp patch only);
#   offline  bench-offline on the 8-layer GLM-5 slice at 1 / 2 / 10 requests, SMALL=1 then 2;
#   ncu      Nsight Compute's memory tables at 256 tokens.
#   run(command="DL=430 bash bench/h200-2026-12-07-s17/judge.sh", carry=[".abin", ".devbin.tar.xz", ".devlibs.tar.xz"])
set -u
T0=$(date +%s)
DL=${DL:-430}
left() { echo $((DL - $(date +%s) + T0)); }
xz -dc .abin/s17.tar.xz | tar -xf -
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for part in ${PARTS:-ab abw test verify offline ncu}; do
  [ "$(left)" -gt 30 ] || { echo "$part: skipped, deadline"; continue; }
  case $part in
    ab)
      V="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_WARP_UNITS=4"
      NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 80 ./nibble bench-moe --tokens 1,2,4,8 --iters 40 > $OUT/ab.log 2>&1
      echo "ab rc=$?"; grep -E "^ +[0-9]|ceilings|^device" $OUT/ab.log ;;
    abw)
      V="NIBBLE_MOE_WG_MBAR=0 NIBBLE_MOE_WG_MBAR=1"
      NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 90 ./nibble bench-moe --tokens 512,1024,1536,2048,4096 --iters 20 > $OUT/abw.log 2>&1
      echo "abw rc=$?"; grep -E "^ +[0-9]|ceilings|^device" $OUT/abw.log ;;
    test)
      for t in moe_stream_variants moe_wgmma_wide moe_wgmma_variants; do
        timeout 90 ./test_cuda_moe $t > $OUT/test-$t.log 2>&1; echo "test $t rc=$?"
        grep -E "warp-scheduled|MBAR|FAIL" $OUT/test-$t.log | head -6; tail -2 $OUT/test-$t.log
      done ;;
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
        --section MemoryWorkloadAnalysis_Tables -o $OUT/n256 -f ./nibble bench-moe --tokens 256 --iters 20 \
        > $OUT/n256-run.log 2>&1; echo "ncu rc=$?"
      $NCU --import $OUT/n256.ncu-rep --page raw --csv 2>&1 | xz -c > $OUT/n256-raw.csv.xz
      $NCU --import $OUT/n256.ncu-rep --page details --print-details all > $OUT/n256-details.txt 2>&1
      grep -E "Duration|DRAM Throughput|L2 Hit|L1/TEX Hit|L2 Cache Throughput" $OUT/n256-details.txt | head -8
      rm -f $OUT/n256.ncu-rep ;;
  esac
  echo "[$part done at $(($(date +%s) - T0)) s]"
done
