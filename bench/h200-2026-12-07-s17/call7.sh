#!/bin/bash
# Seventeenth session, call 7: the wide form with five ring stages at n64 / n80
# (NIBBLE_MOE_WG_WIDE_S5=1, stage phases counted per stage) against four (S5=0, same counting),
# interleaved in one process (.abin/s18.tar.xz, standalone build); the session's earlier build
# (.abin/s17.tar.xz, phases from the block's slice count, NIBBLE_MOE_WG_MBAR=1) alternated with
# it; test_cuda_moe moe_wgmma_wide with each.
#   run(command="bash bench/h200-2026-12-07-s17/call7.sh", carry=[".abin"], timeout_s=200)
set -u
T0=$(date +%s)
mkdir -p a b && (cd a && xz -dc ../.abin/s17.tar.xz | tar -xf -) && (cd b && xz -dc ../.abin/s18.tar.xz | tar -xf -)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for s in 0 1; do
  NIBBLE_MOE_WG_WIDE_S5=$s timeout 60 b/test_cuda_moe moe_wgmma_wide > $OUT/test-s5-$s.log 2>&1
  echo "test S5=$s rc=$?"; tail -1 $OUT/test-s5-$s.log
done
V="NIBBLE_MOE_WG_WIDE_S5=0 NIBBLE_MOE_WG_WIDE_S5=1"
for i in 1 2; do
  NIBBLE_BENCH_MOE_VARIANTS="$V" timeout 60 b/nibble bench-moe --tokens 2048,2304,4096 --iters 20 > $OUT/s5-$i.log 2>&1
  echo "s5 $i rc=$?"; grep -E "^ +[0-9]" $OUT/s5-$i.log
  NIBBLE_MOE_WG_MBAR=1 timeout 60 a/nibble bench-moe --tokens 2048,2304,4096 --iters 20 > $OUT/s17-$i.log 2>&1
  echo "s17 $i rc=$?"; grep -E "^ +[0-9]" $OUT/s17-$i.log
done
echo "[$(($(date +%s) - T0)) s]"
