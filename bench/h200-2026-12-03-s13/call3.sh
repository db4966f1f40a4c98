#!/bin/bash
# Thirteenth session, call 3 (closing), on build-lead (act through L1, the wide form's n80): every GPU check, issue 9's sweep, profile
# and serve (scripts/device-final.sh) with nvidia-smi sampled every 100 ms; issue 8's bench-moe row
# twice.
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
# A/B on this machine: HEAD before this session's changes (standalone nibble0, call 2's) against
# build-lead, alternating; and the wide form's middle width interleaved in one process.
xz -dc .s13c.tar.xz > nibble0 && chmod +x nibble0
for i in 1 2; do
  for b in ./nibble0 $N; do
    timeout 60 $b bench-moe --tokens 192,256,320,2048 --iters 30 > $OUT/x/ab-$i-$(basename $b).log 2>&1
    echo "== ab$i $b"; grep -E "^ +[0-9]" $OUT/x/ab-$i-$(basename $b).log | awk '{print $1, $3, $NF}' | tr '\n' ' '; echo
  done
done
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_WIDE_MID=80 NIBBLE_MOE_WG_WIDE_MID=96" timeout 90 $N bench-moe --tokens 2048,2304,2560 --iters 30 > $OUT/x/mid.log 2>&1
echo "mid rc=$?"; grep -E "^ +[0-9]" $OUT/x/mid.log
kill $SMI
nvidia-smi -q -d PERFORMANCE > $OUT/x/perf-after.txt 2>&1
grep -A6 "Counters" $OUT/x/perf-before.txt $OUT/x/perf-after.txt | grep -E "Power Capping|Thermal|Braking"
python3 scripts/smi-summary.py $OUT/x/smi.csv
cd $OUT && mv offline.log offline.json profile.log bench.log x/ 2>/dev/null; tar -cJf x.tar.xz x && rm -rf x && ls -la
echo "[$(($(date +%s) - T0)) s]"
