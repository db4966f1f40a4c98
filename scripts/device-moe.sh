#!/usr/bin/env bash
# Everything the MoE kernels need from one GPU-machine call (the `run` tool), logs to $OUT:
#   1. the GPU tests (tests/cuda_moe, and ctest -L gpu when a CMake tree is carried)
#   2. nibble bench-moe (uniform, then zipf routing), nibble bench-gemm
#   3. PyTorch's grouped BF16 MoE on the same GPU (bench/moe_torch.py)
# Build here first, either
#   cmake -S . -B build-moe -DCMAKE_BUILD_TYPE=Release && cmake --build build-moe -j2 \
#     --target nibble test_cuda_moe && scripts/device-libs.sh
#   carry: build-moe/nibble build-moe/tests/test_cuda_moe build-moe/tests/cuda_moe .devlibs.tar.xz
# or, when the whole tree does not build, scripts/moe-standalone-build.sh [DIR] (carry
# DIR, default build-moe/standalone: no Debian libraries needed; MOE_BIN=DIR here). Then:
#   run: STEPS="test bench gemm torch" bash scripts/device-moe.sh
# A/B switches read by the kernels: NIBBLE_MOE_KERNEL=stream|mma|wgmma, NIBBLE_MOE_KSPLIT,
# NIBBLE_MOE_WG_A=smem (wgmma reading the expanded weights from shared memory).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/moe-out}
mkdir -p "$OUT"
STEPS=${STEPS:-test bench gemm torch}
TOKENS=${TOKENS:-1,2,10,64,256,1024,2048}
[ -f .devlibs.tar.xz ] && [ ! -d .devlibs ] && tar -xJf .devlibs.tar.xz
export LD_LIBRARY_PATH="$PWD/.devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# CTest files name absolute paths of the machine that configured them (/work/main here).
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
BIN=${MOE_BIN:-build-moe/standalone}
[ -z "${MOE_BIN:-}" ] && [ -x build-moe/nibble ] && build-moe/nibble version >/dev/null 2>&1 && BIN=build-moe
echo "binaries: $BIN" | tee "$OUT/binaries.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv | tee "$OUT/gpu.txt"
rc=0
for s in $STEPS; do
  case $s in
    test)
      if [ -x build-moe/tests/test_cuda_moe ] && [ -f build-moe/tests/cuda_moe/CTestTestfile.cmake ]; then
        (cd build-moe/tests/cuda_moe && timeout 400 ctest -L gpu --output-on-failure -V) 2>&1 | tee "$OUT/test_cuda_moe.log" || rc=1
      else
        timeout 300 "$BIN/test_cuda_moe" 2>&1 | tee "$OUT/test_cuda_moe.log" || rc=1
      fi ;;
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
