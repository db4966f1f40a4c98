#!/usr/bin/env bash
# Build the MoE kernels' test and a `nibble` with only the kernel commands (bench-moe,
# bench-gemm, plan-tiles, version) straight with nvcc/gcc, without CMake and without the
# rest of the tree: for the GPU machine when the full tree does not build, and as a
# dependency-free binary (only the CUDA toolkit's libcublasLt).
# moe_router.cu reads the PDL switches of elementwise.cu, whose other functions need the rest
# of the CUDA backend: objects are built with -ffunction-sections and linked with
# --gc-sections, so only what the MoE code reaches is kept.
#   scripts/moe-standalone-build.sh [OUTDIR]     (default build-moe/standalone)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build-moe/standalone}
ARCHS=${NIBBLE_CUDA_ARCHS:-90a}
mkdir -p "$OUT/obj" "$OUT/gen"
GENCODE=""
for a in ${ARCHS//;/ }; do GENCODE+=" -gencode=arch=compute_$a,code=sm_$a"; done
CFLAGS="-std=c11 -O2 -Wall -Wextra -Werror -Wundef -Wshadow -Wno-unused-parameter -D_GNU_SOURCE -DNIBBLE_HAVE_CUDA=1 -DNIBBLE_VERSION_STRING=\"0.1.0\" -Iinclude -Isrc -I/usr/local/cuda/include"
NVFLAGS="-std=c++17 -O3 ${NVCC_EXTRA:-} $GENCODE -lineinfo -DNIBBLE_HAVE_CUDA=1 -Iinclude -Isrc -Xcompiler=-Wall,-Wno-unused-parameter,-ffunction-sections,-fdata-sections"
objs=()
for f in src/base/status.c src/base/log.c src/base/file.c src/base/progress.c src/format/numerics.c \
         src/tools/tile_plan.c src/ops/cuda/moe_repack.c; do
  o="$OUT/obj/$(echo "$f" | tr / _).o"; gcc $CFLAGS -c "$f" -o "$o"; objs+=("$o")
done
for f in src/ops/cuda/device.cu src/ops/cuda/gemm_lt.cu src/ops/cuda/moe_ffn.cu src/ops/cuda/moe_wgmma.cu src/ops/cuda/moe_wgpc.cu src/ops/cuda/moe_router.cu src/ops/cuda/elementwise.cu \
         src/tools/lab/moe_bench.cu; do
  o="$OUT/obj/$(echo "$f" | tr / _).o"; nvcc $NVFLAGS -c "$f" -o "$o"; objs+=("$o")
done
LIBS="-Wl,--gc-sections -L/usr/local/cuda/lib64 -lcublasLt -lcudart_static -lpthread -ldl -lrt -lm"
gcc $CFLAGS -DNB_MOE_TEST_NO_CPU_OP -Itests tests/cuda_moe/test_moe.c "${objs[@]}" $LIBS -lstdc++ -o "$OUT/test_cuda_moe"
printf 'NB_COMMAND(version, "version")\nNB_COMMAND(bench_moe, "bench-moe")\nNB_COMMAND(bench_gemm, "bench-gemm")\nNB_COMMAND(plan_tiles, "plan-tiles")\n' >"$OUT/gen/nb_commands.h"
gcc $CFLAGS -I"$OUT/gen" -Iapps apps/nibble.c apps/cmd_version.c apps/cmd_bench_moe.c apps/cmd_bench_gemm.c \
    apps/cmd_plan_tiles.c "${objs[@]}" $LIBS -lstdc++ -o "$OUT/nibble"
echo "built $OUT/test_cuda_moe $OUT/nibble"
