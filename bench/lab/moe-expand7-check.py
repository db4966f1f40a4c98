#!/usr/bin/env python3
"""Bit-level check of the repacked NVFP4 layout (the tenth session's, from bench/lab moe-expand7.patch) and the first one, without a GPU.

For random codes, packs a 32-bit word with a layout's bit table (moe_repack.c's nb_moe_bitpos:
pair p, half hi, code bit b = m, e0, e1, sign), applies the integer part of expand_codes
(moe_dev.h) for that layout, and checks that each pair comes out with its codes' bits at the
BF16 positions 6, 7, 8, 15 (+16 for the high half) and nothing outside the mask 0x81C081C0.
Run: python3 bench/lab/moe-expand7-check.py  (prints "ok" for the old and the new layout).
"""
import random

M = 0x81C081C0
OLD = [[[6, 7, 8, 15], [22, 23, 24, 31]], [[3, 4, 5, 12], [19, 20, 21, 28]],
       [[0, 1, 2, 9], [16, 17, 18, 25]], [[10, 11, 13, 14], [26, 27, 29, 30]]]
NEW = [[[6, 7, 8, 15], [22, 23, 24, 31]], [[2, 3, 4, 11], [18, 19, 20, 27]],
       [[28, 29, 30, 5], [12, 13, 14, 21]], [[0, 1, 26, 9], [16, 17, 10, 25]]]


def rotl(w, n):
    return ((w << n) | (w >> (32 - n))) & 0xFFFFFFFF


def expand_old(w):
    return [w & M, (w << 3) & M, (w << 6) & M,
            ((w >> 4) & 0x00C000C0) | ((w >> 5) & 0x01000100) | ((w << 1) & 0x80008000)]


def expand_new(w):
    return [w & M, (w << 4) & M, rotl(w, 10) & M, ((w << 6) & 0x80C080C0) | (rotl(w, 14) & 0x01000100)]


def check(table, expand, rounds=20000):
    assert sorted(b for p in table for h in p for b in h) == list(range(32)), "every bit used once"
    for _ in range(rounds):
        codes = [[random.randrange(16) for _ in range(2)] for _ in range(4)]
        w = 0
        for p in range(4):
            for h in range(2):
                for b in range(4):
                    if codes[p][h] >> b & 1:
                        w |= 1 << table[p][h][b]
        for p, r in enumerate(expand(w)):
            r &= 0xFFFFFFFF
            if r & ~M:
                return False
            for h in range(2):
                got = sum(((r >> (t + 16 * h)) & 1) << b for b, t in enumerate((6, 7, 8, 15)))
                if got != codes[p][h]:
                    return False
    return True


if __name__ == "__main__":
    for name, table, fn in (("old", OLD, expand_old), ("new", NEW, expand_new)):
        print(name, "ok" if check(table, fn) else "MISMATCH")
