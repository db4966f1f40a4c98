#!/usr/bin/env bash
# Lab splits of the wg MLA kernel (bench/lab/mla-wg-lab.patch, timing only: wrong results), for
# the first GPU call that can afford ~3 minutes: where its ~21-25 us per (token, 64 heads) item
# go at 1000 tokens (docs/NEXT.md item 1).
#   here:   bash bench/lab/mla-wg-lab.sh build      -> .devmlalab.tar.xz (a worktree of HEAD with the
#           patch, a Release build of test_cuda_mla_decode in build-mlalab: ~3 min on 2 cores, checked),
#           plus scripts/device-libs.sh build-lead/nibble for .devlibs.tar.xz if it is missing
#   there:  run(command="bash bench/lab/mla-wg-lab.sh run", carry=[".devmlalab.tar.xz", ".devlibs.tar.xz"])
# run: for contexts 64 and 256 at 1000 tokens, test_cuda_mla_decode time with NIBBLE_CUDA_MLA_WG_LAB
# = 0 (as built), 1 (no q load), 2 (no output stores), 3 (neither), 4 (no row loads), 8 (no math),
# 12 (neither: the skeleton), 16 (no slot lookups), 32 (no L2 prefetch); the checks inside the
# timing report FAIL for every setting but 0 (expected). Logs to $OUT, the wg one-term op and
# attention-step lines to stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
  build)
    wt=$(mktemp -d)
    git worktree add -q --detach "$wt" HEAD
    (cd "$wt" && git apply "$OLDPWD/bench/lab/mla-wg-lab.patch" &&
      cmake -S . -B "$OLDPWD/build-mlalab" -DCMAKE_BUILD_TYPE=Release -DNIBBLE_CUDA_ARCHS=90a >/dev/null &&
      cmake --build "$OLDPWD/build-mlalab" -j2 --target test_cuda_mla_decode >/dev/null) || exit 1
    git worktree remove --force "$wt"
    grep -qx '/.devmlalab.tar.xz' .git/info/exclude 2>/dev/null || echo '/.devmlalab.tar.xz' >>.git/info/exclude
    tar -cJf .devmlalab.tar.xz build-mlalab/tests/test_cuda_mla_decode
    [ -f .devlibs.tar.xz ] || scripts/device-libs.sh build-mlalab/tests/test_cuda_mla_decode
    du -h .devmlalab.tar.xz .devlibs.tar.xz
    ;;
  run)
    OUT=${OUT:-/tmp/mla-wg-lab}
    mkdir -p "$OUT"
    tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
    tar -xJf .devmlalab.tar.xz
    export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
    for ctx in 64 256; do
      for lab in 0 1 2 3 4 8 12 16 32; do
        NIBBLE_CUDA_MLA_WG_LAB=$lab timeout 60 build-mlalab/tests/test_cuda_mla_decode time $ctx 1000 \
          >"$OUT/ctx$ctx-lab$lab.log" 2>&1
        echo "ctx $ctx lab $lab: $(grep -E 'wg one term|one term  op' "$OUT/ctx$ctx-lab$lab.log" | head -1 | cut -c1-150)"
        grep -A1 "(one BF16 term)" "$OUT/ctx$ctx-lab$lab.log" | tail -1 | sed "s/^/    /"
      done
    done
    ;;
  *) echo "usage: bench/lab/mla-wg-lab.sh build|run" >&2; exit 2 ;;
esac
