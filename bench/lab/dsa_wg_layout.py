#!/usr/bin/env python3
"""k_dsa_tile_wg's operand layouts, emulated on the CPU (numpy).

Builds one warpgroup's A fragments the way dsa_tile_rows fills them (lane (g, t) of warp w holds
rows 16 w + g and + 8 at dims 32 t + 2 ks and + 1 for k-step ks), writes the shared-memory image
of two tokens' queries the way dsa_wg_store_q does (lane l: dims 32 t + l, t < 4, one 16-byte unit
of k-tile l / 8 at unit l % 8 XOR row % 8), then reads both back with wgmma.m64nNk8's TF32
semantics (A: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4) of the warp's 16 x 8
slice; B: K-major rows of 128 bytes from the descriptor's start at k-tile ks / 4 + 32 B x (ks % 4),
128-byte swizzle on the address bits) and checks D = keys . queries^T for every (row, token, head).
Exit status 0 when every product matches the direct one.
"""
import numpy as np

N, ROWS, D = 64, 64, 128
rng = np.random.default_rng(7)
keys = rng.standard_normal((ROWS, D)).astype(np.float64)
q = rng.standard_normal((2, 32, D)).astype(np.float64)

# A fragments: afrag[warp][lane][ks][r]
afrag = np.zeros((4, 32, 16, 4))
for w in range(4):
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for ks in range(16):
            afrag[w, lane, ks, 0] = keys[16 * w + g, 32 * t + 2 * ks]
            afrag[w, lane, ks, 1] = keys[16 * w + g + 8, 32 * t + 2 * ks]
            afrag[w, lane, ks, 2] = keys[16 * w + g, 32 * t + 2 * ks + 1]
            afrag[w, lane, ks, 3] = keys[16 * w + g + 8, 32 * t + 2 * ks + 1]

# the stage's hi half as floats: 4 k-tiles x N rows x 32 floats (128 B)
smem = np.full(4 * N * 32, np.nan)
for row in range(N):
    tok, h = row // 32, row % 32
    for lane in range(32):
        off = (lane >> 3) * (N * 128) + row * 128 + (((lane & 7) ^ (row & 7)) << 4)
        for t in range(4):
            smem[off // 4 + t] = q[tok, h, 32 * t + lane]

def b_read(ks, n, k):
    """wgmma's B[k][n] for k-step ks: logical byte 4 k of row n from the descriptor's start."""
    start = (ks >> 2) * (N * 128) + (ks & 3) * 32
    addr = start + n * 128 + 4 * k  # unswizzled; the tile base is 1024-aligned
    unit = (addr >> 4) & 7
    addr = (addr & ~0x70) | ((unit ^ ((addr >> 7) & 7)) << 4)
    return smem[addr // 4]

dmat = np.zeros((ROWS, N))
for ks in range(16):
    A = np.zeros((ROWS, 8))
    for w in range(4):
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            A[16 * w + g, t] = afrag[w, lane, ks, 0]
            A[16 * w + g + 8, t] = afrag[w, lane, ks, 1]
            A[16 * w + g, t + 4] = afrag[w, lane, ks, 2]
            A[16 * w + g + 8, t + 4] = afrag[w, lane, ks, 3]
    B = np.array([[b_read(ks, n, k) for n in range(N)] for k in range(8)])
    dmat += A @ B
want = np.concatenate([keys @ q[0].T, keys @ q[1].T], axis=1)
err = np.abs(dmat - want).max()
print(f"k_dsa_tile_wg layout: max |D - keys.q^T| = {err:.3g} over {ROWS} rows x {N} token-heads")
raise SystemExit(0 if err < 1e-9 else 1)
