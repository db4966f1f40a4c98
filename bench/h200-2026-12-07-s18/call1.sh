#!/bin/bash
# Eighteenth session, call 1: the lean loop on 8 warps of two row-tile pairs each
# (NIBBLE_MOE_WG_V=2, lean 13) against the 16-warp default (V=1), interleaved in one process,
# at the 32- and 48-token tiles' token counts; its GPU test rows first; then the issue 8 row of
# the default build. Standalone build of the tree (.abin/s18.tar.xz).
#   run(command="bash bench/h200-2026-12-07-s18/call1.sh", carry=[".abin"], timeout_s=300)
set -u
T0=$(date +%s)
mkdir -p b && (cd b && xz -dc ../.abin/s18.tar.xz | tar -xf -)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
V="NIBBLE_MOE_WG_V=1 NIBBLE_MOE_WG_V=2"
NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 60 b/nibble bench-moe --tokens 512,1000,1024,1100 --iters 20 > $OUT/v2-1.log 2>&1
echo "v2 1 rc=$?"; grep -E "^ +[0-9]|ceilings" $OUT/v2-1.log
echo "[$(($(date +%s) - T0)) s]"
timeout 120 b/test_cuda_moe moe_wgmma_variants > $OUT/test-variants.log 2>&1
echo "test variants rc=$?"; tail -1 $OUT/test-variants.log; grep -B2 -A3 "FAIL" $OUT/test-variants.log | head -20
echo "[$(($(date +%s) - T0)) s]"
NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 60 b/nibble bench-moe --tokens 512,768,1000,1024,1100 --iters 20 > $OUT/v2-2.log 2>&1
echo "v2 2 rc=$?"; grep -E "^ +[0-9]" $OUT/v2-2.log
timeout 60 b/nibble bench-moe --tokens 1,2,10,64,256,1024,2048 --iters 30 > $OUT/row.log 2>&1
echo "row rc=$?"; grep -E "^ +[0-9]" $OUT/row.log
echo "[$(($(date +%s) - T0)) s]"
