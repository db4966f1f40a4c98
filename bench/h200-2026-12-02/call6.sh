#!/usr/bin/env bash
# Call 6: the MLA op at batch 1000 against the context (graph replays; the op's steps alone),
# to split its time into a per-item fixed part and a per-row part.
#   run(command="bash bench/h200-2026-12-02/call6.sh", carry=[".devmla.tar.xz", ".devlibs.tar.xz"])
set -uo pipefail
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devmla.tar.xz
OUT=${OUT:-/tmp/call6}
mkdir -p "$OUT"
for ctx in 64 128 160 256 512; do
  LD_LIBRARY_PATH=$PWD/.devlibs-cuda build-lead/tests/test_cuda_mla_decode time $ctx 1000,500 >"$OUT/mla-time-$ctx.log" 2>&1
  grep -E "mla (time|steps)|one BF16" "$OUT/mla-time-$ctx.log" | cut -c1-260
done
