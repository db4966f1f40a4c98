#!/bin/bash
# Seventeenth session, call 9 (H100 80GB): the KV pool now leaves the largest step's activations
# free and scratch slots free their old buffer before growing (and fall back from 1.5x to the
# exact size): issue 9's 1000-request level on the 8-layer GLM-5 slice, which failed in call 5
# on this card; then the GPU tests that grow scratch slots the most (graphs, cpu == cuda).
#   run(command="bash bench/h200-2026-12-07-s17/call9.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=230)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
tar -xJf .devbin.tar.xz && mv .devbin.tar.xz /tmp/
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
OUT=/tmp/i9 LEVELS=1000 STEPS=offline BUILD=build OFFLINE_TIMEOUT=120 timeout 130 scripts/device-issue9.sh > /tmp/i9.log 2>&1
echo "offline 1000 rc=$?"; cp /tmp/i9/offline.log $OUT/ 2>/dev/null
grep -E "KV cache|activations|error|^[0-9]+ +[0-9.]+ " /tmp/i9/offline.log | cut -c1-220 | head -8
echo "[$(($(date +%s) - T0)) s]"
export LD_LIBRARY_PATH=$PWD/.devlibs-cuda
for t in test_cuda_graph test_cuda_vs_cpu; do
  timeout 60 build/tests/$t > $OUT/$t.log 2>&1; echo "$t rc=$?"; tail -1 $OUT/$t.log
done
echo "[$(($(date +%s) - T0)) s]"
