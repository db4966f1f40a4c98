#!/usr/bin/env bash
# `make run`: the main job. Until the benchmark lands it prints the CLI's help.
set -euo pipefail
cd "$(dirname "$0")/.."
./build/nibble --help
