#!/usr/bin/env bash
# Per-item timeline of the NVFP4 MoE stream kernels (moe_ffn_small_kernel, moe_ffn_kernel):
# bench/lab/moe-trace.patch records, in -DNB_MOE_TRACE builds only, every item a block runs
# (zeroing / gate_up / down: block, SM, item, tile, %globaltimer and clock64 at start, after
# the down wait, at end), each block's entry / loop start / exit and the routing kernel's span.
#   bash bench/lab/moe-trace.sh build
#       (here, no GPU) a temporary worktree of HEAD + the patch, built with
#       NVCC_EXTRA=-DNB_MOE_TRACE scripts/moe-standalone-build.sh -> .abin/nibble-trace.xz
#   bash bench/lab/moe-trace.sh run OUTDIR [bench-moe args]
#       (GPU machine, repo root, .abin/nibble-trace or .abin/nibble-trace.xz present)
#       NIBBLE_MOE_TRACE_OUT=OUTDIR/trace.csv nibble-trace bench-moe (default args
#       --tokens 1,2,10,64 --iters 20; NIBBLE_BENCH_MOE_VARIANTS works: one trace per variant),
#       then bench/lab/moe-trace.py -> OUTDIR/trace.txt; bench-moe's table in OUTDIR/bench.txt.
# The traced launch is one plain stream launch per token point (after 3 warm ones), not a
# graph; the timed rows in bench.txt are of the trace build with recording off.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cmd=${1:-}

case "$cmd" in
build)
    WT=$(mktemp -d /tmp/nibble-moe-trace.XXXXXX)
    rmdir "$WT"
    trap 'git -C "$ROOT" worktree remove --force "$WT" 2>/dev/null || rm -rf "$WT"' EXIT
    git -C "$ROOT" worktree add --detach "$WT" HEAD >/dev/null
    git -C "$WT" apply "$ROOT/bench/lab/moe-trace.patch"
    (cd "$WT" && NVCC_EXTRA=-DNB_MOE_TRACE scripts/moe-standalone-build.sh "$WT/build-trace")
    mkdir -p "$ROOT/.abin"
    cp "$WT/build-trace/nibble" "$ROOT/.abin/nibble-trace"
    xz -T0 -f "$ROOT/.abin/nibble-trace"
    ls -l "$ROOT/.abin/nibble-trace.xz"
    ;;
run)
    OUT=${2:?usage: moe-trace.sh run OUTDIR [bench-moe args]}
    shift 2
    cd "$ROOT"
    BIN=.abin/nibble-trace
    if [ ! -x "$BIN" ]; then
        [ -f "$BIN.xz" ] || { echo "moe-trace: no $BIN(.xz); run 'moe-trace.sh build' first" >&2; exit 1; }
        if command -v xz >/dev/null; then
            xz -dkc "$BIN.xz" >"$BIN"
        else
            python3 -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.open(sys.argv[1]).read())' "$BIN.xz" "$BIN"
        fi
        chmod +x "$BIN"
    fi
    mkdir -p "$OUT"
    rm -f "$OUT/trace.csv"
    [ $# -gt 0 ] || set -- --tokens 1,2,10,64 --iters 20
    NIBBLE_MOE_TRACE_OUT="$OUT/trace.csv" "$BIN" bench-moe "$@" | tee "$OUT/bench.txt"
    python3 bench/lab/moe-trace.py "$OUT/trace.csv" | tee "$OUT/trace.txt"
    ;;
*)
    echo "usage: bash bench/lab/moe-trace.sh build | run OUTDIR [bench-moe args]" >&2
    exit 2
    ;;
esac
