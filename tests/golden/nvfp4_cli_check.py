#!/usr/bin/env python3
"""NVFP4 end to end (stdlib only): `nibble quantize --all-linear` turns each golden fixture into a
ModelOpt-layout NVFP4 checkpoint; this script decodes that checkpoint independently (its own
E2M1/E4M3 decoding, value = e2m1 * (e4m3 * weight_scale_2) rounded to float32 as ModelOpt forms
it) into a plain F32 checkpoint, and `nibble score` of the two must agree within 1e-3 at every
position: nibble's NVFP4 path computes exactly what the format says. The quantized model must
also differ from the BF16 original, or the check would prove nothing.
Run: NIBBLE_BIN=build-x/nibble python3 tests/golden/nvfp4_cli_check.py"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

NIBBLE = os.environ.get("NIBBLE_BIN", "build/nibble")
FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def e4m3(b):
    s = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 3) & 15, b & 7
    if e == 15 and m == 7:
        return math.nan
    return s * (m / 8.0 * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))


def read_st(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    meta = head.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in head.items()}, meta


def read_dir(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else \
        sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    out = {}
    for f in files:
        out.update(read_st(os.path.join(d, f))[0])
    return out


def write_st(path, tensors):
    head, off, blobs = {}, 0, []
    for k, (dt, shape, data) in tensors.items():
        head[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(head).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def dequantize(qdir, ddir):
    t = read_dir(qdir)
    out, n_q = {}, 0
    for k, (dt, shape, data) in t.items():
        if k.endswith((".weight_scale", ".weight_scale_2", ".input_scale")):
            continue
        base = k[:-len(".weight")] if k.endswith(".weight") else None
        if base and base + ".weight_scale" in t and dt == "U8":
            _, sshape, sdata = t[base + ".weight_scale"]
            s2 = struct.unpack("<f", t[base + ".weight_scale_2"][2])[0]
            rows, half = shape
            kdim = half * 2
            vals = []
            for r in range(rows):
                for g in range(kdim // 16):
                    s = f32(e4m3(sdata[r * (kdim // 16) + g]) * s2)
                    for j in range(8):
                        byte = data[r * half + g * 8 + j]
                        vals.append(f32(E2M1[byte & 15] * s))
                        vals.append(f32(E2M1[byte >> 4] * s))
            out[k] = ("F32", [rows, kdim], struct.pack("<%df" % len(vals), *vals))
            n_q += 1
        else:
            out[k] = (dt, shape, data)
    os.makedirs(ddir, exist_ok=True)
    write_st(os.path.join(ddir, "model.safetensors"), out)
    cfg = json.load(open(os.path.join(qdir, "config.json")))
    cfg.pop("quantization_config", None)
    json.dump(cfg, open(os.path.join(ddir, "config.json"), "w"), indent=1)
    return n_q


def read_npy(path):
    b = open(path, "rb").read()
    hl = struct.unpack("<H", b[8:10])[0]
    head = b[10:10 + hl].decode("latin1")
    shape = tuple(int(x) for x in head.split("(")[1].split(")")[0].split(",") if x.strip())
    return shape, struct.unpack("<%df" % (shape[0] * shape[1]), b[10 + hl:])


def score(model, ids, out):
    r = subprocess.run([NIBBLE, "score", "--model", model, "--ids", ids, "--out", out], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"score {model}: {r.stderr}")
    return read_npy(out)


def max_rel(a, b, shape):
    V, worst = shape[1], 0.0
    for p in range(shape[0]):
        x, y = a[p * V:(p + 1) * V], b[p * V:(p + 1) * V]
        worst = max(worst, math.sqrt(sum((u - v) ** 2 for u, v in zip(x, y))) / math.sqrt(sum(v * v for v in y)))
    return worst


def main():
    if not os.path.exists(NIBBLE):
        print(f"no nibble binary at {NIBBLE}", file=sys.stderr)
        return 77
    if subprocess.run([NIBBLE, "quantize", "--help"], capture_output=True).returncode != 0:
        print("this nibble has no quantize command: skipped", file=sys.stderr)
        return 77
    failures = 0
    for fam in ("glm_moe_dsa", "deepseek_v3", "glm4_moe", "qwen3_moe"):
        d = os.path.join(FIX, fam)
        seq = [s for s in json.load(open(os.path.join(d, "reference.json")))["sequences"] if s["name"] == "long"][0]
        ids = ",".join(str(i) for i in seq["ids"])
        with tempfile.TemporaryDirectory() as tmp:
            q, dq = os.path.join(tmp, "q"), os.path.join(tmp, "dq")
            r = subprocess.run([NIBBLE, "quantize", d, q, "--all-linear"], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{fam}: quantize failed: {r.stderr}", file=sys.stderr)
                failures += 1
                continue
            n_q = dequantize(q, dq)
            shape, lq = score(q, ids, os.path.join(tmp, "q.npy"))
            _, ld = score(dq, ids, os.path.join(tmp, "d.npy"))
            _, lo = score(d, ids, os.path.join(tmp, "o.npy"))
            err, vs_orig = max_rel(lq, ld, shape), max_rel(lq, lo, shape)
            ok = n_q > 10 and err <= 1e-3 and vs_orig > 10 * err and vs_orig > 1e-3
            failures += not ok
            print(f"{fam}: {n_q} NVFP4 tensors; nibble NVFP4 vs independently dequantized F32: max rel err {err:.3g}; "
                  f"vs BF16 original {vs_orig:.3g} {'ok' if ok else 'FAIL'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
