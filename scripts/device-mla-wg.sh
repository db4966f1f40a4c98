#!/usr/bin/env bash
# The wgmma MLA decode kernel (src/ops/cuda/mla_wg.cu) checked and timed against the old
# kernels in one GPU-machine call (the `run` tool); logs to $OUT. Build here first:
#   cmake --build build-M4 -j2 --target nibble test_cuda_mla_decode test_cuda_vs_cpu
#   mkdir -p build-M4/dev && cp build-M4/nibble build-M4/tests/test_cuda_mla_decode \
#     build-M4/tests/test_cuda_vs_cpu build-M4/dev/ && tar -cJf build-M4/dev.tar.xz -C build-M4/dev .
#   run(command="DEV=build-M4/dev scripts/device-mla-wg.sh", carry=["build-M4/dev.tar.xz", ".devlibs-cuda"])
# STEPS (default "check time ops bench"), each under its own timeout:
#   check  test_cuda_mla_decode wg: the wg kernel against the CPU op (64/16/80 heads, causal,
#          sparse, empty selection, KV splits, 141-token batches, one-term path) and against
#          the float32 kernel on the GPU at 1, 7, 300, 1000 tokens
#   time   test_cuda_mla_decode time CTX B.. at WG_B (default 64,256,1000) for CTX in WG_CTX
#          (default 256); step time2048: the same at context 2048, batches WG_B2 (default 1000):
#          mma / dec / wg forms with two and one BF16 terms, per-step times
#   ops    test_cuda_vs_cpu mla with NIBBLE_CUDA_MLA=wg
#   bench  bench-offline, 8-layer GLM-5 slice, BENCH_N (default 1000) requests, input 128,
#          output BENCH_OUT (default 32), once per entry of BENCH_ENVS (VAR=v[,VAR=v..] or
#          default; default "NIBBLE_CUDA_MLA=dec,NIBBLE_CUDA_MLA_TERMS=2 default": the
#          defaults before and after the wg kernel)
#   golden tests/cuda_ops/cuda_golden_check.py with each entry of GOLDEN_ENVS (default
#          "NIBBLE_CUDA_MLA=wg"; the fixtures' prompts are short, so forced)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mla-wg-out}
D=${DEV:-build-M4/dev}
mkdir -p "$OUT" "$OUT/more"
if [ -f "$D.tar.xz" ]; then mkdir -p "$D" && tar -xJf "$D.tar.xz" -C "$D"; fi
L=$PWD/.devlibs-cuda
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
# each step's timeout: its own limit, cut to what is left of DEADLINE seconds (default 85) since
# the start; a step with under 5 s left is skipped
lim() { local l=$(( ${DEADLINE:-85} - SECONDS )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
for s in ${STEPS:-check time ops bench}; do
  if [ "$(lim 999)" -lt 5 ]; then echo "== $s skipped (deadline)"; continue; fi
  case $s in
    check)
      env LD_LIBRARY_PATH="$L" timeout "$(lim "${CHECK_S:-60}")" $D/test_cuda_mla_decode wg >"$OUT/check.log" 2>&1
      c=$?
      echo "== check rc $c"; grep -E "rel err|FAIL|ok$|error" "$OUT/check.log" | cut -c1-160
      if [ $c != 0 ]; then rc=1; tail -5 "$OUT/check.log"; fi ;;
    time)
      for c in ${WG_CTX:-256}; do
        env LD_LIBRARY_PATH="$L" timeout "$(lim "${TIME_S:-60}")" $D/test_cuda_mla_decode time "$c" "${WG_B:-64,256,1000}" \
          >"$OUT/time_$c.log" 2>&1 || rc=1
        echo "== time ctx $c"; grep -E "mla time|mla steps|one BF16|rel err|FAIL|ok$" "$OUT/time_$c.log" | cut -c1-260
      done ;;
    time2048)
      env LD_LIBRARY_PATH="$L" timeout "$(lim "${TIME_S:-60}")" $D/test_cuda_mla_decode time 2048 "${WG_B2:-1000}" \
        >"$OUT/time_2048.log" 2>&1 || rc=1
      echo "== time ctx 2048"; grep -E "mla time|mla steps|one BF16|rel err|FAIL|ok$" "$OUT/time_2048.log" | cut -c1-260 ;;
    ops)
      env LD_LIBRARY_PATH="$L" NIBBLE_CUDA_MLA=wg timeout "$(lim "${OPS_S:-40}")" $D/test_cuda_vs_cpu mla \
        >"$OUT/more/ops_mla.log" 2>&1 || rc=1
      echo "== test_cuda_vs_cpu mla, NIBBLE_CUDA_MLA=wg"
      grep -E "FAIL|passed|failed" "$OUT/more/ops_mla.log" | cut -c1-150 ;;
    bench)
      for e in ${BENCH_ENVS:-NIBBLE_CUDA_MLA=dec,NIBBLE_CUDA_MLA_TERMS=2 default}; do
        log="$OUT/more/bench_$(echo "$e" | sed 's/NIBBLE_CUDA_//g; s/[^A-Za-z0-9_.-]/_/g').log"
        # shellcheck disable=SC2046 # an entry is VAR=value[,VAR=value...] or default
        env $(echo "$e" | tr ',' ' ' | sed 's/^default$//') LD_LIBRARY_PATH="$L" timeout "$(lim "${BENCH_S:-40}")" $D/nibble bench-offline \
          --backend cuda --model synthetic:glm5:num_hidden_layers=8,experts=nvfp4 --num-prompts "${BENCH_N:-1000}" \
          --input-len 128 --output-len "${BENCH_OUT:-32}" --warmup 1 --max-running-requests 1000 \
          ${BENCH_PROFILE:+--profile-ops $BENCH_PROFILE} >"$log" 2>&1 || rc=1
        echo "== bench-offline $e"
        grep -E "Decode-only step|Decode step|time / floor|mla_attention|step wall|Mean decode batch" "$log" | cut -c1-150
      done ;;
    golden)
      for e in ${GOLDEN_ENVS:-NIBBLE_CUDA_MLA=wg}; do
        echo "== golden, $e"
        # shellcheck disable=SC2046
        env $(echo "$e" | tr ',' ' ') LD_LIBRARY_PATH="$L" NIBBLE_BIN=$D/nibble PYTHONUNBUFFERED=1 \
          timeout "$(lim "${GOLDEN_S:-120}")" python3 tests/cuda_ops/cuda_golden_check.py \
          >"$OUT/more/golden_$(echo "$e" | sed 's/[^A-Za-z0-9_.-]/_/g').log" 2>&1 || rc=1
        tail -14 "$OUT/more/golden_$(echo "$e" | sed 's/[^A-Za-z0-9_.-]/_/g').log"
      done ;;
  esac
done
# at most 8 files come back: the other logs travel as one archive
tar -cJf "$OUT/more.tar.xz" -C "$OUT" more && rm -rf "$OUT/more"
exit $rc
