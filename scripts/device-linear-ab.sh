#!/usr/bin/env bash
# The BF16 decode linears' GPU call (issue 9, fourth session, engineer L): the linear/MLP op
# checks, `nibble bench-linear --ab` (old kernels vs each new variant, same process) and
# bench-offline at 1, 2, 10 requests with the defaults and with each switch of the round.
#   here:  cmake --build build-L4 -j2 --target nibble test_cuda_linear test_cuda_vs_cpu
#          scripts/device-linear-ab.sh pack        (build-L4/dev/bin.tar.xz, git-ignored)
#   there: run(command="scripts/device-linear-ab.sh", carry=["build-L4/dev", ".devlibs-cuda"])
# PARTS (default "tests bench ab"): tests = test_cuda_linear (all cases) and the other cases
# of test_cuda_vs_cpu; golden = the fixtures through score --backend cuda; bench = bench-linear
# --ab; ab = bench-offline per setting of AB (";"-separated lists of VAR=value); GOLDEN_ENV:
# VAR=value settings for the golden part.
# Logs go to $OUT, a summary to stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build-L4}
if [ "${1:-}" = pack ]; then
  mkdir -p "$B/dev"
  tar -cJf "$B/dev/bin.tar.xz" "$B/nibble" "$B/tests/test_cuda_linear" "$B/tests/test_cuda_vs_cpu"
  du -h "$B/dev/bin.tar.xz"
  exit 0
fi
tar -xJf "$B/dev/bin.tar.xz"
OUT=${OUT:-/tmp/linear-out}
mkdir -p "$OUT"
LIBS="$PWD/.devlibs-cuda"
wrap="$OUT/nibble.sh"
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LIBS" "$PWD/$B/nibble" >"$wrap"
chmod +x "$wrap"
MODEL=${MODEL:-synthetic:glm5:num_hidden_layers=8,experts=nvfp4}
SUM="$OUT/summary.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader | tee "$SUM"
rc=0
for p in ${PARTS:-tests bench ab}; do
  t0=$(date +%s)
  case $p in
    tests)
      LD_LIBRARY_PATH="$LIBS" timeout 120 "$B/tests/test_cuda_linear" ${LINEAR_CASES:-} >"$OUT/test_cuda_linear.log" 2>&1
      e=$?; [ $e = 0 ] || rc=1
      echo "test_cuda_linear: exit $e" | tee -a "$SUM"
      grep -E "FAIL|fail" "$OUT/test_cuda_linear.log" | head -20 | tee -a "$SUM"
      tail -2 "$OUT/test_cuda_linear.log" | tee -a "$SUM"
      if [ -n "${VSCPU:-1}" ]; then
        LD_LIBRARY_PATH="$LIBS" timeout 120 "$B/tests/test_cuda_vs_cpu" >"$OUT/test_cuda_vs_cpu.log" 2>&1
        e=$?; [ $e = 0 ] || rc=1
        echo "test_cuda_vs_cpu: exit $e; $(tail -1 "$OUT/test_cuda_vs_cpu.log")" | tee -a "$SUM"
      fi ;;
    golden)
      # shellcheck disable=SC2086 # GOLDEN_ENV: a list of VAR=value assignments
      env ${GOLDEN_ENV:-} NIBBLE_BIN=$wrap timeout 200 python3 tests/cuda_ops/cuda_golden_check.py >"$OUT/golden.log" 2>&1 || rc=1
      tail -12 "$OUT/golden.log" | tee -a "$SUM" ;;
    bench)
      timeout "${BENCH_TIMEOUT:-120}" "$wrap" bench-linear --ab --format bf16 --lt-tokens none \
        --tokens "${TOKENS:-1,2,4,10,16}" ${BENCH_ARGS:-} >"$OUT/bench-linear.log" 2>&1 || rc=1
      tail -3 "$OUT/bench-linear.log" | tee -a "$SUM" ;;
    ab)
      IFS=';' read -ra settings <<<"${AB:-}"
      for s in "" "${settings[@]}"; do
        echo "=== setting: ${s:-default}" >>"$OUT/ab.log"
        # shellcheck disable=SC2086 # a list of VAR=value assignments
        env $s timeout 60 "$wrap" bench-offline --backend cuda --model "$MODEL" --num-prompts 1,2,10 \
          --input-len 128 --output-len 64 >>"$OUT/ab.log" 2>&1 || rc=1
        grep -E "^[0-9]+ +[0-9.]+ " "$OUT/ab.log" | tail -3 | sed "s/^/${s:-default}: /" | tee -a "$SUM"
      done ;;
  esac
  echo "== part $p: $(( $(date +%s) - t0 )) s (rc so far $rc)" | tee -a "$SUM"
done
exit $rc
