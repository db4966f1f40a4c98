#!/usr/bin/env bash
# Issue 9's per-op step profile in one GPU-machine call (the `run` tool): nibble bench-offline
# --backend cuda --profile-ops N on an 8-layer GLM-5 slice (NVFP4 experts, generated on the
# GPU) at 1, 10 and 1000 requests, input 128, output 16: per level, where a profiled decode
# step's time goes, op by op (docs/bench.md "Per-op profile"). Logs into $OUT:
#   profile.log   the bench's output (the per-level tables follow each level's summary)
#   profile.json  the same figures (levels[i].profile)
#   summary.txt   the GPU, wall time and exit status
# Build here first (cmake -S . -B build-P -DCMAKE_BUILD_TYPE=Release -DNIBBLE_CUDA_ARCHS=90a;
# cmake --build build-P --target nibble) and carry the binary plus .devlibs-cuda (our Debian
# .so files, scripts/device-libs.sh):
#   run(command="BUILD=build-P scripts/device-profile.sh", carry=["build-P/nibble", ".devlibs-cuda"],
#       timeout_s=150)
# Environment: BUILD (build-P), MODEL, LEVELS (1,10,1000), INPUT (128), OUTPUT (16),
# PROFILE (4 steps per level), TIMEOUT (110 s for the bench), EXTRA (more bench-offline flags).
# Expected: well under 2 minutes (model generation ~1 s, ceilings a few s, the 1000-request
# level's prefill of 128k tokens dominates).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/profile-out}
mkdir -p "$OUT"
B=${BUILD:-build-P}
MODEL=${MODEL:-synthetic:glm5:num_hidden_layers=8}  # NVFP4 experts: glm5's default
LEVELS=${LEVELS:-1,10,1000}
IN=${INPUT:-128}
OUTLEN=${OUTPUT:-16}
N=${PROFILE:-4}
# Our Debian libraries only for our binary: the machine's own curl breaks on our libcurl.
wrap=/tmp/profile-nibble
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$PWD/.devlibs-cuda" "$PWD/$B/nibble" >"$wrap"
chmod +x "$wrap"
SUM="$OUT/summary.txt"
nvidia-smi --query-gpu=name,driver_version,power.draw,clocks.sm,memory.total --format=csv | tee "$SUM"
t0=$(date +%s)
# shellcheck disable=SC2086 # EXTRA is a list of flags
timeout "${TIMEOUT:-110}" "$wrap" bench-offline --backend cuda --model "$MODEL" --num-prompts "$LEVELS" \
  --input-len "$IN" --output-len "$OUTLEN" --profile-ops "$N" --json "$OUT/profile.json" ${EXTRA:-} \
  >"$OUT/profile.log" 2>&1
rc=$?
t1=$(date +%s)
echo "bench-offline --profile-ops $N: exit $rc, $((t1 - t0)) s" | tee -a "$SUM"
# the tables, for a quick look in the call's output tail
grep -A40 "^Per-op profile" "$OUT/profile.log" | cut -c1-112 | head -100
exit $rc
