#!/usr/bin/env bash
# Build (and with `run`, run) the Hopper probe, bench/lab/hopper_probe.cu: streaming-read
# bandwidth schemes and wgmma per-instruction cost at small N. See bench/lab/README.md.
#   bash bench/lab/hopper_probe.sh            build build-probe/hopper_probe (always)
#   bash bench/lab/hopper_probe.sh run [1|2]  run it (both parts, or one), building first
#                                             only if it is missing (or PROBE_REBUILD=1)
# PROBE_PTXAS_V=1 adds -Xptxas -v (registers, spills, wgmma serialization warnings).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=build-probe/hopper_probe
build() {
  local nvcc=nvcc extra=()
  command -v nvcc >/dev/null || nvcc=/usr/local/cuda/bin/nvcc
  [[ ${PROBE_PTXAS_V:-0} == 1 ]] && extra=(-Xptxas -v)
  mkdir -p build-probe
  "$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Iinclude -Isrc "${extra[@]}" -o "$BIN" bench/lab/hopper_probe.cu
  echo "built $BIN"
}
if [[ ${1:-} != run ]]; then
  build
  exit 0
fi
shift
[[ -x $BIN && ${PROBE_REBUILD:-0} != 1 ]] || build
exec "$BIN" "$@"
