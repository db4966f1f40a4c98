#!/usr/bin/env python3
"""Analyzer of the MoE stream kernels' item trace (bench/lab/moe-trace.sh, moe-trace.patch).

  python3 bench/lab/moe-trace.py TRACE.csv [--hidden 6144] [--inter 2048] [--time auto|gt|clock]
                                           [--bins 28] [--last 3]

Input: the CSV nb_moe_trace_dump appends (lines starting with '#' are comments):
  label,kind,block,smid,item,tile,cnt,t_start,t_wait,t_end,c_start,c_wait,c_end
kind 0 zeroing, 1 gate_up, 2 down item; -1 a block (t_start entry, t_wait loop start, t_end
exit, item = items it ran); 3 the routing kernel. t_*: %globaltimer ns; c_*: clock64 of the SM.

Time base: %globaltimer may tick coarsely (about 1 us on some drivers / GPUs, 32 ns on
others). --time auto (default) looks at the smallest gap between distinct globaltimer values;
above 200 ns it rebuilds every time from clock64 instead: one cycles->ns slope pooled over all
SMs, one offset per SM (least squares against globaltimer), so durations are cycle-exact and
cross-SM alignment is good to about the globaltimer step / sqrt(events per SM).

Bytes per item (GLM-5 by default): a gate_up item is 4/ks_gu pairs of 16-row gate and up tiles
over K = hidden, a down item 4/ks_dn pairs of 16-row W2 tiles over K = inter, 0.5 + 1/16 bytes
per weight (E2M1 codes + E4M3 scales); ks is inferred from the items per tile.
"""
import argparse
import collections
import csv
import math
import sys

KINDS = {0: "zero", 1: "gate_up", 2: "down"}
W_BYTES = 0.5 + 1.0 / 16


def pct(v, q):
    """q-th percentile (0..100) by linear interpolation; None for an empty list."""
    if not v:
        return None
    s = sorted(v)
    x = (len(s) - 1) * q / 100.0
    lo = int(math.floor(x))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (x - lo)


def us(ns):
    return "-" if ns is None else "%.2f" % (ns / 1000.0)


def mmm(v):
    """min / p50 / p90 / max in us."""
    if not v:
        return "-"
    return "min %s  p50 %s  p90 %s  max %s us" % (us(min(v)), us(pct(v, 50)), us(pct(v, 90)), us(max(v)))


def read(path):
    groups = collections.OrderedDict()
    with open(path, newline="") as f:
        lines = f.readlines()
    for ln in lines:
        if ln.startswith("#") and "dropped" in ln:
            print("warning: " + ln[1:].strip(), file=sys.stderr)
    rows = [ln for ln in lines if ln.strip() and not ln.startswith("#")]
    rd = csv.DictReader(rows)
    for r in rd:
        rec = {k: int(r[k]) for k in rd.fieldnames if k != "label"}
        groups.setdefault(r["label"], []).append(rec)
    return groups


def gt_step(recs):
    """Smallest gap between distinct globaltimer values (ns), None if fewer than two."""
    vals = sorted({r[k] for r in recs for k in ("t_start", "t_wait", "t_end")})
    gaps = [b - a for a, b in zip(vals, vals[1:]) if b > a]
    return min(gaps) if gaps else None


def clock_fit(recs):
    """Per-SM linear maps clock64 -> globaltimer ns with one pooled slope.
    Returns (ns_per_cycle, {smid: offset}, rms residual ns, max residual ns)."""
    pts = collections.defaultdict(set)
    for r in recs:
        for s in ("start", "wait", "end"):
            pts[r["smid"]].add((r["c_" + s], r["t_" + s]))
    num = den = 0.0
    means = {}
    for sm, p in pts.items():
        cm = sum(c for c, _ in p) / len(p)
        tm = sum(t for _, t in p) / len(p)
        means[sm] = (cm, tm)
        for c, t in p:
            num += (c - cm) * (t - tm)
            den += (c - cm) ** 2
    if den <= 0:
        return None
    slope = num / den
    off = {sm: tm - slope * cm for sm, (cm, tm) in means.items()}
    res = [t - (off[sm] + slope * c) for sm, p in pts.items() for c, t in p]
    rms = math.sqrt(sum(x * x for x in res) / len(res))
    return slope, off, rms, max(abs(x) for x in res)


