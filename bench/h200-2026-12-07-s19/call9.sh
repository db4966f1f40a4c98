#!/bin/bash
# Nineteenth session, call 9: the tree with the wg MLA kernel's L2 prefetch off by default
# (NB_CUDA_MLA_WG_PF_DEFAULT 0): every GPU test binary (scripts/device-verify.sh STEPS=tests),
# then issue 9's bench-offline sweep at 1 / 2 / 10 / 1000 requests (scripts/device-issue9.sh
# STEPS=offline). Full build (.devbin.tar.xz) and .devlibs.tar.xz.
#   run(command="bash bench/h200-2026-12-07-s19/call9.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=500)
set -u
T0=$(date +%s)
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
FINAL=$OUT
OUT=/tmp/verify STEPS=tests BUILD=build TEST_TIMEOUT=120 scripts/device-verify.sh 2>&1 | tee $FINAL/verify.txt | grep -v "^ "
tar -C /tmp -cJf $FINAL/verify-logs.tar.xz verify
echo "[$(($(date +%s) - T0)) s]"
OUT=$FINAL/i9 STEPS=offline BUILD=build scripts/device-issue9.sh 2>&1 | tail -12
echo "[$(($(date +%s) - T0)) s]"
