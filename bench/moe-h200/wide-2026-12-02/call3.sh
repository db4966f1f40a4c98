#!/bin/bash
# The column table + balanced gate/up hand-off (build-moe/standalone) against call 1's binary
# (build-moe/standalone-a), alternating processes; tests; issue 8's row on the default ladder;
# Nsight Compute on the new binary.
A=build-moe/standalone-a; B=build-moe/standalone
( time timeout 200 $B/test_cuda_moe moe_wgmma_wide moe_wgmma_variants moe_small moe_glm5_shape moe_big_t ) > $OUT/call3-test.log 2>&1; echo "test rc=$?"
grep -E "FAIL|rel err [0-9.e-]+ >|^real" $OUT/call3-test.log | tail -5; grep -c "rel err" $OUT/call3-test.log
for bin in $A $B $A $B; do
  echo "== $bin" >> $OUT/call3-ab.log
  NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_WIDE=0 NIBBLE_MOE_WG_WIDE=2" timeout 100 $bin/nibble bench-moe --tokens 1000,1024,2048,4096,8192 --iters 20 >> $OUT/call3-ab.log 2>&1
done
for bin in $A $B; do
  echo "== $bin zipf" >> $OUT/call3-ab.log
  NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_WIDE=0 NIBBLE_MOE_WG_WIDE=2" timeout 60 $bin/nibble bench-moe --tokens 2048 --iters 20 --routing zipf >> $OUT/call3-ab.log 2>&1
done
grep -E "^==|^ +[0-9]" $OUT/call3-ab.log
timeout 100 $B/nibble bench-moe --tokens 1,2,10,64,256,1024,2048 --iters 30 > $OUT/call3-row.log 2>&1; echo "row rc=$?"
grep -E "^ +[0-9]|ceilings" $OUT/call3-row.log
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section SourceCounters --section Occupancy"
for c in "wide8192 NIBBLE_MOE_WG_WIDE=2 8192" "lean1000 NIBBLE_MOE_WG_WIDE=0 1000"; do
  set -- $c
  env $2 timeout 100 $NCU --clock-control none -k "regex:moe_wg_kernel" -s 2 -c 1 $SEC -o $OUT/$1 -f $B/nibble bench-moe --tokens $3 --iters 20 > $OUT/$1-run.log 2>&1
  $NCU --import $OUT/$1.ncu-rep --page details > $OUT/$1-details.txt 2>&1
  $NCU --import $OUT/$1.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -6 > $OUT/$1-sass.csv.xz
  grep -E "Duration|Issue Slots Busy|highest-utilized" $OUT/$1-details.txt | head -4
done
cd $OUT && tar -cJf ncu-call3.tar.xz *-details.txt *-run.log *-sass.csv.xz && rm -f *-details.txt *-run.log *-sass.csv.xz *.ncu-rep && ls
