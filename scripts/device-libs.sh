#!/usr/bin/env bash
# Copy the shared libraries a nibble binary needs that the GPU machine lacks (the Debian
# ones: cJSON, libmicrohttpd, PCRE2, utf8proc, libcurl, OpenBLAS and their own needs) into
# .devlibs/ (git-ignored), to carry with the `run` tool and put on LD_LIBRARY_PATH there.
# glibc, the CUDA driver and the CUDA toolkit's libraries are left out: the machine has them.
# Also writes .devlibs.tar.xz (OpenBLAS alone is 36 MB; the archive is about 11 MB), which is
# what to carry: scripts/device-moe.sh unpacks it there.
#   scripts/device-libs.sh [BINARY]        (default build-moe/nibble)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build-moe/nibble}
DEST=.devlibs
grep -qx '/.devlibs/' .git/info/exclude 2>/dev/null || echo '/.devlibs/' >>.git/info/exclude
grep -qx '/.devlibs.tar.xz' .git/info/exclude 2>/dev/null || echo '/.devlibs.tar.xz' >>.git/info/exclude
mkdir -p "$DEST"
ldd "$BIN" | awk '/=> \//{print $3}' | while read -r lib; do
  base=$(basename "$lib")
  case "$base" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) continue ;;
    libcuda.so*|libcudart*|libcublas*|libnccl*|libnvrtc*|libnvJitLink*|libcusparse*|libcufft*|libcurand*) continue ;;
  esac
  case "$lib" in /usr/local/cuda*) continue ;; esac
  cp -L "$lib" "$DEST/$base"
done
tar -cJf .devlibs.tar.xz "$DEST"
du -sh "$DEST" .devlibs.tar.xz
