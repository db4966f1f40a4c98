#!/usr/bin/env python3
"""PyTorch oracle of the ModelOpt NVFP4 weight recipe, written independently from the
description in src/format/nvfp4.h (float32 arithmetic, torch's float8_e4m3fn cast,
torch.searchsorted for the E2M1 bounds). Writes tests/format/data/nvfp4_oracle.safetensors,
which tests/format/test_nvfp4.c (torch_oracle) compares with nibble's C quantizer byte
for byte. Regenerate (needs torch; the GPU machine or any venv has it):
    VENV=$(scripts/pyenv.sh torchref torch transformers safetensors numpy)
    $VENV/bin/python tests/format/nvfp4_oracle.py
"""
import os
import torch
from safetensors.torch import save_file

BOUNDS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])


def quantize(w, shared=None):
    w = w.float()
    n, k = w.shape
    ws2 = torch.tensor(shared, dtype=torch.float32) if shared is not None else w.abs().max() / (6.0 * 448.0)
    blocks = w.reshape(n, k // 16, 16)
    s = blocks.abs().amax(dim=-1) / (6.0 * ws2)
    s = torch.where(s == 0, torch.ones_like(s), s)
    s = s.clamp(min=2.0 ** -9).to(torch.float8_e4m3fn)
    x = blocks / (s.float() * ws2).unsqueeze(-1)
    a = x.abs()
    code = torch.searchsorted(BOUNDS, a.contiguous())  # right=False: equal -> lower index
    code = code + ((a == 0.75) | (a == 1.75) | (a == 3.5)).long()
    code = code + (x < 0).long() * 8
    code = code.reshape(n, k).to(torch.uint8)
    packed = (code[:, 1::2] << 4) | code[:, 0::2]
    return packed.contiguous(), s.contiguous(), ws2.reshape(()).float()


def main():
    g = torch.Generator().manual_seed(1234)
    cases = {}
    # bf16-valued Gaussian weights, as real checkpoints are
    cases["normal"] = (torch.randn(64, 128, generator=g) * 0.02).bfloat16().float()
    # heavy tails: a few outliers make most blocks small relative to amax
    w = (torch.randn(32, 256, generator=g) * 0.01).bfloat16().float()
    w[3, 17] = 1.5
    w[20, 200] = -0.7
    w[7, 0:16] = 0
    w[9, 32:48] *= 1e-5
    cases["outliers"] = w
    # values exactly on the E2M1 bounds (ws2 = 2^-10, block scale 1.0)
    u = 2.0 ** -10
    row = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -2.5, -3.5, -6.0, 0.5, 0.0, 4.0])
    w = torch.zeros(4, 32)
    w[0, 0] = 2.625
    w[1, :16] = row * u
    w[2, 16:] = row.flip(0) * u
    w[3, :] = torch.linspace(-6, 6, 32) * u
    cases["bounds"] = w
    out = {}
    for name, w in cases.items():
        p, s, ws2 = quantize(w)
        out.update({f"{name}.w": w.contiguous(), f"{name}.weight": p, f"{name}.weight_scale": s,
                    f"{name}.weight_scale_2": ws2})
    # gate/up sharing one weight_scale_2
    gate = (torch.randn(16, 64, generator=g) * 0.03).bfloat16().float()
    up = (torch.randn(16, 64, generator=g) * 0.05).bfloat16().float()
    shared = float(torch.maximum(gate.abs().max(), up.abs().max()) / (6.0 * 448.0))
    for name, w in (("shared_gate", gate), ("shared_up", up)):
        p, s, ws2 = quantize(w, shared)
        out.update({f"{name}.w": w, f"{name}.weight": p, f"{name}.weight_scale": s, f"{name}.weight_scale_2": ws2,
                    f"{name}.shared_scale_2": torch.tensor(shared, dtype=torch.float32)})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nvfp4_oracle.safetensors")
    save_file(out, path, metadata={"generator": "tests/format/nvfp4_oracle.py", "torch": torch.__version__})
    print(f"wrote {path}: {len(out)} tensors")


if __name__ == "__main__":
    main()
