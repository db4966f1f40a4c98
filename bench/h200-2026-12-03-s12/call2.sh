#!/bin/bash
# Twelfth session, call 2: the 1-token MoE layer's schedule. Call 1's trace showed three losses in
# the small-step kernel's round-robin schedule (setup ~1.9 us, the gate_up -> down hand-off ~4 us at
# half bandwidth, a ~5 us tail). Here, interleaved in one bench-moe process: the dynamic item
# counter (moe_ffn_kernel, NIBBLE_MOE_SMALL=0) against round-robin at several K splits, then the
# per-item trace of the candidates.
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin.tar.xz build-lead/nibble
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
N=build-lead/nibble
mkdir -p $OUT/x
run() {  # name tokens variants
  NIBBLE_BENCH_MOE_VARIANTS="$3" timeout 150 $N bench-moe --tokens $2 --iters 40 > $OUT/x/$1.log 2>&1; echo "$1 rc=$?"
  grep -E "^ +[0-9]|ceilings" $OUT/x/$1.log; echo "[$(($(date +%s) - T0)) s]"
}
S0=NIBBLE_MOE_SMALL=0
run sweep1 "1,2" "NIBBLE_MOE_SMALL= $S0 $S0,NIBBLE_MOE_KSPLIT_GU=4 $S0,NIBBLE_MOE_KSPLIT_GU=4,NIBBLE_MOE_KSPLIT_DN=2 $S0,NIBBLE_MOE_KSPLIT_GU=4,NIBBLE_MOE_KSPLIT_DN=4 $S0,NIBBLE_MOE_KSPLIT_DN=2 $S0,NIBBLE_MOE_KSPLIT_DN=4 NIBBLE_MOE_KSPLIT_GU=4,NIBBLE_MOE_KSPLIT_DN=4"
run sweep2 "1,2,4" "NIBBLE_MOE_SMALL= $S0,NIBBLE_MOE_KSPLIT_GU=4,NIBBLE_MOE_KSPLIT_DN=2 NIBBLE_MOE_SMALL=,NIBBLE_MOE_STREAM_LOOP=1 $S0,NIBBLE_MOE_KSPLIT_GU=4,NIBBLE_MOE_KSPLIT_DN=2,NIBBLE_MOE_BLOCKS=396"
xz -dkf .abin/nibble-trace.xz; chmod +x .abin/nibble-trace
NIBBLE_BENCH_MOE_VARIANTS="$S0,NIBBLE_MOE_KSPLIT_GU=4,NIBBLE_MOE_KSPLIT_DN=2 $S0,NIBBLE_MOE_KSPLIT_GU=4,NIBBLE_MOE_KSPLIT_DN=4 $S0" \
  timeout 150 bash bench/lab/moe-trace.sh run $OUT/x/trace --tokens 1 --iters 20 > $OUT/x/trace-run.log 2>&1; echo "trace rc=$?"
grep -E "^===|kernel span|block setup|block exit|tail|item durations|  gate_up n|  down  |gate_up: first|down: first|down waits" $OUT/x/trace/trace.txt
cd $OUT && tar -cJf x.tar.xz x && rm -rf x && ls -la
echo "[$(($(date +%s) - T0)) s]"
