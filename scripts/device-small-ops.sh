#!/usr/bin/env bash
# Issue 9 (engineer C), the small ops of a decode step, in one GPU-machine call (the `run`
# tool): their checks against the CPU ops and their before/after timings side by side
# ("before" = NIBBLE_CUDA_SMALL_OPS=legacy, the kernels of before in the same binary).
#   here:  cmake -S . -B build-C -DCMAKE_BUILD_TYPE=Release -DNIBBLE_CUDA_ARCHS=90a
#          cmake --build build-C -j2 --target nibble test_cuda_small_ops test_cuda_vs_cpu test_cuda_graph
#          scripts/device-small-ops.sh pack          (writes build-C/dev.tar.xz, git-ignored)
#   there: run(command="scripts/device-small-ops.sh", carry=["build-C/dev.tar.xz", ".devlibs-cuda"])
# STEPS (default "small vs graph bench golden"):
#   small   test_cuda_small_ops --bench: GLM-5 shapes vs CPU, then per-launch graph times
#   vs      test_cuda_vs_cpu's cases of these ops (embedding norms rows rope norm_n set_rows moe_route)
#   graph   test_cuda_graph (graph replay == eager, bitwise), with and without PDL
#   bench   bench-offline on the 8-layer GLM-5 slice at 1 and 10 requests, VARIANTS (default
#           "legacy nopdl new": the old kernels, the new ones launched plainly, the new ones with
#           programmatic dependent launch): graph-mode decode step p50, then the eager per-op
#           profile (--profile-ops)
#   golden  tests/cuda_ops/cuda_golden_check.py with what is left of DEADLINE
# Logs in $OUT; a summary on stdout. DEADLINE (s, default 84) bounds the whole call.
set -uo pipefail
cd "$(dirname "$0")/.."
B=build-C
if [ "${1:-}" = pack ]; then
  rm -rf $B/dev && mkdir -p $B/dev
  cp $B/nibble $B/tests/test_cuda_small_ops $B/tests/test_cuda_vs_cpu $B/tests/test_cuda_graph $B/dev/
  tar -cJf $B/dev.tar.xz -C $B dev
  du -h $B/dev.tar.xz
  exit 0
fi
T0=$(date +%s)
left() { echo $((${DEADLINE:-84} - ($(date +%s) - T0))); }
tar -xJf $B/dev.tar.xz -C $B
D=$B/dev
OUT=${OUT:-/tmp/small-out}
mkdir -p "$OUT"
LIBS="$PWD/.devlibs-cuda"
wrap=/tmp/small-nibble
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LIBS" "$PWD/$D/nibble" >"$wrap"
chmod +x "$wrap"
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
MODEL=${MODEL:-synthetic:glm5:num_hidden_layers=8,experts=nvfp4}
rc=0
for s in ${STEPS:-small vs graph bench golden}; do
  t0=$(date +%s)
  case $s in
    small)
      LD_LIBRARY_PATH="$LIBS" timeout 40 $D/test_cuda_small_ops --bench >"$OUT/small.log" 2>&1 || rc=1
      grep -E "BENCH|FAIL|tests:" "$OUT/small.log" ;;
    vs)
      for f in embedding norms rows rope norm_n set_rows moe_route; do
        LD_LIBRARY_PATH="$LIBS" timeout 30 $D/test_cuda_vs_cpu $f >>"$OUT/vs.log" 2>&1 || { rc=1; echo "vs $f failed"; }
      done
      grep -E "tests:|FAIL" "$OUT/vs.log" | sort | uniq -c ;;
    graph)
      for pdl in 1 0; do
        NIBBLE_CUDA_PDL=$pdl LD_LIBRARY_PATH="$LIBS" timeout 40 $D/test_cuda_graph >>"$OUT/graph.log" 2>&1 || rc=1
        echo "test_cuda_graph NIBBLE_CUDA_PDL=$pdl: $(grep -E "tests:" "$OUT/graph.log" | tail -1)"
      done
      grep -E "FAIL" "$OUT/graph.log" ;;
    bench)
      for v in ${VARIANTS:-legacy nopdl new}; do
        pdl=1; sm=$v
        [ $v = nopdl ] && { pdl=0; sm=new; }
        NIBBLE_CUDA_SMALL_OPS=$sm NIBBLE_CUDA_PDL=$pdl timeout 40 "$wrap" bench-offline --backend cuda --model "$MODEL" --num-prompts 1,10 \
          --input-len 128 --output-len ${OUTLEN:-48} --profile-ops 4 --ceilings 4252,791 >"$OUT/bench_$v.log" 2>&1 || rc=1
        echo "== $v"
        grep -E "^bench-offline: .*prompts|Decode-only step time|Decode step time / floor|step wall|moe_route|add_rmsnorm|rope_n|norm_n |embedding|mlp.gate|set_rows_n|dsa_select|rmsnorm " "$OUT/bench_$v.log"
      done ;;
    golden)
      l=$(left)
      if [ "$l" -gt 10 ]; then
        NIBBLE_BIN=$wrap timeout "$l" python3 tests/cuda_ops/cuda_golden_check.py >"$OUT/golden.log" 2>&1
        e=$?
        [ $e = 0 ] || rc=1
        echo "golden: exit $e"
        tail -12 "$OUT/golden.log"
      else
        echo "golden: skipped ($l s left)"
      fi ;;
  esac
  echo "[$s: $(($(date +%s) - t0)) s]"
done
exit $rc
