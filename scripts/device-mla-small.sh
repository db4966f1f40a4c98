#!/usr/bin/env bash
# Issue 9, fourth session (engineer S): the MLA small path's launch modes and the one-launch
# key side of an MLA layer (norm_rope_set_n), checked and timed in one GPU-machine call.
# Here: build nibble, test_cuda_mla_small, test_cuda_small_ops and test_cuda_vs_cpu in your
# build folder, pack them and run:
#   mkdir -p build-S4/dev && cp build-S4/nibble build-S4/tests/test_cuda_mla_small \
#     build-S4/tests/test_cuda_small_ops build-S4/tests/test_cuda_vs_cpu build-S4/dev/ &&
#   tar -cJf build-S4/dev.tar.xz -C build-S4/dev .
#   run(command="DEV=build-S4/dev scripts/device-mla-small.sh", carry=["build-S4/dev.tar.xz", ".devlibs-cuda"])
# Steps (each under its own timeout), logs under $OUT:
#   mla      test_cuda_mla_small --bench at context MLA_CTX (192) and MLA_BATCHES (1,2,4,10,16)
#   small    test_cuda_small_ops norm_rope_set (and the launch floor) --bench
#   vscpu    test_cuda_vs_cpu for each name of VS_TESTS (default "mla rope norm set_rows")
#   bench    bench-offline on the 8-layer GLM-5 slice, levels BENCH_LEVELS (1,2,10), input 128,
#            output BENCH_OUT (48), graphs on, once per entry of BENCH_ENVS (VAR=value[,...] or
#            default), all in one log; PROFILE=1 adds --profile-ops 4
#   golden   GOLDEN=1: tests/cuda_ops/cuda_golden_check.py; TINY=1: glm5-tiny greedy cpu == cuda
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mla-small-out}
D=${DEV:-build-S4/dev}
mkdir -p "$OUT"
if [ -f "$D.tar.xz" ]; then mkdir -p "$D" && tar -xJf "$D.tar.xz" -C "$D"; fi
L=$PWD/.devlibs-cuda
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
if [ "${MLA:-1}" = 1 ]; then
  env LD_LIBRARY_PATH="$L" timeout "${MLA_S:-60}" $D/test_cuda_mla_small --bench "${MLA_CTX:-192}" \
    "${MLA_BATCHES:-1,2,4,10,16}" >"$OUT/mla_small.log" 2>&1 || rc=1
  echo "== test_cuda_mla_small"; grep -E "BENCH|FAIL|ok$|FAILED" "$OUT/mla_small.log" | cut -c1-150
fi
if [ "${SMALL:-1}" = 1 ]; then
  for t in launch_floor norm_rope_set; do
    env LD_LIBRARY_PATH="$L" timeout 30 $D/test_cuda_small_ops $t --bench >>"$OUT/small_ops.log" 2>&1 || rc=1
  done
  echo "== test_cuda_small_ops"; grep -E "BENCH|rel err|differ|FAIL|passed|failed" "$OUT/small_ops.log" | cut -c1-150
fi
for t in ${VS_TESTS:-mla rope norm set_rows}; do
  echo "## $t" >>"$OUT/vscpu.log"
  env LD_LIBRARY_PATH="$L" timeout "${VS_S:-40}" $D/test_cuda_vs_cpu $t >>"$OUT/vscpu.log" 2>&1 || rc=1
done
echo "== test_cuda_vs_cpu"; grep -E "FAIL|passed|failed" "$OUT/vscpu.log" | cut -c1-150
grep -c "rel err" "$OUT/vscpu.log"
if [ -n "${BENCH_ENVS:-}" ]; then
  prof=""; [ "${PROFILE:-0}" = 1 ] && prof="--profile-ops 4"
  for s in $BENCH_ENVS; do
    # shellcheck disable=SC2046 # an entry is VAR=value[,VAR=value...]
    if [ "$s" = default ]; then set -- env; else set -- env $(echo "$s" | tr ',' ' '); fi
    echo "######## $s" >>"$OUT/bench.log"
    # shellcheck disable=SC2086
    "$@" LD_LIBRARY_PATH="$L" timeout "${BENCH_S:-40}" $D/nibble bench-offline --backend cuda \
      --model synthetic:glm5:num_hidden_layers=8,experts=nvfp4 --num-prompts "${BENCH_LEVELS:-1,2,10}" \
      --input-len 128 --output-len "${BENCH_OUT:-48}" --warmup 1 $prof >>"$OUT/bench.log" 2>&1 || rc=1
    echo "== bench-offline, $s"
    awk -v s="$s" '/^######## /{on=($2==s)} on' "$OUT/bench.log" |
      grep -E "Decode-only step|time / floor|mla_attention|norm_rope|rope_n|norm_n|set_rows|step wall" | cut -c1-150
  done
fi
if [ "${GOLDEN:-0}" = 1 ]; then
  env LD_LIBRARY_PATH="$L" NIBBLE_BIN=$D/nibble PYTHONUNBUFFERED=1 timeout "${GOLDEN_S:-120}" \
    python3 tests/cuda_ops/cuda_golden_check.py >"$OUT/golden.log" 2>&1 || rc=1
  echo "== golden"; tail -n 15 "$OUT/golden.log" | cut -c1-150
fi
if [ "${TINY:-0}" = 1 ]; then
  for b in cpu cuda; do
    env LD_LIBRARY_PATH="$L" timeout 60 $D/nibble generate --model synthetic:glm5-tiny --ids 1,2,3,4,5,6,7,8 \
      --max-tokens 24 --temperature 0 --ignore-eos --print-ids --backend $b 2>"$OUT/tiny_$b.err" | tail -1 >"$OUT/tiny_$b.ids"
  done
  if cmp -s "$OUT/tiny_cpu.ids" "$OUT/tiny_cuda.ids"; then echo "glm5-tiny greedy: cpu == cuda"
  else echo "glm5-tiny greedy differs"; tail -3 "$OUT/tiny_cuda.err"; rc=1; fi
fi
echo "rc=$rc"
exit $rc
