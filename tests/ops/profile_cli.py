"""nibble bench-offline --profile-ops on the CPU backend (docs/bench.md "Per-op profile"):
the JSON's per-level profile has the requested number of decode-only steps at the level's
batch, op times that sum to the reported op time and stay within the step wall, rows sorted
by time, every GLM-5 op kind, and bytes / GB/s / of-copy consistent with each other and with
the given copy bandwidth; the printed table agrees with the JSON.
Run: NIBBLE_BIN=build-x/nibble python3 tests/ops/profile_cli.py"""
import json
import os
import subprocess
import sys
import tempfile

NIBBLE = os.environ.get("NIBBLE_BIN", "build/nibble")
ENV = dict(os.environ, NIBBLE_LOG="warn")
# the MLA layer's ropes, norms and pool writes run as the fused launches rope_n, norm_n, set_rows_n
KINDS = {"embedding", "rmsnorm", "add_rmsnorm", "linear", "rope_n", "norm_n", "set_rows_n", "dsa_select",
         "mla_attention", "moe_route", "moe_experts", "mlp", "get_rows"}
BW = 2000.0  # --ceilings copy GB/s


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    if not os.path.exists(NIBBLE):
        print("no binary at", NIBBLE)
        return 77
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "p.json")
        cmd = [NIBBLE, "bench-offline", "--model", "synthetic:glm5-tiny:num_hidden_layers=3,index_topk=8", "--num-prompts", "1,6",
               "--input-len", "12", "--output-len", "9", "--profile-ops", "3", "--ceilings", f"{BW},100",
               "--json", js]
        r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)
        if r.returncode:
            fail(f"exit {r.returncode}: {r.stderr[-2000:]}")
        doc = json.load(open(js))
    for lv, batch in zip(doc["levels"], (1, 6)):
        p = lv["profile"]
        if p["steps"] != 3 or p["skipped"] != 2:
            fail(f"level {lv['num_prompts']}: {p['steps']} steps, skipped {p['skipped']}")
        if abs(p["mean_batch"] - batch) > 1e-9:
            fail(f"level {lv['num_prompts']}: mean batch {p['mean_batch']}")
        ops = p["ops"]
        total = sum(o["ms_per_step"] for o in ops)
        if not (0 < p["op_ms"] <= p["wall_ms"]) or abs(total - p["op_ms"]) > 1e-4 + 1e-5 * len(ops):
            fail(f"op sum {total} vs op_ms {p['op_ms']} vs wall {p['wall_ms']}")
        if abs(p["gap_ms"] - (p["wall_ms"] - p["op_ms"])) > 1e-3:
            fail("gap != wall - ops")
        if any(a["ms_per_step"] < b["ms_per_step"] for a, b in zip(ops, ops[1:])):
            fail("rows not sorted by time")
        missing = KINDS - {o["op"] for o in ops}
        if missing:
            fail(f"level {lv['num_prompts']}: no rows for {sorted(missing)}")
        for o in ops:
            if o["op"] in ("linear", "mlp", "moe_experts"):
                if "bytes_per_step" not in o:
                    fail(f"{o['op']} {o['detail']}: no bytes")
                gbps = o["bytes_per_step"] / (o["ms_per_step"] * 1e-3) / 1e9
                # the JSON rounds ms to 1e-6: a 2 us op's rate is good to ~0.1 %
                if abs(gbps - o["GBps"]) > 1e-3 + 1e-2 * gbps or abs(o["of_copy"] - o["GBps"] / BW) > 1e-5:
                    fail(f"{o['op']} {o['detail']}: {o}")
                if f"{batch} tok, " not in o["detail"]:
                    fail(f"{o['op']} detail '{o['detail']}' at batch {batch}")
            elif "bytes_per_step" in o:
                fail(f"{o['op']} has bytes")
        if "Per-op profile: 3 decode-only steps" not in r.stdout:
            fail("no table in the output")
    # --profile-skip: the level's first N decode-only steps are left alone (9 output tokens
    # give 8 decode-only steps: skipping 5 leaves 3), a bad value is refused
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "p.json")
        base = [NIBBLE, "bench-offline", "--model", "synthetic:glm5-tiny:num_hidden_layers=3,index_topk=8",
                "--num-prompts", "6", "--input-len", "12", "--output-len", "9", "--ceilings", f"{BW},100"]
        r = subprocess.run(base + ["--profile-ops", "5", "--profile-skip", "5", "--json", js], env=ENV,
                           capture_output=True, text=True, timeout=120)
        if r.returncode:
            fail(f"--profile-skip 5: exit {r.returncode}: {r.stderr[-2000:]}")
        p = json.load(open(js))["levels"][0]["profile"]
        if p["skipped"] != 5 or p["steps"] != 3:
            fail(f"--profile-skip 5: {p['steps']} steps, skipped {p['skipped']} (want 3, 5)")
        if "(skipped the first 5)" not in r.stdout:
            fail("--profile-skip 5: the table does not say what was skipped")
        for bad in ("-1", "x"):
            r = subprocess.run(base + ["--profile-ops", "2", "--profile-skip", bad], env=ENV, capture_output=True,
                               text=True, timeout=60)
            if r.returncode != 2 or "--profile-skip" not in r.stderr:
                fail(f"--profile-skip {bad}: exit {r.returncode}, stderr {r.stderr[-300:]}")
    print("ok: 2 levels profiled, --profile-skip honoured and checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
