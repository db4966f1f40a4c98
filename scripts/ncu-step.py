#!/usr/bin/env python3
"""Sum an Nsight Compute raw-page export by kernel (no GPU, no ncu needed here).

On the GPU machine (docs/bench.md, "Per-op profile"):
    NIBBLE_CUDA_PROFILER_RANGE=1 ncu --profile-from-start off --cache-control none \\
        --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv \\
        --page raw nibble bench-offline ... --profile-ops 1 --profile-skip 8 > step.csv
Here:
    python3 scripts/ncu-step.py step.csv [--steps N] [--order]

Prints, per kernel name (templates shortened to the name before '<' or '('), its launches,
total and mean duration per step (the export's total divided by --steps, default 1), and the
share of the sum. --order also lists every launch in the order it ran, so a step's kernels
can be matched to its ops.
"""
import csv
import re
import sys
from collections import defaultdict


def short(name):
    name = name.strip()
    m = re.match(r"(?:void\s+)?([A-Za-z_][\w:]*)", name)
    return m.group(1) if m else name[:60]


def load(path):
    lines = [ln for ln in open(path, errors="replace") if ln.startswith('"')]
    rows = list(csv.reader(lines))
    hdr = next(r for r in rows if "Kernel Name" in r)
    ix = {h: i for i, h in enumerate(hdr)}
    if "gpu__time_duration.sum" not in ix:
        sys.exit("no gpu__time_duration.sum column in %s" % path)
    body = rows[rows.index(hdr) + 1:]
    unit = body[0][ix["gpu__time_duration.sum"]] if body else ""
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}
    if unit in scale:
        body = body[1:]
    f = scale.get(unit, 1e-6)
    out = []
    for r in body:
        if len(r) < len(hdr):
            continue
        try:
            t = float(r[ix["gpu__time_duration.sum"]].replace(",", "")) * f
        except ValueError:
            continue
        grid = r[ix["launch__grid_size"]] if "launch__grid_size" in ix else ""
        out.append((short(r[ix["Kernel Name"]]), t, grid))
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args:
        sys.exit(__doc__)
    steps = 1
    if "--steps" in sys.argv:
        steps = int(sys.argv[sys.argv.index("--steps") + 1])
        args = [a for a in args if a != str(steps)]
    ks = load(args[0])
    if not ks:
        sys.exit("no kernel rows in %s" % args[0])
    tot = defaultdict(float)
    cnt = defaultdict(int)
    for name, t, _ in ks:
        tot[name] += t
        cnt[name] += 1
    total = sum(tot.values())
    print("%d launches, %.3f ms in all, %.3f ms per step (%d step%s)" %
          (len(ks), total, total / steps, steps, "" if steps == 1 else "s"))
    print("%-34s %8s %10s %10s %6s" % ("kernel", "launches", "ms/step", "us/launch", "%"))
    for name in sorted(tot, key=lambda n: -tot[n]):
        print("%-34s %8d %10.4f %10.1f %6.2f" % (name[:34], cnt[name], tot[name] / steps,
                                                  1e3 * tot[name] / cnt[name], 100 * tot[name] / total))
    if "--order" in sys.argv:
        for i, (name, t, grid) in enumerate(ks):
            print("%5d %-40s %9.1f us  grid %s" % (i, name[:40], 1e3 * t, grid))


if __name__ == "__main__":
    main()
