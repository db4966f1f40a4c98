#!/bin/bash
# Seventeenth session, call 5, on `build` (the mbarrier ring the default: the wide form always,
# the lean loop's 16-warp defaults unless NIBBLE_MOE_WG_MBAR=0): issue 8's bench-moe row twice
# and the lean loop's A/B; every GPU check (scripts/device-final.sh verify); issue 9's
# bench-offline at 1 / 2 / 10 / 1000 requests, then 1000 again with NIBBLE_MOE_WG_MBAR=0.
#   run(command="bash bench/h200-2026-12-07-s17/call5.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=590)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin.tar.xz && mv .devbin.tar.xz /tmp/
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
N=build/nibble
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for i in 1 2; do
  timeout 90 $N bench-moe --tokens 1,2,10,64,256,1024,2048 --iters 30 > $OUT/moe-row$i.log 2>&1; echo "row$i rc=$?"
  grep -E "^ +[0-9]|ceilings" $OUT/moe-row$i.log
done
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_MBAR=0 NIBBLE_MOE_WG_MBAR=1" timeout 90 $N bench-moe --tokens 512,1000,1024 \
  --iters 30 > $OUT/lean-ab.log 2>&1; echo "lean-ab rc=$?"; grep -E "^ +[0-9]" $OUT/lean-ab.log
echo "[$(($(date +%s) - T0)) s]"
unset LD_LIBRARY_PATH
OUT=$OUT/f PARTS="verify offline" BUILD=build timeout 400 scripts/device-final.sh > /tmp/final-stdout.log 2>&1
echo "final rc=$?"; tail -30 $OUT/f/summary.txt | cut -c1-200
echo "[$(($(date +%s) - T0)) s]"
NIBBLE_MOE_WG_MBAR=0 OUT=/tmp/i9b LEVELS=1000 STEPS=offline BUILD=build timeout 150 scripts/device-issue9.sh > /tmp/i9b.log 2>&1
echo "mbar0 1000 rc=$?"; grep -E "^ *[0-9]+ +[0-9.]+ " /tmp/i9b/offline.log | head -3; cp /tmp/i9b/offline.log $OUT/offline-mbar0.log
echo "[$(($(date +%s) - T0)) s]"
