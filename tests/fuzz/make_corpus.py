#!/usr/bin/env python3
"""Write the seed corpus for fuzz_st_parse: small valid safetensors files (every dtype,
scalars, empty tensors, metadata, padding) and a few malformed ones. Pure stdlib.
    python3 tests/fuzz/make_corpus.py"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "st_parse")
SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I16": 2,
         "I8": 1, "U8": 1, "BOOL": 1}


def file_of(tensors, meta=None, pad=True):
    hdr, off, data = {}, 0, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape in tensors:
        n = SIZES[dt]
        for s in shape:
            n *= s
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        data += bytes((off + i) & 255 for i in range(n))
        off += n
    h = json.dumps(hdr, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def raw(header, data=b""):
    h = header.encode()
    return struct.pack("<Q", len(h)) + h + data


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "empty": file_of([]),
        "meta": file_of([], meta={"format": "pt"}),
        "all_dtypes": file_of([(f"t.{dt}", dt, [2, 3]) for dt in SIZES]),
        "scalar_and_empty": file_of([("s", "F32", []), ("z", "BF16", [0, 4]), ("v", "U8", [5])]),
        "model_like": file_of([("model.embed_tokens.weight", "BF16", [8, 4]),
                               ("model.layers.0.mlp.experts.0.down_proj.weight", "U8", [4, 8]),
                               ("model.layers.0.mlp.experts.0.down_proj.weight_scale", "F8_E4M3", [4, 1]),
                               ("model.layers.0.mlp.experts.0.down_proj.weight_scale_2", "F32", [])],
                              meta={"format": "pt"}),
        "unpadded": file_of([("a", "I64", [3])], pad=False),
        "bad_json": raw('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]'),
        "bad_dtype": raw('{"a":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}}', b"x"),
        "overlap": raw('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                       '"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}', b"abcd"),
        "dup": raw('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                   '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"ab"),
        "huge_shape": raw('{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}}'),
        "short_len": struct.pack("<Q", 1 << 40) + b"{}",
        "truncated": file_of([("a", "F32", [16])])[:-7],
    }
    for name, b in seeds.items():
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(b)
    print(f"wrote {len(seeds)} seeds to {OUT}")


if __name__ == "__main__":
    main()
