#!/usr/bin/env bash
# Every GPU check of the CUDA backend and the MoE kernels in one GPU-machine call (the `run`
# tool), plus issue 9's per-op step profile. The binaries travel as one archive (the carry
# limit is 64 MiB; the CUDA test binaries are ~35 MB each, ~6 MB packed together):
#   here:  cmake -S . -B build-lead -DCMAKE_BUILD_TYPE=Release -DNIBBLE_CUDA_ARCHS=90a
#          cmake --build build-lead -j2
#          scripts/device-verify.sh pack            (writes .devbin.tar.xz, git-ignored)
#   there: run(command="scripts/device-verify.sh", carry=[".devbin.tar.xz", ".devlibs-cuda"])
# STEPS (default "tests golden tiny profile"):
#   tests    every CUDA test binary (exit 77 = no GPU counts as a failure here)
#   golden   tests/cuda_ops/cuda_golden_check.py: fixtures vs HF through score --backend cuda
#   tiny     synthetic:glm5-tiny greedy ids, cpu vs cuda
#   profile  scripts/device-profile.sh (bench-offline --profile-ops on the 8-layer GLM-5 slice)
# Logs go to $OUT (tests.log, golden.log, profile.*), a summary to stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build-lead}
# every ctest labelled gpu that is a binary of its own (cuda_golden is the golden step; the
# MLA timing binary is a timing, not a check), found when packing; the list travels as a file
SKIP=" cuda_golden test_cuda_vs_cpu_mla_timing "
if [ "${1:-}" = pack ]; then
  grep -qx '/.devbin.tar.xz' .git/info/exclude 2>/dev/null || echo '/.devbin.tar.xz' >>.git/info/exclude
  TESTS=$(cd "$B" && ctest -N -L gpu | sed -n 's/^ *Test *#[0-9]*: //p' | while read -r t; do
    case "$SKIP" in *" $t "*) ;; *) echo "$t" ;; esac; done | tr '\n' ' ')
  echo "$TESTS" >"$B/gpu-tests.txt"
  files="$B/nibble $B/gpu-tests.txt"
  for t in $TESTS; do files="$files $B/tests/$t"; done
  # one xz stream with a dictionary larger than a binary: the test binaries share most of their
  # bytes (the same CUDA kernels): preset 1 with a 256 MiB dictionary packs all eleven into ~32 MB
  # in ~25 s on 2 cores (preset 6 with 384 MiB: ~14 MB in ~7 min)
  # shellcheck disable=SC2086 # a list of paths
  tar -cf - $files | xz -T2 --lzma2=preset=1,dict=256MiB -c >.devbin.tar.xz
  du -h .devbin.tar.xz
  exit 0
fi
[ -f .devbin.tar.xz ] && tar -xJf .devbin.tar.xz
TESTS=$(cat "$B/gpu-tests.txt")
OUT=${OUT:-/tmp/verify-out}
mkdir -p "$OUT"
LIBS="$PWD/.devlibs-cuda"
wrap="$OUT/nibble"
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LIBS" "$PWD/$B/nibble" >"$wrap"
chmod +x "$wrap"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
rc=0
for s in ${STEPS:-tests golden tiny profile}; do
  t0=$(date +%s)
  case $s in
    tests)
      for t in $TESTS; do
        LD_LIBRARY_PATH="$LIBS" timeout "${TEST_TIMEOUT:-150}" "$B/tests/$t" >"$OUT/$t.log" 2>&1
        e=$?
        [ $e = 0 ] || rc=1
        echo "$t: exit $e ($(grep -ciE 'fail' "$OUT/$t.log") lines mention FAIL)"
        [ $e = 0 ] || grep -iE "fail|error" "$OUT/$t.log" | head -8
      done ;;
    golden)
      NIBBLE_BIN=$wrap timeout 400 python3 tests/cuda_ops/cuda_golden_check.py >"$OUT/golden.log" 2>&1 || rc=1
      tail -16 "$OUT/golden.log" ;;
    tiny)
      for b in cpu cuda; do
        timeout 120 "$wrap" generate --model synthetic:glm5-tiny --ids 1,2,3,4,5,6,7,8 --max-tokens 24 \
          --temperature 0 --ignore-eos --print-ids --backend $b 2>"$OUT/tiny_$b.err" | tail -1 >"$OUT/tiny_$b.ids"
      done
      if cmp -s "$OUT/tiny_cpu.ids" "$OUT/tiny_cuda.ids"; then echo "glm5-tiny greedy: cpu == cuda"
      else echo "glm5-tiny greedy differs"; tail -3 "$OUT/tiny_cuda.err"; rc=1; fi ;;
    profile)
      OUT=$OUT BUILD=$B scripts/device-profile.sh || rc=1 ;;
  esac
  echo "[$s: $(($(date +%s) - t0)) s]"
done
exit $rc
