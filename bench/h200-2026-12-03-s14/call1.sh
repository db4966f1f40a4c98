#!/bin/bash
# Fourteenth session, call 1 (run 13:23 UTC): the expansion's two rotations as IMAD.WIDE.U32 multiplies
# (NB_MOE_EXPAND_MULW, moe_dev.h). Standalone builds of commit 3068019: mulw1
# (-DNB_MOE_EXPAND_MULW=1; now bench/lab/moe-expand-mulw.patch) and mulw0 (the switch's default 0). test_cuda_moe
# in full on mulw1; bench-moe at issue 8's token counts, processes alternating, three rounds;
# the producer/consumer kernel (NIBBLE_MOE_WG=pc, not measured since its R2UR fix) against the
# default in one process.
set -u
T0=$(date +%s)
xz -dc .s14a.tar.xz | tar -xf -
mkdir -p $OUT/x
timeout 300 ./test-mulw1 > $OUT/x/test-mulw1.log 2>&1; echo "test mulw1 rc=$?"; tail -2 $OUT/x/test-mulw1.log
echo "[$(($(date +%s) - T0)) s]"
for r in 1 2 3; do
  for v in mulw0 mulw1; do
    timeout 100 ./nibble-$v bench-moe --tokens 1,2,10,64,256,1024,2048 --iters 30 > $OUT/x/r$r-$v.log 2>&1
    echo "== r$r $v rc=$?"; grep -E "^ +[0-9]" $OUT/x/r$r-$v.log | awk '{print $1, $3, $NF}' | tr '\n' ' '; echo
  done
done
echo "[$(($(date +%s) - T0)) s]"
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG=lean NIBBLE_MOE_WG=pc" timeout 100 ./nibble-mulw1 bench-moe --tokens 256,512,1024 \
  --iters 30 > $OUT/x/pc.log 2>&1; echo "pc rc=$?"; grep -E "^ +[0-9]|ceilings" $OUT/x/pc.log
echo "[$(($(date +%s) - T0)) s]"
cd $OUT && tar -cJf x.tar.xz x && rm -rf x
