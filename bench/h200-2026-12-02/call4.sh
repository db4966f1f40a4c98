#!/usr/bin/env bash
# Call 4 (2026-12-02): build-lead (Release, sm_90a) of 79cb55b. GPU checks the change can reach,
# fixtures, issue 9's sweep, A/B of the stream kernel's k-group loops, serve + bench, then the
# per-op profile with a steady batch (--profile-skip 24 of 47 decode-only steps).
#   run(command="bash bench/h200-2026-12-02/call4.sh", carry=[".devbin.tar.xz", ".devlibs.tar.xz"], timeout_s=600)
set -uo pipefail
tar -xJf .devlibs.tar.xz && rm -rf .devlibs-cuda && mv .devlibs .devlibs-cuda
AB="NIBBLE_MOE_STREAM_LOOP=0;NIBBLE_MOE_STREAM_LOOP=1" PARTS="verify offline ab serve" scripts/device-final.sh
rc=$?
LEVELS=1,10,1000 OUTPUT=48 PROFILE=4 EXTRA="--profile-skip 24" OUT=$OUT/prof BUILD=build-lead \
  scripts/device-profile.sh >/dev/null 2>&1 || rc=1
grep -A30 "^Per-op profile" "$OUT/prof/profile.log" | cut -c1-150 | tail -34
exit $rc
