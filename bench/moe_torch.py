#!/usr/bin/env python3
"""PyTorch baseline for `nibble bench-moe`: one GLM-5 MoE layer (routed experts only) with
BF16 expert weights, tokens sorted by expert and both GEMMs as grouped GEMMs
(torch._grouped_mm where this PyTorch has it, else a per-expert loop of torch.mm).
Same protocol as bench-moe: CUDA events, warm-up, median of >= 20 runs, routings rotated.
Measures only: no result here is used by nibble. Run on the GPU machine:
    python3 bench/moe_torch.py --tokens 1,2,10,64,256,1024,2048 [--json F]
"""
import argparse, json, statistics, sys

import torch
import torch.nn.functional as F


def routed(T, E, k, gen):
    # k distinct experts per token, uniform; weights 1/k
    ids = torch.argsort(torch.rand(T, E, generator=gen, device="cuda"), dim=1)[:, :k].to(torch.int32)
    return ids, torch.full((T, k), 1.0 / k, device="cuda")


def moe_grouped(x, ids, w, w13, w2, use_gmm):
    T, H = x.shape
    E, k = w13.shape[0], ids.shape[1]
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    tok = order // k
    xs = x.index_select(0, tok)
    counts = torch.bincount(flat, minlength=E)
    if use_gmm:
        offs = torch.cumsum(counts, 0).to(torch.int32)
        h = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)  # [S, 2I]
        I = h.shape[1] // 2
        a = F.silu(h[:, :I]) * h[:, I:]
        y = torch._grouped_mm(a, w2.transpose(1, 2), offs=offs)  # [S, H]
    else:
        outs, start = [], 0
        for e, c in enumerate(counts.tolist()):
            if c:
                h = xs[start:start + c] @ w13[e].t()
                I = h.shape[1] // 2
                outs.append((F.silu(h[:, :I]) * h[:, I:]) @ w2[e].t())
            start += c
        y = torch.cat(outs)
    y = y * w.reshape(-1)[order].unsqueeze(1).to(y.dtype)
    out = torch.zeros(T, H, device="cuda", dtype=torch.float32)
    out.index_add_(0, tok, y.float())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=6144)
    ap.add_argument("--inter", type=int, default=2048)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--tokens", default="1,2,10,64,256,1024,2048")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    H, I, E, k = a.hidden, a.inter, a.experts, a.topk
    gen = torch.Generator(device="cuda").manual_seed(0)
    w13 = (torch.rand(E, 2 * I, H, device="cuda", generator=gen, dtype=torch.bfloat16) - 0.5) * 0.05
    w2 = (torch.rand(E, H, I, device="cuda", generator=gen, dtype=torch.bfloat16) - 0.5) * 0.05
    use_gmm = hasattr(torch, "_grouped_mm")
    if use_gmm:
        try:
            x = torch.randn(4, H, device="cuda", dtype=torch.bfloat16)
            moe_grouped(x, *routed(4, E, k, gen), w13, w2, True)
            torch.cuda.synchronize()
        except Exception as e:  # older kernels / layouts: fall back to the loop
            print(f"torch._grouped_mm unusable ({e}); per-expert loop", file=sys.stderr)
            use_gmm = False
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, BF16 experts {E} x [{H} x {I}], "
          f"top-{k}, {'torch._grouped_mm' if use_gmm else 'per-expert torch.mm loop'}")
    rows = []
    print(f"{'tokens':>7} {'ms':>9}")
    for T in [int(t) for t in a.tokens.split(",")]:
        x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
        routs = [routed(T, E, k, gen) for _ in range(8)]
        for r in routs[:3]:
            moe_grouped(x, *r, w13, w2, use_gmm)
        times = []
        for i in range(a.iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            moe_grouped(x, *routs[i % len(routs)], w13, w2, use_gmm)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        ms = statistics.median(times)
        rows.append({"tokens": T, "ms": ms})
        print(f"{T:7d} {ms:9.4f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "grouped_mm": use_gmm, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
