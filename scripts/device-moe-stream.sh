#!/usr/bin/env bash
# The stream MoE kernel's A/B runs (issue 8: 1, 2 and 256 tokens) in one GPU-machine call (the
# `run` tool): its GPU tests, then `nibble bench-moe` for the first sessions' kernel
# (NIBBLE_MOE_STREAM=v1) and the variants in $VARIANTS side by side in the same binary, then
# the in-model decode step (bench-offline, graphs, batch 1 and 10) for v1 and the default.
#   here:  cmake --build build-E -j2 --target nibble test_cuda_moe
#          scripts/device-moe-stream.sh pack          (writes build-E/dev/bin.tar.xz)
#   there: run(command="scripts/device-moe-stream.sh", carry=["build-E/dev", ".devlibs-cuda"])
# STEPS (default "test bench offline"); VARIANTS: ';'-separated lists of NAME=VALUE settings,
# "-" for the default. Logs go to $OUT, one file per step.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build-E}
if [ "${1:-}" = pack ]; then
  mkdir -p "$B/dev"
  tar -cJf "$B/dev/bin.tar.xz" "$B/nibble" "$B/tests/test_cuda_moe"
  du -h "$B/dev/bin.tar.xz"
  exit 0
fi
[ -f "$B/dev/bin.tar.xz" ] && tar -xJf "$B/dev/bin.tar.xz"
OUT=${OUT:-/tmp/moe-stream-out}
mkdir -p "$OUT"
L=(env "LD_LIBRARY_PATH=$PWD/.devlibs-cuda")
TOKENS=${TOKENS:-1,2,10,64,256}
VARIANTS=${VARIANTS:-"NIBBLE_MOE_STREAM=v1;-"}
MODEL=${MODEL:-synthetic:glm5:num_hidden_layers=8,experts=nvfp4}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
rc=0
for s in ${STEPS:-test bench offline}; do
  t0=$(date +%s)
  case $s in
    test)
      for f in ${TEST_FILTERS:-moe_stream moe_small moe_glm5}; do
        "${L[@]}" timeout ${TEST_TIMEOUT:-40} "$B/tests/test_cuda_moe" "$f" >>"$OUT/test.log" 2>&1 || { echo "test $f FAILED"; rc=1; }
      done
      grep -E "rel err|FAIL|tests:" "$OUT/test.log" | awk '{print}' | grep -E "FAIL|tests:|stream" | tail -60 ;;
    bench)
      IFS=';' read -ra vs <<<"$VARIANTS"
      for v in "${vs[@]}"; do
        envs=(); [ "$v" != "-" ] && read -ra envs <<<"${v//,/ }"
        echo "== variant: $v" | tee -a "$OUT/bench.log"
        "${L[@]}" "${envs[@]}" timeout ${BENCH_TIMEOUT:-30} "$B/nibble" bench-moe --tokens "$TOKENS" ${BENCH_ARGS:-} >>"$OUT/bench.log" 2>&1 || rc=1
        grep -E "^ +[0-9]+ +stream|^ +[0-9]+ +(mma|wgmma)" "$OUT/bench.log" | tail -n "$(echo "$TOKENS" | tr ',' '\n' | wc -l)"
      done ;;
    offline)
      for v in ${OFFLINE_VARIANTS:-NIBBLE_MOE_STREAM=v1 -}; do
        envs=(); [ "$v" != "-" ] && envs=("$v")
        echo "== offline variant: $v" | tee -a "$OUT/offline.log"
        "${L[@]}" "${envs[@]}" timeout ${OFFLINE_TIMEOUT:-40} "$B/nibble" bench-offline --backend cuda --model "$MODEL" \
          --num-prompts 1,10 --input-len 128 --output-len ${OUTPUT_LEN:-32} >>"$OUT/offline.log" 2>&1 || rc=1
        grep -E "^bench-offline: .*prompts|Decode-only step time|Decode step time / floor" "$OUT/offline.log" | tail -6
      done ;;
    profile)
      "${L[@]}" timeout 60 "$B/nibble" bench-offline --backend cuda --model "$MODEL" --num-prompts 1,10 \
        --input-len 128 --output-len 16 --profile-ops 4 >"$OUT/profile.log" 2>&1 || rc=1
      grep -iE "moe|expert" "$OUT/profile.log" | head -20 ;;
  esac
  echo "== $s: $(($(date +%s) - t0)) s"
done
exit $rc
