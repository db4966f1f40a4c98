#!/bin/bash
# Prepared for the twentieth round's first GPU call (an H200 if one comes: needs_h200 is not
# needed, the work fits 80 GB): the nineteenth round's untested switch first, then its figures.
#   1. test_cuda_mla_decode in full (the dec kernel's NIBBLE_CUDA_MLA_DEC_PF, added after the
#      last GPU call, runs its non-default setting there);
#   2. the MLA op's prefetch A/B rows for both kernels (`time 192 1000`, `time 2048 64,256`);
#   3. the cluster residency probe on this card (H100: clusters of 4+ get 124 of 132 SMs);
#   4. issue 8's row (bench-moe) and issue 9's sweep (device-issue9.sh offline) on the tree;
#   5. if .abin/mla16.tar.xz is there (bench/lab/mla-bf16-rows.patch applied in a worktree, its
#      build/tests/test_cuda_mla_decode packed with that path), the wg kernel on BF16 rows
#      (NB_TEST_MLA_ROWS16=1) against F32 rows, contexts 192 and 2048.
# Here first: cmake --build build -j2; BUILD=build scripts/device-verify.sh pack (.devbin.tar.xz);
# nvcc -O2 -gencode=arch=compute_90a,code=sm_90a bench/lab/cluster_probe.cu -o .abin/cluster_probe
#   run(command="bash bench/h200-2026-12-07-s19/next-call.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz", ".abin"], timeout_s=400)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 150 build/tests/test_cuda_mla_decode > $OUT/test-mla-decode.log 2>&1
echo "test_cuda_mla_decode rc=$?"; tail -n1 $OUT/test-mla-decode.log; grep -i "fail" $OUT/test-mla-decode.log | head -5
timeout 60 build/tests/test_cuda_mla_decode time 192 1000 > $OUT/time-192.log 2>&1; grep "prefetched" $OUT/time-192.log
timeout 90 build/tests/test_cuda_mla_decode time 2048 64,256 > $OUT/time-2048.log 2>&1; grep "prefetched" $OUT/time-2048.log
echo "[$(($(date +%s) - T0)) s]"
[ -x .abin/cluster_probe ] && .abin/cluster_probe > $OUT/probe.log 2>&1 && grep -E "cluster  [248]," $OUT/probe.log
timeout 90 build/nibble bench-moe --tokens 1,2,10,64,256,1024,2048 --iters 30 > $OUT/moe-row.log 2>&1
echo "bench-moe rc=$?"; grep -E "^ +[0-9]|ceilings" $OUT/moe-row.log
echo "[$(($(date +%s) - T0)) s]"
# issue 9's sweep only on an H200 (the H100 sweep of this tree is in RESULTS, nineteenth session)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  OUT=$OUT/i9 STEPS=offline BUILD=build scripts/device-issue9.sh 2>&1 | tail -8
fi
echo "[$(($(date +%s) - T0)) s]"
if [ -f .abin/mla16.tar.xz ]; then
  mkdir -p lab16 && xz -dc .abin/mla16.tar.xz | tar -C lab16 -xf -
  for c in 192 2048; do
    for r16 in 0 1; do
      if [ $r16 = 1 ]; then export NB_TEST_MLA_ROWS16=1; else unset NB_TEST_MLA_ROWS16; fi
      timeout 90 lab16/build/tests/test_cuda_mla_decode time $c 64,256,1000 > $OUT/lab16-$c-$r16.log 2>&1
      echo "lab16 ctx $c rows16=$r16 rc=$?"; grep -E "rel err|one term  op|prefetched" $OUT/lab16-$c-$r16.log | grep -v dec | head -9
    done
  done
  unset NB_TEST_MLA_ROWS16
fi
echo "[$(($(date +%s) - T0)) s]"
