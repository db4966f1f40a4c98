#!/bin/bash
# Nineteenth session, call 7: the wg MLA kernel without its L2 prefetch of rows
# (NIBBLE_CUDA_MLA_WG_PF=0; the eighth session's lab split "no L2 prefetch" was 5-11 % faster and
# never applied; call 6's Nsight Compute run has the kernel at 71 % of DRAM peak moving ~33 % more
# bytes than its rows, q and outputs, with an L2 hit rate of 21 %). Its checks
# (test_cuda_mla_decode wg: every wg form, both prefetch settings, against the CPU op and the F32
# kernel), the op alone at 1000 tokens (prefetch on / off, A B A B in one process), then
# bench-offline at 1000 requests (input 128, output 128) alternating PF=1 / 0 twice.
# Full build of the tree (.devbin.tar.xz, scripts/device-verify.sh pack) and .devlibs.tar.xz.
#   run(command="bash bench/h200-2026-12-07-s19/call7.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=600)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 150 build/tests/test_cuda_mla_decode wg > $OUT/test-wg.log 2>&1
echo "test_cuda_mla_decode wg rc=$?"; tail -n1 $OUT/test-wg.log; grep -c "rel err" $OUT/test-wg.log; grep -i "fail" $OUT/test-wg.log | head -5
echo "[$(($(date +%s) - T0)) s]"
for c in 64 192 512; do
  timeout 60 build/tests/test_cuda_mla_decode time $c 1000 > $OUT/time-$c.log 2>&1
  echo "time $c rc=$?"; grep "prefetched" $OUT/time-$c.log
done
echo "[$(($(date +%s) - T0)) s]"
for pf in 1 0 1 0; do
  [ $(($(date +%s) - T0)) -gt 480 ] && { echo "deadline: skipping PF=$pf"; continue; }
  NIBBLE_CUDA_MLA_WG_PF=$pf timeout 100 build/nibble bench-offline --backend cuda --model synthetic:glm5:num_hidden_layers=8 \
    --num-prompts 1000 --input-len 128 --output-len 128 --warmup 1 --max-running-requests 1000 > $OUT/offline-pf$pf-$(date +%s).log 2>&1
  echo "offline PF=$pf rc=$?"; grep -E "^1000 " $(ls -t $OUT/offline-pf$pf-*.log | head -1)
done
echo "[$(($(date +%s) - T0)) s]"
