#!/usr/bin/env bash
# Eighth session, call 5: the BF16-q wg MLA kernel (default) and rope-heads (switch) in the
# whole model. Every GPU check (device-final verify), then bench-offline at 1000 requests
# (input 128, output 128) alternating default / NIBBLE_CUDA_MLA_QLAT16=0 / NIBBLE_CUDA_ROPE_HEADS=1 /
# NIBBLE_CUDA_MLA_WG_STAGE=1, the MLA op alone at 1000 tokens (test_cuda_mla_decode time),
# then the op checks with rope-heads on, then the steady batch profile (default and rope-heads).
#   run(command="bash bench/h200-2026-12-02-s8/call5.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"])
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/call5}
mkdir -p "$OUT"
[ -f .devlibs.tar.xz ] && { tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda; }
PARTS="verify" OUT="$OUT" scripts/device-final.sh >"$OUT/final.log" 2>&1
echo "verify rc $?"; grep -E "FAIL|fail|passed|ok:|== part" "$OUT/summary.txt" | head -30
wrap=/tmp/final-nibble
M=synthetic:glm5:num_hidden_layers=8
for s in "" "NIBBLE_CUDA_MLA_QLAT16=0" "NIBBLE_CUDA_ROPE_HEADS=1" "NIBBLE_CUDA_MLA_WG_STAGE=1" \
  "" "NIBBLE_CUDA_MLA_QLAT16=0" "NIBBLE_CUDA_ROPE_HEADS=1" "NIBBLE_CUDA_MLA_WG_STAGE=1"; do
  # shellcheck disable=SC2086
  env $s timeout 100 "$wrap" bench-offline --backend cuda --model $M --num-prompts 1000 --input-len 128 \
    --output-len 128 --warmup 1 --max-running-requests 1000 >>"$OUT/ab1000.log" 2>&1
  echo "${s:-default}: $(grep -E '^ *1000 +[0-9]' "$OUT/ab1000.log" | tail -1 | cut -c1-160)"
done
for c in 64 256; do
  LD_LIBRARY_PATH="$PWD/.devlibs-cuda" timeout 100 build-lead/tests/test_cuda_mla_decode time $c 1000 >"$OUT/mla$c.log" 2>&1
  grep -E "q_lat F32|outputs direct|one term  op" "$OUT/mla$c.log" | cut -c1-200
done
NIBBLE_CUDA_ROPE_HEADS=1 LD_LIBRARY_PATH="$PWD/.devlibs-cuda" timeout 120 build-lead/tests/test_cuda_vs_cpu rope rope_n \
  >"$OUT/pipetest.log" 2>&1; echo "rope-heads op checks rc $?: $(tail -1 "$OUT/pipetest.log")"
for s in "" "NIBBLE_CUDA_ROPE_HEADS=1"; do
  # shellcheck disable=SC2086
  env $s timeout 100 "$wrap" bench-offline --backend cuda --model $M --num-prompts 1,1000 --input-len 128 \
    --output-len 48 --profile-ops 4 --profile-skip 24 >>"$OUT/profile.log" 2>&1
  echo "=== profile ${s:-default} done rc $?" >>"$OUT/profile.log"
done
grep -E "^ *(mla|rope|routed|moe|add_rmsnorm|router|total|step)" "$OUT/profile.log" | head -40
