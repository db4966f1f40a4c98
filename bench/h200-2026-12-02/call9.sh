#!/usr/bin/env bash
# Call 9: the GPU test binaries call 4 did not carry, on a build of the committed tree
# (src identical to 79cb55b's): linear, small ops, the MLA small path and decode kernels,
# sampling, GPU-generated synthetic weights.
#   run(command="bash bench/h200-2026-12-02/call9.sh", carry=[".devrest.tar.xz", ".devlibs.tar.xz"])
set -uo pipefail
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devrest.tar.xz
OUT=${OUT:-/tmp/call9}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
rc=0
for t in test_cuda_linear test_cuda_small_ops test_cuda_mla_small test_cuda_mla_decode test_cuda_sample test_synth_gpu; do
  t0=$(date +%s)
  timeout 90 build-lead/tests/$t >"$OUT/$t.log" 2>&1
  e=$?
  [ $e = 0 ] || rc=1
  echo "$t: exit $e, $(( $(date +%s) - t0 )) s; $(tail -n 1 "$OUT/$t.log")"
  [ $e = 0 ] || grep -iE "fail|error" "$OUT/$t.log" | head -5
done
exit $rc
