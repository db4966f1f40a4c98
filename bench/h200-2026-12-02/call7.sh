#!/usr/bin/env bash
# Call 7: the wg kernel's q_lat in BF16 from the first GEMM (NIBBLE_CUDA_MLA_QLAT16): the MLA
# decode tests (every form, both q_lat types), then the op and its steps with q_lat F32 and BF16
# side by side at batch 1000 and 500.
#   run(command="bash bench/h200-2026-12-02/call7.sh", carry=[".devmla.tar.xz", ".devlibs.tar.xz"])
set -uo pipefail
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devmla.tar.xz
OUT=${OUT:-/tmp/call7}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
build-lead/tests/test_cuda_mla_decode >"$OUT/mla-test.log" 2>&1; echo "test_cuda_mla_decode exit $?"
grep -iE "fail|q_lat" "$OUT/mla-test.log" | head -20; tail -n 2 "$OUT/mla-test.log"
for ctx in 64 128 256; do
  build-lead/tests/test_cuda_mla_decode time $ctx 1000,500 >"$OUT/mla-time-$ctx.log" 2>&1
  grep -E "q_lat|one term  op|wg :" "$OUT/mla-time-$ctx.log" | cut -c1-200
done
