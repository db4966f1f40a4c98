#!/usr/bin/env bash
# CLI test of `nibble inspect` and `nibble quantize` on the fixture checkpoints and on a
# config-only folder. Run by ctest (NIBBLE_BIN set) or by hand:
#   NIBBLE_BIN=build-fmt/nibble tests/format/cli_test.sh
set -euo pipefail
bin=${NIBBLE_BIN:-build/nibble}
tmp=$(mktemp -d /tmp/nb_cli_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ran=0
for fam in glm_moe_dsa deepseek_v3 glm4_moe qwen3_moe qwen3_moe_fused; do
  dir=tests/fixtures/$fam
  [ -f "$dir/model.safetensors" ] || continue
  ran=1
  out=$("$bin" inspect "$dir")
  grep -q "^architecture   ${fam%_fused}$" <<<"$out" || fail "$fam: architecture line"
  grep -q "^--tp N" <<<"$out" && grep -q "^--ep N" <<<"$out" || fail "$fam: TP/EP table"
  params=$(sed -n 's/^parameters .*(\([0-9]*\)).*/\1/p' <<<"$out")
  [ -n "$params" ] || fail "$fam: parameter count"
  "$bin" quantize "$dir" "$tmp/$fam" >/dev/null 2>&1 || fail "$fam: quantize"
  q=$("$bin" inspect "$tmp/$fam")
  grep -q "^quantization   nvfp4 (group 16" <<<"$q" || fail "$fam: quantized model not NVFP4"
  grep -q "^U8 " <<<"$q" && grep -q "^F8_E4M3 " <<<"$q" || fail "$fam: no NVFP4 tensors"
  qparams=$(sed -n 's/^parameters .*(\([0-9]*\)).*/\1/p' <<<"$q")
  [ "$params" = "$qparams" ] || fail "$fam: parameters $params before, $qparams after quantize"
  for f in config.json hf_quant_config.json model.safetensors.index.json generation_config.json; do
    [ -f "$tmp/$fam/$f" ] || fail "$fam: $f missing"
  done
  echo "ok $fam: $params parameters"
done
# config.json alone: an estimate, said so
mkdir -p "$tmp/cfgonly"
cp tests/format/data/glm5_config.json "$tmp/cfgonly/config.json"
out=$("$bin" inspect "$tmp/cfgonly")
grep -q "estimated from config.json" <<<"$out" || fail "config-only: not marked as an estimate"
grep -q "^parameters     743.911 B" <<<"$out" || fail "config-only: GLM-5 parameter count"
# KV bytes per token: 78 layers x (512 + 64 + 128) x 4 bytes; BF16 latent: 78 x (1152 + 512)
grep -q "^kv cache       219648 bytes per token over 78 layers in float32 rows (4888 tokens per GiB), 129792 with BF16" \
  <<<"$out" || fail "config-only: GLM-5 KV bytes per token"
# errors: unknown architecture, missing folder
echo '{"model_type": "llama"}' > "$tmp/cfgonly/config.json"
if "$bin" inspect "$tmp/cfgonly" 2>"$tmp/err"; then fail "llama accepted"; fi
grep -q "not supported (supported: glm_moe_dsa" "$tmp/err" || fail "unsupported message: $(cat "$tmp/err")"
if "$bin" quantize "$tmp/nope" "$tmp/out" 2>/dev/null; then fail "missing input accepted"; fi
[ $ran = 1 ] || echo "note: no fixtures present, only the config-only checks ran"
echo "cli ok"
