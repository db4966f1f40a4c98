#!/usr/bin/env bash
# Issue 9's linear-layer checks and timings in one GPU-machine call (the `run` tool); logs to $OUT.
# Build here first (cmake -S . -B build-L -DNIBBLE_CUDA_ARCHS=90a; targets nibble
# test_cuda_vs_cpu test_gemm_lt), then: run: BUILD=build-L scripts/device-linear.sh
# (carry $BUILD/nibble, $BUILD/tests/test_cuda_vs_cpu, $BUILD/tests/test_gemm_lt, .devlibs-cuda).
#   golden  tests/cuda_ops/cuda_golden_check.py in the background (fixtures vs HF; greedy vs CPU)
#   ops     test_cuda_vs_cpu linear_* and mlp, test_gemm_lt
#   bench   nibble bench-linear $BENCH_ARGS (after the tests, alone on the GPU)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/linear-out}
BUILD=${BUILD:-build-L}
mkdir -p "$OUT"
LIBS="LD_LIBRARY_PATH=$PWD/.devlibs-cuda"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv | tee "$OUT/gpu.txt"
rc=0
printf '#!/bin/sh\nexec env LD_LIBRARY_PATH=%s/.devlibs-cuda %s/%s/nibble "$@"\n' "$PWD" "$PWD" "$BUILD" > nibble-wrap.sh
chmod +x nibble-wrap.sh
( PYTHONUNBUFFERED=1 NIBBLE_BIN=$PWD/nibble-wrap.sh timeout ${GOLDEN_TIMEOUT:-100} python3 tests/cuda_ops/cuda_golden_check.py >"$OUT/golden.log" 2>&1
  echo "golden rc=$?" >>"$OUT/golden.log" ) &
gpid=$!
timeout 60 env "$LIBS" $BUILD/tests/test_cuda_vs_cpu linear >"$OUT/ops.log" 2>&1 || rc=1
timeout 30 env "$LIBS" $BUILD/tests/test_cuda_vs_cpu mlp >>"$OUT/ops.log" 2>&1 || rc=1
timeout 30 env "$LIBS" $BUILD/tests/test_gemm_lt >>"$OUT/ops.log" 2>&1 || rc=1
grep -E "FAIL|fail|passed|error" "$OUT/ops.log" | head -20
if [ -n "${DIAG:-}" ]; then # glm_moe_dsa/long under each lt precision: which linear path moves the DSA top-k
  PYTHONUNBUFFERED=1 timeout 60 python3 - >"$OUT/diag.log" 2>&1 <<'PY'
import json, os, subprocess, sys
sys.path.insert(0, "tests/golden")
from cli_check import read_npy_f32
d = "tests/fixtures/glm_moe_dsa"
ref = json.load(open(d + "/reference.json"))
seq = [s for s in ref["sequences"] if s["name"] == "long"][0]
_, hf = read_npy_f32(os.path.join(d, seq["logits_file"]))
for name, extra in (("default", {}), ("terms2", {"NIBBLE_CUDA_LINEAR_TERMS": "2"}), ("gemv", {"NIBBLE_CUDA_LINEAR": "gemv"})):
    env = dict(os.environ, NIBBLE_LOG="debug", **extra)
    out = "/tmp/diag_%s.npy" % name
    r = subprocess.run(["./nibble-wrap.sh", "score", "--model", d, "--ids", ",".join(map(str, seq["ids"])), "--out", out,
                        "--backend", "cuda"], capture_output=True, text=True, env=env)
    lt = sorted(set(l.split("linear lt: ")[-1] for l in r.stderr.splitlines() if "linear lt:" in l))
    if r.returncode:
        print(name, "failed:", r.stderr[-400:]); continue
    (shape, g) = read_npy_f32(out)
    V = shape[1]
    worst = max((sum((a - b) ** 2 for a, b in zip(g[p*V:(p+1)*V], hf[p*V:(p+1)*V])) /
                 sum(b * b for b in hf[p*V:(p+1)*V])) ** 0.5 for p in range(shape[0]))
    print(f"{name}: max rel err vs HF {worst:.3g}; lt calls: {lt}")
PY
  cat "$OUT/diag.log"
fi
wait $gpid
cat "$OUT/golden.log"
grep -q "golden rc=0" "$OUT/golden.log" || rc=1
timeout ${BENCH_TIMEOUT:-60} env "$LIBS" $BUILD/nibble bench-linear ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1 || rc=1
cat "$OUT/bench.log"
exit $rc
