#!/bin/bash
# Twelfth session, call 1, on build-lead (HEAD 134a49b): every GPU check, issue 9's sweep, profile
# and serve (scripts/device-final.sh) with nvidia-smi sampled every 100 ms; issue 8's bench-moe row
# twice; the eleventh session's ladder / K-split changes against the old settings, interleaved in
# one process; then the per-item trace of the stream kernels (bench/lab/moe-trace.sh).
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
mkdir -p $OUT/x
nvidia-smi -q -d PERFORMANCE > $OUT/x/perf-before.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader -lms 100 > $OUT/x/smi.csv 2>&1 &
SMI=$!
PARTS="verify offline profile serve" scripts/device-final.sh > $OUT/x/final-stdout.log 2>&1; echo "final rc=$?"
tail -40 $OUT/summary.txt
echo "[$(($(date +%s) - T0)) s]"
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
N=build-lead/nibble
for i in 1 2; do timeout 90 $N bench-moe --tokens 1,2,10,64,256,1024,2048 --iters 30 > $OUT/x/moe-row$i.log 2>&1; echo "row$i rc=$?"; grep -E "^ +[0-9]|ceilings" $OUT/x/moe-row$i.log; done
kill $SMI
run() {  # name tokens variants
  NIBBLE_BENCH_MOE_VARIANTS="$3" timeout 120 $N bench-moe --tokens $2 --iters 40 > $OUT/x/$1.log 2>&1; echo "$1 rc=$?"
  grep -E "^ +[0-9]|ceilings" $OUT/x/$1.log; echo "[$(($(date +%s) - T0)) s]"
}
run ab-small "1,2" "NIBBLE_MOE_KSPLIT_GU= NIBBLE_MOE_KSPLIT_GU=4,NIBBLE_MOE_KSPLIT_DN=2"
run ab-mid "192,256,320" "NIBBLE_MOE_KERNEL= NIBBLE_MOE_KERNEL=wgmma NIBBLE_MOE_NT=2"
nvidia-smi -q -d PERFORMANCE > $OUT/x/perf-after.txt 2>&1
grep -A6 "Counters" $OUT/x/perf-before.txt $OUT/x/perf-after.txt | grep -E "Power Capping|Thermal|Braking"
python3 scripts/smi-summary.py $OUT/x/smi.csv
if [ -f .abin/nibble-trace.xz ]; then
  xz -dkf .abin/nibble-trace.xz; chmod +x .abin/nibble-trace
  timeout 120 bash bench/lab/moe-trace.sh run $OUT/x/trace --tokens 1,2,10 --iters 20 > $OUT/x/trace-run.log 2>&1; echo "trace rc=$?"
  head -120 $OUT/x/trace/trace.txt 2>/dev/null
fi
cd $OUT && mv offline.log offline.json profile.log bench.log x/ 2>/dev/null; tar -cJf x.tar.xz x && rm -rf x && ls -la
echo "[$(($(date +%s) - T0)) s]"
