#!/bin/bash
# Fourteenth session, call 2 (not run: call 1 answered the A/B, so this verify is moot; it holds call 1 too): call 1's
# standalone A/B of NB_MOE_EXPAND_MULW (bench/h200-2026-12-03-s14/call1.sh), then every GPU check
# and issue 9's offline sweep on build-lead (the working tree with NB_MOE_EXPAND_MULW=1:
# scripts/device-final.sh PARTS="verify offline"), nvidia-smi sampled during the sweep.
set -u
T0=$(date +%s)
bash bench/h200-2026-12-03-s14/call1.sh
mkdir -p $OUT/y
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader -lms 100 > $OUT/y/smi.csv 2>&1 &
SMI=$!
PARTS="verify offline" OUT=$OUT/y scripts/device-final.sh > $OUT/y/final-stdout.log 2>&1; echo "final rc=$?"
kill $SMI
tail -30 $OUT/y/summary.txt
python3 scripts/smi-summary.py $OUT/y/smi.csv
cd $OUT && tar -cJf y.tar.xz y && rm -rf y && ls -la
echo "[$(($(date +%s) - T0)) s]"
