#!/usr/bin/env bash
# The closing GPU call of a round (the `run` tool): every GPU check, issue 9's benchmark and
# per-op profile, and A/B timings of chosen switches, in one call, since a call costs a
# machine start. Here first:
#   cmake -S . -B build-lead -DCMAKE_BUILD_TYPE=Release -DNIBBLE_CUDA_ARCHS=90a
#   cmake --build build-lead -j2
#   scripts/device-verify.sh pack                (.devbin.tar.xz: nibble + the GPU tests)
# then
#   run(command="scripts/device-final.sh", carry=[".devbin.tar.xz", ".devlibs-cuda"], timeout_s=540)
# Parts (PARTS, default "verify offline ab profile serve"):
#   verify   scripts/device-verify.sh tests golden tiny          -> verify.tar.xz (all logs)
#   offline  scripts/device-issue9.sh offline (1, 2, 10, 1000)   -> offline.log, offline.json
#   ab       bench-offline at 1 and 10 requests with each AB setting (env assignments, ';'
#            between settings; default: the old linear_mma grid, then the old MLA split cap) -> ab.log
#   pipetest test_cuda_vs_cpu's PIPETEST_CASES with PIPETEST_ENV set -> pipetest.log
#   profile  scripts/device-profile.sh (1, 10, 1000)             -> profile.log
#   goldenab the golden fixtures of GOLDEN_FAMILIES (default glm_moe_dsa) with each GOLDEN_AB
#            setting (env assignments, ';' between)                -> goldenab.log
#   serve    scripts/device-issue9.sh serve (serve + bench, NVML) -> bench.log
# summary.txt collects each part's summary lines; at most 8 files come back.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/final-out}
mkdir -p "$OUT"
export BUILD=${BUILD:-build-lead}
[ -f .devbin.tar.xz ] && tar -xJf .devbin.tar.xz
MODEL=${MODEL:-synthetic:glm5:num_hidden_layers=8}
SUM="$OUT/summary.txt"
: >"$SUM"
rc=0
wrap=/tmp/final-nibble
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$PWD/.devlibs-cuda" "$PWD/$BUILD/nibble" >"$wrap"
chmod +x "$wrap"
for p in ${PARTS:-verify offline ab profile serve}; do
  t0=$(date +%s)
  case $p in
    verify)
      mkdir -p /tmp/final-verify
      OUT=/tmp/final-verify STEPS="tests golden tiny" scripts/device-verify.sh >>"$SUM" 2>&1 || rc=1
      tar -cJf "$OUT/verify.tar.xz" -C /tmp final-verify ;;
    offline)
      mkdir -p /tmp/final-i9
      OUT=/tmp/final-i9 MODEL=$MODEL STEPS=offline scripts/device-issue9.sh >>"$SUM" 2>&1 || rc=1
      cp /tmp/final-i9/offline.log /tmp/final-i9/offline.json "$OUT/" ;;
    ab)
      IFS=';' read -ra settings <<<"${AB:-NIBBLE_CUDA_LINEAR_MMA_WAVE=up;NIBBLE_CUDA_MLA_SPLITS=64}"
      for s in "" "${settings[@]}"; do
        echo "=== setting: ${s:-default}" >>"$OUT/ab.log"
        # shellcheck disable=SC2086 # a list of VAR=value assignments
        env $s timeout 120 "$wrap" bench-offline --backend cuda --model "$MODEL" --num-prompts 1,2,10 \
          --input-len 128 --output-len 64 >>"$OUT/ab.log" 2>&1 || rc=1
        grep -E "^[0-9]+ +[0-9.]+ " "$OUT/ab.log" | tail -3 | sed "s/^/${s:-default}: /" >>"$SUM"
      done ;;
    pipetest)
      # the op checks again with the switches of PIPETEST_ENV set (a default-to-be measured in ab)
      # shellcheck disable=SC2086 # a list of VAR=value assignments
      env ${PIPETEST_ENV:-NIBBLE_CUDA_LINEAR_MMA_PIPE=1} LD_LIBRARY_PATH="$PWD/.devlibs-cuda" timeout 120 \
        "$BUILD/tests/test_cuda_vs_cpu" ${PIPETEST_CASES:-linear_mma mlp mlp_fused} >"$OUT/pipetest.log" 2>&1 || rc=1
      tail -2 "$OUT/pipetest.log" >>"$SUM" ;;
    profile)
      mkdir -p /tmp/final-prof
      OUT=/tmp/final-prof MODEL=$MODEL scripts/device-profile.sh >>"$SUM" 2>&1 || rc=1
      cp /tmp/final-prof/profile.log "$OUT/" ;;
    goldenab)
      # the golden fixtures of GOLDEN_FAMILIES once per GOLDEN_AB setting (';' between), to find
      # which switch moves a fixture's error
      IFS=';' read -ra gsettings <<<"${GOLDEN_AB:-NIBBLE_CUDA_BRANCH=0}"
      for s in "" "${gsettings[@]}"; do
        echo "=== setting: ${s:-default}" >>"$OUT/goldenab.log"
        # shellcheck disable=SC2086 # a list of VAR=value assignments
        env $s GOLDEN_FAMILIES="${GOLDEN_FAMILIES:-glm_moe_dsa}" NIBBLE_BIN=$wrap timeout 120 \
          python3 tests/cuda_ops/cuda_golden_check.py >>"$OUT/goldenab.log" 2>&1
        grep -E "score vs HF" "$OUT/goldenab.log" | tail -2 | sed "s/^/${s:-default}: /" >>"$SUM"
      done ;;
    serve)
      mkdir -p /tmp/final-serve
      OUT=/tmp/final-serve MODEL=$MODEL STEPS=serve scripts/device-issue9.sh >>"$SUM" 2>&1 || rc=1
      cp /tmp/final-serve/bench.log "$OUT/" ;;
  esac
  echo "== part $p: $(( $(date +%s) - t0 )) s (rc so far $rc)" | tee -a "$SUM"
done
cat "$SUM" | cut -c1-200
exit $rc
