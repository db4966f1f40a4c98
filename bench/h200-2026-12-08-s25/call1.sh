#!/bin/bash
# Twenty-fifth session, call 1: dsa_select (the magnitude tie criterion; the prefill form's
# tile and new wgmma cases), the prefill form's timings (k_dsa_tile against k_dsa_tile_wg), a 16k
# prompt's prefill with NIBBLE_CUDA_DSA_TILE=0|1|2, the golden fixtures with the prefill form on,
# then Nsight Compute on both tile kernels.
#   pack: tar -cf - build/nibble build/tests/test_cuda_vs_cpu | xz -T2 --lzma2=preset=1,dict=192MiB -c > .devbin3.tar.xz
#   run(command="bash bench/h200-2026-12-08-s25/call1.sh", carry=[".devbin3.tar.xz", ".devlibs.tar.xz"])
set -u
tar -xJf .devbin3.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
timeout 200 build/tests/test_cuda_vs_cpu dsa_select > $OUT/dsa.log 2>&1; echo "dsa_select rc=$?"
grep -E "FAIL|prefill" $OUT/dsa.log | cut -c1-250 | head -40
for tc in "2048 8192" "4096 32768" "1024 100000"; do
  timeout 100 build/tests/test_cuda_vs_cpu dsa-prefill $tc 2>&1 | grep -E "prefill T=|FAIL|rror|ran where" | cut -c1-400
done
P="--backend cuda --model synthetic:glm5:num_hidden_layers=8 --input-len 16384 --output-len 4 --num-prompts 1 --max-running-requests 1"
for tl in 0 2 1; do
  NIBBLE_CUDA_DSA_TILE=$tl timeout 100 build/nibble bench-offline $P > /tmp/tile-$tl.log 2>&1
  echo "16k prompt, NIBBLE_CUDA_DSA_TILE=$tl: rc=$? $(grep -E "Prefill step time|Prefill throughput" /tmp/tile-$tl.log | head -2 | tr '\n' ' ' | cut -c1-200)"
done
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LD_LIBRARY_PATH" "$PWD/build/nibble" > /tmp/nb && chmod +x /tmp/nb
for tl in 2; do
  NIBBLE_CUDA_DSA_TILE=$tl NIBBLE_BIN=/tmp/nb timeout 150 python3 tests/cuda_ops/cuda_golden_check.py > $OUT/golden-tile$tl.log 2>&1
  echo "golden (NIBBLE_CUDA_DSA_TILE=$tl) rc=$?"; tail -3 $OUT/golden-tile$tl.log
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for k in "k_dsa_tile_wg"; do
  timeout 120 $NCU -k regex:"^$k" --launch-count 1 --section WarpStateStats --section SchedulerStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section SpeedOfLight --section InstructionStats \
    build/tests/test_cuda_vs_cpu dsa-prefill 2048 8192 > $OUT/ncu-${k%$}.txt 2>&1
  echo "ncu $k rc=$?"; grep -E "k_dsa_tile|Duration|Registers Per|Stall|Warp Cycles Per Issued|Issued Ipc|Achieved Occupancy|Throughput" $OUT/ncu-${k%$}.txt | head -40
done
