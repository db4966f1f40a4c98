#!/usr/bin/env bash
# Runs test_server_openai.py with the official openai SDK from PyPI in a cached virtual
# environment (scripts/pyenv.sh). Exits 77 (skipped) only when the environment cannot be
# created (no PyPI access); every other failure fails.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! venv=$("$here/../../scripts/pyenv.sh" server openai==3.51.0); then
  echo "SKIP: could not create the openai SDK environment (PyPI unreachable?)" >&2
  exit 77
fi
exec "$venv/bin/python" "$here/test_server_openai.py"
