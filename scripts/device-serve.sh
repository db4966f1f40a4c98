#!/usr/bin/env bash
# One GPU-machine call (the `run` tool) for the serving path on the CUDA backend:
#   the cuBLASLt GEMM test and the MoE kernel test as built by CMake, then `make run`'s job
#   (scripts/run.sh: nibble serve --backend cuda + nibble bench with NVML telemetry).
# Build here first (cmake -S . -B build-cuda -DNIBBLE_CUDA_ARCHS=90a; cmake --build build-cuda),
# gather the Debian libraries (scripts/device-libs.sh build-cuda/nibble, then move .devlibs to
# .devlibs-cuda), and carry build-cuda/nibble, build-cuda/tests/test_gemm_lt,
# build-cuda/tests/test_cuda_moe and .devlibs-cuda. Logs and the report go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/serve-out}
mkdir -p "$OUT"
B=${BUILD:-build-cuda}
# Our Debian libraries only for our binaries: the machine's own curl breaks on our libcurl.
LIBS="$PWD/.devlibs-cuda"
wrap="$OUT/nibble"
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LIBS" "$PWD/$B/nibble" >"$wrap"
chmod +x "$wrap"
nvidia-smi --query-gpu=name,driver_version,power.draw,power.limit,clocks.sm --format=csv | tee "$OUT/gpu.txt"
for t in test_gemm_lt test_cuda_moe; do
  LD_LIBRARY_PATH="$LIBS" timeout 120 "$B/tests/$t" >"$OUT/$t.log" 2>&1
  echo "$t: exit $?"; grep -E "rel err|FAIL|passed" "$OUT/$t.log" | tail -12
done
NIBBLE_BIN=$wrap RUN_DIR=$OUT/run timeout ${RUN_TIMEOUT:-240} scripts/run.sh 2>&1 | tee "$OUT/run.log" | grep -vE "^\s*$" | tail -60
