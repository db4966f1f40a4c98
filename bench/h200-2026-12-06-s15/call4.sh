#!/bin/bash
# Fifteenth session, call 4 (prepared, never run: every machine start was refused; it needs
# bench/lab/moe-warp.patch applied, see bench/lab/README.md): the decisive part of call3.sh only.
# bench-moe at 1-8 tokens, the block-item small-step kernel (NIBBLE_MOE_SMALL=1, the default)
# against the warp-scheduled one (SMALL=2, and at 4 / 16 units per warp), interleaved in one
# process; then test_cuda_moe moe_stream_variants (its GPU rows). Standalone build of the
# patched tree (.abin/s15a.tar.xz, scripts/moe-standalone-build.sh).
set -u
T0=$(date +%s)
xz -dc .abin/s15a.tar.xz | tar -xf -
mkdir -p $OUT/x
V="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_WARP_UNITS=4 NIBBLE_MOE_SMALL=2,NIBBLE_MOE_WARP_UNITS=16"
NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 110 ./nibble bench-moe --tokens 1,2,4,8 --iters 40 > $OUT/x/ab1.log 2>&1
echo "ab1 rc=$?"; grep -E "^ +[0-9]|ceilings" $OUT/x/ab1.log
echo "[$(($(date +%s) - T0)) s]"
timeout 120 ./test_cuda_moe moe_stream_variants > $OUT/x/test-stream.log 2>&1; echo "test stream rc=$?"
grep -E "FAIL|passed|failed" $OUT/x/test-stream.log | tail -4
echo "[$(($(date +%s) - T0)) s]"
cd $OUT && tar -cJf x.tar.xz x && rm -rf x
