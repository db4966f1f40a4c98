#!/usr/bin/env bash
# Everything the MoE kernels need from one GPU-machine call (the `run` tool), logs to $OUT:
#   1. the GPU tests (tests/cuda_moe, and ctest -L gpu when a CMake tree is carried)
#   2. nibble bench-moe (uniform, then zipf routing), nibble bench-gemm
#   3. PyTorch's grouped BF16 MoE on the same GPU (bench/moe_torch.py)
# Build here first (scripts/moe-standalone-build.sh, or cmake into build-moe and
# scripts/device-libs.sh), then carry build-moe/standalone (and .devlibs) with the call:
#   run: STEPS="test bench gemm torch" scripts/device-moe.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/moe-out}
mkdir -p "$OUT"
STEPS=${STEPS:-test bench gemm torch}
TOKENS=${TOKENS:-1,2,10,64,256,1024,2048}
export LD_LIBRARY_PATH="$PWD/.devlibs:${LD_LIBRARY_PATH:-}"
BIN=build-moe/standalone
[ -x build-moe/nibble ] && BIN=build-moe
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv | tee "$OUT/gpu.txt"
rc=0
for s in $STEPS; do
  case $s in
    test)
      if [ -x build-moe/tests/test_cuda_moe ]; then T=build-moe/tests/test_cuda_moe; else T=$BIN/test_cuda_moe; fi
      timeout 300 "$T" 2>&1 | tee "$OUT/test_cuda_moe.log" || rc=1 ;;
    bench)
      timeout 300 "$BIN/nibble" bench-moe --tokens "$TOKENS" --json "$OUT/bench_moe_uniform.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_moe.log" || rc=1
      [ -n "${ZIPF-1}" ] && { timeout 200 "$BIN/nibble" bench-moe --tokens "$TOKENS" --routing zipf --json "$OUT/bench_moe_zipf.json" ${BENCH_ARGS:-} 2>&1 | tee -a "$OUT/bench_moe.log" || rc=1; } ;;
    gemm)
      timeout 200 "$BIN/nibble" bench-gemm --json "$OUT/bench_gemm.json" 2>&1 | tee "$OUT/bench_gemm.log" || rc=1 ;;
    torch)
      PYTHONUNBUFFERED=1 timeout 300 python3 bench/moe_torch.py --tokens "$TOKENS" --json "$OUT/torch_moe.json" 2>&1 | tee "$OUT/torch_moe.log" || rc=1 ;;
  esac
done
exit $rc
