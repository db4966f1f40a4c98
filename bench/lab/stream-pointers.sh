#!/usr/bin/env bash
# A/B of bench/lab/stream-pointers.patch (the stream kernel's k-group loop with pointers
# advanced by constants) against the tree, for the first GPU call that can afford ~60 s.
#   here:   bash bench/lab/stream-pointers.sh build     -> build-sl/tree, build-sl/patched (~3 min)
#   there:  run(command="bash bench/lab/stream-pointers.sh run",
#               carry=["build-sl/tree/nibble", "build-sl/tree/test_cuda_moe",
#                      "build-sl/patched/nibble", "build-sl/patched/test_cuda_moe"])
# run: the patched build's stream tests (moe_s*, moe_glm5_shape), then bench-moe at 1-64 tokens,
# tree and patched processes alternating twice; logs to $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
  build)
    scripts/moe-standalone-build.sh build-sl/tree
    wt=$(mktemp -d)
    git worktree add -q --detach "$wt" HEAD
    (cd "$wt" && git apply "$OLDPWD/bench/lab/stream-pointers.patch" && scripts/moe-standalone-build.sh "$OLDPWD/build-sl/patched")
    git worktree remove --force "$wt"
    ;;
  run)
    OUT=${OUT:-/tmp/stream-pointers}
    mkdir -p "$OUT"
    rc=0
    build-sl/patched/test_cuda_moe moe_s >"$OUT/test-s.log" 2>&1 || rc=1
    build-sl/patched/test_cuda_moe moe_glm5_shape >"$OUT/test-glm5.log" 2>&1 || rc=1
    tail -n 1 "$OUT/test-s.log" "$OUT/test-glm5.log"
    for b in tree patched tree patched; do
      build-sl/$b/nibble bench-moe --tokens 1,2,10,64 --iters 100 2>&1 | grep -E "^ +[0-9]" | sed "s/\$/  $b/" |
        tee -a "$OUT/bench.log"
    done
    exit $rc
    ;;
  *) echo "usage: bench/lab/stream-pointers.sh build|run" >&2; exit 2 ;;
esac
