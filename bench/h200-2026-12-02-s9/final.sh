set -u
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
PARTS="verify offline profile serve" scripts/device-final.sh > $OUT/final-stdout.log 2>&1; echo "final rc=$?"
tail -40 $OUT/summary.txt
N="env LD_LIBRARY_PATH=$PWD/.devlibs-cuda build-lead/nibble"
mkdir -p $OUT/moe
for i in 1 2; do $N bench-moe --tokens 1,2,10,64,256,1024,2048 --iters 30 > $OUT/moe/row$i.log 2>&1; echo "row$i rc=$?"; grep -E "^ +[0-9]|ceilings" $OUT/moe/row$i.log; done
NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG_WIDE=0 NIBBLE_MOE_WG_WIDE=1 NIBBLE_MOE_WG_WIDE=0 NIBBLE_MOE_WG_WIDE=1" $N bench-moe --tokens 1536,2048,4096,8192 --iters 20 > $OUT/moe/ab.log 2>&1; echo "ab rc=$?"; grep -E "^ +[0-9]" $OUT/moe/ab.log
cd $OUT && tar -cJf moe.tar.xz moe final-stdout.log && rm -rf moe final-stdout.log && ls
