#!/usr/bin/env python3
"""Where a kernel's warps wait, from an Nsight Compute source-counters export (no GPU, no ncu).

On the GPU machine (see bench/moe-h200/wide-2026-12-02/call2.sh):
    ncu --clock-control none -k regex:NAME -s 2 -c 1 --section WarpStateStats \\
        --section SourceCounters -o rep -f PROGRAM ...
    ncu --import rep.ncu-rep --page source --csv --print-source sass > rep-sass.csv
Here:
    python3 scripts/ncu-stalls.py rep-sass.csv [TOP]

Prints the stall reasons over all samples, the samples and executed instructions by opcode,
the share inside the kernel's tensor-core loops (the smallest backward branch whose body
holds an HGMMA or HMMA) against outside them, and the TOP (default 8) most-sampled
instructions with the lines just before them.
"""
import csv
import re
import sys
from collections import Counter, defaultdict


def load(path):
    rows = list(csv.reader(open(path)))
    hdr = next(r for r in rows if r and r[0] == "Address")
    body = [r for r in rows[rows.index(hdr) + 1:] if len(r) >= len(hdr)]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]

    def num(r, col):
        v = r[ix[col]].replace(",", "")
        return int(v) if v.isdigit() else 0

    out = []
    for r in body:
        src = r[ix["Source"]].strip()
        words = src.split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")
        out.append({"addr": int(r[ix["Address"]], 16), "src": src, "op": op,
                    "samples": num(r, "Warp Stall Sampling (All Samples)"),
                    "executed": num(r, "Instructions Executed"),
                    "stalls": {c[6:]: num(r, c) for c in stalls}})
    return out


def loop_mask(ins):
    pos = {x["addr"]: i for i, x in enumerate(ins)}
    inside = [False] * len(ins)
    for i, x in enumerate(ins):
        m = re.search(r"BRA\s.*?0x([0-9a-f]+)", x["src"])
        if not m or int(m.group(1), 16) >= x["addr"] or int(m.group(1), 16) not in pos:
            continue
        j = pos[int(m.group(1), 16)]
        if i - j < 4000 and any("HGMMA" in ins[k]["op"] or "HMMA" in ins[k]["op"] for k in range(j, i + 1)):
            for k in range(j, i + 1):
                inside[k] = True
    return inside


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ins = load(sys.argv[1])
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    total = sum(x["samples"] for x in ins) or 1
    executed = sum(x["executed"] for x in ins) or 1
    reasons = Counter()
    for x in ins:
        reasons.update(x["stalls"])
    print(f"{sys.argv[1]}: {total} stall samples, {executed} warp instructions executed")
    print("stall reasons:")
    for k, v in reasons.most_common(10):
        print(f"  {k:20s} {100 * v / total:5.1f} %")
    by_op, ex_op = defaultdict(int), defaultdict(int)
    for x in ins:
        by_op[x["op"]] += x["samples"]
        ex_op[x["op"]] += x["executed"]
    print("by opcode (share of samples, of executed instructions):")
    for op, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:14]:
        print(f"  {op:28s} {100 * v / total:5.1f} %  {100 * ex_op[op] / executed:5.1f} %")
    inside = loop_mask(ins)
    s_in = sum(x["samples"] for x, m in zip(ins, inside) if m)
    e_in = sum(x["executed"] for x, m in zip(ins, inside) if m)
    print(f"tensor-core loops: {100 * s_in / total:.1f} % of samples, {100 * e_in / executed:.1f} % of instructions; "
          f"outside {100 * (total - s_in) / total:.1f} % / {100 * (executed - e_in) / executed:.1f} %")
    print(f"top {top} instructions by samples:")
    for i in sorted(range(len(ins)), key=lambda k: -ins[k]["samples"])[:top]:
        x = ins[i]
        why = ", ".join(f"{k} {100 * v / total:.2f}" for k, v in sorted(x["stalls"].items(), key=lambda kv: -kv[1])[:3] if v)
        print(f"  {100 * x['samples'] / total:5.2f} %  {x['src'][:72]}  ({why})")
        for k in range(max(0, i - 3), i):
            print(f"           before: {ins[k]['src'][:72]}")


if __name__ == "__main__":
    main()
