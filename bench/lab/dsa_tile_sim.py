# bench/lab/dsa_tile_sim.py: run with python3; no GPU. Twenty-fourth session.
# Emulates k_dsa_tile's indexing (host grouping, blocks, warps, token iteration, row reloads,
# split/count layout) and checks every (token, position < n) pair with n > topk is keyed once,
# into split p // topk, counts <= topk, and the rows used are the token's own sequence's.
import random
TILE_P, TILE_T, WARPS = 128, 32, 8
def run(tokens, topk, scratch_tokens):
    # tokens: list of (seq, pos)
    T = len(tokens); max_ctx = max(p + 1 for _, p in tokens)
    G = (max_ctx + topk - 1) // topk
    keys = {}; cnt = {}; write_all = set()
    for t0 in range(0, T, scratch_tokens):
        t1 = min(T, t0 + scratch_tokens)
        px = (max_ctx + TILE_P - 1) // TILE_P; py = (t1 - t0 + TILE_T - 1) // TILE_T
        for by in range(py):
            for bx in range(px):
                i0 = t0 + by * TILE_T; i1 = min(i0 + TILE_T, t1); pb = bx * TILE_P
                if bx == 0:
                    for i in range(i0, i1):
                        if tokens[i][1] + 1 <= topk: write_all.add(i)
                def nxt(i):
                    i += 1
                    while i < i1:
                        n = tokens[i][1] + 1
                        if n > topk and n > pb: return i
                        i += 1
                    return i1
                i = nxt(i0 - 1)
                if i >= i1: continue
                state = [dict(base=-1, loaded=0, rows=None) for _ in range(WARPS)]
                while i < i1:
                    inext = nxt(i)
                    seq, pos = tokens[i]; n = pos + 1
                    for w in range(WARPS):
                        pw = pb + 16 * w; st = state[w]
                        if pw < n:
                            if seq != st['base'] or (n > st['loaded'] and pw + 16 > st['loaded']):
                                st['rows'] = {p: (seq, p) for p in range(pw, pw + 16) if p < n}
                                st['base'] = seq; st['loaded'] = n
                            s = pw // topk
                            for p in range(pw, pw + 16):
                                if p < n:
                                    assert p in st['rows'] and st['rows'][p] == (seq, p), ("stale row", i, p)
                                    k = (i, p); assert k not in keys, ("twice", k)
                                    keys[k] = s; cnt[(i, s)] = cnt.get((i, s), 0) + 1
                    i = inext
    for i, (seq, pos) in enumerate(tokens):
        n = pos + 1
        if n <= topk:
            assert i in write_all; continue
        for p in range(n):
            assert keys.get((i, p)) == p // topk, ("missing", i, p)
    assert all(c <= topk for c in cnt.values())
    assert all(s < G for s in keys.values())
    return len(keys)
random.seed(1)
cases = [([(0, 2000 + j) for j in range(200)], 256, 1000),
         ([(0, 3000 + j) for j in range(70)] + [(1, 150 + j) for j in range(40)] + [(2, 600 + j) for j in range(3)], 256, 1000),
         ([(0, 5000 + j) for j in range(64)], 2048, 1000),
         ([(0, 3000 + j) for j in range(33)], 64, 7),
         ([(0, j) for j in range(300)], 256, 50),
         ([(s, random.randrange(300, 3000)) for s in range(50)], 256, 13)]
for toks, topk, sc in cases: print(run(toks, topk, sc), "pairs ok")
