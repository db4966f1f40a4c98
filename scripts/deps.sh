#!/usr/bin/env bash
# Installs the Debian packages nibble's build and tests need, when missing.
# Idempotent: says what it installs, and installs nothing when all are present.
# Usage: scripts/deps.sh        (run by `make deps`, `make test`, `make run`)
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config
  libmicrohttpd-dev      # HTTP server
  libcjson-dev           # JSON
  libpcre2-dev           # tokenizer regexes
  libutf8proc-dev        # Unicode normalization
  libcurl4-openssl-dev   # bench client
  libopenblas-dev        # CPU matmul
  clang libclang-rt-14-dev  # libFuzzer harnesses
  python3 python3-venv curl
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#pkgs[@]} packages present"
  exit 0
fi

echo "deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "deps: done"
