#!/bin/bash
# Twenty-fourth session, call 2: dsa_select with the tie criterion on the terms' magnitude (the
# new test binary as .devbin2.tar.xz), then the golden fixtures with the prefill form on.
#   run(command="bash bench/h200-2026-12-07-s24/call2.sh", carry=[".devbin.tar.xz", ".devbin2.tar.xz", ".devlibs.tar.xz"])
set -u
tar -xJf .devbin.tar.xz && tar -xJf .devbin2.tar.xz && tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
exec > >(tee $OUT/summary.txt) 2>&1
timeout 150 build/tests/test_cuda_vs_cpu dsa_select > $OUT/dsa.log 2>&1; echo "dsa_select rc=$?"
grep -E "FAIL|topk 2048.*prefill" $OUT/dsa.log | cut -c1-200 | head -8
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LD_LIBRARY_PATH" "$PWD/build/nibble" > /tmp/nb && chmod +x /tmp/nb
NIBBLE_CUDA_DSA_TILE=1 NIBBLE_BIN=/tmp/nb timeout 200 python3 tests/cuda_ops/cuda_golden_check.py > $OUT/golden-tile.log 2>&1
echo "golden (prefill form on) rc=$?"; tail -16 $OUT/golden-tile.log
