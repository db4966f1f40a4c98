#!/bin/bash
# Prepared in the seventeenth session, not run (needs an H200: the 1000-request level does not fit
# 80 GB): on a full build of the tree (`build`, packed as .devbin.tar.xz by
# `BUILD=build scripts/device-verify.sh pack`) issue 8's bench-moe row twice, the lean loop's
# mbarrier A/B, where the wide form should start, and issue 9's bench-offline at 1 / 2 / 10 / 1000.
#   run(command="bash bench/h200-2026-12-07-s17/call6.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"],
#       timeout_s=560, needs_h200=true)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin.tar.xz && mv .devbin.tar.xz /tmp/
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_MBAR=0 NIBBLE_MOE_WG_MBAR=1" timeout 90 build/nibble bench-moe \
  --tokens 512,1000,1024 --iters 20 > $OUT/lean-ab.log 2>&1
echo "lean-ab rc=$?"; grep -E "^ +[0-9]|ceilings" $OUT/lean-ab.log
for i in 1 2; do
  timeout 90 build/nibble bench-moe --tokens 1,2,10,64,256,1024,2048 --iters 30 > $OUT/moe-row$i.log 2>&1; echo "row$i rc=$?"
  grep -E "^ +[0-9]|ceilings" $OUT/moe-row$i.log
done
# where the wide form (now with its mbarriers) starts: the ladder (above 52 tokens per expert)
# against the wide form everywhere the 16-warp kernel runs
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_WIDE=1 NIBBLE_MOE_WG_WIDE=2" timeout 90 build/nibble bench-moe \
  --tokens 1536,1664,1792 --iters 20 > $OUT/wide-from.log 2>&1; echo "wide-from rc=$?"; grep -E "^ +[0-9]" $OUT/wide-from.log
unset LD_LIBRARY_PATH
echo "[$(($(date +%s) - T0)) s]"
OUT=/tmp/i9 STEPS=offline BUILD=build timeout 300 scripts/device-issue9.sh > /tmp/i9.log 2>&1
echo "offline rc=$?"; cp /tmp/i9/offline.log /tmp/i9/summary.txt $OUT/ 2>/dev/null
grep -E "^[0-9]+ +[0-9.]+ |power|capped" /tmp/i9/offline.log | head -12
echo "[$(($(date +%s) - T0)) s]"
