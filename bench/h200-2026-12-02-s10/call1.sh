#!/bin/bash
# Tenth session, call 1. A = 5bf1c4c (the tree), B = A + bench/lab/moe-expand7.patch +
# bench/lab/mla-qfold.patch (build-lead). (1) bench-moe A/B alternating; (2) the MLA op with the
# fold off / on; (3) bench-offline A, B with the fold off, B; (4) every GPU check on B;
# (5) ncu over one steady batch-1000 decode step of B (NIBBLE_CUDA_PROFILER_RANGE).
set -u
T0=$(date +%s)
tar -xJf .devbin.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
xz -d .abin/nibble-A.xz && chmod +x .abin/nibble-A
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
A=.abin/nibble-A; B=build-lead/nibble; M=synthetic:glm5:num_hidden_layers=8
mkdir -p $OUT/c
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
for i in 1 2; do for v in A B; do
  eval bin=\$$v
  timeout 90 $bin bench-moe --tokens 1,2,10,64,256,1024,2048 --iters 30 > $OUT/c/moe-$v$i.log 2>&1; echo "moe $v$i rc=$?"
  grep -E "^ +[0-9]|ceilings" $OUT/c/moe-$v$i.log
done; done
echo "[$(($(date +%s) - T0)) s]"
for ctx in 128 192; do for f in 0 1; do
  NIBBLE_CUDA_MLA_QFOLD=$f timeout 40 build-lead/tests/test_cuda_mla_decode time $ctx 1000 > $OUT/c/mla-$ctx-$f.log 2>&1
  echo "mla ctx $ctx fold $f rc=$?"; tail -4 $OUT/c/mla-$ctx-$f.log
done; done
echo "[$(($(date +%s) - T0)) s]"
for s in "A" "B NIBBLE_CUDA_MLA_QFOLD=0" "B"; do
  set -- $s; eval bin=\$$1; shift
  env "$@" timeout 100 $bin bench-offline --backend cuda --model $M --num-prompts 1,10,1000 --input-len 128 --output-len 128 > "$OUT/c/off-${s// /_}.log" 2>&1
  echo "offline $s rc=$?"; grep -E "^[0-9]+ +[0-9.]+ |ceilings" "$OUT/c/off-${s// /_}.log"
done
echo "[$(($(date +%s) - T0)) s]"
mkdir -p /tmp/v && OUT=/tmp/v STEPS="tests golden tiny" scripts/device-verify.sh > $OUT/c/verify.log 2>&1; echo "verify rc=$?"
grep -E "exit|within|greedy|\[|FAIL|max rel" $OUT/c/verify.log | head -40
tar -cJf $OUT/verify.tar.xz -C /tmp v
echo "[$(($(date +%s) - T0)) s]"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
left=$((560 - ($(date +%s) - T0)))
if [ $left -gt 60 ]; then
  NIBBLE_CUDA_PROFILER_RANGE=1 timeout $left $NCU --profile-from-start off --cache-control none --clock-control none \
    --metrics gpu__time_duration.sum,launch__grid_size --csv --page raw \
    $B bench-offline --backend cuda --model $M --num-prompts 1000 --input-len 128 --output-len 24 \
    --profile-ops 1 --profile-skip 8 > $OUT/c/ncu-step.csv 2> $OUT/c/ncu-step.err
  echo "ncu rc=$? (limit $left s)"; grep -cE '^"' $OUT/c/ncu-step.csv; grep -E "step wall" $OUT/c/ncu-step.csv
  python3 scripts/ncu-step.py $OUT/c/ncu-step.csv | head -30
fi
cd $OUT && tar -cJf c.tar.xz c && rm -rf c && ls -la
echo "[$(($(date +%s) - T0)) s]"
