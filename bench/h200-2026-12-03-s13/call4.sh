#!/bin/bash
# Thirteenth session, call 4: the L2 prefetch-size hint on the streamed weight loads
# (ld.global.nc.L1::no_allocate.L2::256B / ::128B). Standalone builds on 8279d25's moe_ffn.cu
# (nibble-cur: as committed; -pf256 / -pf128: -DNB_MOE_LD_PF=256 / 128) for bench-moe, three
# rounds alternating; full builds (nibble-head = 8279d25; nibble-pf = the MoE and the dense
# gemv loads with .L2::256B) for bench-offline at 1 / 2 / 10 requests, two rounds alternating.
set -u
T0=$(date +%s)
xz -dc .s13d.tar.xz | tar -xf -
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
mkdir -p $OUT/x
timeout 200 ./test-pf256 moe_s > $OUT/x/test-pf256.log 2>&1; echo "test pf256 moe_s rc=$?"; tail -1 $OUT/x/test-pf256.log
timeout 100 ./test-pf256 moe_glm5 > $OUT/x/test-pf256-glm5.log 2>&1; echo "test pf256 glm5 rc=$?"; tail -1 $OUT/x/test-pf256-glm5.log
echo "[$(($(date +%s) - T0)) s]"
for r in 1 2 3; do
  for v in cur pf256 pf128; do
    timeout 100 ./nibble-$v bench-moe --tokens 1,2,10,64,256,320 --iters 30 > $OUT/x/r$r-$v.log 2>&1
    echo "== r$r $v rc=$?"; grep -E "^ +[0-9]" $OUT/x/r$r-$v.log | awk '{print $1, $3, $NF}' | tr '\n' ' '; echo
  done
done
# the small-step kernel's grid at 1-2 tokens (items round-robin over the blocks)
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_BLOCKS=528 NIBBLE_MOE_BLOCKS=514 NIBBLE_MOE_BLOCKS=450 NIBBLE_MOE_BLOCKS=396 NIBBLE_MOE_BLOCKS=264" \
  timeout 60 ./nibble-cur bench-moe --tokens 1,2 --iters 40 > $OUT/x/blocks.log 2>&1; echo "blocks rc=$?"; grep -E "^ +[0-9]" $OUT/x/blocks.log
echo "[$(($(date +%s) - T0)) s]"
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
for r in 1 2; do
  for v in head pf; do
    timeout 120 ./nibble-$v bench-offline --backend cuda --model synthetic:glm5:num_hidden_layers=8 --num-prompts 1,2,10 \
      --input-len 128 --output-len 64 > $OUT/x/off$r-$v.log 2>&1
    echo "== off$r $v rc=$?"; grep -E "^[0-9]+ +[0-9.]+ " $OUT/x/off$r-$v.log | tail -3
  done
done
echo "[$(($(date +%s) - T0)) s]"
cd $OUT && tar -cJf x.tar.xz x && rm -rf x