def analyze(label, recs, a):
    out = []
    P = out.append
    # globaltimer is ns since the epoch (~1.7e18): a double keeps only 256 ns of it
    base = min(r["t_start"] for r in recs)
    for r in recs:
        for s in ("start", "wait", "end"):
            r["t_" + s] -= base
    step = gt_step(recs)
    mode = a.time
    if mode == "auto":
        mode = "clock" if step is not None and step > 200 else "gt"
    fit = clock_fit(recs) if mode == "clock" else None
    if mode == "clock" and fit is None:
        mode = "gt"
    if mode == "clock":
        slope, off, rms, rmax = fit
        for r in recs:
            for s in ("start", "wait", "end"):
                r[s] = off[r["smid"]] + slope * r["c_" + s]
    else:
        for r in recs:
            for s in ("start", "wait", "end"):
                r[s] = float(r["t_" + s])
    blocks = [r for r in recs if r["kind"] == -1]
    items = [r for r in recs if r["kind"] in KINDS]
    route = [r for r in recs if r["kind"] == 3]
    origin = min(b["start"] for b in blocks) if blocks else min(r["start"] for r in recs)
    for r in recs:
        for s in ("start", "wait", "end"):
            r[s] -= origin
    P("=== %s: %d blocks on %d SMs, %d items (%s)" % (
        label, len(blocks), len({b["smid"] for b in blocks}), len(items),
        ", ".join("%d %s" % (sum(1 for r in items if r["kind"] == k), n) for k, n in KINDS.items())))
    tb = "globaltimer step %s ns" % (step if step is not None else "?")
    if mode == "clock":
        tb += "; times from clock64 (%.3f GHz pooled, per-SM offsets; residual rms %.0f / max %.0f ns)" % (
            1.0 / slope, rms, rmax)
    else:
        tb += "; times from globaltimer"
    P("time base: " + tb)
    if not blocks:
        P("no block records (not a stream kernel launch?)")
        for r in route:
            P("routing kernel: %s us" % us(r["end"] - r["start"]))
        return out
    t_exit = [b["end"] for b in blocks]
    span = max(t_exit)
    P("kernel span (first entry -> last exit): %s us" % us(span))
    for r in route:
        P("routing kernel: start %s, end %s us (relative to the first FFN block entry), %s us long" % (
            us(r["start"]), us(r["end"]), us(r["end"] - r["start"])))
    P("block entry (rel. first entry): %s" % mmm([b["start"] for b in blocks]))
    P("block setup (entry -> loop start): %s" % mmm([b["wait"] - b["start"] for b in blocks]))
    P("block exit: %s" % mmm(t_exit))
    P("tail (last exit - p90 of block exits): %s us" % us(span - pct(t_exit, 90)))
    per_block = collections.Counter(b["item"] for b in blocks)
    P("items per block: " + ", ".join("%d items: %d blocks" % (k, per_block[k]) for k in sorted(per_block)))

    gu = [r for r in items if r["kind"] == 1]
    dn = [r for r in items if r["kind"] == 2]
    # shapes -> bytes per item
    bytes_of = {0: 0.0, 1: 0.0, 2: 0.0}
    tiles = sorted({r["tile"] for r in gu + dn})
    if tiles:
        rb_gu = len(gu) / len(tiles)
        rb_dn = len(dn) / len(tiles)
        ks_gu = rb_gu * 64.0 / a.inter
        ks_dn = rb_dn * 128.0 / a.hidden
        bytes_of[1] = 4.0 / ks_gu * 32 * a.hidden * W_BYTES if ks_gu else 0
        bytes_of[2] = 4.0 / ks_dn * 32 * a.inter * W_BYTES if ks_dn else 0
        tot = len(gu) * bytes_of[1] + len(dn) * bytes_of[2]
        P("tiles %d (tokens per tile %s); per tile %g gate_up / %g down items -> K split gate_up %g, down %g "
          "(hidden %d, inter %d)" % (len(tiles), "/".join(str(x) for x in sorted({r["cnt"] for r in gu + dn})),
                                     rb_gu, rb_dn, ks_gu, ks_dn, a.hidden, a.inter))
        P("bytes per item: gate_up %.1f KB, down %.1f KB; weights %.1f MB in all -> %.2f TB/s over the span" % (
            bytes_of[1] / 1e3, bytes_of[2] / 1e3, tot / 1e6, tot / span / 1e3 if span > 0 else 0))
    P("item durations (start -> end; down: after its wait -> end):")
    for k, n in KINDS.items():
        d = [r["end"] - r["wait"] for r in items if r["kind"] == k]
        if not d:
            continue
        extra = ""
        if bytes_of[k] and pct(d, 50):
            extra = "; at p50 %.0f GB/s per block" % (bytes_of[k] / pct(d, 50))
        P("  %-7s n %4d: %s%s" % (n, len(d), mmm(d), extra))
    if gu:
        ge = [r["end"] for r in gu]
        P("gate_up: first start %s, first end %s us; ends p50 %s p90 %s max %s us" % (
            us(min(r["start"] for r in gu)), us(min(ge)), us(pct(ge, 50)), us(pct(ge, 90)), us(max(ge))))
    if dn:
        w = [r["wait"] - r["start"] for r in dn]
        P("down: first start %s, ends p50 %s p90 %s max %s us" % (
            us(min(r["start"] for r in dn)), us(pct([r["end"] for r in dn], 50)),
            us(pct([r["end"] for r in dn], 90)), us(max(r["end"] for r in dn))))
        P("down waits: sum %s us, mean %s us, max %s us, %d of %d waited > 1 us" % (
            us(sum(w)), us(sum(w) / len(w)), us(max(w)), sum(1 for x in w if x > 1000), len(w)))
        last_gu = {}
        for r in gu:
            last_gu[r["tile"]] = max(last_gu.get(r["tile"], -1e30), r["end"])
        wake = [r["wait"] - last_gu[r["tile"]] for r in dn if r["tile"] in last_gu and r["wait"] - r["start"] > 1000]
        if wake:
            P("  waiters' wake-up after their tile's last gate_up end: %s" % mmm(wake))
        P("  per tile: last gate_up end -> first / last down end (us):")
        for t in tiles[:16]:
            de = [r["end"] for r in dn if r["tile"] == t]
            if t in last_gu and de:
                P("    tile %3d: gate_up done %s, down %s .. %s" % (t, us(last_gu[t]), us(min(de)), us(max(de))))
        if len(tiles) > 16:
            P("    (%d more tiles)" % (len(tiles) - 16))
    # per SM
    busy = collections.defaultdict(float)
    wait = collections.defaultdict(float)
    for r in items:
        busy[r["smid"]] += r["end"] - r["wait"]
        wait[r["smid"]] += r["wait"] - r["start"]
    sm_end = collections.defaultdict(float)
    for b in blocks:
        sm_end[b["smid"]] = max(sm_end[b["smid"]], b["end"])
    bps = max(collections.Counter(b["smid"] for b in blocks).values())
    if span > 0:
        bu = [busy[s] / span for s in sm_end]
        P("per-SM busy (sum of its items' run time / span; up to %d blocks per SM): min %.2f p50 %.2f max %.2f; "
          "waiting: p50 %.2f max %.2f" % (bps, min(bu), pct(bu, 50), max(bu),
                                           pct([wait[s] / span for s in sm_end], 50),
                                           max(wait[s] / span for s in sm_end)))
    P("per-SM end (last exit of its blocks): %s" % mmm(list(sm_end.values())))
    # timeline: bytes moved per bin (an item's bytes spread evenly over its run) and items running
    if span > 0 and a.bins > 0:
        nb = a.bins
        w_ = span / nb
        gbs = [0.0] * nb
        run = [[0.0] * nb for _ in range(3)]
        for r in items:
            s0, s1 = r["wait"], r["end"]
            if s1 <= s0:
                continue
            for i in range(max(0, int(s0 / w_)), min(nb, int(s1 / w_) + 1)):
                ov = min(s1, (i + 1) * w_) - max(s0, i * w_)
                if ov > 0:
                    gbs[i] += bytes_of[r["kind"]] * ov / (s1 - s0)
                    run[r["kind"]][i] += ov / w_
        waiting = [0.0] * nb
        for r in dn:
            s0, s1 = r["start"], r["wait"]
            for i in range(max(0, int(s0 / w_)), min(nb, int(s1 / w_) + 1)):
                ov = min(s1, (i + 1) * w_) - max(s0, i * w_)
                if ov > 0:
                    waiting[i] += ov / w_
        P("timeline (bins of %s us; items running on average, down items waiting, weight TB/s):" % us(w_))
        P("  %8s %8s %8s %8s %8s  %s" % ("t us", "zero", "gate_up", "down", "dn wait", "TB/s"))
        top = max(gbs) or 1.0
        for i in range(nb):
            tbs = gbs[i] / w_ / 1e3
            P("  %8s %8.1f %8.1f %8.1f %8.1f %6.2f %s" % (us(i * w_), run[0][i], run[1][i], run[2][i], waiting[i],
                                                        tbs, "#" * int(round(30 * gbs[i] / top))))
    # the last blocks to exit
    if a.last > 0:
        byblk = collections.defaultdict(list)
        for r in items:
            byblk[r["block"]].append(r)
        P("last %d blocks to exit:" % a.last)
        for b in sorted(blocks, key=lambda b: -b["end"])[:a.last]:
            its = sorted(byblk[b["block"]], key=lambda r: r["start"])
            P("  block %d (SM %d): entry %s, loop %s, exit %s us; %s" % (
                b["block"], b["smid"], us(b["start"]), us(b["wait"]), us(b["end"]),
                "; ".join("%s %d tile %d [%s %s %s]" % (KINDS[r["kind"]], r["item"], r["tile"], us(r["start"]),
                                                        us(r["wait"]), us(r["end"])) for r in its)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--hidden", type=int, default=6144)
    ap.add_argument("--inter", type=int, default=2048)
    ap.add_argument("--time", choices=("auto", "gt", "clock"), default="auto")
    ap.add_argument("--bins", type=int, default=28, help="timeline bins (0: none)")
    ap.add_argument("--last", type=int, default=3, help="last blocks to exit to list")
    a = ap.parse_args()
    groups = read(a.csv)
    if not groups:
        sys.exit("moe-trace: no records in %s" % a.csv)
    for label, recs in groups.items():
        print("\n".join(analyze(label, recs, a)))
        print()


if __name__ == "__main__":
    main()
