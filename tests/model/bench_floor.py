#!/usr/bin/env python3
"""The floor of nibble bench-offline (docs/bench.md "bench-offline and its floor") against an
independent oracle, on the CPU backend with given ceilings (--ceilings), stdlib only:
  - the floor's constants in --json (weight bytes outside the routed experts, one expert's
    bytes and parameters, per-token parameters, attention FLOPs per attended position, KV
    bytes per position) equal the ones computed here from glm5-tiny's published shape;
  - every decode step's attended positions are attributed exactly (no mismatches), and the
    mean floor of each level equals the oracle's mean over the lockstep decode steps
    (request i's token t attends input + t positions; DSA caps attention at index_topk),
    once memory-bound and once compute-bound (ceilings chosen so);
  - the levels of --num-prompts 1,3 run on one model and report what each asked for.
Run: NIBBLE_BIN=build-y/nibble python3 tests/model/bench_floor.py"""
import json
import os
import subprocess
import sys
import tempfile

NIBBLE = os.environ.get("NIBBLE_BIN", "build/nibble")
ENV = dict(os.environ, NIBBLE_LOG="warn")

# glm5-tiny (src/model/synthetic.c): every layer MLA with q_lora and a DSA indexer; layer 0
# dense, layers 1..3 MoE with a shared expert; BF16 everywhere (experts too).
H, I_DENSE, I_MOE, LAYERS, DENSE = 256, 512, 128, 4, 1
NH, Q_LORA, KV_LORA, NOPE, ROPE, V_DIM = 4, 128, 64, 32, 16, 32
E, K, IH, ID, TOPK, VOCAB = 16, 4, 4, 32, 64, 272
IN_LEN, OUT_LEN = 60, 8  # contexts 61..67: the last steps cross index_topk = 64


def oracle():
    attn = (H * Q_LORA + Q_LORA + Q_LORA * NH * (NOPE + ROPE) + H * (KV_LORA + ROPE) + KV_LORA
            + KV_LORA * NH * (NOPE + V_DIM) + NH * V_DIM * H)  # with the q_a / kv_a norms
    indexer = Q_LORA * IH * ID + H * ID + H * IH + 2 * ID  # wq_b, wk, weights_proj, k_norm
    dense_mlp = 3 * H * I_DENSE
    moe_rest = E * H + E + 3 * H * I_MOE  # router (+ correction bias), shared expert
    norms = 2 * H
    params_fixed = VOCAB * H + H  # lm_head, final norm
    params_fixed += LAYERS * (attn + indexer + norms) + DENSE * dense_mlp + (LAYERS - DENSE) * moe_rest
    expert_params = 3 * H * I_MOE
    kv_row = LAYERS * (KV_LORA + ROPE + ID) * 4  # F32 pool rows: latent, rope key, index key
    per_pos = 2 * NH * (2 * KV_LORA + ROPE)
    return {
        "fixed_weight_bytes": 2 * params_fixed,
        "embed_row_bytes": 2 * H,
        "expert_bytes": 2 * expert_params,
        "expert_params": expert_params,
        "dense_params": params_fixed,
        "moe_layers": LAYERS - DENSE,
        "kv_bytes_per_token": kv_row,
        "attn_flops_full": 0,
        "attn_flops_dsa": per_pos * LAYERS,
        "index_flops": 2 * IH * ID * LAYERS,
        "dsa_topk": TOPK,
    }


def floor_ms(c, B, ctx, bw, rate, ctx_eff=None):
    """Floor of a step of B tokens attending ctx positions each (ctx_eff after the DSA cap)."""
    if ctx_eff is None:
        ctx_eff = min(ctx, TOPK)
    touched = E * (1 - (1 - K / E) ** B)
    nbytes = (c["fixed_weight_bytes"] + B * c["embed_row_bytes"] + c["moe_layers"] * touched * c["expert_bytes"]
              + c["kv_bytes_per_token"] * B * ctx)
    flops = (2 * B * (c["dense_params"] + c["moe_layers"] * K * c["expert_params"])
             + c["attn_flops_dsa"] * B * ctx_eff + c["index_flops"] * B * ctx)
    return max(nbytes / bw, flops / rate) * 1e3


