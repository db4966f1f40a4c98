#!/bin/bash
# Twelfth session, call 5: per-item traces (bench/lab/moe-trace.patch on 73879fd, merged by hand:
# .abin/nibble-trace3.xz) of k-group loops 2 and 3 at 1 and 2 tokens, to see why loop 3 (down
# items waiting per act k-group) is slower.
set -u
cp .abin/nibble-trace3.xz .abin/nibble-trace.xz
xz -dkf .abin/nibble-trace.xz; chmod +x .abin/nibble-trace
mkdir -p $OUT/x
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_STREAM_LOOP=2 NIBBLE_MOE_STREAM_LOOP=3" \
  timeout 150 bash bench/lab/moe-trace.sh run $OUT/x/trace --tokens 1,2 --iters 20 > $OUT/x/trace-run.log 2>&1; echo "trace rc=$?"
grep -E "^ +[0-9]" $OUT/x/trace/bench.txt
python3 - $OUT/x/trace/trace.txt <<'PY'
import sys
blocks = open(sys.argv[1]).read().split("\n=== ")
for b in blocks:
    lines = b.splitlines()
    keep = [l for l in lines if not l.startswith("    tile ")]
    print("=== " + "\n".join(keep[:60]) if not b.startswith("===") else "\n".join(keep[:60]))
PY
cd $OUT && tar -cJf x.tar.xz x && rm -rf x
