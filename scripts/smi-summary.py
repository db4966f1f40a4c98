#!/usr/bin/env python3
"""SM clock by power band, from an nvidia-smi sample log (no GPU needed).

The log is what a GPU-machine call writes beside its work:
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \\
        --format=csv,noheader -lms 100 > smi.csv &
Usage: python3 scripts/smi-summary.py smi.csv
Prints the number of samples and, per power band, the SM clock's p10 / p50 / p90 (MHz): under
the 700 W cap of an H200 the clock falls in the top band (bench/RESULTS.md, issue 9, tenth
session). Lines that do not parse (a header, an error) are skipped.
"""
import sys

BANDS = ((0, 200), (200, 400), (400, 550), (550, 650), (650, 2000))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = []
    for ln in open(sys.argv[1]):
        p = [x.strip() for x in ln.split(",")]
        try:
            rows.append((int(p[1].split()[0]), float(p[3].split()[0])))
        except (IndexError, ValueError):
            pass
    print("smi samples", len(rows))
    for lo, hi in BANDS:
        b = sorted(c for c, w in rows if lo <= w < hi)
        if b:
            print("power %4d-%4d W: %5d samples, SM MHz p10/p50/p90 %d/%d/%d"
                  % (lo, hi, len(b), b[len(b) // 10], b[len(b) // 2], b[9 * len(b) // 10]))


if __name__ == "__main__":
    main()
