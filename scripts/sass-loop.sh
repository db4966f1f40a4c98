#!/usr/bin/env bash
# Instruction count of a kernel's innermost loop that issues tensor-core instructions (HGMMA
# or HMMA), from its SASS: how many instructions a warp issues per trip, per tensor
# instruction, and by opcode. No GPU needed; this is how the sixth session found the wgmma
# kernel's slice loop spending 454 instructions where the probe's spent 340 (docs/moe-kernels.md,
# "The lean slice loop").
#   scripts/sass-loop.sh OBJECT|CUBIN|BINARY [FUNCTION-SUBSTRING]
#     no FUNCTION: lists the object's functions
#   e.g. nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DNIBBLE_HAVE_CUDA=1 -Iinclude -Isrc \
#          -cubin src/ops/cuda/moe_wgmma.cu -o /tmp/wg.cubin
#        scripts/sass-loop.sh /tmp/wg.cubin 'moe_wg_kernelILi16ELi0ELi0ELi2ELi1ELi16ELi1E'
# The loop picked is the smallest backward branch whose body holds a tensor instruction;
# "@!PT" padding ptxas puts before LDGSTS groups counts (it takes issue slots).
set -euo pipefail
OBJ=${1:?usage: scripts/sass-loop.sh OBJECT [FUNCTION-SUBSTRING]}
CUOBJDUMP=$(command -v cuobjdump || true)
for c in /usr/local/cuda/bin/cuobjdump /root/.pyenv/versions/*/lib/python3*/site-packages/nvidia/cu13/bin/cuobjdump; do
  [ -n "$CUOBJDUMP" ] && break
  [ -x "$c" ] && CUOBJDUMP=$c
done
[ -n "$CUOBJDUMP" ] || { echo "sass-loop: cuobjdump not found (CUDA toolkit bin/, or pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)" >&2; exit 1; }
# cuobjdump -sass runs nvdisasm, which the pip wheels install beside it
PATH="$PATH:$(dirname "$CUOBJDUMP")"
if [ $# -lt 2 ]; then
  "$CUOBJDUMP" -sass "$OBJ" | sed -n 's/^[[:space:]]*Function : //p'
  exit 0
fi
"$CUOBJDUMP" -sass "$OBJ" | python3 -c '
import re, sys
from collections import Counter
want = sys.argv[1]
funcs, cur = {}, None
for line in sys.stdin:
    m = re.match(r"\s*Function : (\S+)", line)
    if m:
        cur = m.group(1); funcs[cur] = []; continue
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;", line)
    if m and cur: funcs[cur].append((int(m.group(1), 16), m.group(2)))
names = [f for f in funcs if want in f]
if len(names) != 1:
    sys.exit("sass-loop: %d functions match %r%s" % (len(names), want, (": " + " ".join(names[:6])) if names else ""))
ins = funcs[names[0]]
best = None
for a, t in ins:
    m = re.search(r"BRA (0x[0-9a-f]+)", t)
    if not m or int(m.group(1), 16) >= a: continue
    lo = int(m.group(1), 16)
    body = [x for x in ins if lo <= x[0] <= a]
    tc = sum(1 for x in body if re.search(r"\bHG?MMA", x[1]))
    if tc and (best is None or len(body) < len(best[2])): best = (lo, a, body, tc)
if not best: sys.exit("sass-loop: no loop with a tensor instruction in " + names[0])
lo, hi, body, tc = best
ops = Counter(re.sub(r"^@!?U?P[T0-9]\s*", "", t).split()[0].split(".")[0] for _, t in body)
print("%s\nloop %#x-%#x: %d instructions, %d tensor instructions, %.1f per tensor instruction" %
      (names[0], lo, hi, len(body), tc, len(body) / tc))
print(" ".join("%s %d" % kv for kv in ops.most_common()))
' "$2"
