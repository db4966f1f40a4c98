#!/bin/bash
# Tenth session, call 2. A = 5bf1c4c (.abin), C = 4th commit of the session (build-lead): the
# expand7 layout, the q fold, activations to BF16 four floats per load, the SiLU pass writing
# down's BF16 input. (1) test_cuda_linear, test_cuda_moe, test_cuda_vs_cpu on C; (2) bench-offline
# A / C / C with NIBBLE_CUDA_MLP_SILU4=0 / A / C at 1, 10, 1000 requests, nvidia-smi sampled;
# (3) ncu over one steady batch-1000 decode step of C.
set -u
T0=$(date +%s)
tar -xJf .devbin.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
xz -d .abin/nibble-A.xz && chmod +x .abin/nibble-A
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
A=.abin/nibble-A; C=build-lead/nibble; M=synthetic:glm5:num_hidden_layers=8
mkdir -p $OUT/c
for t in test_cuda_linear test_cuda_vs_cpu test_cuda_moe; do
  timeout 150 build-lead/tests/$t > $OUT/c/$t.log 2>&1; echo "$t rc=$?"; grep -iE "fail" $OUT/c/$t.log | head -5; tail -1 $OUT/c/$t.log
done
echo "[$(($(date +%s) - T0)) s]"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader -lms 100 > $OUT/c/smi.csv 2>&1 &
SMI=$!
n=0
for s in "A" "C" "C NIBBLE_CUDA_MLP_SILU4=0" "A" "C"; do
  n=$((n+1)); set -- $s; eval bin=\$$1; shift
  echo "=== $n $s start $(date +%H:%M:%S.%N)" >> $OUT/c/marks.txt
  env "$@" timeout 100 $bin bench-offline --backend cuda --model $M --num-prompts 1,10,1000 --input-len 128 --output-len 128 > "$OUT/c/off-$n.log" 2>&1
  echo "offline $n $s rc=$?"; grep -E "^[0-9]+ +[0-9.]+ |ceilings" "$OUT/c/off-$n.log"
  echo "=== $n end $(date +%H:%M:%S.%N)" >> $OUT/c/marks.txt
  [ $n = 2 ] && nvidia-smi -q -d PERFORMANCE > $OUT/c/perf-after.txt 2>&1
done
timeout 60 $C bench-offline --backend cuda --model $M --num-prompts 1000 --input-len 128 --output-len 400 > $OUT/c/off-long.log 2>&1 &
sleep 8; nvidia-smi -q -d PERFORMANCE,POWER,CLOCK > $OUT/c/perf-during.txt 2>&1; wait
grep -E "^[0-9]+ +[0-9.]+ " $OUT/c/off-long.log
kill $SMI
echo "[$(($(date +%s) - T0)) s]"
python3 - $OUT/c/smi.csv <<'PY'
import sys
rows=[]
for ln in open(sys.argv[1]):
    p=[x.strip() for x in ln.split(",")]
    try: rows.append((int(p[1].split()[0]), float(p[3].split()[0])))
    except Exception: pass
busy=[r for r in rows if r[1] > 350]
print("smi samples", len(rows), "busy (>350 W)", len(busy))
if busy:
    cl=sorted(r[0] for r in busy); pw=sorted(r[1] for r in busy)
    q=lambda a,f: a[int(f*(len(a)-1))]
    print("busy SM MHz p10/p50/p90 %d/%d/%d, W p10/p50/p90 %.0f/%.0f/%.0f" % (q(cl,.1),q(cl,.5),q(cl,.9),q(pw,.1),q(pw,.5),q(pw,.9)))
PY
grep -iE "Power Cap|Thermal|Idle|Applications Clocks Setting|SW|HW|Power Draw|Current Power Limit|SM  " $OUT/c/perf-during.txt | head -24
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
left=$((560 - ($(date +%s) - T0)))
if [ $left -gt 60 ]; then
  NIBBLE_CUDA_PROFILER_RANGE=1 timeout $left $NCU --profile-from-start off --cache-control none --clock-control none \
    --metrics gpu__time_duration.sum,launch__grid_size --csv --page raw \
    $C bench-offline --backend cuda --model $M --num-prompts 1000 --input-len 128 --output-len 24 \
    --profile-ops 1 --profile-skip 8 > $OUT/c/ncu-step.csv 2> $OUT/c/ncu-step.err
  echo "ncu rc=$? (limit $left s)"
  python3 scripts/ncu-step.py $OUT/c/ncu-step.csv | head -16
fi
cd $OUT && tar -cJf c.tar.xz c && rm -rf c && ls -la
echo "[$(($(date +%s) - T0)) s]"