def run_case(gbps, tflops, want_compute_bound):
    fails = 0
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "bo.json")
        r = subprocess.run([NIBBLE, "bench-offline", "--model", "synthetic:glm5-tiny", "--num-prompts", "1,3",
                            "--input-len", str(IN_LEN), "--output-len", str(OUT_LEN), "--ceilings",
                            f"{gbps},{tflops}", "--json", js], capture_output=True, text=True, env=ENV, timeout=300)
        if r.returncode != 0:
            print(f"bench-offline failed: {r.stdout}\n{r.stderr}", file=sys.stderr)
            return 1
        out = json.load(open(js))
    want = oracle()
    for key, v in want.items():
        got = out["floor"][key]
        if abs(got - v) > 0.5 + 1e-9 * abs(v):  # the JSON rounds to integers or 0.1
            print(f"floor constant {key}: {got}, oracle {v}", file=sys.stderr)
            fails += 1
    if [lv["num_prompts"] for lv in out["levels"]] != [1, 3]:
        print(f"levels: {out['levels']}", file=sys.stderr)
        return fails + 1
    bw, rate = gbps * 1e9, tflops * 1e12
    for lv in out["levels"]:
        B = lv["num_prompts"]
        steps = lv["step_records"]
        # every request's token t >= 1 attends IN_LEN + t positions, whichever step made it
        tot = sum(r[2] for r in steps)
        tot_eff = sum(r[3] for r in steps)
        want_tot = B * sum(IN_LEN + t for t in range(1, OUT_LEN))
        want_eff = B * sum(min(IN_LEN + t, TOPK) for t in range(1, OUT_LEN))
        if (tot, tot_eff) != (want_tot, want_eff):
            print(f"level {B}: attended positions {tot}, {tot_eff}; want {want_tot}, {want_eff}", file=sys.stderr)
            fails += 1
        for r in steps:  # each decode-only step's floor from its own batch and positions
            if r[1] == 0:
                f = floor_ms(want, r[0], r[2] / r[0], bw, rate, r[3] / r[0])
                if abs(r[6] - f) > 1e-5 * f:
                    print(f"level {B}: step {r}: floor {r[6]}, oracle {f}", file=sys.stderr)
                    fails += 1
        # all requests arrive at once: decode-only steps make tokens 1..OUT_LEN-1 in lockstep
        fl = [floor_ms(want, B, IN_LEN + t, bw, rate) for t in range(1, OUT_LEN)]
        exp = sum(fl) / len(fl)
        checks = [(lv["decode_steps"], OUT_LEN - 1), (lv["kv_attribution_mismatches"], 0),
                  (lv["compute_bound_steps"], (OUT_LEN - 1) if want_compute_bound else 0),
                  (lv["completed"], B), (lv["mean_decode_batch"], B)]
        for got, w in checks:
            if got != w:
                print(f"level {B}: {got} != {w} ({lv})", file=sys.stderr)
                fails += 1
        if abs(lv["floor_mean_ms"] - exp) > 1e-4 * exp:
            print(f"level {B}: floor_mean_ms {lv['floor_mean_ms']}, oracle {exp}", file=sys.stderr)
            fails += 1
        ratio = lv["decode_step_mean_ms"] / lv["floor_mean_ms"]
        if abs(lv["time_over_floor_mean"] - ratio) > 1e-3 * ratio + 1e-3:  # printed with 3 decimals
            print(f"level {B}: time_over_floor_mean {lv['time_over_floor_mean']} vs {ratio}", file=sys.stderr)
            fails += 1
    return fails


def main():
    if not os.path.exists(NIBBLE):
        print(f"no nibble binary at {NIBBLE}", file=sys.stderr)
        return 77
    # ceilings far below any machine's, so floors are long and the JSON's 4 decimals exact enough
    fails = run_case(0.01, 1e3, False)  # bytes dominate
    fails += run_case(1e3, 1e-6, True)  # FLOPs dominate
    print(f"bench_floor: {fails} failures", file=sys.stderr)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
