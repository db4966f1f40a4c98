#!/usr/bin/env python3
"""The model commands end to end on the golden fixtures (stdlib only):
  nibble score --model DIR --ids ... --out X.npy   -> every position within 1e-3 of HF's logits
  nibble generate --model DIR --ids ... --max-tokens 8 --temperature 0 --ignore-eos --print-ids
                                                   -> last line == HF's greedy continuation
and a bad request (an id past the vocabulary) fails with a message naming it.
Run: NIBBLE_BIN=build-x/nibble python3 tests/golden/cli_check.py"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

NIBBLE = os.environ.get("NIBBLE_BIN", "build/nibble")
FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")


def read_npy_f32(path):
    with open(path, "rb") as f:
        b = f.read()
    assert b[:6] == b"\x93NUMPY", path
    hl = struct.unpack("<H", b[8:10])[0] if b[6] == 1 else struct.unpack("<I", b[8:12])[0]
    off = 10 if b[6] == 1 else 12
    head = b[off:off + hl].decode("latin1")
    assert "'<f4'" in head and "False" in head, head
    shape = tuple(int(x) for x in head.split("(")[1].split(")")[0].split(",") if x.strip())
    n = 1
    for s in shape:
        n *= s
    return shape, struct.unpack("<%df" % n, b[off + hl:off + hl + 4 * n])


def main():
    if not os.path.exists(NIBBLE):
        print(f"no nibble binary at {NIBBLE}", file=sys.stderr)
        return 77
    failures = 0
    for fam in ("glm_moe_dsa", "deepseek_v3", "glm4_moe", "qwen3_moe"):
        d = os.path.join(FIX, fam)
        ref = json.load(open(os.path.join(d, "reference.json")))
        for seq in ref["sequences"]:
            ids = ",".join(str(i) for i in seq["ids"])
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "logits.npy")
                r = subprocess.run([NIBBLE, "score", "--model", d, "--ids", ids, "--out", out, "--backend", "cpu"],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"{fam}/{seq['name']}: score failed: {r.stderr}", file=sys.stderr)
                    failures += 1
                    continue
                shape, ours = read_npy_f32(out)
            rshape, theirs = read_npy_f32(os.path.join(d, seq["logits_file"]))
            if shape != rshape:
                print(f"{fam}/{seq['name']}: shape {shape} != {rshape}", file=sys.stderr)
                failures += 1
                continue
            V = shape[1]
            worst = 0.0
            for p in range(shape[0]):
                a, b = ours[p * V:(p + 1) * V], theirs[p * V:(p + 1) * V]
                num = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
                den = math.sqrt(sum(y * y for y in b))
                worst = max(worst, num / den)
            ok = worst <= 1e-3
            failures += not ok
            r = subprocess.run([NIBBLE, "generate", "--model", d, "--ids", ids, "--max-tokens", str(len(seq["greedy"])),
                                "--temperature", "0", "--ignore-eos", "--print-ids"], capture_output=True, text=True)
            got = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else "(failed: " + r.stderr + ")"
            want = ",".join(str(t) for t in seq["greedy"])
            failures += got != want
            print(f"{fam}/{seq['name']}: score max rel err {worst:.3g} {'ok' if ok else 'FAIL'}; "
                  f"generate {'ok' if got == want else 'FAIL: ' + got + ' != ' + want}")
    # NB_DUMP writes the named intermediates of the matching layers
    d = os.path.join(FIX, "glm4_moe")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NB_DUMP="blk.2.*", NB_DUMP_DIR=tmp)
        r = subprocess.run([NIBBLE, "score", "--model", d, "--ids", "9,10,11", "--out", os.path.join(tmp, "l.npy")],
                           capture_output=True, text=True, env=env)
        got = sorted(f for f in os.listdir(tmp) if f.startswith("s0."))
        want = [f"s0.blk.2.{n}.npy" for n in ("attn_in", "attn_out", "mlp_in", "mlp_out")]
        if r.returncode != 0 or got != want or read_npy_f32(os.path.join(tmp, want[1]))[0] != (3, 128):
            print(f"NB_DUMP: rc {r.returncode}, files {got}, wanted {want}", file=sys.stderr)
            failures += 1
    d = os.path.join(FIX, "qwen3_moe")
    r = subprocess.run([NIBBLE, "score", "--model", d, "--ids", "5,99999", "--out", "/dev/null"], capture_output=True,
                       text=True)
    if r.returncode == 0 or "99999" not in r.stderr:
        print(f"bad id: expected a failure naming 99999, got rc {r.returncode}: {r.stderr}", file=sys.stderr)
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
