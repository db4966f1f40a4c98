#!/bin/bash
# Twenty-second session, call 6 (the last): the DSA merge's passes without warp collectives
# (NIBBLE_CUDA_DSA_HIST=atomic, the new default) against match.any / ballots, as a graph; then
# every GPU test and the golden fixtures on the full build of the final tree.
#   BUILD=build scripts/device-verify.sh pack
#   run(command="bash bench/h200-2026-12-07-s22/call6.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=290)
set -u
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
for tc in "1 100000" "1 2100" "16 100000"; do
  for h in match atomic; do
    echo "hist $h: $(NIBBLE_CUDA_DSA_HIST=$h timeout 40 build/tests/test_cuda_vs_cpu dsa-time $tc 2>&1 | grep 'dsa_select time' | cut -c1-240)"
  done
done
OUT=/tmp/verify STEPS="tests golden" BUILD=build TEST_TIMEOUT=120 scripts/device-verify.sh
echo "device-verify rc=$?"
