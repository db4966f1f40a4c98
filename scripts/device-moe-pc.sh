#!/usr/bin/env bash
# One GPU-machine call (the `run` tool) for the producer/consumer wgmma MoE kernel
# (ops/cuda/moe_wgpc.cu, issue 8, fourth session): its GPU tests, then nibble bench-moe with
# every variant timed in the same process on the same weights and routings
# (NIBBLE_BENCH_MOE_VARIANTS, tools/lab/moe_bench.cu). Logs to $OUT.
# Build here first (dependency-free binaries, only the CUDA toolkit's libraries):
#   scripts/moe-standalone-build.sh build-W4/standalone
#   run: bash scripts/device-moe-pc.sh   carry: build-W4/standalone
# TESTS lists test_cuda_moe cases run before the bench, TESTS_AFTER those after it (the other
# kernels' regression checks, cut first if time runs out); VARIANTS the bench variants
# (space-separated, each NAME=VALUE[,NAME=VALUE]); TOKENS the token points. With OFFLINE_BIN
# (a full `nibble`, needs .devlibs-cuda carried too) and when the bench's second variant beat
# its first at 1000 tokens: bench-offline at 1000 requests under both (decode step p50).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/moe-pc-out}
mkdir -p "$OUT"
B=${MOE_BIN:-build-W4/standalone}
TESTS=${TESTS:-moe_wgpc}
TESTS_AFTER=${TESTS_AFTER:-moe_small moe_glm5_shape}
TOKENS=${TOKENS:-256,512,1000,1024,2048}
VARIANTS=${VARIANTS:-NIBBLE_MOE_WG=rs NIBBLE_MOE_WG=pc}
ITERS=${ITERS:-20}
L="env LD_LIBRARY_PATH=/usr/local/cuda/lib64"
t0=$(date +%s.%N)
stamp() { echo "[$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s] $*" | tee -a "$OUT/times.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
tests() {
  for t in "$@"; do
    stamp "test $t"
    timeout ${TEST_TIMEOUT:-30} $L "$B/test_cuda_moe" "$t" >>"$OUT/test.log" 2>&1 || { rc=1; echo "FAILED: $t"; }
  done
  grep -E "FAIL|tests:|error|variant" "$OUT/test.log" | tail -30
  awk '/rel err/{n++; v=$0; sub(/.*rel err /,"",v); sub(/ .*/,"",v); if (v+0>m) m=v+0} END{print n " cases, max rel err " m}' "$OUT/test.log"
}
tests $TESTS
stamp "bench"
NIBBLE_BENCH_MOE_VARIANTS="$VARIANTS" timeout ${BENCH_TIMEOUT:-45} $L "$B/nibble" bench-moe --tokens "$TOKENS" \
  --iters "$ITERS" --json "$OUT/bench.json" >"$OUT/bench.log" 2>&1 || rc=1
cat "$OUT/bench.log"
if [ -n "${OFFLINE_BIN:-}" ]; then
  case $OFFLINE_BIN in  # carried xz-compressed (the carry limit)
    *.xz) xz -dc "$OFFLINE_BIN" >/tmp/nibble-offline && chmod +x /tmp/nibble-offline && OFFLINE_BIN=/tmp/nibble-offline ;;
  esac
  a=${VARIANTS%% *}; rest=${VARIANTS#* }; b=${rest%% *}
  win=$(awk -v a="$a" -v b="$b" '$1 == 1000 && $NF == a {ta = $3} $1 == 1000 && $NF == b {tb = $3}
        END {print (ta > 0 && tb > 0 && tb < ta) ? 1 : 0}' "$OUT/bench.log")
  if [ "$win" = 1 ]; then
    for v in "$a" "$b"; do
      stamp "offline $v"
      echo "== offline $v" >>"$OUT/offline.log"
      env LD_LIBRARY_PATH=$PWD/.devlibs-cuda ${v//,/ } timeout ${OFFLINE_TIMEOUT:-30} "$OFFLINE_BIN" bench-offline \
        --backend cuda --model "${MODEL:-synthetic:glm5:num_hidden_layers=8,experts=nvfp4}" --num-prompts 1000 \
        --input-len ${INPUT_LEN:-64} --output-len ${OUTPUT_LEN:-16} --max-running-requests 1000 >>"$OUT/offline.log" 2>&1 || rc=1
      grep -E "^== |prompts|Decode-only step time|Decode step time / floor" "$OUT/offline.log" | tail -4
    done
  else
    echo "offline skipped: $b did not beat $a at 1000 tokens"
  fi
fi
tests $TESTS_AFTER
stamp "end rc=$rc"
exit $rc
